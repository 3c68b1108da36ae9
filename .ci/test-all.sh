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

# The static release build and the image made of it (about 10 minutes of CPU on 2 cores) are
# needed only by tests/deploy. They are built in the background, niced, once the preparations
# (whose apt-get installs must not run beside its own) are done: they take
# the cores whenever the foreground leaves one idle (a build's serial stretches, tests waiting on
# Lease expiries, watches and processes). The deploy tests (the chart, the image, the node) follow
# in the same background lane once the testkit tests are done. Its output goes to a log shown after.
static_log=$(mktemp) deploy_log=$(mktemp) static_status=$(mktemp) deploy_status=$(mktemp)
(
  build_status=0
  (timed "background: static binary (niced)" nice -n 19 bash .ci/prepare-static.sh &&
    timed "background: image" nice -n 19 bash .ci/prepare-image.sh) || build_status=$?
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

section "tests: test build (every target: the tests, the benches and examples compile too)"
# The test build makes target/debug/conclave too (the CLI's tests run it): building it here with
# the workspace's features, not `cargo build -p conclave`'s narrower ones, keeps the test step from
# compiling about 110 dependencies a second time (14m56 of two builds became one of 10m57).
workspace_cargo test --workspace --all-targets --no-run

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

section "tests: plugin workspace unit tests (native)"
(cd strategies && env "${build_env[@]}" cargo test)

# Every test binary of the workspace build above, as lines "PACKAGE<TAB>DIRECTORY<TAB>BINARY"
# (libraries', binaries' and test targets' harnesses; the benches and examples only compile).
# They are run directly, from their package's directory as cargo runs them: `cargo test -p
# PACKAGE` would resolve features for that one package and compile about a hundred dependencies
# again, and one `cargo test` runs its binaries one after another.
binaries_list=$(mktemp)
workspace_cargo test --workspace --all-targets --no-run --message-format=json 2>/dev/null | python3 -c '
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
' >"$binaries_list"
# The binaries of package $1, one per line.
test_binaries() {
  awk -F'\t' -v package="$1" '$1 == package { print $3 }' "$binaries_list"
}
# The directory of package $1's binaries (its manifest's).
package_dir() {
  awk -F'\t' -v package="$1" '$1 == package { print $2; exit }' "$binaries_list"
}
mapfile -t deploy_tests < <(test_binaries conclave-deploy-tests)
mapfile -t testkit_tests < <(test_binaries conclave-testkit)
mapfile -t model_tests < <(test_binaries conclave-model)
if [ "${#deploy_tests[@]}" -eq 0 ] || [ "${#testkit_tests[@]}" -eq 0 ] || [ "${#model_tests[@]}" -eq 0 ]; then
  echo "no test binaries of tests/deploy, tests/support or tests/model found" >&2
  exit 1
fi

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

status=0
# The doc tests and the model checks (tests/model: millions of states through the core, CPU-bound
# for about two minutes) run in a lane of their own, beside the testkit tests and the workspace
# tests: most of those wait on Lease timers, nodes and processes and leave the cores idle.
beside_log=$(mktemp) beside_status=$(mktemp)
(
  lane_status=0
  # The whole workspace, as built above: excluding packages would resolve features anew and
  # compile a hundred dependencies again.
  timed "beside: doc tests" workspace_cargo test --workspace --doc || lane_status=$?
  run_test_binaries "beside: model test" "$(package_dir conclave-model)" "${model_tests[@]}" || lane_status=$?
  echo "$lane_status" >"$beside_status"
) >"$beside_log" 2>&1 &
beside_pid=$!

section "tests: testkit tests (before the deploy tests: both start the machine's one node)"
# The node the testkit's tests start waits for the machine-wide node lock, but the README's
# quick start (`cluster.sh up`, in the deploy tests) refuses to start while another node runs:
# these run before the deploy lane starts.
run_test_binaries "test binary: testkit" "$(package_dir conclave-testkit)" "${testkit_tests[@]}" || status=$?

(
  while [ ! -s "$static_status" ]; do sleep 2; done
  if [ "$(cat "$static_status")" -ne 0 ]; then
    echo "not run: the static binary or the image failed to build"
    echo 1 >"$deploy_status"
    exit 0
  fi
  lane_status=0
  run_test_binaries "background: deploy test" "$(package_dir conclave-deploy-tests)" "${deploy_tests[@]}" || lane_status=$?
  echo "$lane_status" >"$deploy_status"
) >"$deploy_log" 2>&1 &
deploy_pid=$!

# The workspace's test binaries, the longest first as last measured (the rest follow in the
# build's order), taken three at a time: each waits mostly on Lease expiries, processes and
# watches, so three side by side finish in about half the time of one after another.
longest_first="controller_real controller_emulator demo_status differential_random soak split_brain_processes prometheus"
section "tests: workspace tests (all but tests/deploy, tests/support and tests/model; three at a time)"
lanes_status=0
# One pass over the list: each binary of every package but those three, ranked by its name's place
# in $longest_first (the others after, in the build's order), as a directory line and a binary line.
awk -F'\t' -v skip=" conclave-deploy-tests conclave-testkit conclave-model " -v longest="$longest_first" '
  BEGIN { count = split(longest, names, " "); for (i = 1; i <= count; i++) rank[names[i]] = i }
  index(skip, " " $1 " ") == 0 {
    name = $3; sub(/.*\//, "", name); sub(/-[0-9a-f]+$/, "", name)
    printf "%d\t%d\t%s\t%s\n", (name in rank) ? rank[name] : count + 1, NR, $2, $3
  }' "$binaries_list" | sort -t$'\t' -k1,1n -k2,2n | awk -F'\t' '{ print $3; print $4 }' |
  xargs -r -d '\n' -n 2 -P 3 bash -c 'run_test_binary "test binary:" "$1" "$2"' - || lanes_status=$?
if [ "$lanes_status" -ne 0 ]; then
  status=$lanes_status
fi

section "tests: doc tests and model checks (run meanwhile)"
wait "$beside_pid" || true
cat "$beside_log"
beside_lane_status=$(cat "$beside_status")
rm -f "$beside_log" "$beside_status"
if [ "${beside_lane_status:-1}" -ne 0 ]; then
  status=${beside_lane_status:-1}
fi

section "tests: static binary and image (built meanwhile)"
wait "$deploy_pid" || true
cat "$static_log"
section "tests: deploy tests (the chart, the image, the node; run meanwhile)"
cat "$deploy_log"
build_status=$(cat "$static_status") lane_status=$(cat "$deploy_status")
build_status=${build_status:-1} lane_status=${lane_status:-1}
rm -f "$static_log" "$deploy_log" "$static_status" "$deploy_status" "$binaries_list" "$CI_TIMES.output-lock"
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
