//! The controller image (deploy/Dockerfile): its stages give the same final stage whichever
//! binary and base they are built from, the image `.ci/prepare-image.sh` built agrees with the
//! chart and holds one static binary on a distroless/static root, and it runs the demo as its
//! non-root user on a read-only root with podman. (cluster.rs runs the chart's pod from the
//! same image against a real kube-apiserver.)

use conclave_deploy_tests::image::{
    BUILDER_OUTPUT, DEFAULT_STATIC_BINARY, DISTROLESS_NONROOT, Dockerfile, Image, NONROOT,
    dynamic_dependencies, locate_image, locate_static_binary,
};
use conclave_deploy_tests::{manifests_path, repo_root};

/// The final stage is built on `BASE_IMAGE` (distroless/static by default) and takes only the
/// binary, from the `binary` stage, which is whichever stage `BINARY_STAGE` names: `builder`
/// by default (deploy/build-static.sh in a rust image), or `prebuilt` (the output of the same
/// script, built outside the engine). Nothing in the final stage depends on the choice.
#[test]
fn the_final_stage_is_the_same_whichever_binary_and_base() {
    let dockerfile = Dockerfile::read().expect("parsing deploy/Dockerfile");
    let image = dockerfile.final_stage();
    assert_eq!(image.from, "${BASE_IMAGE}");
    assert_eq!(dockerfile.resolve(&image.from), DISTROLESS_NONROOT);
    assert!(
        image
            .instructions
            .iter()
            .all(|line| !line.contains('$') && !line.starts_with("RUN")),
        "the final stage uses no argument and runs nothing (distroless has no shell): {:?}",
        image.instructions
    );
    let copies: Vec<&str> = image.instructions_of("COPY").collect();
    assert_eq!(
        copies,
        [format!(
            "--from=binary {BUILDER_OUTPUT} /usr/local/bin/conclave"
        )],
        "the final stage copies the binary and nothing else"
    );

    let binary = dockerfile.stage("binary").expect("a stage named binary");
    assert_eq!(binary.from, "${BINARY_STAGE}");
    assert!(binary.instructions.is_empty(), "{:?}", binary.instructions);
    assert_eq!(dockerfile.arg("BINARY_STAGE"), Some("builder"));

    let builder = dockerfile.stage("builder").expect("a builder stage");
    assert!(
        builder
            .instructions_of("RUN")
            .any(|run| run.ends_with(&format!("deploy/build-static.sh {BUILDER_OUTPUT}"))),
        "the builder stage builds with deploy/build-static.sh, the script CI runs: {:?}",
        builder.instructions
    );
    let prebuilt = dockerfile.stage("prebuilt").expect("a prebuilt stage");
    assert_eq!(prebuilt.from, "scratch");
    assert_eq!(
        prebuilt.instructions,
        [format!("COPY {DEFAULT_STATIC_BINARY} {BUILDER_OUTPUT}")],
        "the prebuilt stage takes what deploy/build-static.sh installs by default"
    );

    // The context leaves target/ out but for that one file.
    let ignore = std::fs::read_to_string(repo_root().join("deploy/Dockerfile.dockerignore"))
        .expect("reading deploy/Dockerfile.dockerignore");
    let patterns: Vec<&str> = ignore
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .collect();
    let excluded = patterns.iter().position(|p| *p == "target/");
    let kept = patterns
        .iter()
        .position(|p| *p == format!("!{DEFAULT_STATIC_BINARY}"));
    assert!(
        matches!((excluded, kept), (Some(e), Some(k)) if e < k),
        "deploy/Dockerfile.dockerignore must exclude target/, then keep !{DEFAULT_STATIC_BINARY}: {patterns:?}"
    );
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

fn image() -> Option<Image> {
    locate_image().expect("locating the image")
}

/// The built image runs as the user the chart runs its pod as, serves metrics on the port the
/// chart names, and caches compiled plugins in a place the chart keeps writable.
#[test]
fn the_image_config_matches_the_chart() {
    let Some(image) = image() else {
        return;
    };
    let config = image.config().expect("podman image inspect");
    assert_eq!(config.user, format!("{NONROOT}:{NONROOT}"));
    let manifests = std::fs::read_to_string(manifests_path()).expect("reading the manifests");
    assert!(
        manifests.contains(&format!("runAsUser: {NONROOT}"))
            && manifests.contains(&format!("runAsGroup: {NONROOT}")),
        "the chart's securityContext runs as the image's USER {}",
        config.user
    );
    assert!(manifests.contains("readOnlyRootFilesystem: true"));
    assert_eq!(config.entrypoint, ["/usr/local/bin/conclave"]);
    assert_eq!(config.exposed, ["9090/tcp"]);
    assert!(manifests.contains("containerPort: 9090"));
    assert!(
        config.cmd.first().map(String::as_str) == Some("run")
            && config.cmd.iter().any(|arg| arg.ends_with(":9090")),
        "CMD {:?} runs the controller with metrics on the exposed port",
        config.cmd
    );
    // Compiled plugin code goes to a writable place even on a read-only root: /tmp, which the
    // chart mounts an emptyDir on.
    assert_eq!(config.env_value("XDG_CACHE_HOME"), Some("/tmp"));
    assert!(manifests.contains("mountPath: /tmp"));
    // distroless' own settings, kept by the local equivalent too.
    assert_eq!(
        config.env_value("SSL_CERT_FILE"),
        Some("/etc/ssl/certs/ca-certificates.crt")
    );
    assert_eq!(config.working_dir, "/home/nonroot");
    eprintln!("image {}: {} bytes", image.reference, config.size);
}

/// The image holds one static binary on distroless/static (or the local equivalent): the
/// nonroot user and group, its home, CA certificates and tzdata; no shell and no libc.
#[test]
fn the_image_holds_a_static_binary_on_distroless_static() {
    let Some(image) = image() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = "usr/local/bin/conclave";
    let files = image
        .files(dir.path(), &[binary, "etc/passwd", "etc/group"])
        .expect("exporting the image's file system");
    let file = |path: &str| {
        files
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("the image has no /{path}"))
    };
    let rootfs = dir.path().join("rootfs");
    let dependencies = dynamic_dependencies(&rootfs.join(binary)).expect("readelf");
    assert!(dependencies.is_empty(), "/{binary}: {dependencies:?}");
    assert_eq!(
        file(binary).owner,
        (0, 0),
        "the user cannot replace its binary"
    );

    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).expect("/etc/passwd");
    assert!(
        passwd.lines().any(|l| l.starts_with(&format!(
            "nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:"
        ))),
        "{passwd}"
    );
    let group = std::fs::read_to_string(rootfs.join("etc/group")).expect("/etc/group");
    assert!(
        group.lines().any(|l| l == format!("nonroot:x:{NONROOT}:")),
        "{group}"
    );
    let home = file("home/nonroot");
    assert_eq!(
        (home.mode.as_str(), home.owner),
        ("drwx------", (NONROOT, NONROOT))
    );
    assert_eq!(file("tmp").mode, "drwxrwxrwt");
    file("etc/ssl/certs/ca-certificates.crt");
    file("usr/share/zoneinfo/Europe/Berlin");

    let shells_or_libc: Vec<&str> = files
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            ["sh", "bash", "busybox"].contains(&name)
                || name.starts_with("ld-")
                || name.starts_with("libc.")
                || name.starts_with("libc-")
        })
        .collect();
    assert!(
        shells_or_libc.is_empty(),
        "no shell, no libc: {shells_or_libc:?}"
    );
}

