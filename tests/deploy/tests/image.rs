//! The controller image (deploy/Dockerfile) as far as this machine can check it without a
//! container engine: its final stage agrees with the chart, the binary the builder stage makes
//! is static, and that binary runs from a root laid out like the image, as the image's non-root
//! user, on a read-only root with the chart's volumes. (cluster.rs runs the chart's pod spec from
//! the same root against a real kube-apiserver.)

use conclave_deploy_tests::image::{
    ImageConfig, RootFs, Sandbox, Volume, can_sandbox, dynamic_dependencies, locate_static_binary,
};
use conclave_deploy_tests::{manifests_path, tools_required};

/// The static binary and permission to sandbox, or `None` after a SKIP line.
fn static_binary_and_sandbox() -> Option<std::path::PathBuf> {
    let binary = locate_static_binary().expect("locating the static binary")?;
    if !can_sandbox() {
        assert!(
            !tools_required(),
            "running the image root needs root (mount namespaces, chroot); CONCLAVE_REQUIRE_KUBE is set"
        );
        eprintln!("SKIP: running the image root needs root (mount namespaces, chroot)");
        return None;
    }
    Some(binary)
}

#[test]
fn dockerfile_builds_with_the_checked_script_and_matches_the_chart() {
    let image = ImageConfig::from_dockerfile().expect("parsing deploy/Dockerfile");
    assert!(
        image
            .builder_text
            .contains("deploy/build-static.sh /out/conclave"),
        "the builder stage must build with deploy/build-static.sh, the script CI runs"
    );
    let entrypoint = image.entrypoint.first().expect("an ENTRYPOINT");
    assert_eq!(
        image.destination_of("/out/conclave"),
        Some(entrypoint.as_str()),
        "the ENTRYPOINT is the binary the final stage copies"
    );
    assert_ne!(image.user.0, 0, "the image runs as a non-root user");

    // The chart runs the pod as the image's user and serves metrics on the exposed port, which
    // is also the port of the default CMD.
    let manifests = std::fs::read_to_string(manifests_path()).expect("reading the manifests");
    assert!(
        manifests.contains(&format!("runAsUser: {}", image.user.0))
            && manifests.contains(&format!("runAsGroup: {}", image.user.1)),
        "the chart's securityContext runs as the image's USER {:?}",
        image.user
    );
    assert!(manifests.contains("readOnlyRootFilesystem: true"));
    assert_eq!(image.exposed, vec![9090]);
    assert!(manifests.contains("containerPort: 9090"));
    assert!(
        image.cmd.iter().any(|arg| arg.ends_with(":9090")),
        "CMD {:?} serves metrics on the exposed port",
        image.cmd
    );
    // Compiled plugin code goes to a writable place even on a read-only root.
    assert_eq!(image.env_value("XDG_CACHE_HOME"), Some("/tmp"));
}

#[test]
fn an_unmodelled_final_stage_instruction_is_refused() {
    let dockerfile = "FROM rust AS builder\nRUN make\nFROM gcr.io/distroless/static\nRUN echo hi\n";
    let error = ImageConfig::parse(dockerfile).expect_err("RUN in the final stage");
    assert!(error.to_string().contains("RUN"), "{error}");
}

#[test]
fn the_static_binary_needs_no_libc_and_no_loader() {
    let Some(binary) = locate_static_binary().expect("locating the static binary") else {
        return;
    };
    let dependencies = dynamic_dependencies(&binary).expect("readelf");
    assert!(
        dependencies.is_empty(),
        "{} is not static: {dependencies:?}",
        binary.display()
    );
}

/// Runs `conclave demo --duration <duration>` from the image root, as the image's user, on a
/// read-only root with `volumes`; asserts that it exits 0 and returns what it printed.
fn demo_in_image_root(binary: &std::path::Path, volumes: Vec<Volume>, duration: &str) -> String {
    let image = ImageConfig::from_dockerfile().expect("parsing deploy/Dockerfile");
    let mut sandbox = Sandbox::for_image(&image);
    sandbox.read_only_root = true;
    sandbox.volumes = volumes;
    let root = RootFs::build(&image, binary, &sandbox.mount_points()).expect("image root");
    let mut argv = image.entrypoint.clone();
    argv.extend(["demo", "--duration", duration].map(String::from));
    let output = sandbox
        .command(root.path(), &argv)
        .output()
        .expect("starting the sandbox");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the demo in the image root exited with {}\n--- stdout\n{stdout}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `conclave demo` needs no cluster: it starts the emulator, the controller (with the embedded
/// plugins, compiled into the cache under `XDG_CACHE_HOME`) and simulated candidates. From the
/// image root, as uid 65532, on a read-only root with the chart's emptyDirs, it runs to its
/// summary and exits 0.
#[test]
fn the_image_runs_the_demo_as_its_user_on_a_read_only_root() {
    let Some(binary) = static_binary_and_sandbox() else {
        return;
    };
    let stdout = demo_in_image_root(&binary, vec![Volume::Empty { at: "/tmp".into() }], "12s");
    assert!(stdout.contains("Summary"), "no summary table:\n{stdout}");
    // Far from any source tree, the plugin Lease runs on the plugin embedded for the demo, loaded
    // through the sandboxed engine like a third-party plugin.
    assert!(
        stdout.contains(
            "conclave.dev/priority (plugin strategies/priority, embedded in this binary)"
        ) && !stdout.contains("plugin Lease: skipped"),
        "the plugin Lease did not run:\n{stdout}"
    );
}

/// Without any writable directory (no volumes on the read-only root) the binary still does its
/// job rather than failing: compiled plugin code is not cached (a warning), and the demo goes on
/// with the built-in strategy, saying why its plugin Lease is skipped. A pod whose volumes are
/// missing must not crash-loop.
#[test]
fn the_image_runs_the_demo_on_a_read_only_root_without_volumes() {
    let Some(binary) = static_binary_and_sandbox() else {
        return;
    };
    let stdout = demo_in_image_root(&binary, Vec::new(), "8s");
    assert!(
        stdout.contains("plugin Lease: skipped (cannot create a scratch plugin directory"),
        "{stdout}"
    );
    assert!(stdout.contains("Summary"), "{stdout}");
}
