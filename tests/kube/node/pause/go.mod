// Module pause is the pod sandbox's placeholder process for the test node: it waits for SIGTERM or
// SIGINT and reaps orphans, as the upstream pause container does. Built FROM scratch into the
// node's sandbox image (no registry is reachable to pull registry.k8s.io/pause).
module github.com/conclave-dev/conclave/tests/kube/node/pause

go 1.26.0
