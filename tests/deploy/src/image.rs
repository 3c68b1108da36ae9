//! The controller image, checked without a container runtime.
//!
//! This machine has no container engine and reaches no image registry, so `docker build` cannot
//! run here. What can be checked is everything the image consists of: the static binary that
//! `deploy/build-static.sh` builds (the Dockerfile's builder stage runs the same script), and the
//! Dockerfile's final stage (its `COPY`, `USER`, `ENV`, `ENTRYPOINT` and `CMD`), applied to a
//! root filesystem laid out like `distroless/static:nonroot`: no shell, no libc, CA certificates
//! and the `nonroot` user. [`Sandbox`] runs a command in that root as a container runtime would:
//! in its own mount namespace, as the image's (or the pod's) user, with a read-only root, a
//! private environment and the volumes a pod mounts.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, repo_root};

/// Environment variable naming the static binary to put in the image (.ci/test-all.sh sets
/// it after running `deploy/build-static.sh`).
pub const STATIC_BINARY_ENV: &str = "CONCLAVE_STATIC_BINARY";
/// Where `deploy/build-static.sh` installs the binary by default.
pub const DEFAULT_STATIC_BINARY: &str = "target/static/conclave";
/// What the Dockerfile's builder stage produces and its final stage copies.
const BUILDER_OUTPUT: &str = "/out/conclave";
/// The user distroless' `nonroot` images run as.
const NONROOT: u32 = 65532;

/// The runtime configuration of the image, read from the Dockerfile's final stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageConfig {
    /// The base image of the final stage.
    pub base: String,
    /// `COPY --from=...` lines: (stage, source in that stage, destination in the image).
    pub copies: Vec<(String, String, String)>,
    /// `USER`, as uid and gid.
    pub user: (u32, u32),
    /// `ENV` settings, in order.
    pub env: Vec<(String, String)>,
    /// `ENTRYPOINT`, exec form.
    pub entrypoint: Vec<String>,
    /// `CMD`, exec form.
    pub cmd: Vec<String>,
    /// `EXPOSE`d ports.
    pub exposed: Vec<u16>,
    /// The whole text of the builder stages, for checks on how the binary is built.
    pub builder_text: String,
}

/// `deploy/Dockerfile`.
pub fn dockerfile_path() -> PathBuf {
    repo_root().join("deploy/Dockerfile")
}

impl ImageConfig {
    /// Reads and parses `deploy/Dockerfile`.
    pub fn from_dockerfile() -> Result<Self, Error> {
        let path = dockerfile_path();
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            context: format!("reading {}", path.display()),
            source,
        })?;
        Self::parse(&text)
    }

    /// Parses a Dockerfile's final stage. Only the instructions an image configuration is made
    /// of are understood there; any other instruction in the final stage is an error, so a new
    /// one cannot slip past these checks unexamined.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let instructions = logical_lines(text);
        let last_from = instructions
            .iter()
            .rposition(|line| keyword(line) == "FROM")
            .ok_or_else(|| unexpected("the Dockerfile has no FROM"))?;
        let builder_text = instructions[..last_from].join("\n");
        let base = rest(&instructions[last_from])
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut config = Self {
            base,
            copies: Vec::new(),
            user: (0, 0),
            env: Vec::new(),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            exposed: Vec::new(),
            builder_text,
        };
        for line in &instructions[last_from + 1..] {
            let args = rest(line);
            match keyword(line).as_str() {
                "COPY" => config.copies.push(parse_copy(args)?),
                "USER" => config.user = parse_user(args)?,
                "ENV" => config.env.extend(parse_env(args)?),
                "ENTRYPOINT" => config.entrypoint = parse_exec_form(args)?,
                "CMD" => config.cmd = parse_exec_form(args)?,
                "EXPOSE" => {
                    for port in args.split_whitespace() {
                        let number = port.trim_end_matches("/tcp");
                        config.exposed.push(
                            number
                                .parse()
                                .map_err(|_| unexpected(format!("EXPOSE {port}")))?,
                        );
                    }
                }
                "LABEL" | "ARG" => {}
                other => {
                    return Err(unexpected(format!(
                        "the final stage has a {other} instruction these checks do not model"
                    )));
                }
            }
        }
        Ok(config)
    }

    /// Where the image puts the file that `COPY --from=<builder>` takes from `source`.
    pub fn destination_of(&self, source: &str) -> Option<&str> {
        self.copies
            .iter()
            .find(|(_, from, _)| from == source)
            .map(|(_, _, to)| to.as_str())
    }

    /// The value of an `ENV` setting.
    pub fn env_value(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The Dockerfile's instructions with comments dropped and `\` continuations joined.
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
    if !current.trim().is_empty() {
        lines.push(current.trim().to_owned());
    }
    lines.retain(|line| !line.is_empty());
    lines
}

fn keyword(line: &str) -> String {
    line.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase()
}

fn rest(line: &str) -> &str {
    line.split_once(char::is_whitespace)
        .map(|(_, rest)| rest.trim())
        .unwrap_or_default()
}

