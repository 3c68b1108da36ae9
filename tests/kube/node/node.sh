#!/usr/bin/env bash
# The host side of Conclave's test node (containerd + kubelet on this machine), shared by
# tests/kube/cluster.sh and conclave-testkit's Node, so both set up and clean up the same way:
#
#   node.sh prepare BIN_DIR        checks Debian's runc, CNI plugins, iptables and podman, and builds
#                                  (FROM scratch, cached) the sandbox image BIN_DIR/pause.tar
#                                  (localhost/pause:local), the test workload BIN_DIR/probe.tar
#                                  (localhost/conclave-probe:local), and kube-scheduler as a pod's
#                                  image BIN_DIR/kube-scheduler.tar (localhost/kube-scheduler:VERSION,
#                                  the binary BIN_DIR/kube-scheduler, VERSION from its --version)
#   node.sh setup DIR              sysctls, the bridge, a FORWARD guard, and the configuration files
#                                  (containerd.toml, kubelet.yaml, cni/) written into DIR; prints
#                                  the node's IP address
#   node.sh import DIR CTR TAR     imports an image archive into containerd's k8s.io namespace, and
#                                  names every image REPO:TAG there also REPO@DIGEST, as a pull from
#                                  a registry would: pods pinning an image by digest find it
#   node.sh digest DIR CTR NAME    prints the digest (sha256:...) containerd has for image NAME
#   node.sh cleanup DIR            kills the pods' processes and shims, unmounts, deletes the bridge,
#                                  the iptables chains and the cgroups the node made; idempotent
#
# setup reads KUBELET_PORT, HEALTHZ_PORT and CA (the cluster CA file) from the environment. One node
# runs on a machine at a time: the bridge, its subnet and the kubepods cgroups are machine-wide
# (callers hold a lock, see flock in cluster.sh and the testkit). Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The node's network: a bridge of its own, pods in SUBNET, the node (kubelet, gateway) at NODE_IP.
BRIDGE=conclave0
SUBNET=10.244.0.0/24
NODE_IP=10.244.0.1
# The Service range of the test control planes: routed to the bridge, so that a ClusterIP that
# kube-proxy does not translate (yet) never leaves the machine.
SERVICE_CIDR=10.0.0.0/24
# The filter chain that keeps the pods' traffic on the bridge: pods talk to each other and to the
# host, never beyond it.
GUARD=CONCLAVE-NODE-GUARD
# net.ipv4.ip_forward as it was before the first node set it.
FORWARD_ORIG=/run/conclave-node.ip_forward

say() { echo "node.sh: $*" >&2; }
die() { say "$*"; exit 1; }

