//! Bounded memory growth (`memory_growth`): on a row that declares
//! `memory_growth_mb`, the agent's processes may grow at most that much
//! during the faulted turn over their own footprint before the output the
//! row makes exists. The footprint is the most they held before it: the
//! resident memory measured as the row's first model call arrived (the
//! reply held until it was read: [`Event::MemoryBaseline`]) or any sample
//! before that, whichever is higher (a heap that a collection had just
//! shrunk, or a boot that peaked higher, is still the agent's size). The
//! peak is the highest resident-memory sum sampled from the baseline to the
//! first sample after the faulted turn ended (the row is sampled every
//! 50 ms through it; an exec-mode agent's next turn is a new process whose
//! boot is not the output's doing). Resident memory on both sides, never
//! the cgroup's `memory.peak`, which also counts page cache (a file the
//! agent spills the output to is not memory it holds). So a lean agent that
//! keeps copies of the output fails, and a large one that stays flat
//! passes. `not checked` when the baseline or a later sample is missing.

use super::{Check, Invariant};
use crate::observe::{Event, Observation, ProcSample};
use crate::scenarios::Scenario;

const NAME: &str = "memory_growth";

/// Bytes in a MB, as the bound is written.
const MB: f64 = 1024.0 * 1024.0;

/// The baseline: its time, resident bytes and process count.
type Baseline = (f64, u64, usize);

fn baseline(obs: &Observation) -> Option<Result<Baseline, String>> {
    obs.find(|e| match e {
        Event::MemoryBaseline {
            rss,
            processes,
            error,
        } => Some(match error {
            Some(e) => Err(e.clone()),
            None => Ok((*rss, *processes)),
        }),
        _ => None,
    })
    .map(|(at, r)| r.map(|(rss, n)| (at, rss, n)))
}

/// One cause, one failed check: on a row whose growth failed, the absolute
/// bound (`memory_bounded`) that the same growth pushed the peak over is
/// `not checked`, naming it, when the footprint before the output was
/// within that bound (a footprint already over it is its own cause).
pub fn one_cause(bounded: Check, growth: Option<&Check>, s: &Scenario, obs: &Observation) -> Check {
    let base = baseline(obs).and_then(Result::ok).map(|(_, rss, _)| rss);
    let within = base.is_some_and(|b| b as f64 / MB <= s.memory_mb as f64);
    if bounded.failed() && growth.is_some_and(Check::failed) && within {
        let why = format!(
            "the peak over the row's `memory_mb` ({} MB) is the growth `memory_growth` fails: the footprint before the output was within it",
            s.memory_mb
        );
        return Check::skipped(bounded.invariant, bounded.name, why);
    }
    bounded
}

/// The faulted turn's samples from `at` on: up to the first sample after
/// its `turn_end` (all of them if it never ended).
fn in_turn(obs: &Observation, at: f64) -> Vec<&ProcSample> {
    let end = obs.turn_end(0).map(|(t, _)| t);
    let mut out = Vec::new();
    for p in obs.proc_samples.iter().filter(|p| p.at >= at) {
        out.push(p);
        if end.is_some_and(|e| p.at > e) {
            break;
        }
    }
    out
}

