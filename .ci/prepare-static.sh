#!/usr/bin/env bash
# Builds the static (musl) controller binary that deploy/Dockerfile puts into the image, with
# deploy/build-static.sh (the script the Dockerfile's builder stage runs), into
# target/static/conclave, for the image checks in tests/deploy. Installs what the build needs
# first: the Rust musl target, and musl-gcc from Debian's musl-tools (apt-get, as root).
# Prints the elapsed time.
set -euo pipefail
start=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! command -v musl-gcc >/dev/null; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "prepare-static: musl-gcc is required; install Debian's musl-tools (apt-get install musl-tools)" >&2
        exit 1
    fi
    echo "prepare-static: installing musl-tools"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends musl-tools >/dev/null \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends musl-tools >/dev/null; }
fi
"$repo/deploy/build-static.sh" "$repo/target/static/conclave"
echo "prepare-static: elapsed $(( $(date +%s) - start ))s"
