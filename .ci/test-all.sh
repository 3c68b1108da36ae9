#!/usr/bin/env bash
# Runs every Conclave test on a fresh machine: prepares what the tests need (the wasm32-wasip2
# target, the real Kubernetes control plane and node built from Go modules, the node's Debian
# packages and images, helm built from Go modules),
# the static controller binary the image is made of (musl-tools from Debian's packages; built
# while the tests that do not need it run), promtool
# (Debian's prometheus); checks and tests the alerting rules with promtool, builds the strategy
# plugins from source (and one Python and one JavaScript plugin with the registries' toolchains),
# runs the strategy vectors and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# shellcheck source=.ci/times.sh
source .ci/times.sh

rustup target add wasm32-wasip2 >/dev/null
section "tests: prepare (control plane, node, helm, prometheus, registry)"
for prepare in .ci/prepare-kube.sh .ci/prepare-node.sh .ci/prepare-helm.sh .ci/prepare-prometheus.sh .ci/prepare-registry.sh; do
  if [ -f "$prepare" ]; then timed "tests: $prepare" bash "$prepare"; fi
done

# Tests that need the real control plane, the node, kubectl, helm, the conclave binary or the
# static image binary fail (instead of skipping) when these are missing: this script provides them
# all, so their absence is a bug.
export CONCLAVE_REQUIRE_KUBE=1 CONCLAVE_REQUIRE_NODE=1 CONCLAVE_REQUIRE_KUBECTL=1 CONCLAVE_REQUIRE_BIN=1
# The Prometheus test (host/cli/tests/prometheus.rs: the dashboard's queries and two alert drills
# on a real Prometheus scraping `conclave run`) needs Debian's prometheus server, which
# .ci/prepare-prometheus.sh installs with promtool.
export CONCLAVE_REQUIRE_PROMETHEUS=1
# The OCI plugin tests (host/cli/tests/strategy_oci.rs: push, pull, auth, digests, timeouts
# against a real registry, and skopeo reading what was pushed) need Debian's docker-registry and
# skopeo, which .ci/prepare-registry.sh installs.
export CONCLAVE_REQUIRE_REGISTRY=1
export CONCLAVE_STATIC_BINARY=$PWD/target/static/conclave
export CONCLAVE_IMAGE=localhost/conclave:dev CONCLAVE_PODMAN_FLAGS="--storage-driver vfs --runtime runc"

section "tests: alerting rules (promtool)"
promtool check rules deploy/prometheus/conclave-rules.yaml
promtool test rules deploy/prometheus/conclave-rules.test.yaml

section "tests: strategy plugins (wasm32-wasip2)"
(cd strategies && cargo build --target wasm32-wasip2 --release)