fn unexpected(message: impl Into<String>) -> Error {
    Error::Unexpected(format!("deploy/Dockerfile: {}", message.into()))
}

fn parse_copy(args: &str) -> Result<(String, String, String), Error> {
    let words: Vec<&str> = args.split_whitespace().collect();
    match words.as_slice() {
        [from, source, destination] => {
            let stage = from.strip_prefix("--from=").ok_or_else(|| {
                unexpected(format!("COPY {args}: only COPY --from=STAGE is modelled"))
            })?;
            Ok((stage.into(), (*source).into(), (*destination).into()))
        }
        _ => Err(unexpected(format!(
            "COPY {args}: expected --from=STAGE SRC DEST"
        ))),
    }
}

fn parse_user(args: &str) -> Result<(u32, u32), Error> {
    let (user, group) = args.split_once(':').unwrap_or((args, args));
    let number = |s: &str| {
        s.parse::<u32>().map_err(|_| {
            unexpected(format!(
                "USER {args}: give numeric ids (Kubernetes' runAsNonRoot checks them)"
            ))
        })
    };
    Ok((number(user)?, number(group)?))
}

fn parse_env(args: &str) -> Result<Vec<(String, String)>, Error> {
    args.split_whitespace()
        .map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .ok_or_else(|| unexpected(format!("ENV {args}: use the KEY=VALUE form")))
        })
        .collect()
}

fn parse_exec_form(args: &str) -> Result<Vec<String>, Error> {
    serde_json::from_str(args)
        .map_err(|e| unexpected(format!("{args}: not the JSON exec form ({e})")))
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

/// A root filesystem laid out like the image: the base's files, plus the binary where the
/// Dockerfile copies it. Deleted on drop.
pub struct RootFs {
    dir: tempfile::TempDir,
}

impl RootFs {
    /// Lays out the image of `config` with `binary` as the builder stage's output.
    ///
    /// The base is modelled on `gcr.io/distroless/static-debian12:nonroot`: `/etc/passwd` and
    /// `/etc/group` with root, nobody and nonroot, the CA bundle, `/tmp` (mode 1777) and the
    /// nonroot home directory; no shell and no libc. Mount points for `extra_dirs` are created.
    pub fn build(config: &ImageConfig, binary: &Path, extra_dirs: &[&str]) -> Result<Self, Error> {
        if !config.base.starts_with("gcr.io/distroless/static") {
            return Err(unexpected(format!(
                "final stage FROM {}: RootFs models distroless/static only",
                config.base
            )));
        }
        let destination = config
            .destination_of(BUILDER_OUTPUT)
            .ok_or_else(|| unexpected(format!("the final stage does not copy {BUILDER_OUTPUT}")))?;
        let dir = tempfile::Builder::new()
            .prefix("conclave-image-")
            .tempdir()
            .map_err(|source| io("creating the image root", source))?;
        let root = dir.path();
        let base_files = [
            (
                "etc/passwd",
                "root:x:0:0:root:/root:/sbin/nologin\n\
                 nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
                 nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
            ),
            (
                "etc/group",
                "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n",
            ),
            ("etc/nsswitch.conf", "hosts: files dns\n"),
        ];
        for (path, content) in base_files {
            write(&root.join(path), content.as_bytes())?;
        }
        let ca = std::fs::read("/etc/ssl/certs/ca-certificates.crt")
            .map_err(|source| io("reading this machine's CA bundle", source))?;
        write(&root.join("etc/ssl/certs/ca-certificates.crt"), &ca)?;
        for mount_point in ["proc", "tmp", "home/nonroot"].iter().chain(extra_dirs) {
            let path = root.join(mount_point.trim_start_matches('/'));
            std::fs::create_dir_all(&path)
                .map_err(|source| io(format!("creating {}", path.display()), source))?;
        }
        set_mode(&root.join("tmp"), 0o1777)?;
        std::os::unix::fs::chown(root.join("home/nonroot"), Some(NONROOT), Some(NONROOT))
            .map_err(|source| io("chown /home/nonroot", source))?;
        let target = root.join(destination.trim_start_matches('/'));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|source| io(format!("creating {}", parent.display()), source))?;
        }
        std::fs::copy(binary, &target).map_err(|source| {
            io(
                format!("copying {} into the image", binary.display()),
                source,
            )
        })?;
        set_mode(&target, 0o755)?;
        // Whoever runs the image reads its root, but owns none of it.
        set_mode(root, 0o755)?;
        Ok(Self { dir })
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn io(context: impl Into<String>, source: std::io::Error) -> Error {
    Error::Io {
        context: context.into(),
        source,
    }
}

fn write(path: &Path, content: &[u8]) -> Result<(), Error> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|source| io(format!("creating {}", parent.display()), source))?;
    }
    std::fs::write(path, content)
        .map_err(|source| io(format!("writing {}", path.display()), source))
}

fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|source| io(format!("chmod {}", path.display()), source))
}

