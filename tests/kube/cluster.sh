#!/usr/bin/env bash
# A single-node Kubernetes cluster on this machine for trying Conclave, where one would use kind
# (which cannot be fetched here): the control plane and node that tests/kube/build.sh builds from Go
# modules, containerd with Debian's runc and CNI plugins, no registry.
#
#   cluster.sh up DIR          builds what is missing, starts etcd, kube-apiserver,
#                              kube-controller-manager, kube-scheduler, containerd, the kubelet and
#                              kube-proxy, and prints DIR/kubeconfig (admin) once the node is Ready
#   cluster.sh load DIR IMAGE  copies IMAGE from the local podman store into the node's containerd
#                              (namespace k8s.io) under its name and as REPO@DIGEST (printed, to
#                              pin it); pods use it with imagePullPolicy IfNotPresent/Never
#   cluster.sh digest DIR IMAGE prints the digest (sha256:...) the node has for IMAGE, to pin it
#   cluster.sh down DIR        stops everything `up` started and cleans up the host (mounts, bridge,
#                              iptables chains, cgroups, sysctls); DIR itself stays, with the logs
#
# The node is named conclave-node; it joins with its own credentials (system:node:conclave-node in
# system:nodes, checked by the Node authorizer and NodeRestriction). Pods get 10.244.0.0/24 on the
# bridge conclave0 and cannot reach beyond this machine; Services (ClusterIP, 10.0.0.0/24) work
# through kube-proxy (iptables). One node per machine. Needs root, Go, podman, and Debian's runc,
# containernetworking-plugins, iptables and conntrack. Logs in DIR/logs; CONCLAVE_KUBE_OUT as for
# build.sh; KUBECTL picks kubectl (default: the one on PATH).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
kube_version=$(sed -nE 's#^[[:space:]]*k8s.io/kubernetes[[:space:]]+(v[^[:space:]]+).*#\1#p' "$here/go.mod" | sed -n 1p)
bin=${CONCLAVE_KUBE_OUT:-$repo/target/kube}/$kube_version/bin
node_sh=$here/node/node.sh
NODE=conclave-node
NODE_IP=10.244.0.1
LOCK=/run/conclave-node.lock
READY_TIMEOUT=${CONCLAVE_NODE_READY_TIMEOUT:-300}

