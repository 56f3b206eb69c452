//! The typed events a run emits, the scenario verdict and the run's tally.
//! Reporters (progress, text, JSON, JUnit, HTML) consume them and never re-run
//! any logic; a finished scenario is shared with every reporter (`Arc`), never
//! copied per reporter.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::observe::{Observation, Phase};
pub use crate::oracle::Verdict;
use crate::oracle::{Check, ErrorCause, NotApplicable};

/// A finished scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub id: String,
    /// Which run of this scenario (1-based) out of `attempts` (`--repeat`).
    pub attempt: u32,
    pub attempts: u32,
    #[serde(flatten)]
    pub verdict: Verdict,
    pub seconds: f64,
    pub main_calls: u64,
    pub checks: Vec<Check>,
    pub observation: Observation,
    /// Where its artifacts were kept, if they were.
    pub artifacts: Option<PathBuf>,
}

impl ScenarioResult {
    /// Only a `Pass` passes (never an error or an N/A).
    pub fn passed(&self) -> bool {
        self.verdict.passed()
    }

    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.failed())
    }

    pub fn not_checked(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.not_checked())
    }

    /// A scenario run that does not apply to the profile: not run.
    pub fn not_applicable(
        id: &str,
        attempt: u32,
        attempts: u32,
        reason: NotApplicable,
    ) -> ScenarioResult {
        ScenarioResult {
            verdict: Verdict::NotApplicable { reason },
            ..ScenarioResult::error(id, attempt, attempts, ErrorCause::default(), 0.0)
        }
    }

    /// A scenario run chaosrun could not finish: no checks, the cause kept.
    pub fn error(
        id: &str,
        attempt: u32,
        attempts: u32,
        cause: ErrorCause,
        seconds: f64,
    ) -> ScenarioResult {
        ScenarioResult {
            id: id.to_string(),
            attempt,
            attempts,
            verdict: Verdict::Error { cause },
            seconds,
            main_calls: 0,
            checks: Vec::new(),
            observation: Observation {
                scenario: id.to_string(),
                wall: seconds,
                probe_turn: 1,
                workers: 1,
                ..Observation::default()
            },
            artifacts: None,
        }
    }
}

/// How the scenario runs of a whole run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub passed: usize,
    pub failed: usize,
    pub errors: usize,
    pub not_applicable: usize,
}

impl Stats {
    /// Tally `results` against the `expected` number of scenario runs
    /// (selected × repeat): a run without a result is an error.
    pub fn tally<'a>(results: impl IntoIterator<Item = &'a Verdict>, expected: usize) -> Stats {
        let mut s = Stats::default();
        for v in results {
            s.add(v);
        }
        s.errors += expected.saturating_sub(s.total());
        s
    }

    /// Count one more verdict.
    pub fn add(&mut self, v: &Verdict) {
        match v {
            Verdict::Pass => self.passed += 1,
            Verdict::Fail => self.failed += 1,
            Verdict::Error { .. } => self.errors += 1,
            Verdict::NotApplicable { .. } => self.not_applicable += 1,
        }
    }

    pub fn total(&self) -> usize {
        self.passed + self.failed + self.errors + self.not_applicable
    }

    /// Exit 0: no failure and no error (N/A is neither).
    pub fn ok(&self) -> bool {
        self.failed == 0 && self.errors == 0
    }

    /// `20 passed, 2 failed, 1 error, 3 not applicable` (errors and N/A only
    /// when there are some).
    pub fn summary(&self) -> String {
        let mut s = format!("{} passed, {} failed", self.passed, self.failed);
        if self.errors > 0 {
            let plural = if self.errors == 1 { "" } else { "s" };
            s.push_str(&format!(", {} error{plural}", self.errors));
        }
        if self.not_applicable > 0 {
            s.push_str(&format!(", {} not applicable", self.not_applicable));
        }
        s
    }
}

/// One event of a run.
#[derive(Debug, Clone)]
pub enum RunEvent {
    Started {
        total: usize,
        jobs: usize,
    },
    ScenarioStarted {
        id: String,
    },
    Phase {
        id: String,
        phase: Phase,
        deadline: f64,
    },
    ScenarioFinished(Arc<ScenarioResult>),
    /// Something about the whole run a user should fix, decided by the
    /// runner (e.g. a declared log that never appeared in any scenario).
    Warning(String),
    /// Every selected scenario run is accounted for in `stats`.
    Finished {
        stats: Stats,
        wall: f64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_result_is_an_error_and_only_passes_are_ok() {
        let v = [Verdict::Pass, Verdict::Pass];
        let s = Stats::tally(&v, 3);
        assert_eq!((s.passed, s.errors), (2, 1));
        assert!(!s.ok());
        assert_eq!(s.summary(), "2 passed, 0 failed, 1 error");
        let na = [
            Verdict::Pass,
            Verdict::NotApplicable {
                reason: NotApplicable::Profile("resume: false".into()),
            },
        ];
        let s = Stats::tally(&na, 2);
        assert!(s.ok());
        assert_eq!(s.summary(), "1 passed, 0 failed, 1 not applicable");
        let e = [Verdict::Error {
            cause: ErrorCause::Saved("x".into()),
        }];
        assert!(!Stats::tally(&e, 1).ok());
    }
}
