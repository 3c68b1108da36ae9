#!/usr/bin/env bash
# Prepares the OCI plugin tests (host/cli/tests/strategy_oci.rs): installs Debian's
# `docker-registry` (the CNCF distribution registry 2.8, started on loopback by the testkit's
# Registry) and `skopeo` (the third-party client that inspects what `conclave strategy push`
# published) when either is missing (apt-get, as root). Cached: a second run only checks. Prints
# the elapsed time.
set -euo pipefail
start=$(date +%s)

if ! command -v docker-registry >/dev/null || ! command -v skopeo >/dev/null; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "prepare-registry: docker-registry or skopeo not found; install Debian's docker-registry and skopeo packages" >&2
        exit 1
    fi
    echo "prepare-registry: installing docker-registry and skopeo"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y docker-registry skopeo >/dev/null \
        || { apt-get update >/dev/null && apt-get install -y docker-registry skopeo >/dev/null; }
fi
# Where systemd runs, Debian's package also starts a service on :5000; the tests start their own
# registries on free loopback ports.
echo "prepare-registry: $(docker-registry --version 2>&1 | sed -n 1p); $(skopeo --version 2>&1 | sed -n 1p)"
echo "prepare-registry: elapsed $(( $(date +%s) - start ))s"