say() { echo "cluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts NAME (BINARY ARGS...) in the background, in its own session, logging to DIR/logs/NAME.log.
start() {
    local name=$1; shift
    setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$dir/pids/$name"
    echo "$name" >>"$dir/pids/order"
}

running() { [[ -f $dir/pids/$1 ]] && kill -0 "$(cat "$dir/pids/$1")" 2>/dev/null; }

# Waits up to SECONDS for COMMAND to succeed, failing with NAME's log tail if NAME exits first.
wait_until() {
    local name=$1 seconds=$2; shift 2
    local deadline=$(( $(date +%s) + seconds ))
    until "$@" >/dev/null 2>&1; do
        if ! running "$name"; then
            tail -n 30 "$dir/logs/$name.log" >&2
            die "$name exited (log $dir/logs/$name.log)"
        fi
        (( $(date +%s) < deadline )) || { tail -n 30 "$dir/logs/$name.log" >&2; die "timed out waiting for $name"; }
        sleep 0.5
    done
}

# A certificate signed by the cluster CA: cert NAME SUBJECT [SANS].
cert() {
    local name=$1 subject=$2 sans=${3:-}
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$name.key" 2>/dev/null
    openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr" 2>/dev/null
    local ext=$pki/$name.ext
    if [[ -n $sans ]]; then
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$sans" >"$ext"
    else
        printf 'extendedKeyUsage=clientAuth\n' >"$ext"
    fi
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 30 -sha256 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}

kubeconfig() {
    local name=$1 server=$2
    cat >"$dir/$name.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: conclave
  cluster: {server: "$server", certificate-authority: "$pki/ca.crt"}
users:
- name: $name
  user: {client-certificate: "$pki/$name.crt", client-key: "$pki/$name.key"}
contexts:
- name: conclave
  context: {cluster: conclave, user: $name}
current-context: conclave
KUBECONFIG
}

up() {
    [[ $(id -u) -eq 0 ]] || die "needs root (containerd, the kubelet and the bridge do)"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [[ -f $dir/pids/order ]]; then
        die "$dir already holds a cluster; run cluster.sh down $dir first"
    fi
    local t0
    t0=$(date +%s)
    CONCLAVE_KUBE_OUT=${CONCLAVE_KUBE_OUT:-} bash "$here/build.sh" >&2
    bash "$node_sh" prepare "$bin"
    local kubectl=${KUBECTL:-$(command -v kubectl || true)}
    [[ -x $kubectl ]] || die "kubectl not found (set KUBECTL)"
    mkdir -p "$dir/logs" "$dir/pids" "$dir/node"
    : >"$dir/pids/order"

    # One node per machine: hold the lock for the cluster's lifetime.
    start lock flock -n "$LOCK" sleep infinity
    sleep 0.3
    running lock || die "another node runs on this machine (lock $LOCK held)"

    pki=$dir/pki
    mkdir -p "$pki"
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
    openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=conclave-cluster-ca" -days 30 \
        -out "$pki/ca.crt" 2>/dev/null
    cert apiserver "/CN=kube-apiserver" \
        "IP:127.0.0.1,IP:$NODE_IP,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert admin "/O=system:masters/CN=conclave-admin"
    cert controller-manager "/CN=system:kube-controller-manager"
    cert scheduler "/CN=system:kube-scheduler"
    cert proxy "/CN=system:kube-proxy"
    cert node "/O=system:nodes/CN=system:node:$NODE"
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key" 2>/dev/null
    openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

    # The node's network first: the API server serves on the bridge address, so pods reach it
    # through the `kubernetes` Service.
    local node_ip
    node_ip=$(KUBELET_PORT=$(free_port) HEALTHZ_PORT=$(free_port) CA=$pki/ca.crt \
        bash "$node_sh" setup "$dir/node")
    [[ $node_ip == "$NODE_IP" ]] || die "node.sh set the node up at $node_ip, not $NODE_IP"

    local etcd_port peer_port port
    etcd_port=$(free_port); peer_port=$(free_port); port=$(free_port)
    start etcd "$bin/etcd" --name=conclave --data-dir="$dir/etcd-data" \
        --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
        --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
        --initial-cluster="conclave=http://127.0.0.1:$peer_port" --unsafe-no-fsync=true --log-level=warn
    wait_until etcd 60 bash -c "exec 3<>/dev/tcp/127.0.0.1/$etcd_port"

    local server=https://$NODE_IP:$port
    start kube-apiserver "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
        --bind-address="$NODE_IP" --advertise-address="$NODE_IP" --secure-port="$port" \
        --cert-dir="$dir/apiserver-certs" --tls-cert-file="$pki/apiserver.crt" \
        --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
        --service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC \
        --enable-admission-plugins=NodeRestriction \
        --kubelet-client-certificate="$pki/admin.crt" --kubelet-client-key="$pki/admin.key" \
        --kubelet-preferred-address-types=InternalIP \
        --feature-gates=CoordinatedLeaderElection=true --runtime-config=coordination.k8s.io/v1beta1=true \
        --profiling=false --v=1
    kubeconfig admin "$server"
    cp "$dir/admin.kubeconfig" "$dir/kubeconfig"
    wait_until kube-apiserver 180 "$kubectl" --kubeconfig "$dir/kubeconfig" get --raw /readyz
    say "kube-apiserver ready at $server after $(( $(date +%s) - t0 ))s"

    kubeconfig controller-manager "$server"
    kubeconfig scheduler "$server"
    kubeconfig proxy "$server"
    kubeconfig node "$server"
    local kcm=$dir/controller-manager.kubeconfig sched=$dir/scheduler.kubeconfig
    start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$kcm" \
        --authentication-kubeconfig="$kcm" --authorization-kubeconfig="$kcm" \
        --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
        --use-service-account-credentials=true --leader-elect=false \
        --bind-address=127.0.0.1 --secure-port="$(free_port)" --cert-dir="$dir/kcm-certs" --v=1
    start kube-scheduler "$bin/kube-scheduler" --kubeconfig="$sched" \
        --authentication-kubeconfig="$sched" --authorization-kubeconfig="$sched" --leader-elect=false \
        --bind-address=127.0.0.1 --secure-port="$(free_port)" --cert-dir="$dir/scheduler-certs" --v=1

    # containerd finds the shim on PATH: the one built here, not Debian's (containerd 1.6's).
    start containerd env PATH="$bin:$PATH" "$bin/containerd" --config "$dir/node/containerd.toml"
    wait_until containerd 60 "$bin/ctr" --address "$dir/node/containerd.sock" version
    bash "$node_sh" import "$dir/node" "$bin/ctr" "$bin/pause.tar"

    start kubelet env PATH="$bin:$PATH" "$bin/kubelet" --config="$dir/node/kubelet.yaml" \
        --kubeconfig="$dir/node.kubeconfig" --hostname-override="$NODE" --node-ip="$NODE_IP" \
        --root-dir="$dir/node/kubelet" --cert-dir="$dir/node/kubelet-pki" --v=1
    start kube-proxy "$bin/kube-proxy" --kubeconfig="$dir/proxy.kubeconfig" \
        --hostname-override="$NODE" --proxy-mode=iptables --cluster-cidr=10.244.0.0/24 \
        --conntrack-max-per-core=0 --healthz-bind-address="127.0.0.1:$(free_port)" \
        --metrics-bind-address="127.0.0.1:$(free_port)" --v=1
    wait_until kubelet "$READY_TIMEOUT" node_ready "$kubectl"
    say "node $NODE Ready after $(( $(date +%s) - t0 ))s"
    echo "$dir/kubeconfig"
}

node_ready() {
    [[ $("$1" --kubeconfig "$dir/kubeconfig" get node "$NODE" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

load() {
    local image=$1 tar
    [[ -S $dir/node/containerd.sock ]] || die "no node runs in $dir (cluster.sh up $dir first)"
    tar=$(mktemp "$dir/load-XXXXXX.tar")
    # shellcheck disable=SC2086
    podman ${CONCLAVE_PODMAN_FLAGS:-} save -q --format docker-archive -o "$tar" "$image"
    bash "$node_sh" import "$dir/node" "$bin/ctr" "$tar"
    rm -f "$tar"
    say "loaded $image into the node; pinned by digest it is ${image%:*}@$(digest "$image")"
}

digest() {
    [[ -S $dir/node/containerd.sock ]] || die "no node runs in $dir (cluster.sh up $dir first)"
    bash "$node_sh" digest "$dir/node" "$bin/ctr" "$1"
}

down() {
    local name pid n
    if [[ -f $dir/pids/order ]]; then
        # Reverse start order; SIGTERM, then SIGKILL whatever is still there after 10 s.
        for name in $(tac "$dir/pids/order"); do
            pid=$(cat "$dir/pids/$name" 2>/dev/null) || continue
            kill -TERM -- "-$pid" 2>/dev/null || true
        done
        for name in $(tac "$dir/pids/order"); do
            pid=$(cat "$dir/pids/$name" 2>/dev/null) || continue
            for n in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            kill -KILL -- "-$pid" 2>/dev/null || true
        done
    fi
    if [[ -d $dir/node ]]; then bash "$node_sh" cleanup "$dir/node"; fi
    rm -rf "$dir/pids" "$dir/etcd-data" "$dir/node/containerd"
    say "stopped; logs stay in $dir/logs"
}

cmd=${1:-}
dir=${2:-}
usage="usage: cluster.sh up DIR | load DIR IMAGE | digest DIR IMAGE | down DIR"
[[ -n $cmd && -n $dir ]] || die "$usage"
case $cmd in
up) up ;;
load) dir=$(cd "$dir" && pwd); load "${3:?IMAGE}" ;;
digest) dir=$(cd "$dir" && pwd); digest "${3:?IMAGE}" ;;
down) dir=$(cd "$dir" && pwd); down ;;
*) die "$usage" ;;
esac
