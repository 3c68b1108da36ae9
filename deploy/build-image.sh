#!/usr/bin/env bash
# Builds the controller image from deploy/Dockerfile for this machine's platform, with docker
# (when its daemon answers) or podman. The final stage is the Dockerfile's, whatever the two
# build arguments below choose; the script prints what it chose.
#
# Usage: deploy/build-image.sh [--tag IMAGE] [--binary builder|prebuilt] [--base IMAGE|local]
#   --tag IMAGE     the image to tag (default: localhost/conclave:dev)
#   --binary        builder: compile in the engine, FROM rust (pulled);
#                   prebuilt: run deploy/build-static.sh here (target/static/conclave, the
#                   binary .ci/prepare-static.sh builds) and copy that in.
#                   Default: builder when the rust image is present or can be pulled, else prebuilt.
#   --base          the image under the binary (BASE_IMAGE). Default: the Dockerfile's
#                   gcr.io/distroless/static-debian12:nonroot when present or pullable, else
#                   local: an equivalent assembled here (below).
# Environment:
#   CONCLAVE_ENGINE        docker or podman (default: docker if `docker info` works, else podman)
#   CONCLAVE_PODMAN_FLAGS  global podman flags, e.g. "--storage-driver vfs --runtime runc"
#
# The local base holds what distroless/static-debian12:nonroot holds and nothing more: passwd and
# group with root, nobody and nonroot (uid/gid 65532), /home/nonroot (0700, 65532), /root, /tmp
# (1777), nsswitch.conf, os-release, services and protocols (netbase), this machine's CA bundle
# (/etc/ssl/certs/ca-certificates.crt) and tzdata (/usr/share/zoneinfo); PATH and SSL_CERT_FILE
# as distroless sets them, USER 65532 and WORKDIR /home/nonroot. No shell, no libc.
set -euo pipefail
started=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

tag=localhost/conclave:dev
binary=
base=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$binary" in
  '' | builder | prebuilt) ;;
  *) echo "build-image.sh: --binary is builder or prebuilt, not $binary" >&2; exit 2 ;;
esac

engine=${CONCLAVE_ENGINE:-}
if [[ -z $engine ]]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null; then
    engine=podman
  else
    echo "build-image.sh: neither a docker daemon nor podman (Debian: apt-get install podman runc)" >&2
    exit 1
  fi
fi
case "$engine" in
  podman) read -r -a flags <<<"${CONCLAVE_PODMAN_FLAGS:-}"; cli=(podman "${flags[@]}") ;;
  docker) cli=(docker) ;;
  *) echo "build-image.sh: CONCLAVE_ENGINE is docker or podman, not $engine" >&2; exit 2 ;;
esac

# The default of a global ARG of the Dockerfile.
arg_default() {
  sed -n "s/^ARG $1=//p" deploy/Dockerfile | head -n 1
}

# Whether the engine has IMAGE or can pull it (quietly: an unreachable registry is expected).
available() {
  "${cli[@]}" image inspect "$1" >/dev/null 2>&1 || "${cli[@]}" pull "$1" >/dev/null 2>&1
}

builder_image="rust:$(arg_default RUST_VERSION)-bookworm"
if [[ -z $binary ]]; then
  if available "docker.io/library/$builder_image"; then binary=builder; else binary=prebuilt; fi
fi
if [[ $binary == prebuilt ]]; then
  deploy/build-static.sh target/static/conclave
  echo "build-image.sh: binary: prebuilt, target/static/conclave from deploy/build-static.sh"
else
  echo "build-image.sh: binary: builder stage, FROM $builder_image"
fi

distroless=$(arg_default BASE_IMAGE)
if [[ -z $base ]]; then
  if available "$distroless"; then base=$distroless; else base=local; fi
fi

if [[ $base == local ]]; then
  base=localhost/conclave-base:static-debian12-nonroot
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  root=$work/root
  mkdir -p "$root"/{etc/ssl/certs,usr/share,home/nonroot,root,tmp}
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
  echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
  cat >"$root/etc/os-release" <<'EOF'
PRETTY_NAME="Distroless (local equivalent, assembled by conclave's deploy/build-image.sh)"
NAME="Debian GNU/Linux"
ID="debian"
VERSION_ID="12"
VERSION="Debian GNU/Linux 12 (bookworm)"
HOME_URL="https://github.com/GoogleContainerTools/distroless"
EOF
  for file in /etc/services /etc/protocols; do
    if [[ -f $file ]]; then cp "$file" "$root/etc/"; fi
  done
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  # zoneinfo/localtime points at this machine's /etc/localtime, which the image does not have.
  cp -a /usr/share/zoneinfo "$root/usr/share/"
  rm -f "$root/usr/share/zoneinfo/localtime"
  chmod 0755 "$root" "$root/home"
  chmod 0700 "$root/root" "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  # Owners are set in the archives, so this works without root too.
  tar --numeric-owner --owner=0 --group=0 -C "$root" --exclude=./home/nonroot -cf "$work/root.tar" .
  tar --numeric-owner --owner=65532 --group=65532 -C "$root" -cf "$work/nonroot.tar" ./home/nonroot
  cat >"$work/Dockerfile" <<EOF
FROM scratch
ADD root.tar /
ADD nonroot.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
USER 65532
WORKDIR /home/nonroot
LABEL dev.conclave.base="local equivalent of $distroless (deploy/build-image.sh)"
EOF
  "${cli[@]}" build --quiet -f "$work/Dockerfile" -t "$base" "$work" >/dev/null
  echo "build-image.sh: base: $base, assembled here ($distroless could not be pulled)"
else
  echo "build-image.sh: base: $base"
fi

"${cli[@]}" build -f deploy/Dockerfile \
  --build-arg "BINARY_STAGE=$binary" --build-arg "BASE_IMAGE=$base" \
  -t "$tag" .
echo "build-image.sh: $tag built with $engine in $(( $(date +%s) - started ))s" \
  "(binary: $binary; base: $base)"
