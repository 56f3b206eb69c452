//! Bounded memory growth (`memory_growth`): on a row that declares
//! `memory_growth_mb`, the agent's processes may grow at most that much over
//! their own footprint, measured on the same row as its first model call
//! arrived (the reply held until it was read: [`Event::MemoryBaseline`]),
//! before the output the row makes exists. The peak is the highest
//! resident-memory sum sampled after the baseline (the row is sampled every
//! 50 ms through its faulted turn): resident memory on both sides, never the
//! cgroup's `memory.peak`, which also counts page cache (a file the agent
//! spills the output to is not memory it holds). So a lean agent that keeps
//! copies of the output fails, and a large one that stays flat passes.
//! `not checked` when the baseline or a later sample is missing.

use super::{Check, Invariant};
use crate::observe::{Event, Observation};
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

/// The growth check, on a row that declares a bound.
pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let allowed = s.memory_growth_mb?;
    let inv = Invariant::Memory;
    let (at, base, n) = match baseline(obs) {
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
    let peak = obs
        .proc_samples
        .iter()
        .filter(|p| p.at >= at && p.rss > 0)
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
            "the agent's processes grew by {growth:.0} MB over their own footprint, more than the {allowed} MB the row allows (`memory_growth_mb`): baseline {:.0} MB ({n} process(es), resident memory measured as the row's first model call arrived, at {at:.1} s), peak {:.0} MB (sampled RSS at {:.1} s)",
            base as f64 / MB,
            peak.rss as f64 / MB,
            peak.at
        )],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::ProcSample;
    use crate::oracle::fixtures::{at, end, healthy, scenario};

    fn sample(at: f64, mb: u64) -> ProcSample {
        ProcSample {
            at,
            count: 2,
            cpu: 0.0,
            rss: mb << 20,
        }
    }

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
        assert!(v[0].contains("baseline 30 MB (3 process(es)"), "{v:?}");
        assert!(v[0].contains("at 1.0 s"), "{v:?}");
        assert!(v[0].contains("peak 510 MB (sampled RSS at 2.0 s)"), "{v:?}");
    }

    /// A 1 GB agent that stays flat passes (an absolute 512 MB bound failed
    /// it); samples before the baseline (its boot) are not growth.
    #[test]
    fn a_large_flat_agent_passes_and_boot_is_not_growth() {
        let s = scenario("expect: error\nmemory_growth_mb: 80");
        let mut o = run(1040, &[(1.5, 1060), (2.5, 1100)]);
        o.proc_samples.push(sample(0.8, 1900));
        assert!(!check(&s, &o).unwrap().failed());
        let o = run(1040, &[(1.5, 1060), (2.5, 1130)]);
        assert!(check(&s, &o).unwrap().failed(), "90 MB of growth");
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
