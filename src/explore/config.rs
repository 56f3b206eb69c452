//! What `chaosrun explore` draws from: the reply-kind weights per main call,
//! the delay distribution, how often a trial gets an interrupt, a process
//! fault or a persistent fault (and of which kind). Read from `explore.yaml` (`--config`), every field optional
//! (defaults below, documented in the README), mistakes as `FILE:LINE:COL`.
//! Also the `--budget` duration (`90s`, `10m`, `1h`).

use serde::Deserialize;

/// The longest `--budget`: one day.
pub const MAX_BUDGET_SECS: u64 = 86_400;

pub use super::weights::{PersistWeights, Weights};

/// How often a trial gets a fault that lasts, and of which kind.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Persistence {
    /// Share of trials (without a kill, interrupt or stop) with a persistent fault.
    pub share: f64,
    /// Share of those whose fault never clears (the rest clear after 2–3 calls).
    pub never_clears: f64,
    pub weights: PersistWeights,
}

impl Default for Persistence {
    fn default() -> Self {
        Persistence {
            share: 0.3,
            never_clears: 0.5,
            weights: PersistWeights::default(),
        }
    }
}

/// A log-normal delay distribution given by its median and 99th percentile
/// (seconds), used for tool run times and the final answer's chunk gaps.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delay {
    pub p50: f64,
    pub p99: f64,
}

impl Default for Delay {
    fn default() -> Self {
        Delay {
            p50: 0.05,
            p99: 0.5,
        }
    }
}

/// The whole `explore.yaml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub weights: Weights,
    pub delay: Delay,
    /// Share of trials with an interrupt (sent right after a retryable error).
    pub interrupt_share: f64,
    /// Share of trials with a process fault (a kill, then resume), when the
    /// profile resumes.
    pub kill_share: f64,
    /// Share of the other trials with a stop: the agent's tree frozen
    /// (SIGSTOP) for 0.5–4 s as a step's call arrives, then continued.
    pub stop_share: f64,
    /// Scripted tool steps per trial, drawn uniformly from [min, max].
    pub steps: [u32; 2],
    /// Share of tool steps that are parallel batches (2..=`max_parallel` calls).
    pub parallel_share: f64,
    pub max_parallel: u32,
    /// Share of tool steps that start a background job.
    pub background_share: f64,
    /// Persistent faults: share, share that never clear, kind weights.
    pub persist: Persistence,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            weights: Weights::default(),
            delay: Delay::default(),
            interrupt_share: 0.2,
            kill_share: 0.2,
            stop_share: 0.1,
            steps: [1, 4],
            parallel_share: 0.4,
            max_parallel: 4,
            background_share: 0.15,
            persist: Persistence::default(),
        }
    }
}

impl Config {
    /// Parse and validate `text` (`file` names it in errors).
    pub fn parse(text: &str, file: &str) -> Result<Config, String> {
        let c: Config = serde_yaml::from_str(text).map_err(|e| match e.location() {
            Some(l) => format!("{file}:{}:{}: {e}", l.line(), l.column()),
            None => format!("{file}: {e}"),
        })?;
        c.validate().map_err(|m| format!("{file}: {m}"))?;
        Ok(c)
    }

    /// Every value within its bounds, or the first one that is not, named.
    pub fn validate(&self) -> Result<(), String> {
        let w = self.weights.list();
        if w.iter().any(|x| !x.is_finite() || *x < 0.0) {
            return Err("weights: each must be a finite number ≥ 0".into());
        }
        if w.iter().sum::<f64>() <= 0.0 {
            return Err("weights: at least one must be > 0".into());
        }
        let pw = self.persist.weights.list();
        if pw.iter().any(|x| !x.is_finite() || *x < 0.0) || pw.iter().sum::<f64>() <= 0.0 {
            return Err(
                "persist.weights: each must be a finite number ≥ 0, at least one > 0".into(),
            );
        }
        for (name, v) in [
            ("persist.share", self.persist.share),
            ("persist.never_clears", self.persist.never_clears),
            ("interrupt_share", self.interrupt_share),
            ("kill_share", self.kill_share),
            ("stop_share", self.stop_share),
            ("parallel_share", self.parallel_share),
            ("background_share", self.background_share),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name}: {v} is not a share between 0 and 1"));
            }
        }
        let d = &self.delay;
        if !(d.p50.is_finite() && d.p99.is_finite() && d.p50 > 0.0 && d.p99 >= d.p50) {
            return Err("delay: need 0 < p50 ≤ p99 (seconds)".into());
        }
        if d.p99 > 2.0 {
            return Err("delay: p99 must be ≤ 2 s (below the stale timeout)".into());
        }
        let [lo, hi] = self.steps;
        if lo > hi || hi > 8 {
            return Err("steps: need [min, max] with min ≤ max ≤ 8".into());
        }
        if !(2..=8).contains(&self.max_parallel) {
            return Err("max_parallel: must be 2 to 8".into());
        }
        Ok(())
    }
}

/// `--budget`: a number with a unit (`90s`, `10m`, `1h`; a bare number is
/// seconds), at least 1 s and at most one day.
pub fn parse_budget(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1),
        Some((i, 'm')) => (&t[..i], 60),
        Some((i, 'h')) => (&t[..i], 3600),
        _ => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("--budget {s:?}: expected a duration like 90s, 10m or 1h"))?;
    let secs = n
        .checked_mul(mult)
        .filter(|v| (1..=MAX_BUDGET_SECS).contains(v))
        .ok_or_else(|| format!("--budget {s:?}: must be between 1s and 24h"))?;
    Ok(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_with_units_and_bounds() {
        assert_eq!(parse_budget("90s").unwrap().as_secs(), 90);
        assert_eq!(parse_budget("10m").unwrap().as_secs(), 600);
        assert_eq!(parse_budget("1h").unwrap().as_secs(), 3600);
        assert_eq!(parse_budget("5").unwrap().as_secs(), 5);
        for bad in [
            "",
            "0s",
            "25h",
            "-1m",
            "1.5m",
            "10x",
            "99999999999999999999h",
        ] {
            assert!(parse_budget(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn config_defaults_fill_in_and_errors_have_a_place() {
        let c = Config::parse("weights: {hang: 0}\n", "e.yaml").unwrap();
        assert_eq!(c.weights.get("hang"), Some(0.0));
        assert_eq!(c.weights.ok, Weights::default().ok);
        let e = Config::parse("weights:\n  nope: 1\n", "e.yaml").unwrap_err();
        assert!(e.starts_with("e.yaml:2:"), "{e}");
        assert!(Config::parse("kill_share: 2\n", "e.yaml").is_err());
        assert!(Config::parse("delay: {p50: 1, p99: 0.5}\n", "e.yaml").is_err());
        assert!(Config::parse("weights: {ok: 0, error_500: 0, error_429: 0, drop_mid_stream: 0, stall_mid_stream: 0, hang: 0, value_empty: 0, value_no_calls: 0, value_cut: 0, value_refused: 0}\n", "e.yaml").is_err());
    }
}