prepare() {
    local bin=$1 missing=()
    [[ -x /usr/bin/runc || -x /usr/sbin/runc ]] || missing+=(runc)
    [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] || missing+=(containernetworking-plugins)
    command -v iptables >/dev/null || missing+=(iptables)
    command -v conntrack >/dev/null || missing+=(conntrack)
    command -v podman >/dev/null || missing+=(podman)
    if ((${#missing[@]})); then
        die "missing Debian packages: ${missing[*]} (apt-get install ${missing[*]})"
    fi
    image "$bin" pause localhost/pause:local
    image "$bin" probe localhost/conclave-probe:local
    binary_image "$bin" kube-scheduler
}

# Builds the static binary BIN_DIR/NAME into a FROM scratch image localhost/NAME:VERSION (VERSION
# from `NAME --version`), running as 65532 (nonroot), saved as the docker archive
# BIN_DIR/NAME.tar, unless that archive exists and is newer than the binary.
binary_image() {
    local bin=$1 name=$2 start work version tag
    if [[ -f $bin/$name.tar && $bin/$name.tar -nt $bin/$name ]]; then
        return 0
    fi
    start=$(date +%s)
    version=$("$bin/$name" --version | awk '{print $NF}')
    tag=localhost/$name:$version
    work=$(mktemp -d)
    cp "$bin/$name" "$work/$name"
    printf 'FROM scratch\nCOPY %s /usr/local/bin/%s\nUSER 65532:65532\nENTRYPOINT ["/usr/local/bin/%s"]\n' \
        "$name" "$name" "$name" >"$work/Containerfile"
    local podman=(podman --root "$work/root" --runroot "$work/run" --storage-driver vfs)
    "${podman[@]}" build --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
        -q -t "$tag" -f "$work/Containerfile" "$work" >/dev/null
    "${podman[@]}" save -q --format docker-archive -o "$work/$name.tar" "$tag"
    "${podman[@]}" rmi -a -f >/dev/null 2>&1 || true
    mv "$work/$name.tar" "$bin/$name.tar"
    rm -rf "$work"
    say "built image $tag into $bin/$name.tar in $(( $(date +%s) - start ))s"
}

# Builds the Go program in node/NAME statically into a FROM scratch image TAG, saved as the docker
# archive BIN_DIR/NAME.tar, unless that archive exists and is newer than the program's sources.
image() {
    local bin=$1 name=$2 tag=$3 src=$here/$2 start work
    if [[ -f $bin/$name.tar && -z $(find "$src" -newer "$bin/$name.tar") ]]; then
        return 0
    fi
    start=$(date +%s)
    work=$(mktemp -d)
    cp "$src/main.go" "$src/go.mod" "$src/Containerfile" "$work/"
    (cd "$work" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$name" .)
    local podman=(podman --root "$work/root" --runroot "$work/run" --storage-driver vfs)
    "${podman[@]}" build --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
        -q -t "$tag" -f "$work/Containerfile" "$work" >/dev/null
    "${podman[@]}" save -q --format docker-archive -o "$work/$name.tar" "$tag"
    "${podman[@]}" rmi -a -f >/dev/null 2>&1 || true
    mkdir -p "$bin"
    mv "$work/$name.tar" "$bin/$name.tar"
    rm -rf "$work"
    say "built image $tag into $bin/$name.tar in $(( $(date +%s) - start ))s"
}

fill() {
    local dir=$1
    sed -e "s#@DIR@#$dir#g" -e "s#@BRIDGE@#$BRIDGE#g" -e "s#@SUBNET@#$SUBNET#g" \
        -e "s#@NODE_IP@#$NODE_IP#g" -e "s#@KUBELET_PORT@#${KUBELET_PORT:?}#g" \
        -e "s#@HEALTHZ_PORT@#${HEALTHZ_PORT:?}#g" -e "s#@CA@#${CA:?}#g"
}

setup() {
    local dir=$1
    # The caller holds the machine's node lock: whatever a node left behind (its test binary was
    # killed before it could clean up) is stale.
    sweep '/node/containerd\.sock' '/node/(containerd|kubelet)(/|$)'
    mkdir -p "$dir/cni" "$dir/manifests" "$dir/containerd"
    fill "$dir" <"$here/containerd.toml" >"$dir/containerd.toml"
    fill "$dir" <"$here/kubelet.yaml" >"$dir/kubelet.yaml"
    fill "$dir" <"$here/cni.conflist" >"$dir/cni/10-conclave-node.conflist"
    # The CNI bridge plugin turns forwarding on for its gateway; remember the value to restore
    # (machine-wide, like the setting: a node killed before its cleanup leaves it for the next).
    [[ -f $FORWARD_ORIG ]] || cat /proc/sys/net/ipv4/ip_forward >"$FORWARD_ORIG"
    sysctl -qw net.ipv4.ip_forward=1
    # The bridge exists before the kubelet starts, so that the node's address (--node-ip) does.
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
    fi
    ip addr replace "$NODE_IP/${SUBNET#*/}" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    ip route replace "$SERVICE_CIDR" dev "$BRIDGE"
    if ! iptables -w -n -L "$GUARD" >/dev/null 2>&1; then
        iptables -w -N "$GUARD"
        iptables -w -A "$GUARD" -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
        iptables -w -A "$GUARD" -i "$BRIDGE" -j DROP
        iptables -w -A "$GUARD" -o "$BRIDGE" -j DROP
        iptables -w -I FORWARD -j "$GUARD"
    fi
    echo "$NODE_IP"
}

import() {
    local dir=$1 ctr=$2 tar=$3
    local out
    # ctr warns on stderr that cgroup v1 is deprecated; show its output only when it fails.
    if ! out=$("$ctr" --address "$dir/containerd.sock" -n k8s.io images import "$tar" 2>&1); then
        echo "$out" >&2
        die "cannot import $tar"
    fi
    # Without a registry, containerd knows the imported images only by the names in the archive,
    # and the kubelet asks for REPO@DIGEST when a pod pins one (an image volume always should).
    local ref type digest
    while read -r ref type digest _; do
        [[ $ref == *@* || $ref == sha256:* || $ref != *:* ]] && continue
        "$ctr" --address "$dir/containerd.sock" -n k8s.io images tag --force \
            "$ref" "${ref%:*}@$digest" >/dev/null 2>&1 || die "cannot name $ref by its digest"
    done < <("$ctr" --address "$dir/containerd.sock" -n k8s.io images ls 2>/dev/null | tail -n +2)
}

digest() {
    local dir=$1 ctr=$2 name=$3 found
    found=$("$ctr" --address "$dir/containerd.sock" -n k8s.io images ls "name==$name" 2>/dev/null \
        | awk 'NR > 1 { print $3 }')
    [[ $found == sha256:* ]] || die "containerd in $dir has no image $name"
    echo "$found"
}

# Every pid in the kubelet's pod cgroups (all v1 hierarchies, and the unified one).
pod_pids() {
    find /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods -name cgroup.procs 2>/dev/null \
        | xargs -r cat 2>/dev/null | sort -u
}

# The runc shims of a node's containerd whose socket path matches the regular expression SOCKET
# (they outlive containerd: they are reparented to init).
shim_pids() {
    local socket=$1 p
    for p in /proc/[0-9]*; do
        if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qE -- "-address [^ ]*$socket( |\$)"; then
            echo "${p#/proc/}"
        fi
    done
}

# Removes a cgroup directory tree bottom-up (cgroup directories are removed with rmdir only).
remove_cgroup_tree() {
    find "$1" -depth -type d -exec rmdir {} \; 2>/dev/null || true
}

# Removes what a node left on the host: kills the processes in the kubelet's pod cgroups and the
# shims whose containerd socket matches SOCKET (a regular expression), unmounts every mount point
# matching MOUNTS, deletes the bridge, the KUBE-*, CNI-* and guard chains, and the pod cgroups.
sweep() {
    local socket=$1 mounts=$2 pids round
    for round in 1 2 3 4 5 6 7 8 9 10; do
        pids=$( { pod_pids; shim_pids "$socket"; } | sort -u)
        [[ -z $pids ]] && break
        # shellcheck disable=SC2086
        kill -9 $pids 2>/dev/null || true
        sleep 0.5
    done
    # Rootfs overlays, network namespaces, volumes: deepest first, lazily, so that a busy one cannot
    # stop the cleanup.
    local m
    # (ENVIRON, not awk -v, which would interpret the pattern's backslashes.)
    for m in $(RE=$mounts awk '$5 ~ ENVIRON["RE"] { print $5 }' /proc/self/mountinfo | sort -r); do
        umount -l "$m" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    # Drop every rule that jumps to or sits in one of the chains, then the chains, in every table of
    # both families (the kubelet and kube-proxy make their chains for IPv6 too).
    local family table
    for family in iptables ip6tables; do
        for table in filter nat mangle; do
            "$family-save" -t "$table" 2>/dev/null | awk -v guard="$GUARD" '
                /^\*/ || /^COMMIT/ { print; next }
                /^:/ { name = substr($1, 2); if (name ~ /^(KUBE-|CNI-)/ || name == guard) next; print; next }
                /^-A / { if ($2 ~ /^(KUBE-|CNI-)/ || $2 == guard) next;
                         for (i = 3; i <= NF; i++) if ($i == "-j" || $i == "-g")
                             if ($(i+1) ~ /^(KUBE-|CNI-)/ || $(i+1) == guard) next;
                         print; next }
                { print }' | "$family-restore" -w -T "$table" 2>/dev/null || true
        done
    done
    local cg
    for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
        if [[ -d $cg ]]; then remove_cgroup_tree "$cg"; fi
    done
}

# Regular expression matching exactly the string $1.
literal() { printf '%s' "$1" | sed 's/[][\.*^$+?(){}|]/\\&/g'; }

cleanup() {
    local dir=$1 quoted
    quoted=$(literal "$dir")
    sweep "$quoted/containerd\.sock" "^$quoted/"
    if [[ -f $FORWARD_ORIG ]]; then
        sysctl -qw "net.ipv4.ip_forward=$(cat "$FORWARD_ORIG")"
        rm -f "$FORWARD_ORIG"
    fi
    rm -rf "$dir/cni-ipam"
}

cmd=${1:-}
case $cmd in
prepare) prepare "${2:?BIN_DIR}" ;;
setup) setup "${2:?DIR}" ;;
import) import "${2:?DIR}" "${3:?CTR}" "${4:?TAR}" ;;
digest) digest "${2:?DIR}" "${3:?CTR}" "${4:?NAME}" ;;
cleanup) cleanup "${2:?DIR}" ;;
*) die "usage: node.sh prepare BIN_DIR | setup DIR | import DIR CTR TAR | digest DIR CTR NAME | cleanup DIR" ;;
esac
