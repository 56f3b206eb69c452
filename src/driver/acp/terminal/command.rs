//! One terminal's command: started through [`crate::driver::spawn`] exactly
//! like the agent (the scenario's cgroup, network and mount namespaces and
//! seccomp program, no privileges, only the environment it is given, a
//! process group of its own), its stdout and stderr pumped into one
//! [`Output`], its exit published once the process is reaped, and the kill
//! of its whole process tree: the group and the descendants while the
//! command has not been reaped, and every process carrying its marker
//! variable ([`MARK_VAR`]) wherever it re-parented.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use super::output::Output;
use crate::driver::child::{Child, Stdin};
use crate::driver::mountns::MntNs;
use crate::driver::netns::NetNs;
use crate::driver::process::Exit;
use crate::driver::seccomp::Policy;
use crate::driver::spawn::{self, SpawnSpec};
use crate::proc_hygiene::{self as hygiene, Scope};

/// The variable every terminal command carries (value: its terminal's
/// marker), inherited by all it starts: how its tree is found after its
/// processes re-parented.
pub const MARK_VAR: &str = "CHAOS_TERMINAL";

/// How long a kill waits for the processes it signalled to be gone.
const KILL_WAIT: Duration = spawn::KILL_WAIT;

/// Marker sweeps per kill: a process forked while a sweep ran is found by
/// the next one.
const SWEEPS: usize = 8;

/// Bytes read from a pipe after its command exited before the exit is
/// published (what the command itself wrote is in the pipe by then; a
/// descendant still writing is not waited for).
const DRAIN_MAX: usize = 2 * super::output::HARD_CAP;

/// Bytes per read of a pipe (a command that floods costs fewer wake-ups).
const READ_BUF: usize = 64 * 1024;

/// Where every terminal command runs: the agent's own containment.
pub struct Sandbox {
    /// The scenario's work dir (the default cwd, and the bound of any other).
    pub work: PathBuf,
    /// The agent's hermetic environment.
    pub env: BTreeMap<String, String>,
    pub netns: Option<Arc<NetNs>>,
    pub mntns: Option<Arc<MntNs>>,
    pub seccomp: Policy,
    pub scope: Arc<Scope>,
}

/// One command to start.
pub struct Launch {
    pub argv: Vec<String>,
    /// Exactly its environment (the marker included).
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub limit: Option<u64>,
    /// Its [`MARK_VAR`] value.
    pub marker: String,
    /// Its stdin a pipe chaosrun holds open and never writes (the client
    /// fault `stdin_open`), not `/dev/null`.
    pub stdin_open: bool,
}

/// A started command.
pub struct Command {
    pid: i32,
    /// Held from the start, before the process could be reaped.
    leader: Option<OwnedFd>,
    marker: String,
    output: Arc<Mutex<Output>>,
    exit: watch::Receiver<Option<Exit>>,
    /// Held while the command is reaped; true once it was (its pid may then
    /// be another process's: neither its group nor its children are ours).
    reaped: Arc<tokio::sync::Mutex<bool>>,
    pump: tokio::task::JoinHandle<()>,
    /// The write end of an open stdin (`stdin_open`), held and never written.
    _stdin: Option<tokio::process::ChildStdin>,
}

