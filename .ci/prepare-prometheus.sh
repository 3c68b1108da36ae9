#!/usr/bin/env bash
# Prepares the alerting rules' checks and the Prometheus test: installs Debian's `prometheus`
# package (2.42: the server, started by host/cli/tests/prometheus.rs, and promtool) when either is
# missing (apt-get, as root). Cached: a second run only checks. Prints
# the elapsed time.
set -euo pipefail
start=$(date +%s)

if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "prepare-prometheus: promtool or prometheus not found; install Debian's prometheus package" >&2
        exit 1
    fi
    echo "prepare-prometheus: installing prometheus (the server and promtool)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y prometheus >/dev/null \
        || { apt-get update >/dev/null && apt-get install -y prometheus >/dev/null; }
fi
echo "prepare-prometheus: $(promtool --version 2>&1 | sed -n 1p); $(prometheus --version 2>&1 | sed -n 1p)"
echo "prepare-prometheus: elapsed $(( $(date +%s) - start ))s"
