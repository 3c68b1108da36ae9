//! The split-brain soak on a real node (issue 32): `conclave candidate` Pods under the kubelet,
//! elected by the chart's controller (its defaults: take-over, pod liveness on), while the driver
//! SIGKILLs containers through containerd (the kubelet restarts them), deletes Pods (SIGTERM),
//! starts better candidates (pre-emption) and kills the active controller's container; the
//! checker reads every process's output from the container logs (see
//! `conclave_deploy_tests::soak`) and fails the run on an overlap, a leaked task, an unended term
//! or a candidate that exited unasked.
//!
//! ```text
//! CONCLAVE_IMAGE=localhost/conclave:dev cargo bench -p conclave-deploy-tests --bench node_soak -- \
//!     [--handoffs 1000] [--leases 4] [--candidates 3] [--minutes 60] [--seed S]
//! ```
//! Needs root and the node (`tests/kube/build.sh`), helm (`.ci/prepare-helm.sh`) and the image
//! (`deploy/build-image.sh`). A short run is in CI (tests/node.rs).

use std::path::PathBuf;
use std::time::Duration;

use conclave_deploy_tests::image::locate_image;
use conclave_deploy_tests::soak::{self, NodeSoakConfig};
use conclave_deploy_tests::workloads::{install_chart_on_one_node, load_image, rolled_out};
use conclave_deploy_tests::{FULL_NAME, RELEASE_NAMESPACE, locate_helm};
use conclave_testkit::{ControlPlane, Node};

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main(flavor = "multi_thread")]
async fn main() -> BenchResult<()> {
    let config = config_from_args()?;
    let image = locate_image()?.ok_or("no image: build it with deploy/build-image.sh")?;
    let helm = locate_helm()?.ok_or("no helm: run .ci/prepare-helm.sh")?;
    let plane = ControlPlane::start()
        .await?
        .ok_or("no control plane: run tests/kube/build.sh")?;
    let node = Node::start(&plane)
        .await?
        .ok_or("no node: run as root after tests/kube/build.sh")?;
    let client = plane.client().await?;
    load_image(&image, &node, &image.reference)?;
    install_chart_on_one_node(&helm, &plane, &image.reference, &[])?;
    rolled_out(
        &client,
        RELEASE_NAMESPACE,
        FULL_NAME,
        2,
        Duration::from_secs(300),
    )
    .await?;
    eprintln!(
        "node soak: seed {}, outputs in {}",
        config.seed,
        config.output_dir.display()
    );
    let report = soak::run(&client, &node, &image.reference, config).await?;
    println!("{report}");
    for problem in report
        .verdict
        .overlaps
        .iter()
        .chain(&report.verdict.leaked)
        .chain(&report.verdict.errors)
        .chain(&report.unexpected_exits)
        .chain(&report.wrongly_dead)
        .take(20)
    {
        println!("problem: {problem}");
    }
    if !report.clean() {
        return Err("the node soak found a problem (see above)".into());
    }
    Ok(())
}

/// The run's shape from the command line (cargo bench adds `--bench`, which is ignored).
fn config_from_args() -> BenchResult<NodeSoakConfig> {
    let mut config = NodeSoakConfig {
        leases: 4,
        candidates: 3,
        hand_offs: 1000,
        max: Duration::from_secs(60 * 60),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos() as u64,
        output_dir: PathBuf::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--handoffs" => config.hand_offs = value()?.parse()?,
            "--leases" => config.leases = value()?.parse()?,
            "--candidates" => config.candidates = value()?.parse()?,
            "--minutes" => config.max = Duration::from_secs(60 * value()?.parse::<u64>()?),
            "--seed" => config.seed = value()?.parse()?,
            _ => {}
        }
    }
    if config.leases == 0 || config.candidates < 2 {
        return Err("--leases must be at least 1 and --candidates at least 2".into());
    }
    config.output_dir = conclave_deploy_tests::repo_root()
        .join("target/node-soak")
        .join(config.seed.to_string());
    Ok(config)
}
