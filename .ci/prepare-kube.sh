#!/usr/bin/env bash
# Builds (or finds cached) the real Kubernetes control plane for the tests: kube-apiserver,
# kube-scheduler, kube-controller-manager from k8s.io/kubernetes and etcd from go.etcd.io/etcd,
# all from Go modules (see tests/kube/README.md). Works on a fresh machine with empty Go caches:
# the modules come from the Go module proxy. Safe to run repeatedly: a cached build returns at once.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v go >/dev/null; then
    echo "prepare-kube: the Go toolchain is required (go not found on PATH)" >&2
    exit 1
fi
# go.mod says `go 1.26.0`; with an older local Go, fetch a matching toolchain from the proxy.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
exec bash "$repo/tests/kube/build.sh"