/// The growth check, on a row that declares a bound.
pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let allowed = s.memory_growth_mb?;
    let inv = Invariant::Memory;
    let (at, measured, n) = match baseline(obs) {
        None => {
            return Some(Check::skipped(
                inv,
                NAME,
                "the agent's footprint was never measured: its first model call of the row never arrived",
            ))
        }
        Some(Err(e)) => {
            let why = format!("the agent's footprint could not be measured: {e}");
            return Some(Check::skipped(inv, NAME, why));
        }
        Some(Ok(b)) => b,
    };
    let before = obs
        .proc_samples
        .iter()
        .filter(|p| p.at < at && p.rss > measured)
        .max_by_key(|p| p.rss);
    let (base, from) = match before {
        Some(p) => (p.rss, format!("sampled at {:.1} s, before the row's first model call arrived at {at:.1} s, when it was {:.0} MB", p.at, measured as f64 / MB)),
        None => (measured, format!("measured as the row's first model call arrived, at {at:.1} s")),
    };
    let peak = in_turn(obs, at)
        .into_iter()
        .filter(|p| p.rss > 0)
        .max_by_key(|p| p.rss);
    let Some(peak) = peak else {
        let why = "no sample of the agent's resident memory after its footprint was measured";
        return Some(Check::skipped(inv, NAME, why));
    };
    let growth = peak.rss.saturating_sub(base) as f64 / MB;
    if growth <= allowed as f64 {
        return Some(Check::new(inv, NAME, vec![]));
    }
    Some(Check::new(
        inv,
        NAME,
        vec![format!(
            "the agent's processes grew by {growth:.0} MB over their own footprint in the faulted turn, more than the {allowed} MB the row allows (`memory_growth_mb`): baseline {:.0} MB (the most its {n} process(es) held before the output: resident memory {from}), peak {:.0} MB (sampled RSS at {:.1} s)",
            base as f64 / MB,
            peak.rss as f64 / MB,
            peak.at
        )],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::{at, end, healthy, sample, scenario};

    /// A run whose footprint was `base` MB at 1.0 s, then sampled `peaks`.
    fn run(base: u64, peaks: &[(f64, u64)]) -> Observation {
        let s = scenario("expect: error");
        let mut o = healthy(&s, end(0, false, true, ""));
        let ev = Event::MemoryBaseline {
            rss: base << 20,
            processes: 3,
            error: None,
        };
        o.events.insert(0, at(1.0, ev));
        o.proc_samples = std::iter::once((0.5, base / 2))
            .chain(peaks.iter().copied())
            .map(|(t, mb)| sample(t, mb))
            .collect();
        o
    }

    /// Three copies of a 160 MB output on a 30 MB agent (~510 MB) fail;
    /// the message says the baseline, the growth and the allowance.
    #[test]
    fn a_lean_agent_keeping_copies_fails_against_its_own_footprint() {
        let s = scenario("expect: error\nmemory_growth_mb: 80");
        let c = check(&s, &run(30, &[(1.5, 200), (2.0, 510), (3.0, 35)])).unwrap();
        let v = c.violations();
        assert_eq!(v.len(), 1, "{c:?}");
        assert!(v[0].contains("grew by 480 MB"), "{v:?}");
        assert!(v[0].contains("more than the 80 MB the row allows"), "{v:?}");
        assert!(
            v[0].contains("baseline 30 MB (the most its 3 process(es)"),
            "{v:?}"
        );
        assert!(v[0].contains("arrived, at 1.0 s"), "{v:?}");
        assert!(v[0].contains("peak 510 MB (sampled RSS at 2.0 s)"), "{v:?}");
    }

    /// A 1 GB agent that stays flat passes (an absolute 512 MB bound failed
    /// it); its footprint is the most it held before the output (a boot
    /// that peaked higher, a heap a collection had just shrunk), so the
    /// dip the baseline caught is not counted as growth.
    #[test]
    fn a_large_flat_agent_passes_against_the_most_it_held_before() {
        let s = scenario("expect: error\nmemory_growth_mb: 80");
        let o = run(1040, &[(1.5, 1060), (2.5, 1100)]);
        assert!(!check(&s, &o).unwrap().failed());
        let o = run(1040, &[(1.5, 1060), (2.5, 1130)]);
        assert!(check(&s, &o).unwrap().failed(), "90 MB of growth");
        // Measured in a dip: 960 MB at the call, 1100 MB a moment before.
        let mut o = run(960, &[(1.5, 1060), (2.5, 1130)]);
        o.proc_samples.push(sample(0.9, 1100));
        let c = check(&s, &o).unwrap();
        assert!(!c.failed(), "{c:?}");
        o.proc_samples.push(sample(3.0, 1190));
        let v = check(&s, &o).unwrap().violations().to_vec();
        assert!(v[0].contains("baseline 1100 MB"), "{v:?}");
        assert!(v[0].contains("sampled at 0.9 s, before the row's first model call arrived at 1.0 s, when it was 960 MB"), "{v:?}");
    }

    /// The next turn's process (exec mode) booting bigger is not the
    /// output's growth: samples end with the first after the faulted turn.
    #[test]
    fn samples_after_the_faulted_turn_are_not_judged() {
        let s = scenario("expect: error\nmemory_growth_mb: 80");
        let mut o = run(600, &[(1.5, 650), (2.5, 660), (9.0, 900)]);
        let end = o
            .events
            .iter()
            .position(|t| matches!(t.event, Event::TurnEnd(ref e) if e.i == 0))
            .unwrap();
        o.events[end].at = 2.0;
        assert!(
            !check(&s, &o).unwrap().failed(),
            "the first sample after the turn (660 MB) counts, not the next turn's 900 MB"
        );
        o.proc_samples.insert(2, sample(2.2, 700));
        assert!(
            check(&s, &o).unwrap().failed(),
            "held at the turn's end: 700 MB"
        );
    }

    /// Continue CLI's 4250 MB on the row failed both `memory_bounded`
    /// (4096) and `memory_growth`: one cause, so the first is not checked;
    /// a footprint already over the bound is its own cause.
    #[test]
    fn growth_over_the_absolute_bound_fails_one_check() {
        let s = scenario("expect: error\nmemory_growth_mb: 100");
        let o = run(265, &[(2.0, 4250)]);
        let g = check(&s, &o).unwrap();
        let b = crate::oracle::memory::check(&s, &o);
        assert!(g.failed() && b.failed());
        let c = one_cause(b.clone(), Some(&g), &s, &o);
        assert!(c.not_checked() && !c.failed(), "{c:?}");
        assert!(
            c.not_checked_reason().unwrap().contains("`memory_growth`"),
            "{c:?}"
        );
        let o = run(4200, &[(2.0, 4400)]);
        let g = check(&s, &o).unwrap();
        let b = crate::oracle::memory::check(&s, &o);
        assert!(g.failed() && one_cause(b, Some(&g), &s, &o).failed());
    }

    #[test]
    fn no_bound_no_check_and_no_baseline_is_not_checked() {
        let o = run(30, &[(2.0, 510)]);
        assert!(check(&scenario("expect: error"), &o).is_none());
        let s = scenario("expect: error\nmemory_growth_mb: 80");
        let mut o = run(30, &[(2.0, 510)]);
        o.events.remove(0);
        let c = check(&s, &o).unwrap();
        assert!(c.not_checked() && !c.failed(), "{c:?}");
        let mut o = run(30, &[(2.0, 510)]);
        o.events[0].event = Event::MemoryBaseline {
            rss: 0,
            processes: 0,
            error: Some("no process of the scenario was found".into()),
        };
        let c = check(&s, &o).unwrap();
        assert!(c.not_checked(), "{c:?}");
        let o = run(30, &[]);
        let mut o2 = o.clone();
        o2.proc_samples.retain(|p| p.at < 1.0);
        assert!(check(&s, &o2).unwrap().not_checked());
    }
}
