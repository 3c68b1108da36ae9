#!/usr/bin/env bash
# Builds the real Kubernetes control plane and node used by Conclave's tests from published Go modules
# only: kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kube-proxy from k8s.io/kubernetes
# (see go.mod), etcd from go.etcd.io/etcd/server/v3 (see etcd/go.mod), and containerd,
# containerd-shim-runc-v2 and ctr from github.com/containerd/containerd/v2 (see containerd/go.mod).
# No downloaded binaries, no source trees.
#
# Output: <repo>/target/kube/<kubernetes version>/bin/{kube-apiserver,kube-scheduler,
# kube-controller-manager,kubelet,kube-proxy,etcd,containerd,containerd-shim-runc-v2,ctr} (override the root
# with CONCLAVE_KUBE_OUT). A stamp file holds a hash of every build input; when it matches, the
# script does nothing. Prints the elapsed time.
#
# Toolchain: go.mod says `go 1.26.0`, which Go 1.26.x builds as is. Should a pinned module ever need a
# newer Go, set GOTOOLCHAIN (e.g. GOTOOLCHAIN=go1.27.3, served by the module proxy) before running.
set -euo pipefail

start=$(date +%s)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

# The version a go.mod requires of a module, read from the file itself (not `go list -m`, which
# needs the module graph and so the network when the module cache is empty): the up-to-date check
# below must work offline.
required_version() {
    sed -nE "s#^(require)?[[:space:]]*$2[[:space:]]+(v[^[:space:]]+).*#\\2#p" "$1" | sed -n 1p
}
kube_version=$(required_version "$here/go.mod" k8s.io/kubernetes)
etcd_version=$(required_version "$here/etcd/go.mod" go.etcd.io/etcd/server/v3)
containerd_version=$(required_version "$here/containerd/go.mod" github.com/containerd/containerd/v2)
if [[ ! $kube_version =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
    echo "build.sh: cannot read the k8s.io/kubernetes version from $here/go.mod" >&2
    exit 1
fi
major=${BASH_REMATCH[1]}
minor=${BASH_REMATCH[2]}
if [[ -z $etcd_version ]]; then
    echo "build.sh: cannot read the etcd server version from $here/etcd/go.mod" >&2
    exit 1
fi
if [[ -z $containerd_version ]]; then
    echo "build.sh: cannot read the containerd version from $here/containerd/go.mod" >&2
    exit 1
fi

out=${CONCLAVE_KUBE_OUT:-$repo/target/kube}/$kube_version/bin
stamp=$out/.build-stamp
inputs=$(cd "$here" && cat build.sh go.mod go.sum etcd/go.mod etcd/go.sum etcd/main.go \
    containerd/go.mod containerd/go.sum | sha256sum | cut -d' ' -f1)
want="kubernetes=$kube_version etcd=$etcd_version containerd=$containerd_version inputs=$inputs"
bins=(kube-apiserver kube-scheduler kube-controller-manager kubelet kube-proxy etcd containerd containerd-shim-runc-v2 ctr)

all_present() {
    local b
    for b in "${bins[@]}"; do [[ -x $out/$b ]] || return 1; done
    [[ -f $stamp && $(cat "$stamp") == "$want" ]]
}

if all_present; then
    echo "build.sh: control plane and node $kube_version (etcd $etcd_version, containerd $containerd_version) already built in $out"
    echo "build.sh: elapsed $(( $(date +%s) - start ))s"
    exit 0
fi

mkdir -p "$out"
rm -f "$stamp"
echo "build.sh: building kubernetes $kube_version, etcd $etcd_version and containerd $containerd_version into $out ($(go version))"

export CGO_ENABLED=0
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$kube_version -X $vpkg.gitMajor=$major -X $vpkg.gitMinor=$minor"
ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=$build_date"

step() {
    local t=$(date +%s)
    "$@"
    echo "build.sh:   '$*' took $(( $(date +%s) - t ))s"
}

echo "build.sh: downloading modules"
(cd "$here" && step go mod download)
(cd "$here/etcd" && step go mod download)
(cd "$here/containerd" && step go mod download)

echo "build.sh: compiling etcd"
(cd "$here/etcd" && step go build -buildvcs=false -ldflags "-s -w" -o "$out/etcd" .)

echo "build.sh: compiling kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kube-proxy"
# The kubelet's and kube-proxy's cgo users (net, os/user) have pure-Go fallbacks: no build tag.
(cd "$here" && step go build -buildvcs=false -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy)

echo "build.sh: compiling containerd, containerd-shim-runc-v2, ctr"
# no_btrfs: the btrfs snapshotter needs cgo; urfave_cli_no_docs: drops ctr's man-page generator.
cpkg=github.com/containerd/containerd/v2
cldflags="-s -w -X $cpkg/version.Version=$containerd_version -X $cpkg/version.Revision=module"
(cd "$here/containerd" && step go build -buildvcs=false -tags "no_btrfs urfave_cli_no_docs" \
    -ldflags "$cldflags" -o "$out/" \
    $cpkg/cmd/containerd $cpkg/cmd/containerd-shim-runc-v2 $cpkg/cmd/ctr)

"$out/kube-apiserver" --version
# `sed -n 1p`, not `head -1`: sed reads all of it, so etcd never dies of SIGPIPE (exit 141 under
# pipefail) for writing after its reader quit.
"$out/etcd" --version | sed -n 1p
"$out/kubelet" --version
"$out/containerd" --version
echo "$want" > "$stamp"
echo "build.sh: elapsed $(( $(date +%s) - start ))s"
