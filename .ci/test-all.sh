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
# shellcheck source=.ci/build-env.sh
source .ci/build-env.sh

# cargo for the workspace's test build: the same environment every time, so a later call finds
# the first one's build fresh.
workspace_cargo() {
  env "${build_env[@]}" cargo "$@"
}

section "tests: prepare (control plane, node, helm, prometheus, registry)"
for prepare in .ci/prepare-kube.sh .ci/prepare-node.sh .ci/prepare-helm.sh .ci/prepare-prometheus.sh .ci/prepare-registry.sh; do
  if [ -f "$prepare" ]; then timed "tests: $prepare" bash "$prepare"; fi
done

# The static release build and the image made of it (tests/deploy's image, cluster, krew and node
# tests need them) are built in the background, from the moment the preparations (whose apt-get
# installs must not run beside its own) are done, beside the test build's first part.
static_log=$(mktemp) static_status=$(mktemp)
(
  build_status=0
  (timed "background: static binary" bash .ci/prepare-static.sh &&
    timed "background: image" bash .ci/prepare-image.sh) || build_status=$?
  echo "$build_status" >"$static_status"
) >"$static_log" 2>&1 &

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
(cd strategies && env "${build_env[@]}" cargo build --target wasm32-wasip2 --release)

# Lines "PACKAGE<TAB>DIRECTORY<TAB>BINARY" for each test binary of a `cargo test --no-run
# --message-format=json-render-diagnostics` build read on stdin (libraries', binaries' and test
# targets' harnesses; benches and examples only compile). The binaries are run directly, from their
# package's directory as cargo runs them: `cargo test -p PACKAGE` would resolve features for that
# one package and compile about a hundred dependencies again, and one `cargo test` runs its
# binaries one after another.
list_test_binaries() {
  python3 -c '
import json, os, sys
for line in sys.stdin:
    message = json.loads(line)
    if (message.get("reason") == "compiler-artifact" and message.get("executable")
            and message["profile"]["test"]
            and set(message["target"]["kind"]) & {"lib", "bin", "test", "proc-macro"}):
        # "path+file:///DIR#NAME@VERSION", or "path+file:///DIR#VERSION" when NAME is the last part of DIR.
        url, _, fragment = message["package_id"].partition("#")
        package = fragment.split("@")[0] if "@" in fragment else url.rsplit("/", 1)[-1]
        directory = os.path.dirname(message["manifest_path"])
        print(package, directory, message["executable"], sep="\t")
'
}

section "tests: test build, first part (what the node lane runs)"
# The tests that start the machine's one node (tests/support's and tests/deploy's node.rs) and
# tests/deploy's image tests wait mostly on the node, its containers and Lease expiries, and need
# the image: they run as soon as they and the image are built, beside the rest of the build and
# the other tests, instead of after them. Built here: those test targets and the conclave binary
# (through the CLI's run_defaults test, whose package holds it). The whole workspace is selected,
# as in the full build below: the same feature resolution, so nothing compiles twice.
node_lane_list=$(mktemp)
workspace_cargo test --workspace --no-run --message-format=json-render-diagnostics \
  --test node --test cluster --test image --test krew --test run_defaults |
  list_test_binaries >"$node_lane_list"
