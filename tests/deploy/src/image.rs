//! The controller image: how `deploy/Dockerfile` is put together, and the image
//! `deploy/build-image.sh` built from it, run with podman.
//!
//! `.ci/prepare-image.sh` builds the image (`localhost/conclave:dev`, or `$CONCLAVE_IMAGE`) from
//! the static binary `.ci/prepare-static.sh` built, on distroless/static or, with no registry
//! reachable, on the equivalent the script assembles; the final stage is the Dockerfile's either
//! way. The tests run that image as a container runtime runs it, not a model of it.

use std::path::{Path, PathBuf};

use crate::{CommandOutput, Error, repo_root};

/// Environment variable naming the static binary (.ci/test-all.sh sets it after running
/// `deploy/build-static.sh`).
pub const STATIC_BINARY_ENV: &str = "CONCLAVE_STATIC_BINARY";
/// Where `deploy/build-static.sh` installs the binary by default, and where the Dockerfile's
/// `prebuilt` stage takes it from.
pub const DEFAULT_STATIC_BINARY: &str = "target/static/conclave";
/// Environment variable naming the image to run (.ci/test-all.sh sets it).
pub const IMAGE_ENV: &str = "CONCLAVE_IMAGE";
/// The image `.ci/prepare-image.sh` and `deploy/build-image.sh` tag by default.
pub const DEFAULT_IMAGE: &str = "localhost/conclave:dev";
/// Environment variable holding podman's global flags, split on whitespace (the same variable
/// `deploy/build-image.sh` reads, so the tests look in the storage the image was built into).
pub const PODMAN_FLAGS_ENV: &str = "CONCLAVE_PODMAN_FLAGS";
/// The base image the Dockerfile names by default.
pub const DISTROLESS_NONROOT: &str = "gcr.io/distroless/static-debian12:nonroot";
/// The user distroless' `nonroot` images run as.
pub const NONROOT: u32 = 65532;
/// Where the builder stages leave the binary and the final stage copies it from.
pub const BUILDER_OUTPUT: &str = "/out/conclave";
/// Where a kubelet mounts a pod's ServiceAccount token, CA and namespace.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// `deploy/Dockerfile`.
pub fn dockerfile_path() -> PathBuf {
    repo_root().join("deploy/Dockerfile")
}

/// `deploy/Dockerfile` as stages: its global `ARG` defaults and each `FROM` with the
/// instructions under it (comments dropped, `\` continuations joined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// Global `ARG NAME=default` lines, before the first `FROM`.
    pub args: Vec<(String, String)>,
    /// The stages, in order; the last one is the image.
    pub stages: Vec<Stage>,
}

/// One `FROM` of a Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// What it is built on, as written (`${NAME}` unresolved).
    pub from: String,
    /// Its `AS` name.
    pub name: Option<String>,
    /// Its instructions after the `FROM`, one logical line each.
    pub instructions: Vec<String>,
}

impl Dockerfile {
    /// Reads and parses `deploy/Dockerfile`.
    pub fn read() -> Result<Self, Error> {
        let path = dockerfile_path();
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            context: format!("reading {}", path.display()),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses a Dockerfile into its global arguments and stages.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut dockerfile = Self {
            args: Vec::new(),
            stages: Vec::new(),
        };
        for line in logical_lines(text) {
            let (keyword, rest) = split_instruction(&line);
            match (keyword.as_str(), dockerfile.stages.last_mut()) {
                ("FROM", _) => {
                    let words: Vec<&str> = rest.split_whitespace().collect();
                    let (from, name) = match words.as_slice() {
                        [from] => (*from, None),
                        [from, r#as, name] if r#as.eq_ignore_ascii_case("AS") => {
                            (*from, Some((*name).to_owned()))
                        }
                        _ => return Err(unexpected(format!("FROM {rest}"))),
                    };
                    dockerfile.stages.push(Stage {
                        from: from.to_owned(),
                        name,
                        instructions: Vec::new(),
                    });
                }
                ("ARG", None) => {
                    let (name, default) = rest.split_once('=').unwrap_or((rest, ""));
                    dockerfile.args.push((name.to_owned(), default.to_owned()));
                }
                (_, None) => return Err(unexpected(format!("{line} before the first FROM"))),
                (_, Some(stage)) => stage.instructions.push(line),
            }
        }
        if dockerfile.stages.is_empty() {
            return Err(unexpected("no FROM"));
        }
        Ok(dockerfile)
    }

