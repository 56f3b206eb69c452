//! The kernel's OOM kill (`process_fault: {action: oom, at: {after_calls:
//! N}, headroom_mb: M}`): the reply to the N-th main call is held until,
//! its trigger fired, the agent's processes get a memory cgroup limit of
//! their usage then plus `headroom_mb` ([`MemoryLimit`]: the scenario's v2
//! cgroup's `memory.max`, else a v1 memory cgroup of the scenario's own).
//! The turn makes the agent's processes outgrow it and the kernel kills one
//! of them: whichever it picks (the agent's main process, its engine, its
//! tool), a kill in the agent's tree is the agent's OOM. chaosrun notices it
//! when it happens, on the kernel's OOM event ([`OomEvents`]: then the
//! cgroup's own `oom_kill` counter is read until it rose, within
//! [`CONFIRM`]), records it ([`Event::OomKill`], and the kill it amounts to,
//! [`Event::ProcessFault`] `kill`, landed when the counter rose) and lifts
//! the limit (a v1 cgroup is removed). The rest of the faulted turn is the
//! agent's: if its process dies (its output ends), it is restarted as after
//! any kill; if it lives on and ends the turn, the probe follows with no
//! restart (an exec-mode agent's next turn is its own next process). The
//! agent's events are read all the while, so nothing is restarted after the
//! session closed. chaosrun sends no signal itself: an agent that outlives
//! the turn without ending it misses the deadline.

use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::faults::Hit;
use super::{Drive, Next};
use crate::observe::Event;
use crate::proc_hygiene::memory_limit::MemoryLimit;
use crate::proc_hygiene::oom_events::OomEvents;
use crate::proc_hygiene::Scope;
use crate::scenarios::Sent;

const MB: f64 = 1_048_576.0;

/// How long the `oom_kill` counter is re-read after the kernel's OOM event
/// (v1 signals as the cgroup runs out, just before the killer picks its
/// victim), and how often.
const CONFIRM: Duration = Duration::from_secs(crate::oracle::OOM_NOTICE_LAG as u64);
const CONFIRM_EVERY: Duration = Duration::from_millis(10);

/// The limit set: the cgroup, its OOM kills before, the usage it counts from.
type Limited = (MemoryLimit, u64, u64);

/// Blocking: put the scope's processes (every one, those forked meanwhile
/// too) under a limit of their usage plus `headroom` bytes. The cgroup is
/// named after the run and the worker's incarnation (`name`); the
/// [`MemoryLimit`] owns it (an error or a drop removes it).
fn limit(scope: &Scope, name: (&str, &str), headroom: u64) -> Result<Limited, String> {
    let members = || scope.members().iter().map(|p| p.pid).collect();
    let cg = MemoryLimit::open(scope.cgroup_path(), name, &members)?;
    let read = cg.oom_kills().zip(cg.usage());
    let Some((before, usage)) = read else {
        return Err("the memory cgroup's usage or oom_kill counter could not be read".into());
    };
    if let Err(e) = cg.set(usage + headroom) {
        return Err(format!("the limit could not be set: {e}"));
    }
    Ok((cg, before, usage))
}

/// The limit while it holds, and what its record needs.
struct Armed {
    cg: Option<MemoryLimit>,
    before: u64,
    usage: u64,
    limit: u64,
    via: &'static str,
    /// The kernel said the cgroup ran out (its kill may not be counted yet).
    woke: bool,
}

impl Armed {
    /// The OOM kills since the limit was set: read once, or (after the
    /// kernel's OOM event) until the counter rose, within [`CONFIRM`].
    async fn kills(&self) -> u64 {
        let Some(cg) = &self.cg else { return 0 };
        let end = Instant::now() + CONFIRM;
        loop {
            let n = cg
                .oom_kills()
                .unwrap_or(self.before)
                .saturating_sub(self.before);
            if n > 0 || !self.woke || Instant::now() >= end {
                return n;
            }
            tokio::time::sleep(CONFIRM_EVERY).await;
        }
    }
}

/// The kernel's next OOM event (never, without a watch).
async fn woken(events: &mut Option<OomEvents>) {
    let ok = match events {
        Some(e) => e.next().await.is_ok(),
        None => false,
    };
    if !ok {
        // A watch that failed says nothing more: the agent's events and
        // the deadline still end the turn.
        *events = None;
        std::future::pending::<()>().await;
    }
}

