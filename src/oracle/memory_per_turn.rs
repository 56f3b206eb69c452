//! Memory per turn (`memory_per_turn`): on a long-session row that declares
//! `memory_per_turn_mb`, the agent's resident memory may grow by at most that
//! many MB per turn over the session. The footprint of turn `i` is the first
//! resident-memory sample taken at or after its `turn_end` (the drive awaits
//! a sample at every turn's end) and before the next turn's end; the first
//! [`WARMUP`] turns are left out (imports, caches and the first model
//! client are not growth). The growth per turn is the least-squares slope of
//! those footprints (MB) over the turn index, so one sample caught in a
//! collection's dip or a transient peak moves it little. Judged against the
//! agent's own footprint, never an absolute figure: a 1 GB agent that stays
//! flat passes, a 30 MB one that keeps a copy of its history per turn fails.
//! `not checked` when fewer than [`MIN_TURNS`] turns after the warm-up have a
//! sample, when the agent was restarted during the session (a new process's
//! footprint is not the old one's), in worker mode (several processes share
//! the session) and in exec mode (a process per turn: no process lives
//! across turns).

use super::{Check, Invariant};
use crate::observe::{Event, Observation, ProcSample};
use crate::scenarios::Scenario;

const NAME: &str = "memory_per_turn";

/// Bytes in a MB, as the bound is written.
const MB: f64 = 1024.0 * 1024.0;

pub use crate::scenarios::schema::{PER_TURN_MIN_TURNS as MIN_TURNS, PER_TURN_WARMUP as WARMUP};

/// Each turn's footprint: (turn index, MB) for the turns that ended and have
/// a sample at or after their end and before the next turn's end.
pub fn footprints(obs: &Observation) -> Vec<(u64, f64)> {
    let mut ends: Vec<(f64, u64)> = obs
        .events
        .iter()
        .filter_map(|t| match &t.event {
            Event::TurnEnd(e) => Some((t.at, e.i)),
            _ => None,
        })
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = Vec::new();
    for (k, (at, i)) in ends.iter().enumerate() {
        let until = ends.get(k + 1).map_or(f64::INFINITY, |n| n.0);
        let first = obs
            .proc_samples
            .iter()
            .filter(|p: &&ProcSample| p.rss > 0 && p.at >= *at && p.at < until)
            .min_by(|a, b| a.at.total_cmp(&b.at));
        if let Some(p) = first {
            out.push((*i, p.rss as f64 / MB));
        }
    }
    out
}

