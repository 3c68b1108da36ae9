// Module probe is the test node's workload image: an HTTP health endpoint for the kubelet's probes.
module github.com/conclave-dev/conclave/tests/kube/node/probe

go 1.26.0
