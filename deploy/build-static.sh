#!/usr/bin/env bash
# Builds the statically linked (musl) `conclave` binary that deploy/Dockerfile puts into the
# image, and refuses a binary that would need a libc or a loader at run time. The Dockerfile's
# builder stage runs this script, and so do .ci/prepare-static.sh and deploy/build-image.sh
# (which puts its output into the image when no builder image can be pulled); the tests then run
# that image with podman (tests/deploy).
#
# Usage: deploy/build-static.sh [OUT]
#   OUT     where to install the binary (default: target/static/conclave)
# Environment:
#   CONCLAVE_STATIC_TARGET  the Rust target (default: the musl target of this machine's arch)
#
# Needs musl-gcc (Debian's musl-tools) for ring's C code; the musl targets link statically by
# default (crt-static), so the result runs on distroless/static, which has no libc.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/static/conclave}

case "$(uname -m)" in
  x86_64) default_target=x86_64-unknown-linux-musl ;;
  aarch64 | arm64) default_target=aarch64-unknown-linux-musl ;;
  *) echo "build-static.sh: no musl target known for $(uname -m)" >&2; exit 1 ;;
esac
target=${CONCLAVE_STATIC_TARGET:-$default_target}

if ! command -v musl-gcc >/dev/null; then
  echo "build-static.sh: musl-gcc not found (Debian: apt-get install musl-tools)" >&2
  exit 1
fi
# host/engine/build.rs compiles the built-in strategy plugins to wasm32-wasip2 and embeds them.
rustup target add "$target" wasm32-wasip2 >/dev/null
cc_var="CC_${target//-/_}"
export "$cc_var"="${!cc_var:-musl-gcc}"

started=$(date +%s)
cargo build --release --locked -p conclave --bin conclave --target "$target"
# Symbols are not needed at run time (panics still name their location): about a fifth smaller.
install -D -s -m 0755 "target/$target/release/conclave" "$out"

# A static executable names no program interpreter and needs no shared library.
if readelf -l "$out" | grep -q 'Requesting program interpreter'; then
  echo "build-static.sh: $out is not static: it names a program interpreter" >&2
  exit 1
fi
if readelf -d "$out" | grep -q '(NEEDED)'; then
  echo "build-static.sh: $out is not static: it needs shared libraries:" >&2
  readelf -d "$out" | grep '(NEEDED)' >&2
  exit 1
fi
echo "build-static.sh: $out ($target, $(du -h "$out" | cut -f1)) built in $(( $(date +%s) - started ))s"