/// Run `f` (which blocks: a start waits for the child's exec, a scan reads
/// /proc) off the runtime's worker where the runtime has others.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Command {
    /// Start `launch` in `sandbox`; its output is read from then on.
    pub fn start(sandbox: &Sandbox, launch: Launch) -> anyhow::Result<Command> {
        let (mut child, pid) = blocking(|| {
            spawn::spawn(SpawnSpec {
                argv: &launch.argv,
                env: &launch.env,
                cwd: &launch.cwd,
                stdin: if launch.stdin_open {
                    Stdin::Piped
                } else {
                    Stdin::Null
                },
                scope: &sandbox.scope,
                netns: sandbox.netns.as_deref(),
                mntns: sandbox.mntns.as_deref(),
                seccomp: sandbox.seccomp,
                tty: None,
                what: "terminal command",
            })
        })?;
        // Our unreaped child: the pid is still this process.
        let leader = hygiene::pidfd_open(pid);
        let exited = hygiene::pidfd_open(pid).and_then(readable_at_exit);
        let output = Arc::new(Mutex::new(Output::new(launch.limit)));
        let (exit_tx, exit) = watch::channel(None);
        let reaped = Arc::new(tokio::sync::Mutex::new(false));
        let stdin = child.stdin.take();
        let pump = Pump {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child,
            pid,
            output: output.clone(),
            exit: exit_tx,
            reaped: reaped.clone(),
            exited,
        };
        Ok(Command {
            pid,
            leader,
            marker: launch.marker,
            output,
            exit,
            reaped,
            pump: tokio::spawn(pump.run()),
            _stdin: stdin,
        })
    }

    /// Whether the command has not exited (been reaped) yet.
    pub fn running(&self) -> bool {
        self.exit.borrow().is_none()
    }

    /// `terminal/output`'s result.
    pub fn output(&self) -> Value {
        let exit = *self.exit.borrow();
        let (output, truncated) = self.output.lock().unwrap_or_else(|e| e.into_inner()).text();
        let mut v = json!({"output": output, "truncated": truncated});
        if let Some(exit) = exit {
            v["exitStatus"] = exit_status(exit);
        }
        v
    }

    /// The command's exit, once reaped; None if it can no longer be known
    /// (the terminal was dropped meanwhile).
    pub async fn wait(&self) -> Option<Exit> {
        let mut rx = self.exit.clone();
        let got = rx.wait_for(Option::is_some).await.ok().and_then(|v| *v);
        got
    }

    /// SIGKILL the command's whole tree and wait (bounded) until every
    /// process signalled is gone and the command reaped.
    pub async fn kill(&self) {
        let fds = blocking(|| {
            let mut fds = self.signal_group();
            for _ in 0..SWEEPS {
                let hit = sweep(|v| v == self.marker);
                if hit.is_empty() {
                    break;
                }
                fds.extend(hit);
            }
            fds
        });
        let _ = tokio::time::timeout(KILL_WAIT, async {
            self.wait().await;
            for fd in fds {
                gone(fd).await;
            }
        })
        .await;
    }

    /// SIGKILL the command, its process group and its descendants, if it
    /// has not been reaped (a reaped pid is no longer ours to name); the
    /// pidfds of the descendants signalled. A reap under way is left alone
    /// (the marker sweep finds what it left).
    pub fn signal_group(&self) -> Vec<OwnedFd> {
        let Ok(reaped) = self.reaped.try_lock() else {
            return Vec::new();
        };
        if *reaped {
            return Vec::new();
        }
        // Read before the kill: once the command is dead its children
        // re-parent and no longer look like its.
        let tree = hygiene::descendant_pidfds(self.pid);
        if let Some(fd) = &self.leader {
            hygiene::pidfd_send(fd, libc::SIGKILL);
        }
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        hygiene::kill_pidfds(&tree);
        tree
    }
}

impl Drop for Command {
    fn drop(&mut self) {
        if self.running() {
            self.signal_group();
        }
        self.pump.abort();
    }
}

/// One /proc scan: SIGKILL every live process whose [`MARK_VAR`] value
/// `matches`, confirmed through a pidfd opened first (a reused pid is never
/// hit); their pidfds.
pub fn sweep(matches: impl Fn(&str) -> bool) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    for (value, procs) in hygiene::by_value(MARK_VAR) {
        if !matches(&value) {
            continue;
        }
        for p in procs {
            let Some(fd) = hygiene::pidfd_open(p.pid) else {
                continue;
            };
            if hygiene::pidfd_signal_if_marked(p.pid, libc::SIGKILL, MARK_VAR, &value) {
                out.push(fd);
            }
        }
    }
    out
}

