#!/usr/bin/env bash
# Builds the controller image the tests in tests/deploy run (localhost/conclave:dev, or
# $CONCLAVE_IMAGE) with deploy/build-image.sh, from the static binary .ci/prepare-static.sh
# built (--binary prebuilt: the rust builder image cannot be pulled here) and, when
# gcr.io/distroless cannot be pulled either, on the local equivalent of distroless/static that
# the script assembles. Installs podman and runc first (Debian's packages, apt-get, as root).
# Podman runs with the vfs storage driver and runc on these machines ($CONCLAVE_PODMAN_FLAGS;
# crun, not installed, fails on their cgroups). Prints the elapsed time.
set -euo pipefail
start=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "prepare-image: podman and runc are required; install Debian's podman and runc (apt-get install podman runc)" >&2
        exit 1
    fi
    echo "prepare-image: installing podman and runc"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y podman runc >/dev/null \
        || { apt-get update >/dev/null && apt-get install -y podman runc >/dev/null; }
fi
export CONCLAVE_ENGINE=podman
export CONCLAVE_PODMAN_FLAGS=${CONCLAVE_PODMAN_FLAGS---storage-driver vfs --runtime runc}
"$repo/deploy/build-image.sh" --tag "${CONCLAVE_IMAGE:-localhost/conclave:dev}" --binary prebuilt
echo "prepare-image: elapsed $(( $(date +%s) - start ))s"
