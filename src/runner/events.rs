//! The typed events a run emits, the scenario verdict and the run's tally.
//! Reporters (progress, text, JSON, JUnit, HTML) consume them and never re-run
//! any logic; a finished scenario is shared with every reporter (`Arc`), never
//! copied per reporter.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::observe::{Observation, Phase};
use crate::oracle::{Check, Status};

/// A scenario's verdict (DESIGN.md "Verdicts"). Deserialized (by `merge`)
/// with exactly these names: any other verdict is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every check passed or could not be made (with its reason).
    Pass,
    /// At least one check failed.
    Fail,
    /// chaosrun itself could not run the scenario (a panic, a store it could
    /// not query): counts as not passed.
    Error {
        #[serde(default)]
        cause: String,
    },
    /// The profile declares the capability the scenario needs absent: shown
    /// apart, never counted as a pass.
    NotApplicable {
        #[serde(default)]
        reason: String,
    },
}

impl Verdict {
    /// The verdict the checks make: `Fail` when any check failed.
    pub fn from_checks(checks: &[Check]) -> Verdict {
        Verdict::from_statuses(checks.iter().map(|c| &c.status))
    }

    /// The one rule over check outcomes, shared by the run ([`Verdict::judge`])
    /// and `merge` ([`Verdict::rejudge`]): any failed check fails the
    /// scenario; a check that could not be made is never a failure.
    pub fn from_statuses<'a>(statuses: impl IntoIterator<Item = &'a Status>) -> Verdict {
        if statuses
            .into_iter()
            .any(|s| matches!(s, Status::Fail { .. }))
        {
            Verdict::Fail
        } else {
            Verdict::Pass
        }
    }

    /// A recorded verdict judged again from its recorded checks (`merge`):
    /// an error stays an error (it never passes anyway); a failed check
    /// fails it whatever it says; an N/A stays apart; a pass or fail with no
    /// check at all is an error (nothing was checked); else the checks'
    /// verdict by [`Verdict::from_statuses`], never the recorded one.
    pub fn rejudge(recorded: Verdict, checks: &[Status]) -> Verdict {
        let by_checks = Verdict::from_statuses(checks);
        match recorded {
            e @ Verdict::Error { .. } => e,
            _ if by_checks == Verdict::Fail => Verdict::Fail,
            na @ Verdict::NotApplicable { .. } => na,
            _ if checks.is_empty() => Verdict::Error {
                cause: "the report holds no check for it".into(),
            },
            _ => by_checks,
        }
    }

    /// The verdict of an observed run: an `Error` when chaosrun could not
    /// set the run up (provider, home, spawning the agent) or the observation
    /// shows a configuration error (a store the profile's query cannot read),
    /// else what the checks make.
    pub fn judge(checks: &[Check], obs: &Observation) -> Verdict {
        if let Some(err) = &obs.setup_error {
            return Verdict::Error {
                cause: format!("the scenario could not be run: {err}"),
            };
        }
        // Proxy mode: an upstream that failed on its own is chaosrun's
        // failure to run the scenario, not the agent's.
        // A replayed cassette that has no entry for a call is the same.
        if let Some(e) = obs.recording.upstream_errors.first() {
            let what = if e.starts_with("cassette ") {
                "the recorded session"
            } else {
                "the upstream"
            };
            return Verdict::Error {
                cause: format!("{what} could not serve the scenario: {e}"),
            };
        }
        match crate::oracle::configuration_error(obs) {
            Some(cause) => Verdict::Error { cause },
            None => Verdict::from_checks(checks),
        }
    }

    /// `PASS`, `FAIL`, `ERROR` or `N/A`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Error { .. } => "ERROR",
            Verdict::NotApplicable { .. } => "N/A",
        }
    }

    /// The JSON name: `pass`, `fail`, `error`, `not_applicable`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Error { .. } => "error",
            Verdict::NotApplicable { .. } => "not_applicable",
        }
    }

    /// The error's cause or the N/A reason.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Verdict::Error { cause } => Some(cause),
            Verdict::NotApplicable { reason } => Some(reason),
            _ => None,
        }
    }

    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Pass)
    }
}

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
    pub fn not_applicable(id: &str, attempt: u32, attempts: u32, reason: String) -> ScenarioResult {
        ScenarioResult {
            verdict: Verdict::NotApplicable { reason },
            ..ScenarioResult::error(id, attempt, attempts, String::new(), 0.0)
        }
    }

    /// A scenario run chaosrun could not finish: no checks, the cause kept.
    pub fn error(
        id: &str,
        attempt: u32,
        attempts: u32,
        cause: String,
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
                reason: "resume: false".into(),
            },
        ];
        let s = Stats::tally(&na, 2);
        assert!(s.ok());
        assert_eq!(s.summary(), "1 passed, 0 failed, 1 not applicable");
        let e = [Verdict::Error { cause: "x".into() }];
        assert!(!Stats::tally(&e, 1).ok());
    }
}
