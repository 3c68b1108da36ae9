//! Where the control-plane binaries built by `tests/kube/build.sh` live, and what to do when they
//! are missing.

use std::path::{Path, PathBuf};

use crate::Error;

/// The Kubernetes version `tests/kube/go.mod` pins; `build.sh` builds into
/// `target/kube/<this>/bin`. A unit test checks that it matches go.mod.
pub const KUBERNETES_VERSION: &str = "v1.37.2";

/// Set this environment variable (CI does) to turn missing binaries into an error instead of a
/// skip.
pub const REQUIRE_ENV: &str = "CONCLAVE_REQUIRE_KUBE";

/// Overrides the directory holding the binaries.
const BIN_DIR_ENV: &str = "CONCLAVE_KUBE_BIN_DIR";

/// The binaries every control plane needs.
const REQUIRED: [&str; 3] = ["etcd", "kube-apiserver", "kube-scheduler"];

/// The directory holding etcd, kube-apiserver, kube-scheduler and kube-controller-manager.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// Finds the binaries: `$CONCLAVE_KUBE_BIN_DIR`, else
    /// `<workspace>/target/kube/<KUBERNETES_VERSION>/bin`.
    ///
    /// Returns `Ok(None)` (after printing a SKIP line to stderr) when one is missing and
    /// `CONCLAVE_REQUIRE_KUBE` is unset or empty, and [`Error::BinaryMissing`] when it is set.
    pub fn locate() -> Result<Option<Self>, Error> {
        let dir = match std::env::var_os(BIN_DIR_ENV) {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => workspace_root()
                .join("target/kube")
                .join(KUBERNETES_VERSION)
                .join("bin"),
        };
        // Canonical paths read better in logs and process listings.
        let dir = dir.canonicalize().unwrap_or(dir);
        let bins = Self { dir };
        for name in REQUIRED {
            let path = bins.path(name);
            if !is_executable(&path) {
                if required() {
                    return Err(Error::BinaryMissing { binary: path });
                }
                eprintln!(
                    "SKIP: {} is missing; run tests/kube/build.sh to build the control plane \
                     (set {REQUIRE_ENV}=1 to make this a failure)",
                    path.display()
                );
                return Ok(None);
            }
        }
        Ok(Some(bins))
    }

    /// The path of binary `name` (it may not exist, e.g. kube-controller-manager).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Whether `CONCLAVE_REQUIRE_KUBE` asks for the binaries to be present.
fn required() -> bool {
    std::env::var_os(REQUIRE_ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The Cargo workspace root (this crate lives in `<root>/tests/support`).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// build.sh derives the output directory from go.mod; the harness hard-codes it. They must
    /// agree or every test silently skips.
    #[test]
    fn version_matches_go_mod() {
        let go_mod = std::fs::read_to_string(workspace_root().join("tests/kube/go.mod")).unwrap();
        let pinned = go_mod
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find_map(|w| match w.as_slice() {
                ["k8s.io/kubernetes", v, ..] | ["require", "k8s.io/kubernetes", v, ..] => {
                    Some(v.to_string())
                }
                _ => None,
            })
            .expect("go.mod requires k8s.io/kubernetes");
        assert_eq!(pinned, KUBERNETES_VERSION);
    }
}
