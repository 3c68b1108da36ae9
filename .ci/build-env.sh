# Sourced by .ci/run and .ci/test-all.sh: the settings of the host builds, the same in both so
# that a build made by one is fresh for the other.
#
# The host's binaries are linked with mold (Debian's package, installed through apt-get when
# missing and run as root) instead of GNU ld: a test build links about seventy binaries, each
# carrying wasmtime and kube-rs, and mold links them several times faster. Without mold (not
# root, no apt-get) the default linker is used.
#
# With CONCLAVE_CLIPPY=1 (.ci/run sets it), `build_env` makes a build also the lint:
# clippy-driver wraps rustc for the workspace's own crates (what `cargo clippy` does, but with
# code generation), with clippy's `-D warnings`, so the lints and the test build compile every
# crate once, not twice. Run the builds as `env "${build_env[@]}" cargo ...`.
if ! command -v mold >/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "build-env: installing mold"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mold >/dev/null 2>&1 ||
    { apt-get update >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mold >/dev/null 2>&1; } ||
    echo "build-env: mold could not be installed; linking with the default linker"
fi
if command -v mold >/dev/null; then
  export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-fuse-ld=mold"
fi

build_env=()
if [ "${CONCLAVE_CLIPPY:-0}" = 1 ]; then
  rustup component add clippy >/dev/null
  build_env=(RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver)"
    CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
fi