impl Drive<'_> {
    /// Land an `oom` fault on worker `k` and play the rest of the faulted
    /// turn: `Some(whether the probe can follow)` once the turn ended or the
    /// dead agent was revived, `None` when the hit's deadline passed first
    /// (the caller records the missed deadline).
    pub(super) async fn oom_kill(&mut self, k: usize, hit: &Hit<'_>) -> Option<bool> {
        let scope = self.scope().clone();
        let name = format!("{}-{}", self.worker(k).pid(), self.incarnation[k]);
        let run_var = self.launch.env.get(crate::proc_hygiene::RUN_VAR);
        let run = run_var
            .cloned()
            .unwrap_or_else(|| std::process::id().to_string());
        let headroom = hit.headroom_mb << 20;
        let limited = tokio::task::spawn_blocking(move || limit(&scope, (&run, &name), headroom))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        // Watched before the held reply goes: no OOM can come first.
        let mut events = limited.as_ref().ok().and_then(|(cg, ..)| cg.events().ok());
        hit.provider.hold_from(None);
        let (cg, before, usage) = match limited {
            Ok(l) => l,
            Err(error) => {
                self.record_oom(("none", 0, 0, 0), Some(error), hit);
                return Some(false);
            }
        };
        let via = cg.via().name();
        let mut armed = Armed {
            cg: Some(cg),
            before,
            usage,
            limit: usage + headroom,
            via,
            woke: false,
        };
        loop {
            tokio::select! {
                _ = woken(&mut events), if armed.cg.is_some() => {
                    armed.woke = true;
                    if armed.kills().await > 0 {
                        self.noticed(&mut armed, hit).await;
                    }
                }
                next = self.next() => match next {
                    Next::Event(at, w, ev) => {
                        let end = matches!(&ev, Event::TurnEnd(t) if t.i == 0);
                        self.push_from(at, w, ev);
                        if end {
                            self.noticed(&mut armed, hit).await;
                            hit.provider.refresh_credential();
                            return Some(true);
                        }
                    }
                    // Another worker (sharing the cgroup) that closed and
                    // exited is not news; one that died is revived too.
                    Next::Eof(w) if w != k => {
                        if !self.said_closed(w) {
                            self.noticed(&mut armed, hit).await;
                            if !self.revive_after_oom(w, hit).await {
                                return Some(false);
                            }
                        }
                    }
                    Next::Eof(_) => {
                        self.noticed(&mut armed, hit).await;
                        return Some(self.revive_after_oom(k, hit).await);
                    }
                },
                _ = sleep_until(hit.deadline) => {
                    self.noticed(&mut armed, hit).await;
                    return None;
                }
            }
        }
    }

    /// Record the OOM (once): the kills counted so far, then the limit
    /// lifted, so the agent's processes that are left go on unlimited.
    async fn noticed(&mut self, armed: &mut Armed, hit: &Hit<'_>) {
        if armed.cg.is_none() {
            return;
        }
        let kills = armed.kills().await;
        self.record_oom((armed.via, armed.usage, armed.limit, kills), None, hit);
        if let Some(cg) = armed.cg.take() {
            let _ = tokio::task::spawn_blocking(move || cg.remove()).await;
        }
    }

    /// The agent's process died in the faulted turn: record its exit (killed
    /// by chaosrun only if it had to be, its output over but the process
    /// still there at the turn's deadline) and start it again, as after a
    /// kill; whether it was revived.
    async fn revive_after_oom(&mut self, k: usize, hit: &Hit<'_>) -> bool {
        let exited = tokio::time::timeout_at(hit.deadline, self.worker(k).wait()).await;
        let (exit, killed) = match exited {
            Ok(exit) => (exit, false),
            Err(_) => (self.kill_worker(k).await, true),
        };
        self.retire(k, &exit, killed);
        let (turn, boot) = hit.resume;
        self.revive(k, turn, boot).await
    }

    /// Record the OOM kill (`via`, usage and limit in bytes, the counter's
    /// rise) and the kill it amounts to (the action's facts): landed on as
    /// many processes as the kernel's counter rose by.
    fn record_oom(
        &mut self,
        (via, usage, limit, oom_kills): (&str, u64, u64, u64),
        error: Option<String>,
        hit: &Hit<'_>,
    ) {
        let now = Instant::now();
        self.push(
            now,
            Event::OomKill {
                via: via.into(),
                usage_mb: (usage as f64 / MB * 10.0).round() / 10.0,
                limit_mb: (limit as f64 / MB * 10.0).round() / 10.0,
                oom_kills,
                error,
            },
        );
        let recorded: Sent = hit.action.recorded();
        self.push(
            now,
            Event::ProcessFault {
                action: recorded,
                signalled: usize::try_from(oom_kills).unwrap_or(usize::MAX),
                main_calls: hit.main_calls,
                start_up: false,
            },
        );
    }
}