    /// The default of the global `ARG name`.
    pub fn arg(&self, name: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The stage named `name`.
    pub fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.name.as_deref() == Some(name))
    }

    /// The last stage: the image.
    pub fn final_stage(&self) -> &Stage {
        self.stages
            .last()
            .expect("parse refuses a Dockerfile without FROM")
    }

    /// `from` with a `${NAME}` argument replaced by its default.
    pub fn resolve(&self, from: &str) -> String {
        from.strip_prefix("${")
            .and_then(|rest| rest.strip_suffix('}'))
            .and_then(|name| self.arg(name))
            .map_or_else(|| from.to_owned(), str::to_owned)
    }
}

impl Stage {
    /// The arguments of this stage's instructions of kind `keyword` (`COPY`, `RUN`, ...).
    pub fn instructions_of<'a>(&'a self, keyword: &'a str) -> impl Iterator<Item = &'a str> {
        self.instructions.iter().filter_map(move |line| {
            let (kind, rest) = split_instruction(line);
            (kind == keyword).then_some(rest)
        })
    }
}

/// The instructions of a Dockerfile, comments dropped and `\` continuations joined.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        let trimmed = raw.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head.trim_end());
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                lines.push(std::mem::take(&mut current).trim().to_owned());
            }
        }
    }
    lines.push(current.trim().to_owned());
    lines.retain(|line| !line.is_empty());
    lines
}

/// An instruction's keyword, upper-cased, and the rest of its line.
fn split_instruction(line: &str) -> (String, &str) {
    let (keyword, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    (keyword.to_ascii_uppercase(), rest.trim())
}

fn unexpected(message: impl Into<String>) -> Error {
    Error::Unexpected(format!("deploy/Dockerfile: {}", message.into()))
}

fn io(context: impl Into<String>, source: std::io::Error) -> Error {
    Error::Io {
        context: context.into(),
        source,
    }
}

/// The static binary to test: `$CONCLAVE_STATIC_BINARY`, else `target/static/conclave`.
///
/// `Ok(None)` (after a SKIP line) when it is missing and CI does not demand it.
pub fn locate_static_binary() -> Result<Option<PathBuf>, Error> {
    let path = std::env::var_os(STATIC_BINARY_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(DEFAULT_STATIC_BINARY));
    if path.is_file() {
        return Ok(Some(path));
    }
    if crate::tools_required() {
        return Err(Error::ToolMissing {
            tool: "the static conclave binary",
            hint: "run deploy/build-static.sh, as .ci/test-all.sh does",
        });
    }
    eprintln!(
        "SKIP: {} not found (deploy/build-static.sh)",
        path.display()
    );
    Ok(None)
}

/// The dynamic-linking facts of an ELF file, from `readelf`: its program interpreter and the
/// shared libraries it needs (both empty for a static executable).
pub fn dynamic_dependencies(binary: &Path) -> Result<Vec<String>, Error> {
    let headers = crate::run(
        Path::new("readelf"),
        &["-l", "-d", &binary.to_string_lossy()],
        None,
    )?;
    headers.assert_success();
    Ok(headers
        .stdout
        .lines()
        .filter(|line| line.contains("Requesting program interpreter") || line.contains("(NEEDED)"))
        .map(|line| line.trim().to_owned())
        .collect())
}

/// The podman command line: `podman` and the global flags of [`PODMAN_FLAGS_ENV`].
#[derive(Debug, Clone)]
pub struct Podman {
    flags: Vec<String>,
}

impl Podman {
    /// podman with the flags of [`PODMAN_FLAGS_ENV`].
    pub fn from_env() -> Self {
        let flags = std::env::var(PODMAN_FLAGS_ENV).unwrap_or_default();
        Self {
            flags: flags.split_whitespace().map(str::to_owned).collect(),
        }
    }

    /// `podman`, its global flags, then `args`: program first, for [`std::process::Command`]
    /// or a managed process.
    pub fn command_line<S: AsRef<str>>(&self, args: &[S]) -> Vec<String> {
        let mut line = vec!["podman".to_owned()];
        line.extend(self.flags.iter().cloned());
        line.extend(args.iter().map(|a| a.as_ref().to_owned()));
        line
    }

    /// Runs podman with `args` and returns what it printed (a non-zero exit is not an error).
    pub fn run<S: AsRef<str>>(&self, args: &[S]) -> Result<CommandOutput, Error> {
        let line = self.command_line(args);
        let rest: Vec<&str> = line[1..].iter().map(String::as_str).collect();
        crate::run(Path::new(&line[0]), &rest, None)
    }
}

/// The image to run, found in podman's storage.
#[derive(Debug, Clone)]
pub struct Image {
    /// The podman it is stored in.
    pub podman: Podman,
    /// Its name, e.g. `localhost/conclave:dev`.
    pub reference: String,
}

/// Options every test run of the image passes: removed on exit, and explicit limits on open
/// files and processes (these machines refuse podman's default ulimits).
const RUN_DEFAULTS: &[&str] = &[
    "--rm",
    "--ulimit=nofile=1024:1024",
    "--ulimit=nproc=1024:1024",
];

/// Finds podman and the image `$CONCLAVE_IMAGE` (default `localhost/conclave:dev`) in its storage.
///
/// `Ok(None)` after a SKIP line when either is missing, or an error when
/// [`tools_required`](crate::tools_required).
pub fn locate_image() -> Result<Option<Image>, Error> {
    let podman = Podman::from_env();
    let reference = std::env::var(IMAGE_ENV)
        .ok()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_owned());
    let missing = |tool: &'static str, hint: &'static str| {
        if crate::tools_required() {
            return Err(Error::ToolMissing { tool, hint });
        }
        eprintln!("SKIP: {tool} not found ({hint})");
        Ok(None)
    };
    match podman.run(&["--version"]) {
        Ok(version) if version.success() => {}
        _ => return missing("podman", "Debian: apt-get install podman runc"),
    }
    if !podman.run(&["image", "exists", &reference])?.success() {
        return missing(
            "the conclave image",
            "build it with .ci/prepare-image.sh (or deploy/build-image.sh) and set CONCLAVE_IMAGE",
        );
    }
    Ok(Some(Image { podman, reference }))
}

