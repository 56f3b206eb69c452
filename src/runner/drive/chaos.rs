//! A seeded chaos run's script: the loop that drives a long conversation
//! while the schedule (drawn in [`crate::runner::plan::schedule`])
//! kills an agent process (then resumes it at the first unfinished turn) or
//! stops it. In worker mode each fault picks one
//! of the workers; a single agent's stops freeze its whole tree (its cgroup,
//! or what the tag fallback finds).

use tokio::time::{sleep_until, Instant};

use super::{Drive, Next};
use crate::observe::{Event, Phase, ScheduledFault};
use crate::provider::Provider;
use crate::scenarios::{FaultTarget, Scenario};
use crate::units::secs;

/// Drive a chaos run; returns whether every turn got through (`Err`: setup).
pub(crate) async fn drive(
    d: &mut Drive<'_>,
    s: &Scenario,
    schedule: &[ScheduledFault],
    provider: &Provider,
) -> Result<bool, String> {
    let dl = &s.deadlines;
    if !d.boot_all(dl.boot).await? {
        return Ok(false);
    }
    let spec = s.chaos.as_ref().expect("a chaos scenario");
    // The spec's turns are the conversation, then the probe.
    let probe = spec.turns;
    let stop_target = if d.count() > 1 {
        FaultTarget::Agent
    } else {
        FaultTarget::Tree
    };
    // Bounded termination per turn, as everywhere else: each turn must end
    // within the turn deadline of the previous one's end (or of a restart),
    // so a slow but live agent is not failed for its pace.
    let t0 = Instant::now();
    let mut deadline = t0 + secs(dl.turn);
    d.phase(Phase::FaultedTurn, dl.turn);
    let mut ended = std::collections::BTreeSet::new();
    let mut closed = std::collections::BTreeSet::new();
    let mut next = schedule.iter();
    let mut fault = next.next();
    loop {
        let fault_at = fault.map(|f| t0 + secs(f.at));
        tokio::select! {
            line = d.next() => match line {
                // A worker that said `closed` may exit; any other exit is a crash.
                Next::Eof(k) if closed.contains(&k) => {}
                Next::Eof(_) => return Ok(false),
                Next::Event(at, k, ev) => {
                    let mut done = false;
                    match &ev {
                        Event::TurnStart { i } if *i == probe => d.snapshot("probe_turn_start").await,
                        Event::TurnEnd(t) => {
                            if ended.insert(t.i) {
                                deadline = Instant::now() + secs(dl.turn);
                            }
                            done = t.i == probe;
                        }
                        Event::Closed => {
                            closed.insert(k);
                        }
                        _ => {}
                    }
                    d.push_from(at, k, ev);
                    if done {
                        return Ok(true);
                    }
                }
            },
            _ = sleep_until(fault_at.unwrap_or(t0)), if fault_at.is_some() => {
                let f = fault.expect("guarded by fault_at");
                fault = next.next();
                let k = f.worker.min(d.count() - 1);
                let calls = *provider.main_calls().borrow();
                if f.action == "kill" {
                    d.signal(k, FaultTarget::Agent, libc::SIGKILL, "kill", calls).await;
                    let start = (0..=probe).find(|i| !ended.contains(i)).unwrap_or(probe);
                    if !d.restart(k, start, dl.boot).await {
                        return Ok(false);
                    }
                    deadline = deadline.max(Instant::now() + secs(dl.turn));
                } else {
                    d.signal(k, stop_target, libc::SIGSTOP, "stop", calls).await;
                    tokio::time::sleep(secs(f.stop_for)).await;
                    d.signal(k, stop_target, libc::SIGCONT, "cont", calls).await;
                }
            }
            _ = sleep_until(deadline) => {
                d.missed(Phase::FaultedTurn, dl.turn);
                return Ok(false);
            }
        }
    }
}