# The node lane's binaries of package $1 whose names (without cargo's hash) are the arguments
# after it, one per line, in that order.
node_lane_binaries() {
  local package=$1 name
  shift
  for name in "$@"; do
    awk -F'\t' -v package="$package" -v name="$name" '
      $1 == package { file = $3; sub(/.*\//, "", file); sub(/-[0-9a-f]+$/, "", file); if (file == name) print $3 }' \
      "$node_lane_list"
  done
}
mapfile -t testkit_node_tests < <(node_lane_binaries conclave-testkit node)
mapfile -t deploy_node_tests < <(node_lane_binaries conclave-deploy-tests node)
mapfile -t deploy_image_tests < <(node_lane_binaries conclave-deploy-tests image krew cluster)
if [ "${#testkit_node_tests[@]}" -ne 1 ] || [ "${#deploy_node_tests[@]}" -ne 1 ] || [ "${#deploy_image_tests[@]}" -ne 3 ]; then
  echo "the node lane's test binaries (tests/support's node, tests/deploy's node, image, krew, cluster) were not all built" >&2
  exit 1
fi
testkit_dir=$(awk -F'\t' '$1 == "conclave-testkit" { print $2; exit }' "$node_lane_list")
deploy_dir=$(awk -F'\t' '$1 == "conclave-deploy-tests" { print $2; exit }' "$node_lane_list")

# Runs the test binary $3 from directory $2, timed under label $1 and the binary's name (its file
# name without cargo's hash) and directory. Its output is printed whole when it ends, so binaries
# run side by side do not mix their lines.
run_test_binary() {
  local label=$1 dir=$2 test=$3 name log status=0
  name=$(basename "$test")
  log=$(mktemp)
  timed "$label ${name%-*} (${dir#"$PWD"/})" bash -c 'cd "$1" && "$2"' - "$dir" "$test" >"$log" 2>&1 || status=$?
  {
    flock 9
    echo "     Running $test (exit $status)"
    cat "$log"
  } 9>>"$CI_TIMES.output-lock"
  rm -f "$log"
  return "$status"
}
export -f run_test_binary timed

# Runs each test binary (the arguments after the first two) from directory $2, one after another,
# under label $1; returns the exit status of the last one that failed, 0 if none did.
run_test_binaries() {
  local label=$1 dir=$2 test result=0
  shift 2
  for test in "$@"; do
    run_test_binary "$label" "$dir" "$test" || result=$?
  done
  return "$result"
}

# Waits for the static binary and the image; fails when they did not build.
wait_for_image() {
  while [ ! -s "$static_status" ]; do sleep 2; done
  if [ "$(cat "$static_status")" -ne 0 ]; then
    echo "not run: the static binary or the image failed to build"
    return 1
  fi
}

# The node lane: tests/support's node tests, then (once the image is built) tests/deploy's, one
# after another: both start the machine's one node, and the README's quick start there
# (`cluster.sh up`) refuses to start while another node runs. No other test starts a node.
node_log=$(mktemp) node_status=$(mktemp)
(
  lane_status=0
  run_test_binaries "node lane: testkit test" "$testkit_dir" "${testkit_node_tests[@]}" || lane_status=$?
  if wait_for_image; then
    run_test_binaries "node lane: deploy test" "$deploy_dir" "${deploy_node_tests[@]}" || lane_status=$?
  else
    lane_status=1
  fi
  echo "$lane_status" >"$node_status"
) >"$node_log" 2>&1 &
node_pid=$!

# The image lane: tests/deploy's tests of the static binary and the image (podman, and the chart's
# Pod on a real kube-apiserver), beside the node lane once the image is built.
image_log=$(mktemp) image_status=$(mktemp)
(
  lane_status=0
  if wait_for_image; then
    run_test_binaries "image lane: deploy test" "$deploy_dir" "${deploy_image_tests[@]}" || lane_status=$?
  else
    lane_status=1
  fi
  echo "$lane_status" >"$image_status"
) >"$image_log" 2>&1 &
image_pid=$!

section "tests: test build, the rest (every target: the tests, the benches and examples compile too; niced beside the node lane)"
# The test build makes target/debug/conclave too (the CLI's tests run it): building it here with
# the workspace's features, not `cargo build -p conclave`'s narrower ones, keeps the test step from
# compiling about 110 dependencies a second time. Niced: the node lane's tests and the static
# build come first.
binaries_list=$(mktemp)
nice -n 10 env "${build_env[@]}" cargo test --workspace --all-targets --no-run \
  --message-format=json-render-diagnostics | list_test_binaries >"$binaries_list"
mapfile -t model_tests < <(awk -F'\t' '$1 == "conclave-model" { print $3 }' "$binaries_list")
model_dir=$(awk -F'\t' '$1 == "conclave-model" { print $2; exit }' "$binaries_list")
if [ "${#model_tests[@]}" -eq 0 ]; then
  echo "no test binaries of tests/model found" >&2
  exit 1
fi

status=0
# The doc tests, the plugin workspace's native unit tests and the model checks (tests/model:
# millions of states through the core, CPU-bound for about two minutes) run in a lane of their
# own, beside the other tests: most of those wait on Lease timers, nodes and processes and leave
# the cores idle.
beside_log=$(mktemp) beside_status=$(mktemp)
(
  lane_status=0
  # The whole workspace, as built above: excluding packages would resolve features anew and
  # compile a hundred dependencies again.
  timed "beside: doc tests" workspace_cargo test --workspace --doc || lane_status=$?
  timed "beside: plugin workspace unit tests (native)" \
    bash -c 'cd strategies && env "$@" cargo test' - "${build_env[@]}" || lane_status=$?
  run_test_binaries "beside: model test" "$model_dir" "${model_tests[@]}" || lane_status=$?
  echo "$lane_status" >"$beside_status"
) >"$beside_log" 2>&1 &
beside_pid=$!

section "tests: strategy vectors"
# tests/vectors/NAME.json holds the vectors of the plugin crate strategies/NAME; each runs against
# the component just built from that crate (beta plugins are not built in, so they are tested as
# the .wasm files operators load with --plugins DIR).
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

# The other test binaries (every package's but tests/model's, and but the node and image lanes'),
# the longest first as last measured (the rest follow in the build's order), taken three at a
# time: each waits mostly on Lease expiries, processes and watches, so three side by side finish
# in about half the time of one after another.
longest_first="controller_real controller_emulator demo_status differential_random soak split_brain_processes prometheus"
section "tests: the other test binaries (three at a time)"
lanes_status=0
# One pass over the lists: each binary not in the node lane's list nor tests/model's, ranked by its
# name's place in $longest_first (the others after, in the build's order), as a directory line and
# a binary line.
awk -F'\t' -v longest="$longest_first" '
  BEGIN { count = split(longest, names, " "); for (i = 1; i <= count; i++) rank[names[i]] = i }
  FNR == NR { lane[$3] = 1; next }
  !($3 in lane) && $1 != "conclave-model" {
    name = $3; sub(/.*\//, "", name); sub(/-[0-9a-f]+$/, "", name)
    printf "%d\t%d\t%s\t%s\n", (name in rank) ? rank[name] : count + 1, FNR, $2, $3
  }' <(printf '%s\n' "${testkit_node_tests[@]}" "${deploy_node_tests[@]}" "${deploy_image_tests[@]}" | sed 's/^/-\t-\t/') "$binaries_list" |
  sort -t$'\t' -k1,1n -k2,2n | awk -F'\t' '{ print $3; print $4 }' |
  xargs -r -d '\n' -n 2 -P 3 bash -c 'run_test_binary "test binary:" "$1" "$2"' - || lanes_status=$?
if [ "$lanes_status" -ne 0 ]; then
  status=$lanes_status
fi

# Prints lane $1's log, named $2, once its process $3 has ended; folds its status file $4 into
# $status.
finish_lane() {
  local name=$1 log=$2 pid=$3 status_file=$4 lane_status
  wait "$pid" || true
  section "tests: $name (run meanwhile)"
  cat "$log"
  lane_status=$(cat "$status_file")
  if [ "${lane_status:-1}" -ne 0 ]; then
    status=${lane_status:-1}
  fi
  rm -f "$log" "$status_file"
}
finish_lane "doc tests, plugin unit tests and model checks" "$beside_log" "$beside_pid" "$beside_status"
finish_lane "the image lane (tests/deploy: the static binary, the image, the chart's Pod)" "$image_log" "$image_pid" "$image_status"
finish_lane "the node lane (tests/support's and tests/deploy's node tests)" "$node_log" "$node_pid" "$node_status"
section "tests: static binary and image (built meanwhile)"
cat "$static_log"
build_status=$(cat "$static_status")
build_status=${build_status:-1}
rm -f "$static_log" "$static_status" "$binaries_list" "$node_lane_list" "$CI_TIMES.output-lock"
if [ "$build_status" -ne 0 ]; then
  echo "the static binary or the image failed to build (exit $build_status)" >&2
  exit "$build_status"
fi
if [ "$status" -ne 0 ]; then
  exit "$status"
fi

print_times
echo "== all tests finished in $(( $(date +%s) - started ))s"