section "tests: strategy vectors"
# tests/vectors/NAME.json holds the vectors of the plugin crate strategies/NAME; each runs against
# the component just built from that crate (beta plugins are not built in, so they are tested as
# the .wasm files operators load with --plugins DIR).
# The test build makes target/debug/conclave too (the CLI's tests run it): building it here with
# the workspace's features, not `cargo build -p conclave`'s narrower ones, keeps the test step from
# compiling about 110 dependencies a second time (14m56 of two builds became one of 10m57).
cargo test --workspace --no-run
plugins=target/wasm/wasm32-wasip2/release
for vectors in tests/vectors/*.json; do
  plugin=$(basename "$vectors" .json)
  wasm="$plugins/${plugin//-/_}.wasm"
  if [ ! -f "$wasm" ]; then
    echo "no component $wasm for $vectors: is strategies/$plugin a member of strategies/Cargo.toml?" >&2
    exit 1
  fi
  ./target/debug/conclave strategy test "$wasm" --vectors "$vectors"
done
# The built-in as built against conclave:strategy@0.1.0, @0.2.0 and @0.3.0, before the current
# contract existed: components of every earlier version still load and pass the same vectors.
for contract in v0.1 v0.2 v0.3; do
  ./target/debug/conclave strategy test "host/engine/tests/fixtures/$contract/oldest_emulation_version.wasm" \
    --vectors tests/vectors/oldest-emulation-version.json
done

section "tests: Python and JavaScript plugins (componentize-py, componentize-js from the registries)"
# Creates one plugin per language with `conclave strategy new --lang`, builds it with the pinned
# toolchains; host/cli/tests/languages.rs runs their vectors and elects one on the emulator.
bash .ci/prepare-langs.sh
export CONCLAVE_REQUIRE_LANGS=1

section "tests: plugin workspace unit tests (native)"
(cd strategies && cargo test)

# The test binaries of the two packages whose tests are run apart from the others below, from the
# workspace build above: `cargo test -p PACKAGE` would resolve features for that one package and
# compile about a hundred dependencies again.
test_binaries() {
  cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if (message.get("reason") == "compiler-artifact" and message.get("executable")
            and message["profile"]["test"] and "#" + sys.argv[1] + "@" in message["package_id"]):
        print(message["executable"])
' "$1"
}
mapfile -t deploy_tests < <(test_binaries conclave-deploy-tests)
mapfile -t testkit_tests < <(test_binaries conclave-testkit)
mapfile -t model_tests < <(test_binaries conclave-model)
if [ "${#deploy_tests[@]}" -eq 0 ] || [ "${#testkit_tests[@]}" -eq 0 ] || [ "${#model_tests[@]}" -eq 0 ]; then
  echo "no test binaries of tests/deploy, tests/support or tests/model found" >&2
  exit 1
fi

# The static release build and the image made of it (about 10 minutes of CPU on 2 cores) are
# needed only by tests/deploy. They are built in the background, niced, while the other tests
# run: those mostly wait (on Lease expiries, watches, processes), and the build takes the idle
# cores. The deploy tests (the chart, the image, the node) follow in the same background lane,
# beside the workspace tests, for the same reason. Their output goes to a log shown after.
static_log=$(mktemp) deploy_log=$(mktemp) static_status=$(mktemp) deploy_status=$(mktemp)
(
  build_status=0
  (timed "background: static binary (niced)" nice -n 19 bash .ci/prepare-static.sh &&
    timed "background: image" bash .ci/prepare-image.sh) || build_status=$?
  echo "$build_status" >"$static_status"
) >"$static_log" 2>&1 &

# Runs each test binary (the arguments after the first two) from directory $2, each timed under
# label $1 and its file name; returns the exit status of the last one that failed, 0 if none did.
run_test_binaries() {
  local label=$1 dir=$2 test result=0
  shift 2
  for test in "$@"; do
    echo "     Running $test"
    timed "$label $(basename "$test")" bash -c 'cd "$1" && "$2"' - "$dir" "$test" || result=$?
  done
  return "$result"
}

status=0
section "tests: testkit tests (before the deploy tests: both start the machine's one node)"
# The node the testkit's tests start waits for the machine-wide node lock, but the README's
# quick start (`cluster.sh up`, in the deploy tests) refuses to start while another node runs:
# these run before the deploy lane starts.
run_test_binaries "test binary: testkit" tests/support "${testkit_tests[@]}" || status=$?

(
  while [ ! -s "$static_status" ]; do sleep 2; done
  if [ "$(cat "$static_status")" -ne 0 ]; then
    echo "not run: the static binary or the image failed to build"
    echo 1 >"$deploy_status"
    exit 0
  fi
  lane_status=0
  run_test_binaries "background: deploy test" tests/deploy "${deploy_tests[@]}" || lane_status=$?
  echo "$lane_status" >"$deploy_status"
) >"$deploy_log" 2>&1 &
deploy_pid=$!

# The model checks (tests/model: millions of states through the core, CPU-bound for about two
# minutes) run beside the workspace tests too, in a lane of their own: most of those tests wait on
# Lease timers and processes and leave the cores idle.
model_log=$(mktemp) model_status=$(mktemp)
(
  lane_status=0
  run_test_binaries "beside: model test" tests/model "${model_tests[@]}" || lane_status=$?
  echo "$lane_status" >"$model_status"
) >"$model_log" 2>&1 &
model_pid=$!

section "tests: workspace tests (all but tests/deploy, tests/support and tests/model)"
workspace_log=$(mktemp)
cargo test --workspace --exclude conclave-deploy-tests --exclude conclave-testkit \
  --exclude conclave-model --no-fail-fast 2>&1 | tee "$workspace_log" || status=$?
test_binary_times "$workspace_log"
rm -f "$workspace_log"

section "tests: model checks (run meanwhile)"
wait "$model_pid" || true
cat "$model_log"
model_lane_status=$(cat "$model_status")
rm -f "$model_log" "$model_status"
if [ "${model_lane_status:-1}" -ne 0 ]; then
  status=${model_lane_status:-1}
fi

section "tests: static binary and image (built meanwhile)"
wait "$deploy_pid" || true
cat "$static_log"
section "tests: deploy tests (the chart, the image, the node; run meanwhile)"
cat "$deploy_log"
build_status=$(cat "$static_status") lane_status=$(cat "$deploy_status")
build_status=${build_status:-1} lane_status=${lane_status:-1}
rm -f "$static_log" "$deploy_log" "$static_status" "$deploy_status"
if [ "$build_status" -ne 0 ]; then
  echo "the static binary or the image failed to build (exit $build_status)" >&2
  exit "$build_status"
fi
if [ "$lane_status" -ne 0 ]; then
  status=$lane_status
fi
if [ "$status" -ne 0 ]; then
  exit "$status"
fi

print_times
echo "== all tests finished in $(( $(date +%s) - started ))s"
