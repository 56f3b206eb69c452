//! The kernel's OOM kill (`process_fault: {action: oom, at: {after_calls:
//! N}, headroom_mb: M}`): the reply to the N-th main call is held until,
//! its trigger fired, the agent's processes get a memory cgroup limit of
//! their usage then plus `headroom_mb` ([`MemoryLimit`]: the scenario's v2
//! cgroup's `memory.max`, else a v1 memory cgroup of the scenario's own).
//! The turn makes the agent outgrow it and the kernel kills it; chaosrun
//! waits (within the turn's deadline) for the agent to die, reads the
//! cgroup's own `oom_kill` counter, lifts the limit (a v1 cgroup is removed),
//! records the OOM kill ([`Event::OomKill`]) and the kill it amounts to
//! ([`Event::ProcessFault`] `kill`, landed only when the counter rose), and
//! restarts the agent as after any kill. chaosrun sends no signal itself: an
//! agent that outlives the turn without an OOM kill misses the deadline.

use tokio::time::Instant;

use super::faults::Hit;
use super::Drive;
use crate::observe::Event;
use crate::proc_hygiene::memory_limit::MemoryLimit;
use crate::proc_hygiene::Scope;
use crate::scenarios::Sent;

const MB: f64 = 1_048_576.0;

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

/// The kernel's OOM kill is a SIGKILL: the agent died of one, or exited 137
/// (a launcher passing its child's death on). An agent that exits on its own
/// (its tool was the kernel's pick) was not OOM-killed.
fn died_of_sigkill(code: Option<i32>, signal: Option<i32>) -> bool {
    signal == Some(libc::SIGKILL) || code == Some(128 + libc::SIGKILL)
}

impl Drive<'_> {
    /// Land an `oom` fault on worker `k`: `Some(whether it was revived)`
    /// once it died, `None` when the hit's deadline passed with it alive
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
        hit.provider.hold_from(None);
        let (main_calls, recorded) = (hit.main_calls, hit.action.recorded());
        let (cg, before, usage) = match limited {
            Ok(l) => l,
            Err(error) => {
                self.record_oom(
                    ("none", 0, 0, 0),
                    Some(error),
                    (main_calls, recorded),
                    false,
                );
                return Some(false);
            }
        };
        let exited = tokio::time::timeout_at(hit.deadline, self.worker(k).wait())
            .await
            .ok();
        let kills = cg.oom_kills().unwrap_or(before).saturating_sub(before);
        let via = cg.via().name();
        let _ = tokio::task::spawn_blocking(move || cg.remove()).await;
        let figures = (via, usage, usage + headroom, kills);
        let killed = exited
            .as_ref()
            .is_some_and(|e| died_of_sigkill(e.code, e.signal));
        self.record_oom(figures, None, (main_calls, recorded), killed);
        self.retire(k, &exited?, false);
        let (turn, boot) = hit.resume;
        Some(self.revive(k, turn, boot).await)
    }

    /// Record the OOM kill (`via`, usage and limit in bytes, the counter's
    /// rise) and the kill it amounts to (`recorded`, the action's facts):
    /// landed when the agent died of a SIGKILL and the kernel's counter rose.
    fn record_oom(
        &mut self,
        (via, usage, limit, oom_kills): (&str, u64, u64, u64),
        error: Option<String>,
        (main_calls, recorded): (u64, Sent),
        killed: bool,
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
        self.push(
            now,
            Event::ProcessFault {
                action: recorded,
                signalled: usize::from(killed && oom_kills > 0),
                main_calls,
                start_up: false,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::died_of_sigkill;

    /// Gemini CLI's turn exited 1 after the kernel killed its tool: not an
    /// OOM kill of the agent; a SIGKILL or a launcher's 137 is.
    #[test]
    fn only_a_sigkill_or_a_launchers_137_is_the_agent_oom_killed() {
        assert!(died_of_sigkill(None, Some(9)));
        assert!(died_of_sigkill(Some(137), None));
        assert!(!died_of_sigkill(Some(1), None));
        assert!(!died_of_sigkill(Some(0), None));
        assert!(!died_of_sigkill(None, Some(15)));
    }
}