/// A pidfd registered with the runtime: readable once its process exited.
pub fn readable_at_exit(fd: OwnedFd) -> Option<AsyncFd<OwnedFd>> {
    // SAFETY: the OwnedFd stays open, the same fd, as long as the AsyncFd.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
}

/// Until the process behind `fd` has exited.
async fn gone(fd: OwnedFd) {
    if let Some(fd) = readable_at_exit(fd) {
        let _ = fd.readable().await;
    }
}

/// The ACP exit status: `exitCode` or `signal` (its name), the other null.
pub fn exit_status(exit: Exit) -> Value {
    let signal = exit.signal.map(|s| {
        nix::sys::signal::Signal::try_from(s).map_or_else(|_| s.to_string(), |s| s.to_string())
    });
    json!({"exitCode": exit.code, "signal": signal})
}

/// The task that owns the child: reads both pipes into the output, reaps
/// the child and publishes its exit.
struct Pump {
    child: Child,
    pid: i32,
    stdout: Option<tokio::process::ChildStdout>,
    stderr: Option<tokio::process::ChildStderr>,
    output: Arc<Mutex<Output>>,
    exit: watch::Sender<Option<Exit>>,
    reaped: Arc<tokio::sync::Mutex<bool>>,
    /// Readable once the child exited (None: the reap waits by itself).
    exited: Option<AsyncFd<OwnedFd>>,
}

impl Pump {
    async fn run(mut self) {
        let (mut out_buf, mut err_buf) = (vec![0u8; READ_BUF], vec![0u8; READ_BUF]);
        let mut done = false;
        while !done || self.stdout.is_some() || self.stderr.is_some() {
            tokio::select! {
                n = read_some(&mut self.stdout, &mut out_buf) => {
                    keep(&mut self.stdout, n, &out_buf, &self.output)
                }
                n = read_some(&mut self.stderr, &mut err_buf) => {
                    keep(&mut self.stderr, n, &err_buf, &self.output)
                }
                _ = exited(&self.exited), if !done => {
                    let exit = self.reap().await;
                    drain(&mut self.stdout, &self.output);
                    drain(&mut self.stderr, &self.output);
                    self.exit.send_replace(Some(exit));
                    done = true;
                }
            }
        }
    }

    /// Reap the exited child (under the lock [`Command::signal_group`]
    /// takes, so its pid is never signalled once it may be reused).
    async fn reap(&mut self) -> Exit {
        let mut reaped = self.reaped.lock().await;
        let status = self.child.wait().await;
        *reaped = true;
        hygiene::disown(self.pid);
        match status {
            Ok(st) => Exit {
                code: st.code(),
                signal: st.signal(),
            },
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        }
    }
}

/// Until the child exited (at once without a pidfd: the reap then waits).
async fn exited(fd: &Option<AsyncFd<OwnedFd>>) {
    if let Some(fd) = fd {
        let _ = fd.readable().await;
    }
}

/// Read from `pipe`, or never once it is closed.
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(p) => p.read(buf).await,
        None => std::future::pending().await,
    }
}

/// Keep what a read gave; close the pipe at its end (or error).
fn keep<R>(pipe: &mut Option<R>, n: std::io::Result<usize>, buf: &[u8], output: &Mutex<Output>) {
    match n {
        Ok(n) if n > 0 => output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(&buf[..n]),
        _ => *pipe = None,
    }
}

/// Read what is in `pipe` now, without waiting (its fd is non-blocking),
/// up to [`DRAIN_MAX`] bytes.
fn drain<R: AsRawFd>(pipe: &mut Option<R>, output: &Mutex<Output>) {
    let Some(p) = pipe else { return };
    let mut buf = vec![0u8; READ_BUF];
    let mut total = 0;
    while total < DRAIN_MAX {
        match nix::unistd::read(p.as_raw_fd(), &mut buf) {
            Ok(0) => {
                *pipe = None;
                return;
            }
            Ok(n) => {
                total += n;
                output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(&buf[..n]);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}
