#!/usr/bin/env bash
# Builds helm from the Go module proxy (no downloaded release binaries) into target/tools/helm, for
# rendering deploy/helm/conclave into deploy/manifests.yaml and for the staleness test in
# tests/deploy. Skips the build when target/tools/helm already reports the pinned version.
# Prints the elapsed time.
set -euo pipefail
start=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=v3.22.0
out=$repo/target/tools
helm=$out/helm

if [[ -x $helm ]] && "$helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$version"; then
    echo "prepare-helm: helm $version already built at $helm"
    echo "prepare-helm: elapsed $(( $(date +%s) - start ))s"
    exit 0
fi
if ! command -v go >/dev/null; then
    echo "prepare-helm: the Go toolchain is required (go not found on PATH)" >&2
    exit 1
fi
mkdir -p "$out"
echo "prepare-helm: building helm $version into $out ($(go version))"
# helm's go.mod may ask for a newer Go than the local one; fetch it from the proxy when so.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
CGO_ENABLED=0 GOBIN=$out GOFLAGS=-buildvcs=false go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
    "helm.sh/helm/v3/cmd/helm@$version"
"$helm" version --template 'prepare-helm: built {{.Version}} ({{.GoVersion}})'
echo
echo "prepare-helm: elapsed $(( $(date +%s) - start ))s"