/// Runs `conclave demo --duration <duration>` in the image with no network, on a read-only
/// root with nothing writable but `writable` (tmpfs mounts, as a pod's emptyDirs), as the
/// image's user, with every capability dropped; asserts that it exits 0 and returns its output.
fn demo_in_image(image: &Image, writable: &[&str], duration: &str) -> String {
    let mut options: Vec<String> = [
        "--network=none",
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
    ]
    .map(String::from)
    .to_vec();
    options.extend(
        writable
            .iter()
            .map(|at| format!("--tmpfs={at}:rw,exec,nosuid,nodev,mode=1777")),
    );
    let args = ["demo", "--duration", duration].map(String::from);
    let output = image.run_to_end(&options, &args).expect("podman run");
    output.assert_success();
    output.stdout
}

/// `conclave demo` needs no cluster: it starts the emulator, the controller (with the embedded
/// plugins, compiled into the cache under `XDG_CACHE_HOME`) and simulated candidates. In the
/// image, as uid 65532, on a read-only root with the chart's emptyDir on /tmp, it runs to its
/// summary and exits 0.
#[test]
fn the_image_runs_the_demo_as_its_user_on_a_read_only_root() {
    let Some(image) = image() else {
        return;
    };
    let stdout = demo_in_image(&image, &["/tmp"], "12s");
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

/// Without any writable directory the binary still does its job rather than failing: compiled
/// plugin code is not cached (a warning), and the demo goes on with the built-in strategy,
/// saying why its plugin Lease is skipped. A pod whose volumes are missing must not crash-loop.
#[test]
fn the_image_runs_the_demo_on_a_read_only_root_without_volumes() {
    let Some(image) = image() else {
        return;
    };
    let stdout = demo_in_image(&image, &[], "8s");
    assert!(
        stdout.contains("plugin Lease: skipped (cannot create a scratch plugin directory"),
        "{stdout}"
    );
    assert!(stdout.contains("Summary"), "{stdout}");
}
