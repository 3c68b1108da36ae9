//! Command-line subcommands of the `conclave` binary.

pub mod candidate;
pub mod demo;
pub mod emulator;
pub mod run;
pub mod scaffold;
pub mod status;
pub mod strategy;

use anyhow::Context as _;
use std::path::Path;

/// Builds a Kubernetes client from `kubeconfig`, or, when `None`, from the usual places: the
/// in-cluster config, `$KUBECONFIG`, then `~/.kube/config`.
pub(crate) async fn kube_client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("finding a cluster (in-cluster config, $KUBECONFIG or ~/.kube/config)")?,
    };
    kube::Client::try_from(config).context("building the Kubernetes client")
}
