//! Exec mode's runtime: a one-shot CLI agent run as one process per turn,
//! standing in for a driver-protocol agent. [`ExecAgent`] synthesises the
//! protocol's events (`ready` when the first process starts, `turn_start` and
//! `turn_end` per process with `final`/`failed`/`interrupted` read through the
//! profile's selectors, `closed` and end of output once the last turn's
//! process exited), sends an interrupt as SIGINT to the turn's process group
//! (SIGKILL after the grace), and kills a turn's whole process tree on a kill.
//! It also says when each turn's process first reached the provider
//! (`first_call`, from the provider's request count: the first request after
//! the spawn): the runner's deadlines for the turn start there, and a fault
//! sent before it landed in start-up ([`Agent::starting_up`]).
//! Each turn's process starts inside the scenario's containment, like any
//! agent. The turn's start ([`turn`]), the loop over turns ([`turns`]) and
//! the reading of its output through the selectors ([`read`]) are its parts.

mod read;
mod turn;
mod turns;

use turn::{capture_missing, mentions, Turn};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::home::{ExecRun, Prepared};
use super::process::{Exit, Sink};
use crate::proc_hygiene::Scope;

/// How long a turn's output may stay open after its process exited (a job it
/// left behind may hold stdout): then the turn is judged on what was read.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// Bytes of a turn's stderr kept for the `failed.stderr` pattern.
const STDERR_TAIL: usize = 64 * 1024;
/// Characters of that tail the turn's end carries into the observation
/// ([`TurnEnd::stderr`]): what the oracle quotes when `final` is empty.
const STDERR_KEEP_CHARS: usize = 2000;

/// The value the store query binds as the session id: the profile's
/// `exec.store_session` rendered with the values captured so far (exec mode),
/// else `None`. `Err` names a capture the agent never printed.
pub(crate) fn store_session(prep: &Prepared) -> Result<Option<String>, String> {
    let Some(run) = &prep.exec else {
        return Ok(None);
    };
    let mut vars = run.vars.clone();
    let captured = run.captured.lock().unwrap_or_else(|e| e.into_inner());
    for (name, value) in captured.iter() {
        vars.insert(crate::profile::exec::captured_var(name), value.clone());
    }
    for name in run.spec.capture.keys() {
        let var = crate::profile::exec::captured_var(name);
        if !vars.contains_key(&var) && mentions(&run.spec.store_session, &var) {
            return Err(format!(
                "the store query needs `{{{{captured.{name}}}}}` (`exec.store_session`), but the agent's output never matched `exec.capture.{name}`"
            ));
        }
    }
    crate::template::render(&run.spec.store_session, &vars).map(Some)
}

/// The running turn's process.
pub(super) struct Running {
    pub(super) pid: i32,
    pub(super) pidfd: Option<std::os::fd::OwnedFd>,
}

/// What the runner and the turn loop share.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) current: Mutex<Option<Running>>,
    /// A kill landed: no further turn starts.
    pub(super) killed: AtomicBool,
    /// The running turn's process has reached the provider.
    pub(super) reached: AtomicBool,
}

/// A one-shot CLI agent over its turns.
pub struct ExecAgent {
    pub(super) pid: i32,
    pub(super) exit: watch::Receiver<Option<Exit>>,
    pub(super) ctl: mpsc::UnboundedSender<()>,
    pub(super) shared: Arc<Shared>,
    pub(super) other_lines: Arc<AtomicU64>,
}

impl ExecAgent {
    /// Start the agent's first turn process: turn `start` (0, or the turn to
    /// resume at after a kill with the `resume` argv).
    pub fn spawn(
        prep: &Prepared,
        run: &ExecRun,
        env: &BTreeMap<String, String>,
        sink: Sink,
        scope: Arc<Scope>,
        resume: Option<u64>,
        requests: watch::Receiver<u64>,
    ) -> anyhow::Result<ExecAgent> {
        let start = resume.unwrap_or(0) as usize;
        let shared = Arc::new(Shared::default());
        let other_lines = Arc::new(AtomicU64::new(0));
        let turn = Turn {
            prep: prep.clone(),
            run: run.clone(),
            env: env.clone(),
            scope,
            worker: sink.worker,
            budget: sink.budget.clone(),
            other_lines: other_lines.clone(),
            requests,
        };
        // A first turn that needs a value never captured is not a spawn
        // failure: the agent says why (and ends) through its events.
        let first = match turn.spawn(start, resume.is_some()) {
            Ok(s) => Ok(s),
            Err(e) => Err(capture_missing(&e).ok_or(e)?),
        };
        let pid = first.as_ref().map_or(-1, |s| s.pid);
        let (ctl, ctl_rx) = mpsc::unbounded_channel();
        let (exit_tx, exit) = watch::channel(None);
        let loop_shared = shared.clone();
        tokio::spawn(async move {
            turn.run_all(first, start, loop_shared, sink, ctl_rx, exit_tx)
                .await
        });
        Ok(ExecAgent {
            pid,
            exit,
            ctl,
            shared,
            other_lines,
        })
    }

    pub fn signal(&self, sig: i32) -> bool {
        let cur = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if sig == libc::SIGKILL {
            self.shared.killed.store(true, Ordering::SeqCst);
        }
        let Some(r) = cur.as_ref() else { return false };
        if crate::proc_hygiene::is_zombie(r.pid) {
            return false;
        }
        // The tree is read before the kill: once the turn's process is
        // dead its children are re-parented and no longer look like its.
        let tree = if sig == libc::SIGKILL {
            crate::proc_hygiene::descendant_pidfds(r.pid)
        } else {
            Vec::new()
        };
        let hit = r
            .pidfd
            .as_ref()
            .is_some_and(|fd| crate::proc_hygiene::pidfd_send(fd, sig));
        if hit {
            // The rest of the turn's tree: its process group, and any
            // descendant that left it (a launcher's real agent, a tool).
            if let Ok(s) = nix::sys::signal::Signal::try_from(sig) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(r.pid), s);
            }
            crate::proc_hygiene::kill_pidfds(&tree);
        }
        hit
    }
}

impl ExecAgent {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Interrupt the running turn (SIGINT to its process group, SIGKILL
    /// after the grace).
    pub fn interrupt(&self) -> std::io::Result<()> {
        self.ctl
            .send(())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))
    }

    /// Close the running turn's terminal ([`crate::driver::pty::hang_up`]);
    /// the agent ends with that turn's process, as after a kill.
    pub fn hang_up(&self) -> bool {
        let cur = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.shared.killed.store(true, Ordering::SeqCst);
        cur.as_ref().is_some_and(|r| {
            !crate::proc_hygiene::is_zombie(r.pid) && crate::driver::pty::hang_up(r.pid)
        })
    }

    /// Wait for the last turn's process to have exited.
    pub async fn wait(&mut self) -> Exit {
        match self.exit.wait_for(Option::is_some).await {
            Ok(x) => x.expect("waited for Some"),
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        }
    }

    /// Whether the running turn's process has not reached the provider yet.
    pub fn starting_up(&self) -> bool {
        let cur = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        cur.is_some() && !self.shared.reached.load(Ordering::SeqCst)
    }

    pub fn exited(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    pub fn other_lines(&self) -> u64 {
        self.other_lines.load(Ordering::Relaxed)
    }
}
