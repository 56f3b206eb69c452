//! The ACP drive's runtime: chaosrun as the Agent Client Protocol client of
//! one long-lived agent process per scenario. [`AcpAgent`] starts the agent
//! inside the scenario's containment like any agent (the same
//! [`crate::driver::spawn`]: netns, mntns, seccomp, cgroup, hermetic env;
//! stdout and stderr kept in the worker's logs within the run's budget),
//! and synthesises the protocol's events from the conversation ([`session`]):
//! `ready` once `initialize` and `session/new` (or, after a kill,
//! `session/load`) were answered, `turn_start`/`turn_end` per
//! `session/prompt`, tool statuses, client calls and updates after a turn,
//! `closed` after the last turn (and `session/close` where advertised), then
//! end of stdin. An interrupt is `session/cancel`; a SIGKILL takes the
//! agent's whole process tree and its terminals. The framing is [`rpc`], the
//! client side it serves [`client`] (with [`terminal`]).

pub mod client;
mod faulted;
mod replay;
pub mod rpc;
mod session;
pub mod terminal;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use super::home::{AcpRun, Prepared};
use super::output::STDERR;
use super::process::{Exit, Sink};
use super::spawn::SpawnSpec;
use crate::proc_hygiene::Scope;

/// Frames waiting for the drive (each at most [`rpc::MAX_FRAME`]).
const FRAME_QUEUE: usize = 8;

/// The session id the store is read under: the one the agent returned from
/// `session/new` (`None` before it did, or without an ACP profile).
pub(crate) fn store_session(prep: &Prepared) -> Option<String> {
    let run = prep.acp.as_ref()?;
    run.session
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// One ACP agent process.
pub struct AcpAgent {
    pid: i32,
    pidfd: Option<std::os::fd::OwnedFd>,
    exit: watch::Receiver<Option<Exit>>,
    /// Interrupts for the drive (each one a `session/cancel`).
    ctl: mpsc::UnboundedSender<()>,
    /// The client side (its terminals are killed with the agent).
    client: Arc<client::Client>,
    /// How many turns the runner is done with ([`AcpAgent::turn_done`]).
    done: watch::Sender<u64>,
}

impl AcpAgent {
    /// Start the agent and its drive: fresh, or after a kill resuming at
    /// turn K (`resume: Some(K)`: `session/load` per the profile's `load`).
    pub fn spawn(
        prep: &Prepared,
        run: &AcpRun,
        env: &BTreeMap<String, String>,
        sink: Sink,
        scope: Arc<Scope>,
        resume: Option<u64>,
    ) -> anyhow::Result<AcpAgent> {
        let (stdout_path, stderr_path) = prep.dirs.logs(sink.worker);
        let mut stderr_log = crate::output::append_log(&stderr_path)?;
        let stdout_log = crate::output::append_log(&stdout_path)?;
        let _ = writeln!(stderr_log, "[chaosrun] ACP agent: {:?}", run.argv);
        let (mut child, pid) = super::spawn::spawn(SpawnSpec {
            argv: &run.argv,
            env,
            cwd: &prep.dirs.work,
            stdin: super::child::Stdin::Piped,
            scope: &scope,
            netns: prep.netns.as_deref(),
            mntns: prep.mntns.as_deref(),
            seccomp: prep.seccomp,
            tty: prep.tty.then_some(super::pty::TtyStdio::Stderr),
            what: "ACP agent command",
        })?;
        // Not reaped yet (its waiter starts below): this pidfd is this child's.
        let pidfd = crate::proc_hygiene::pidfd_open(pid);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        if let Some(stderr) = child.stderr.take() {
            let (b, w) = (sink.budget.clone(), sink.worker);
            tokio::spawn(super::output::copy_capped(stderr, stderr_log, b, w, STDERR));
        }
        let (frames_tx, frames) = mpsc::channel(FRAME_QUEUE);
        let (b, w) = (sink.budget.clone(), sink.worker);
        tokio::spawn(rpc::read_frames(stdout, stdout_log, b, w, frames_tx));
        let exit = crate::driver::process::watch_exit(child, pid);
        let client = Arc::new(client::Client {
            workdir: run.workdir.clone(),
            permission: run.spec.permission,
            terminals: terminal::Terminals::new(prep, env, scope),
        });
        let (ctl, ctl_rx) = mpsc::unbounded_channel();
        let out = rpc::Out::new(stdin);
        let (done, done_rx) = watch::channel(0);
        let drive = session::Drive::new(run.clone(), sink, out, frames, stderr_path, done_rx);
        tokio::spawn(drive.run(client.clone(), ctl_rx, resume));
        Ok(AcpAgent {
            pid,
            pidfd,
            exit,
            ctl,
            client,
            done,
        })
    }

    /// The runner is done with turn `i` (its end handled): the drive may
    /// send the next prompt.
    pub fn turn_done(&self, i: u64) {
        self.done.send_modify(|n| *n = (*n).max(i + 1));
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Send `sig` to the agent (a SIGKILL to its whole process tree and its
    /// terminals); whether it hit a live process.
    pub fn signal(&self, sig: i32) -> bool {
        if self.exited().is_some() || crate::proc_hygiene::is_zombie(self.pid) {
            return false;
        }
        // Read before the kill: once the agent is dead its children are
        // re-parented and no longer look like its.
        let tree = if sig == libc::SIGKILL {
            crate::proc_hygiene::descendant_pidfds(self.pid)
        } else {
            Vec::new()
        };
        let hit = self
            .pidfd
            .as_ref()
            .is_some_and(|fd| crate::proc_hygiene::pidfd_send(fd, sig));
        if hit && sig == libc::SIGKILL {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            crate::proc_hygiene::kill_pidfds(&tree);
            self.client.terminals.kill_all();
        }
        hit
    }

    /// Interrupt the running turn: `session/cancel`.
    pub fn interrupt(&self) -> std::io::Result<()> {
        self.ctl
            .send(())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }

    /// Wait for the agent process to exit.
    pub async fn wait(&mut self) -> Exit {
        match self.exit.wait_for(Option::is_some).await {
            Ok(x) => x.expect("waited for Some"),
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        }
    }

    pub fn exited(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    /// Stray stdout lines: none here (a line that is not a frame is a bad
    /// event).
    pub fn other_lines(&self) -> u64 {
        0
    }
}
