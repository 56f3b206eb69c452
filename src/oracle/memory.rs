//! Bounded memory (`memory_bounded`): the agent's processes' peak memory
//! within the row's `memory_mb` (the table's default, 4096). The peak is the
//! scenario cgroup's `memory.peak` where the kernel keeps one, else the
//! highest resident-memory sum the sampler saw (about twice a second: a
//! spike shorter than that can be missed, never invented). `not checked`
//! when neither figure exists (an observation saved before RSS was sampled).

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::scenarios::Scenario;

const NAME: &str = "memory_bounded";

/// Bytes in a MB, as the bound is written.
const MB: f64 = 1024.0 * 1024.0;

/// The agent's peak memory and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    pub bytes: u64,
    /// `cgroup memory.peak`, or `sampled RSS`.
    pub source: &'static str,
    /// Seconds into the run of the sample that saw it (sampled RSS only).
    pub at: Option<f64>,
}

impl Peak {
    pub fn mb(&self) -> f64 {
        self.bytes as f64 / MB
    }
}

/// The observation's peak memory figure, if it has one.
pub fn peak(obs: &Observation) -> Option<Peak> {
    if let Some(bytes) = obs.memory_peak {
        return Some(Peak {
            bytes,
            source: "cgroup memory.peak",
            at: None,
        });
    }
    let top = obs.proc_samples.iter().max_by_key(|s| s.rss)?;
    (top.rss > 0).then_some(Peak {
        bytes: top.rss,
        source: "sampled RSS",
        at: Some(top.at),
    })
}

pub fn check(s: &Scenario, obs: &Observation) -> Check {
    let inv = Invariant::Memory;
    let Some(p) = peak(obs) else {
        return Check::skipped(
            inv,
            NAME,
            "no memory figure: no cgroup memory.peak and no sample of resident memory",
        );
    };
    let bound = s.memory_mb;
    if p.mb() <= bound as f64 {
        return Check::new(inv, NAME, vec![]);
    }
    let at = p.at.map(|t| format!(" at {t:.1} s")).unwrap_or_default();
    Check::new(
        inv,
        NAME,
        vec![format!(
            "the agent's processes peaked at {:.0} MB ({}{at}), over the row's bound of {bound} MB (`memory_mb`)",
            p.mb(),
            p.source
        )],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::ProcSample;
    use crate::oracle::fixtures::{end, healthy, sample, scenario};

    fn observation() -> Observation {
        let s = scenario("expect: error");
        healthy(&s, end(0, false, true, ""))
    }

    #[test]
    fn the_peak_is_held_to_the_rows_bound() {
        let mut s = scenario("expect: error\nmemory_mb: 300");
        assert_eq!(s.memory_mb, 300);
        let mut o = observation();
        o.proc_samples = vec![sample(1.0, 40), sample(2.5, 512), sample(3.0, 60)];
        let c = check(&s, &o);
        let v = c.violations();
        assert_eq!(v.len(), 1, "{c:?}");
        assert!(
            v[0].contains("peaked at 512 MB (sampled RSS at 2.5 s)"),
            "{v:?}"
        );
        assert!(v[0].contains("bound of 300 MB"), "{v:?}");
        s.memory_mb = 600;
        assert!(!check(&s, &o).failed());
    }

    #[test]
    fn the_cgroups_peak_wins_and_no_figure_is_not_checked() {
        let mut s = scenario("expect: error");
        assert_eq!(s.memory_mb, 4096, "the default");
        s.memory_mb = 100;
        let mut o = observation();
        o.proc_samples = vec![sample(1.0, 40)];
        o.memory_peak = Some(150 << 20);
        let c = check(&s, &o);
        assert!(
            c.violations()[0].contains("150 MB (cgroup memory.peak)"),
            "{c:?}"
        );
        o.memory_peak = None;
        o.proc_samples = vec![ProcSample::default()];
        let c = check(&s, &o);
        assert!(c.not_checked() && !c.failed(), "{c:?}");
    }
}
