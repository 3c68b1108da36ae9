#!/usr/bin/env bash
# Renders the Helm chart deploy/helm/conclave into deploy/manifests.yaml, for users without Helm:
#   kubectl apply --server-side -f deploy/manifests.yaml
# The release is "conclave" in namespace "conclave-system", with the Namespace object included
# (namespace.create=true) and every other value at its default.
#
#   deploy/render.sh           rewrite deploy/manifests.yaml
#   deploy/render.sh --stdout  print the rendering (the staleness test compares it to the file)
#
# helm comes from $HELM, else target/tools/helm (built by .ci/prepare-helm.sh), else PATH.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
helm=${HELM:-}
if [[ -z $helm ]]; then
    if [[ -x $repo/target/tools/helm ]]; then
        helm=$repo/target/tools/helm
    elif command -v helm >/dev/null; then
        helm=$(command -v helm)
    else
        echo "render.sh: helm not found; run .ci/prepare-helm.sh or set HELM" >&2
        exit 1
    fi
fi

render() {
    echo "# Rendered from deploy/helm/conclave by deploy/render.sh. Do not edit: change the chart and"
    echo "# re-run deploy/render.sh (tests/deploy fails when this file is stale)."
    echo "#   kubectl apply --server-side -f deploy/manifests.yaml"
    # Run from the chart's parent so the output holds no absolute paths.
    (cd "$here/helm" && "$helm" template conclave ./conclave \
        --namespace conclave-system \
        --kube-version 1.33.0 \
        --include-crds \
        --set namespace.create=true)
}

case ${1:-} in
    --stdout)
        out=$(render)
        printf '%s\n' "$out"
        ;;
    "")
        out=$(render)
        printf '%s\n' "$out" > "$here/manifests.yaml"
        echo "render.sh: wrote $here/manifests.yaml"
        ;;
    *)
        echo "usage: $0 [--stdout]" >&2
        exit 2
        ;;
esac
