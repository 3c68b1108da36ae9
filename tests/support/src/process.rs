//! Child processes (etcd, kube-apiserver, kube-scheduler, ...) that never outlive the test binary.
//!
//! Two mechanisms, because a test binary can end in two ways:
//!
//! * Normal scope exit or a panic that unwinds: [`ManagedProcess`] kills and reaps its child in
//!   `Drop`.
//! * The binary exits while a process is still referenced from a `static` (the shared control
//!   plane is never dropped), or the binary is killed outright: every child is spawned with
//!   `prctl(PR_SET_PDEATHSIG, SIGKILL)`, so the kernel kills it when its parent goes away.
//!
//! The death signal fires when the parent *thread* exits, not the parent process. Test threads and
//! tokio runtimes come and go, so all children are spawned from one dedicated spawner thread that
//! lives until the process exits.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;

use crate::Error;

/// A request to the spawner thread: the command and where to send the spawned child.
struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// The spawner thread's inbox. The sender lives in a `static`, so the thread never sees its
/// channel close and stays alive for the whole process.
static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for SpawnRequest { mut command, reply } in rx {
                    set_parent_death_signal(&mut command);
                    // The requester may have given up; nothing to do then.
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("cannot start the testkit spawner thread");
        tx
    })
}

/// Arranges for `command`'s process to receive SIGKILL when the spawning thread exits.
#[allow(unsafe_code)]
fn set_parent_death_signal(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only prctl and getppid, which are
    // async-signal-safe; it allocates nothing and touches no locks.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody would kill us.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("parent exited before exec"));
            }
            Ok(())
        });
    }
}

/// A running child process whose stdout and stderr go to a log file. Killed and reaped on drop.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    log: PathBuf,
    child: Child,
}

impl ManagedProcess {
    /// Spawns `program args...` with both output streams appended to `log`.
    ///
    /// `name` identifies the process in errors and log listings (e.g. `kube-apiserver`).
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> Result<Self, Error> {
        let io_err = |source| Error::Io {
            context: format!("opening log file {}", log.display()),
            source,
        };
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .map_err(io_err)?;
        let err = out.try_clone().map_err(io_err)?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let (reply, answer) = mpsc::channel();
        spawner()
            .send(SpawnRequest { command, reply })
            .map_err(|_| Error::Spawn {
                program: program.to_owned(),
                source: io::Error::other("spawner thread is gone"),
            })?;
        let child = answer
            .recv()
            .map_err(|_| io::Error::other("spawner thread is gone"))
            .and_then(|r| r)
            .map_err(|source| Error::Spawn {
                program: program.to_owned(),
                source,
            })?;
        tracing::debug!(name, pid = child.id(), log = %log.display(), "started process");
        Ok(Self {
            name: name.to_owned(),
            log: log.to_owned(),
            child,
        })
    }

    /// The name given at spawn time.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file holding the process's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status if the process has exited, `None` while it runs.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends SIGTERM (a graceful stop: components release their leases) without waiting.
    pub fn terminate(&mut self) {
        self.signal(libc::SIGTERM);
    }

    /// Freezes the process with SIGSTOP (it keeps its sockets and state but runs no code until
    /// [`resume`](Self::resume)). Returns false, sending nothing, if it has already exited.
    pub fn suspend(&mut self) -> bool {
        self.signal(libc::SIGSTOP)
    }

    /// Lets a process frozen by [`suspend`](Self::suspend) run again (SIGCONT; harmless on a
    /// running process). Returns false, sending nothing, if it has already exited.
    pub fn resume(&mut self) -> bool {
        self.signal(libc::SIGCONT)
    }

    /// Sends `signal` unless the process has exited; returns whether it was sent.
    #[allow(unsafe_code)]
    fn signal(&mut self, signal: libc::c_int) -> bool {
        if self.exit_status().is_some() {
            return false;
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own unreaped child,
        // so it cannot have been recycled for another process.
        unsafe { libc::kill(pid, signal) == 0 }
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The last `max_bytes` of the log (lossy UTF-8), for error messages.
    pub fn log_tail(&self, max_bytes: usize) -> String {
        log_tail(&self.log, max_bytes)
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `max_bytes` of the file at `path` (lossy UTF-8), or a note that it cannot be read.
fn log_tail(path: &Path, max_bytes: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let start = bytes.len().saturating_sub(max_bytes);
            String::from_utf8_lossy(&bytes[start..]).into_owned()
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}