/// The least-squares slope of `y` over `x` (None under two distinct x).
pub fn slope(points: &[(u64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 as f64 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 as f64 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The check, on a row that declares a bound.
pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let allowed = s.memory_per_turn_mb?;
    let inv = Invariant::Memory;
    if obs.turn_model().start_up {
        let why = "a process per turn (exec mode): no process lives across the session's turns";
        return Some(Check::skipped(inv, NAME, why));
    }
    if obs.workers > 1 {
        let why = format!(
            "{} worker processes share the session: no one process lives through all its turns",
            obs.workers
        );
        return Some(Check::skipped(inv, NAME, why));
    }
    let spawns = obs
        .events
        .iter()
        .filter(|t| matches!(t.event, Event::Spawned { .. }))
        .count();
    if spawns > 1 {
        let why = format!(
            "the agent was started {spawns} times: a new process's footprint is not the old one's"
        );
        return Some(Check::skipped(inv, NAME, why));
    }
    let all = footprints(obs);
    let judged: Vec<(u64, f64)> = all
        .iter()
        .copied()
        .filter(|p| p.0 >= WARMUP as u64)
        .collect();
    if judged.len() < MIN_TURNS {
        let why = format!(
            "{} turn(s) after the first {WARMUP} have a resident-memory sample at their end; a slope needs {MIN_TURNS}",
            judged.len()
        );
        return Some(Check::skipped(inv, NAME, why));
    }
    let per_turn = slope(&judged).unwrap_or(0.0);
    if per_turn <= allowed {
        return Some(Check::new(inv, NAME, vec![]));
    }
    let (first, last) = (judged[0], judged[judged.len() - 1]);
    Some(Check::new(
        inv,
        NAME,
        vec![format!(
            "the agent's resident memory grew by {per_turn:.2} MB per turn over {} turns, more than the {allowed} MB the row allows (`memory_per_turn_mb`; least-squares slope of the footprint sampled at each turn's end, turns {}–{}): {:.0} MB after turn {}, {:.0} MB after turn {}",
            judged.len(),
            first.0,
            last.0,
            first.1,
            first.0,
            last.1,
            last.0
        )],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::TurnModel;
    use crate::oracle::fixtures::{at, end, healthy, sample, scenario};

    const ROW: &str = "expect: survives\nchaos: {turns: 30, duration: 0.01, min_faults: 0}\nmemory_per_turn_mb: 0.5";

    /// A session of `turns` turns, one a second, whose footprint after turn
    /// `i` is `mb(i)` MB, sampled 0.1 s after each turn's end.
    fn session(turns: u64, mb: impl Fn(u64) -> f64) -> Observation {
        let s = scenario(ROW);
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.events
            .retain(|t| !matches!(t.event, Event::TurnStart { .. } | Event::TurnEnd(_)));
        o.proc_samples.clear();
        for i in 0..turns {
            let t = 1.0 + i as f64;
            o.events.push(at(t - 0.5, Event::TurnStart { i }));
            o.events
                .push(at(t, Event::TurnEnd(end(i, true, false, "done"))));
            let mut p = sample(t + 0.1, 0);
            p.rss = (mb(i) * MB) as u64;
            o.proc_samples.push(p);
        }
        o.events.sort_by(|a, b| a.at.total_cmp(&b.at));
        o
    }

    #[test]
    fn the_slope_is_the_least_squares_fit() {
        assert_eq!(slope(&[(0, 1.0), (1, 3.0), (2, 5.0)]), Some(2.0));
        assert_eq!(slope(&[(4, 1.0)]), None);
        // One dip does not hide a steady rise of 1 MB per turn.
        let pts: Vec<(u64, f64)> = (0..20)
            .map(|i| (i, i as f64 + if i == 10 { -8.0 } else { 0.0 }))
            .collect();
        assert!(
            (slope(&pts).unwrap() - 1.0).abs() < 0.1,
            "{:?}",
            slope(&pts)
        );
    }

    /// A history copied each turn (k × 40 KB in turn k) fails; a history
    /// that grows by its 40 KB a turn on a large agent passes.
    #[test]
    fn a_copy_of_the_history_per_turn_fails_a_flat_large_agent_passes() {
        let s = scenario(ROW);
        let copies = session(30, |i| 30.0 + (i * i) as f64 * 0.04 / 2.0);
        let c = check(&s, &copies).unwrap();
        let v = c.violations();
        assert_eq!(v.len(), 1, "{c:?}");
        assert!(
            v[0].contains("MB per turn over 25 turns, more than the 0.5 MB"),
            "{v:?}"
        );
        assert!(v[0].contains("turns 5–29"), "{v:?}");
        let flat = session(30, |i| {
            1040.0 + i as f64 * 0.04 + if i % 7 == 0 { 30.0 } else { 0.0 }
        });
        let c = check(&s, &flat).unwrap();
        assert!(!c.failed() && !c.not_checked(), "{c:?}");
    }

    /// The warm-up turns' growth (a boot finishing) is not judged.
    #[test]
    fn the_warm_up_turns_are_left_out() {
        let s = scenario(ROW);
        let o = session(30, |i| {
            if i < WARMUP as u64 {
                10.0 * i as f64
            } else {
                80.0
            }
        });
        assert!(!check(&s, &o).unwrap().failed());
    }

    #[test]
    fn too_few_samples_a_restart_or_exec_mode_is_not_checked() {
        let s = scenario(ROW);
        assert!(check(&scenario("expect: error"), &session(30, |_| 1.0)).is_none());
        let mut o = session(30, |i| i as f64 * 5.0);
        o.proc_samples.truncate(WARMUP + MIN_TURNS - 1);
        let c = check(&s, &o).unwrap();
        assert!(c.not_checked() && !c.failed(), "{c:?}");
        assert!(
            c.not_checked_reason().unwrap().contains("a slope needs 10"),
            "{c:?}"
        );
        let mut o = session(30, |i| i as f64 * 5.0);
        o.events.push(at(12.2, Event::Spawned { pid: 43 }));
        assert!(check(&s, &o).unwrap().not_checked());
        let mut o = session(30, |i| i as f64 * 5.0);
        o.turn_model = Some(TurnModel::EXEC);
        let c = check(&s, &o).unwrap();
        assert!(
            c.not_checked_reason().unwrap().contains("exec mode"),
            "{c:?}"
        );
        o.turn_model = Some(TurnModel::ACP);
        assert!(check(&s, &o).unwrap().failed());
        o.workers = 3;
        let c = check(&s, &o).unwrap();
        assert!(
            c.not_checked_reason()
                .unwrap()
                .contains("3 worker processes"),
            "{c:?}"
        );
    }

    /// A sample is a turn's only until the next turn ended: a turn whose
    /// sample is missing takes none of the next one's.
    #[test]
    fn each_sample_counts_for_one_turn() {
        let mut o = session(3, |i| 1.0 + i as f64);
        o.proc_samples.remove(1);
        let f = footprints(&o);
        assert_eq!(f.len(), 2, "{f:?}");
        assert_eq!(f[1].0, 2);
    }
}
