#!/usr/bin/env bash
# Prepares the test node (conclave-testkit's Node, tests/kube/cluster.sh): installs Debian's runc,
# containernetworking-plugins, iptables, conntrack and podman when missing (apt-get, as root), and
# builds the node's FROM scratch images (the pod sandbox, the probe workload) with
# tests/kube/node/node.sh prepare, next to the binaries tests/kube/build.sh (.ci/prepare-kube.sh)
# built: kubelet and containerd come from that build. Cached: a second run only checks. Prints the
# elapsed time.
set -euo pipefail
start=$(date +%s)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
packages=(runc containernetworking-plugins iptables conntrack podman)

missing=()
command -v runc >/dev/null || missing+=(runc)
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null || missing+=(iptables)
command -v conntrack >/dev/null || missing+=(conntrack)
command -v podman >/dev/null || missing+=(podman)
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "prepare-node: missing ${missing[*]}; install Debian's ${packages[*]}" >&2
        exit 1
    fi
    echo "prepare-node: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y "${missing[@]}" >/dev/null \
        || { apt-get update >/dev/null && apt-get install -y "${missing[@]}" >/dev/null; }
fi
kube_version=$(sed -nE 's#^[[:space:]]*k8s.io/kubernetes[[:space:]]+(v[^[:space:]]+).*#\1#p' "$repo/tests/kube/go.mod" | sed -n 1p)
bash "$repo/tests/kube/node/node.sh" prepare "${CONCLAVE_KUBE_OUT:-$repo/target/kube}/$kube_version/bin"
echo "prepare-node: elapsed $(( $(date +%s) - start ))s"
