//! Seeded chaos runs: the fault schedule drawn from a seed (pure, so the same
//! seed always gives the same schedule), and the loop that drives a long
//! conversation while the schedule kills an agent process (then resumes it at
//! the first unfinished turn) or stops it. In worker mode each fault picks one
//! of the workers; a single agent's stops freeze its whole tree (its cgroup,
//! or what the tag fallback finds).

use rand::{Rng, SeedableRng};
use tokio::time::{sleep_until, Instant};

use super::drive::{Drive, Next};
use crate::observe::{Event, Phase, ScheduledFault};
use crate::provider::Provider;
use crate::scenarios::{ChaosSpec, FaultTarget, Scenario, MAX_FAULTS};
use crate::units::secs;

/// A stable per-scenario seed from the run's seed and the scenario id, so
/// selecting other scenarios does not change this one's schedule.
pub fn scenario_seed(run_seed: u64, id: &str) -> u64 {
    // FNV-1a: stable across Rust versions, unlike the std hasher.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ run_seed
}

/// The faults of a chaos run over `workers` agent processes, in time order
/// (at most [`MAX_FAULTS`]).
pub fn schedule(spec: &ChaosSpec, seed: u64, workers: usize) -> Vec<ScheduledFault> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut at = 0.0;
    while out.len() < MAX_FAULTS {
        at += rng.gen_range(spec.interval[0]..=spec.interval[1]);
        if at > spec.duration {
            return out;
        }
        let kill = rng.gen_bool(spec.kill_share);
        let stop_for = rng.gen_range(spec.stop_for[0]..=spec.stop_for[1]);
        let worker = rng.gen_range(0..workers.max(1));
        out.push(ScheduledFault {
            at,
            action: if kill { "kill" } else { "stop" }.into(),
            stop_for: if kill { 0.0 } else { stop_for },
            worker,
        });
    }
    out
}

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
    (d.on_phase)(Phase::FaultedTurn, dl.turn);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ChaosSpec {
        ChaosSpec {
            turns: 10,
            duration: 30.0,
            interval: [0.5, 1.5],
            kill_share: 0.5,
            stop_for: [0.2, 1.0],
            min_faults: 20,
        }
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let a = schedule(&spec(), 42, 1);
        assert_eq!(a, schedule(&spec(), 42, 1));
        assert_ne!(a, schedule(&spec(), 43, 1));
    }

    #[test]
    fn schedule_respects_its_bounds() {
        let s = schedule(&spec(), 7, 3);
        // 30 s at 0.5–1.5 s apart: between 20 and 60 faults.
        assert!((20..=60).contains(&s.len()), "{}", s.len());
        let mut prev = 0.0;
        for f in &s {
            assert!(f.at - prev >= 0.5 - 1e-9 && f.at - prev <= 1.5 + 1e-9);
            assert!(f.at <= 30.0);
            match f.action.as_str() {
                "kill" => assert_eq!(f.stop_for, 0.0),
                "stop" => assert!((0.2..=1.0).contains(&f.stop_for)),
                other => panic!("{other}"),
            }
            prev = f.at;
        }
        assert!(s.iter().any(|f| f.action == "kill") && s.iter().any(|f| f.action == "stop"));
        // With three workers every one of them is picked.
        for w in 0..3 {
            assert!(s.iter().any(|f| f.worker == w), "worker {w} never picked");
        }
    }

    #[test]
    fn scenario_seed_depends_on_id_and_run_seed_only() {
        assert_eq!(scenario_seed(1, "a"), scenario_seed(1, "a"));
        assert_ne!(scenario_seed(1, "a"), scenario_seed(1, "b"));
        assert_ne!(scenario_seed(1, "a"), scenario_seed(2, "a"));
    }
}