/// A volume mounted into the sandbox.
#[derive(Debug, Clone)]
pub enum Volume {
    /// An empty, writable tmpfs (a pod's `emptyDir`).
    Empty {
        /// Where it is mounted.
        at: String,
    },
    /// A host directory mounted read-only (a Secret, ConfigMap or projected volume).
    ReadOnly {
        /// The directory on this machine.
        source: PathBuf,
        /// Where it is mounted.
        at: String,
    },
}

impl Volume {
    fn mount_point(&self) -> &str {
        match self {
            Self::Empty { at } | Self::ReadOnly { at, .. } => at,
        }
    }
}

/// How to run a process from the image, as a container runtime would.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The user and group to run as.
    pub user: (u32, u32),
    /// The whole environment of the process (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// Whether the root filesystem is mounted read-only (`readOnlyRootFilesystem`).
    pub read_only_root: bool,
    /// Volumes, mounted in order.
    pub volumes: Vec<Volume>,
}

impl Sandbox {
    /// The image's own settings: its `USER`, its `ENV` plus the `PATH` runtimes set, a writable
    /// root and no volumes.
    pub fn for_image(config: &ImageConfig) -> Self {
        let mut env = vec![(
            "PATH".to_owned(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        )];
        env.extend(config.env.iter().cloned());
        Self {
            user: config.user,
            env,
            read_only_root: false,
            volumes: Vec::new(),
        }
    }

    /// The mount points the volumes need in the image root (pass to [`RootFs::build`]).
    pub fn mount_points(&self) -> Vec<&str> {
        self.volumes.iter().map(Volume::mount_point).collect()
    }

    /// The command line (program first) that runs `argv` (an absolute path inside the image,
    /// then its arguments) in `root`: a private mount namespace with the volumes and `/proc`
    /// mounted, the root read-only if asked, then `chroot` as [`user`](Self::user) with exactly
    /// [`env`](Self::env). It needs root on this machine (to mount and chroot); the program it
    /// ends in does not have it. Every step execs the next, so the pid stays the same from
    /// start to the program and signals sent to it reach the program.
    pub fn command_line(&self, root: &Path, argv: &[String]) -> Vec<String> {
        let mut line: Vec<String> = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-ec",
        ]
        .map(String::from)
        .to_vec();
        line.push(SANDBOX_SCRIPT.to_owned());
        line.push("sandbox".to_owned());
        line.push(root.display().to_string());
        for volume in &self.volumes {
            line.push(match volume {
                Volume::Empty { at } => format!("empty:{at}"),
                Volume::ReadOnly { source, at } => format!("ro:{at}:{}", source.display()),
            });
        }
        line.push(
            if self.read_only_root {
                "root:ro"
            } else {
                "root:rw"
            }
            .to_owned(),
        );
        line.push("--".to_owned());
        line.extend(self.env.iter().map(|(k, v)| format!("{k}={v}")));
        line.push("/usr/sbin/chroot".to_owned());
        line.push(format!("--userspec={}:{}", self.user.0, self.user.1));
        line.push(root.display().to_string());
        line.extend(argv.iter().cloned());
        line
    }

    /// [`command_line`](Self::command_line) as a [`Command`].
    pub fn command(&self, root: &Path, argv: &[String]) -> Command {
        let line = self.command_line(root, argv);
        let mut command = Command::new(&line[0]);
        command.args(&line[1..]);
        command
    }
}

/// Run by `sh` inside the new mount namespace: `$1` is the root, then one word per mount, then
/// `--`, then what `env -i` runs. Mounts on the root's subdirectories are mounted before the
/// root is made read-only, as a runtime mounts volumes over a read-only root.
const SANDBOX_SCRIPT: &str = r#"
root=$1; shift
mount --bind "$root" "$root"
while [ "$1" != "--" ]; do
  case "$1" in
    empty:*) mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root${1#empty:}" ;;
    ro:*) spec=${1#ro:}; at=${spec%%:*}; source=${spec#*:}
          mount --bind "$source" "$root$at"
          mount -o remount,bind,ro "$root$at" ;;
    root:ro) mount -o remount,bind,ro "$root" ;;
    root:rw) ;;
    *) echo "sandbox: unknown mount $1" >&2; exit 2 ;;
  esac
  shift
done
shift
mount -t proc proc "$root/proc"
exec /usr/bin/env -i "$@"
"#;

/// Whether this process may set up a [`Sandbox`] (it needs root).
pub fn can_sandbox() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// The dynamic-linking facts of an ELF file, from `readelf`: its program interpreter and the
/// shared libraries it needs (both empty for a static executable).
pub fn dynamic_dependencies(binary: &Path) -> Result<Vec<String>, Error> {
    let program = Path::new("readelf");
    let headers = crate::run(program, &["-l", "-d", &binary.to_string_lossy()], None)?;
    headers.assert_success();
    Ok(headers
        .stdout
        .lines()
        .filter(|line| line.contains("Requesting program interpreter") || line.contains("(NEEDED)"))
        .map(|line| line.trim().to_owned())
        .collect())
}
