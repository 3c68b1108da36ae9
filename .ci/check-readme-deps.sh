#!/usr/bin/env bash
# Builds candidate/examples/controller.rs as a new crate of its own, outside the workspace, from
# exactly the dependency block candidate/README.md shows (with conclave-candidate as a path
# dependency on this checkout): what a component author copies must build the API it shows.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crate=$(mktemp -d)
trap 'rm -rf "$crate"' EXIT
block=$(awk '/^```toml$/ {inside=1; next} inside && /^```$/ {exit} inside {print}' "$repo/candidate/README.md")
if ! grep -q '^conclave-candidate = ' <<<"$block"; then
  echo "check-readme-deps: no [dependencies] block with conclave-candidate in candidate/README.md" >&2
  exit 1
fi
mkdir -p "$crate/src"
{
  printf '[package]\nname = "readme-component"\nversion = "0.1.0"\nedition = "2024"\npublish = false\n\n'
  sed "s|^conclave-candidate = .*|conclave-candidate = { path = \"$repo/candidate\" }|" <<<"$block"
  printf '\n[workspace]\n'
} >"$crate/Cargo.toml"
cp "$repo/candidate/examples/controller.rs" "$crate/src/main.rs"
# The workspace's lock file and its target directory (or $CARGO_TARGET_DIR): the versions it pins
# and the dependencies it has built are reused, and cargo adds whatever the block needs beyond them.
cp "$repo/Cargo.lock" "$crate/Cargo.lock"
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}" cargo build --manifest-path "$crate/Cargo.toml"
echo "check-readme-deps: candidate/examples/controller.rs builds from candidate/README.md's block"
