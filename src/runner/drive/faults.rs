//! Landing a process fault, as its action says ([`Landing`], declared in
//! the action's own file under `scenarios/actions/`): a kill (the dead
//! workers buried, then revived at a turn), a pause (SIGSTOP or the tree's
//! freeze, the provider silenced for a suspend, SIGCONT after `stop_for`),
//! or the kernel's OOM kill under a memory limit ([`super::oom`]). The one
//! operation the scripts ([`super::turns`], [`super::chaos`]) call to fault
//! the agent; the signals, burials and revivals are this file's.

use tokio::time::Instant;

use super::Drive;
use crate::driver::spawn::KILL_WAIT;
use crate::observe::Event;
use crate::provider::Provider;
use crate::scenarios::{FaultAction, FaultTarget, Landing, Sent};
use crate::units::secs;

/// One fault to land on a worker.
pub(super) struct Hit<'p> {
    pub action: FaultAction,
    pub target: FaultTarget,
    /// A pause's length, in seconds.
    pub stop_for: f64,
    /// An `oom`'s headroom, in MB.
    pub headroom_mb: u64,
    /// The main calls the provider had received when it came due.
    pub main_calls: u64,
    /// The turn a killed worker resumes at, and its boot deadline.
    pub resume: (u64, f64),
    /// Copy the agent's store once a killed agent is gone (a kill aimed at
    /// a store write).
    pub copy_store: bool,
    /// Damage the agent's transcript once it is gone (`store_damage`).
    pub damage: Option<crate::scenarios::damage::Damage>,
    /// When an `oom` that did not kill gives up (the turn's deadline).
    pub deadline: Instant,
    pub provider: &'p Provider,
}

/// How landing a fault ended.
pub(super) enum Landed {
    /// The agent died of it: whether every dead worker was revived.
    Revived(bool),
    /// The agent lives on (a pause).
    GoesOn,
    /// The deadline passed with the agent alive (an `oom` that did not
    /// kill); the caller records the missed deadline.
    Missed,
}

impl Drive<'_> {
    /// Land `hit` on worker `k`.
    pub(super) async fn land(&mut self, k: usize, hit: Hit<'_>) -> Landed {
        match hit.action.lands() {
            Landing::Kill => Landed::Revived(self.kill(k, &hit).await),
            Landing::Pause { silences } => {
                self.pause(k, &hit, silences).await;
                Landed::GoesOn
            }
            Landing::Hangup => Landed::Revived(self.hang_up(k, &hit).await),
            Landing::MemoryLimit => self
                .oom_kill(k, &hit)
                .await
                .map_or(Landed::Missed, Landed::Revived),
        }
    }

    /// SIGKILL, bury every dead worker (a tree kill takes them all down),
    /// then revive them; whether every one was revived.
    async fn kill(&mut self, k: usize, hit: &Hit<'_>) -> bool {
        let recorded = hit.action.recorded();
        self.signal(k, hit.target, libc::SIGKILL, recorded, hit.main_calls)
            .await;
        let dead: Vec<usize> = match hit.target {
            FaultTarget::Agent => vec![k],
            FaultTarget::Tree => (0..self.count()).collect(),
        };
        for &w in &dead {
            self.bury(w).await;
        }
        if hit.copy_store {
            self.copy_store_at_kill().await;
        }
        if let Some(kind) = hit.damage {
            self.damage_store(kind).await;
        }
        let (turn, boot) = hit.resume;
        for w in dead {
            if !self.revive(w, turn, boot).await {
                return false;
            }
        }
        true
    }

    /// Close worker `k`'s terminal ([`crate::driver::pty::hang_up`]),
    /// record it, and wait up to [`KILL_WAIT`] for the agent to exit of it
    /// (recorded as an exit chaosrun did not kill); one still running then
    /// is buried (SIGKILL, recorded as killed by chaosrun). Then revive it.
    async fn hang_up(&mut self, k: usize, hit: &Hit<'_>) -> bool {
        let start_up = self.starting_up(k);
        let signalled = usize::from(self.worker(k).hang_up());
        let event = Event::ProcessFault {
            action: hit.action.recorded(),
            signalled,
            main_calls: hit.main_calls,
            start_up,
        };
        self.push_from(Instant::now(), k, event);
        match self.worker(k).wait_for(KILL_WAIT).await {
            Some(exit) => self.retire(k, &exit, false),
            None => self.bury(k).await,
        }
        if hit.copy_store {
            self.copy_store_at_kill().await;
        }
        if let Some(kind) = hit.damage {
            self.damage_store(kind).await;
        }
        let (turn, boot) = hit.resume;
        self.revive(k, turn, boot).await
    }

    /// SIGSTOP (the provider silenced first when `silences`), then SIGCONT
    /// after `stop_for`.
    async fn pause(&mut self, k: usize, hit: &Hit<'_>, silences: bool) {
        let recorded = hit.action.recorded();
        self.signal(k, hit.target, libc::SIGSTOP, recorded, hit.main_calls)
            .await;
        if silences {
            hit.provider.sleep();
        }
        tokio::time::sleep(secs(hit.stop_for)).await;
        self.signal(k, hit.target, libc::SIGCONT, Sent::Cont, hit.main_calls)
            .await;
    }

    /// Send `sig` to worker `k` (through its pidfd), or to the scenario's
    /// whole tree (SIGKILL: `cgroup.kill`; SIGSTOP/SIGCONT: freeze/thaw; the
    /// tag fallback signals what it can find); records the fault as `sent`
    /// with the number of processes actually hit (0: the fault did not
    /// land), and whether it hit an exec-mode turn still starting up.
    async fn signal(
        &mut self,
        k: usize,
        target: FaultTarget,
        sig: i32,
        sent: Sent,
        main_calls: u64,
    ) {
        let start_up = self.starting_up(k);
        let signalled = match target {
            FaultTarget::Agent => usize::from(self.worker(k).signal(sig)),
            FaultTarget::Tree => {
                let scope = self.scope().clone();
                tokio::task::spawn_blocking(move || match sig {
                    libc::SIGSTOP => scope.freeze(true),
                    libc::SIGCONT => scope.freeze(false),
                    _ => scope.kill(),
                })
                .await
                .unwrap_or(0)
            }
        };
        let event = Event::ProcessFault {
            action: sent,
            signalled,
            main_calls,
            start_up,
        };
        self.push_from(Instant::now(), k, event);
    }
}