/// The runtime configuration and size of an image, from `podman image inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageConfig {
    /// `USER`.
    pub user: String,
    /// `ENV`, as `KEY=VALUE`.
    pub env: Vec<String>,
    /// `ENTRYPOINT`.
    pub entrypoint: Vec<String>,
    /// `CMD`.
    pub cmd: Vec<String>,
    /// Exposed ports, e.g. `9090/tcp`.
    pub exposed: Vec<String>,
    /// `WORKDIR`.
    pub working_dir: String,
    /// Labels, `KEY=VALUE`.
    pub labels: Vec<String>,
    /// The image size in bytes.
    pub size: u64,
}

impl ImageConfig {
    /// The value of the environment variable `key`.
    pub fn env_value(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
    }
}

/// One entry of an image's file system, from `tar --list --verbose`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    /// Path without a leading `./` or `/`, directories without the trailing `/`.
    pub path: String,
    /// The `ls -l` style mode, e.g. `drwx------`.
    pub mode: String,
    /// Owner uid and gid.
    pub owner: (u32, u32),
}

impl Image {
    /// `podman image inspect` of the image.
    pub fn config(&self) -> Result<ImageConfig, Error> {
        let output = self.podman.run(&["image", "inspect", &self.reference])?;
        output.assert_success();
        let inspected: serde_json::Value = serde_json::from_str(&output.stdout)
            .map_err(|e| Error::Unexpected(format!("podman image inspect: {e}")))?;
        let image = &inspected[0];
        let config = &image["Config"];
        let strings = |value: &serde_json::Value| -> Vec<String> {
            value
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let keys = |value: &serde_json::Value, join: bool| -> Vec<String> {
            value
                .as_object()
                .map(|map| {
                    map.iter()
                        .map(|(k, v)| match (join, v.as_str()) {
                            (true, Some(v)) => format!("{k}={v}"),
                            _ => k.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(ImageConfig {
            user: config["User"].as_str().unwrap_or_default().to_owned(),
            env: strings(&config["Env"]),
            entrypoint: strings(&config["Entrypoint"]),
            cmd: strings(&config["Cmd"]),
            exposed: keys(&config["ExposedPorts"], false),
            working_dir: config["WorkingDir"].as_str().unwrap_or_default().to_owned(),
            labels: keys(&config["Labels"], true),
            size: image["Size"]
                .as_u64()
                .ok_or_else(|| Error::Unexpected("podman image inspect: no Size".into()))?,
        })
    }

    /// The image's file system, exported from a container created (not started) from it into
    /// `dir/rootfs.tar`, listed, and the files named in `extract` extracted under `dir/rootfs`.
    pub fn files(&self, dir: &Path, extract: &[&str]) -> Result<Vec<ImageFile>, Error> {
        let name = unique_name("export");
        let created = self
            .podman
            .run(&["create", "--name", &name, &self.reference])?;
        created.assert_success();
        let _remove = Container {
            podman: self.podman.clone(),
            name: name.clone(),
        };
        let tar = dir.join("rootfs.tar");
        let tar_arg = tar.to_string_lossy().into_owned();
        self.podman
            .run(&["export", "--output", &tar_arg, &name])?
            .assert_success();
        let listing = crate::run(
            Path::new("tar"),
            &["--list", "--verbose", "--numeric-owner", "--file", &tar_arg],
            None,
        )?;
        listing.assert_success();
        let files = listing
            .stdout
            .lines()
            .map(parse_listing_line)
            .collect::<Result<Vec<_>, _>>()?;
        if !extract.is_empty() {
            let rootfs = dir.join("rootfs");
            std::fs::create_dir_all(&rootfs).map_err(|e| io("creating the rootfs dir", e))?;
            let rootfs_arg = rootfs.to_string_lossy().into_owned();
            let mut args = vec!["--extract", "--file", &tar_arg, "--directory", &rootfs_arg];
            args.extend_from_slice(extract);
            crate::run(Path::new("tar"), &args, None)?.assert_success();
        }
        Ok(files)
    }

    /// The command line (program first) of `podman run` of the image in the background as the
    /// container `name`, with `options` (after the [defaults](RUN_DEFAULTS)) and `args` after
    /// the image (its `CMD`, or what replaces it).
    pub fn run_command_line<S: AsRef<str>>(
        &self,
        container: &Container,
        options: &[S],
        args: &[S],
    ) -> Vec<String> {
        let mut run = vec!["run".to_owned(), format!("--name={}", container.name)];
        run.extend(RUN_DEFAULTS.iter().map(|o| (*o).to_owned()));
        run.extend(options.iter().map(|o| o.as_ref().to_owned()));
        run.push(self.reference.clone());
        run.extend(args.iter().map(|a| a.as_ref().to_owned()));
        self.podman.command_line(&run)
    }

    /// Runs the image to completion (see [`run_command_line`](Self::run_command_line)) and
    /// returns what it printed.
    pub fn run_to_end<S: AsRef<str>>(
        &self,
        options: &[S],
        args: &[S],
    ) -> Result<CommandOutput, Error> {
        let container = self.container("run");
        let line = self.run_command_line(&container, options, args);
        let rest: Vec<&str> = line[1..].iter().map(String::as_str).collect();
        crate::run(Path::new(&line[0]), &rest, None)
    }

    /// A name for a container of this image, removed (if it exists then) when dropped.
    pub fn container(&self, purpose: &str) -> Container {
        Container {
            podman: self.podman.clone(),
            name: unique_name(purpose),
        }
    }
}

/// `conclave-test-<pid>-<purpose>-<n>`: unique on this machine while this process runs.
fn unique_name(purpose: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("conclave-test-{}-{purpose}-{n}", std::process::id())
}

/// A container's name; the container is force-removed when this is dropped, whatever became of
/// the `podman run` that started it (killing that client does not stop the container).
#[derive(Debug)]
pub struct Container {
    podman: Podman,
    name: String,
}

impl Container {
    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host pid of the container's first process, once it runs.
    pub fn pid(&self) -> Option<u32> {
        let output = self
            .podman
            .run(&["inspect", "--format", "{{.State.Pid}}", &self.name])
            .ok()?;
        output
            .stdout
            .trim()
            .parse()
            .ok()
            .filter(|pid| *pid != 0 && output.success())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self
            .podman
            .run(&["rm", "--force", "--ignore", "--time", "0", &self.name]);
    }
}

/// One line of `tar --list --verbose --numeric-owner`:
/// `drwx------ 65532/65532 0 2024-01-01 00:00 ./home/nonroot/` (then ` -> target` for a symlink,
/// ` link to target` for a hard link).
fn parse_listing_line(line: &str) -> Result<ImageFile, Error> {
    let bad = || Error::Unexpected(format!("tar listing line {line:?}"));
    // Mode, owner, size, date and time, then the name, which may hold spaces.
    let name_at = field_start(line, 5).ok_or_else(bad)?;
    let fields: Vec<&str> = line[..name_at].split_whitespace().collect();
    let (uid, gid) = fields[1].split_once('/').ok_or_else(bad)?;
    let owner = (
        uid.parse().map_err(|_| bad())?,
        gid.parse().map_err(|_| bad())?,
    );
    let name = &line[name_at..];
    let name = name
        .split(" -> ")
        .next()
        .and_then(|n| n.split(" link to ").next())
        .unwrap_or(name);
    let path = name
        .trim_start_matches("./")
        .trim_start_matches('/')
        .trim_end_matches('/')
        .to_owned();
    Ok(ImageFile {
        path,
        mode: fields[0].to_owned(),
        owner,
    })
}

/// The byte offset where the `n`th (from 0) whitespace-separated field of `line` starts.
fn field_start(line: &str, n: usize) -> Option<usize> {
    let mut seen = 0;
    let mut in_field = false;
    for (at, c) in line.char_indices() {
        if c.is_whitespace() {
            in_field = false;
        } else if !in_field {
            if seen == n {
                return Some(at);
            }
            in_field = true;
            seen += 1;
        }
    }
    None
}
