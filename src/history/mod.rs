//! Run history (`--history DB`, `chaosrun history DB`, `merge --history DB`):
//! every run recorded in SQLite or Postgres, and each scenario's recent
//! outcomes read back as regressions (`NEW FAIL`), fixes, flakes and duration
//! trends.
//!
//! This file owns the records written per run and their two sources: the run
//! events of a live run ([`ScenarioRecord::from_result`]) and a (merged) JSON
//! report, read as its [`document`] types ([`RunRecord::from_report`]). [`store`] persists them, [`meta`]
//! gathers what describes a run, [`recorder`] is the live run's reporter,
//! [`analyze`] derives the labels, [`render`] and [`html`] print them.

pub mod analyze;
pub mod command;
pub mod html;
pub mod meta;
pub mod recorder;
pub mod render;
pub mod store;

use serde::Serialize;

use crate::oracle::{Invariant, Status};
use crate::report::document;
use crate::runner::{ScenarioResult, Verdict};

pub use store::Store;

/// One check of one scenario run, as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckRecord {
    pub invariant: String,
    pub name: String,
    /// `pass`, `fail` or `not_checked` (the JSON report's words).
    pub status: String,
    /// The violations (one per line) or the reason it was not checked.
    pub message: String,
}

/// One scenario run (one attempt) of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioRecord {
    pub id: String,
    pub attempt: u32,
    /// `pass`, `fail`, `error` or `n/a` (see [`verdict_of`]).
    pub verdict: String,
    pub seconds: f64,
    pub main_calls: u64,
    pub checks: Vec<CheckRecord>,
}

/// Everything recorded about one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunRecord {
    pub chaosrun_version: String,
    pub table_path: Option<String>,
    /// sha256 of the table's bytes, lowercase hex.
    pub table_sha256: Option<String>,
    /// The agent (the profile's source as given to `--agent`, or `bundled`).
    pub agent: String,
    /// First stdout line of the profile's `version_cmd`.
    pub agent_version: Option<String>,
    /// The seed (several, comma-separated, for a merge of differently seeded shards).
    pub seed: Option<String>,
    /// `K/N` when the run was one shard.
    pub shard: Option<String>,
    /// Unix milliseconds.
    pub started_ms: i64,
    pub finished_ms: i64,
    pub ci: meta::Ci,
    pub scenarios: Vec<ScenarioRecord>,
}

impl RunRecord {
    /// This record with every secret the run knows replaced
    /// ([`crate::redact`]): the history is a sink like any report.
    pub fn redacted(&self) -> RunRecord {
        let t = |s: &str| crate::redact::text(s).into_owned();
        let o = |s: &Option<String>| s.as_deref().map(t);
        let mut r = self.clone();
        r.table_path = o(&self.table_path);
        r.agent = t(&self.agent);
        r.agent_version = o(&self.agent_version);
        for s in &mut r.scenarios {
            s.id = t(&s.id);
            for c in &mut s.checks {
                c.message = t(&c.message);
            }
        }
        r
    }
}

/// A scenario run's verdict word: `pass`, `fail`, `error` (chaosrun could
/// not run it) or `n/a`.
pub fn verdict_of(r: &ScenarioResult) -> &'static str {
    verdict_word(&r.verdict)
}

fn verdict_word(v: &Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Error { .. } => "error",
        Verdict::NotApplicable { .. } => "n/a",
    }
}

/// The record of an `error` cause or `n/a` reason, kept beside the checks so
/// `history` shows it as the reason the scenario did not pass.
fn detail_record(verdict: &str, detail: String) -> CheckRecord {
    CheckRecord {
        invariant: "verdict".into(),
        name: verdict.into(),
        status: if verdict == "error" {
            "error"
        } else {
            "not_applicable"
        }
        .into(),
        message: detail,
    }
}

/// A check's record: its invariant's and status's report words, its
/// violations (one per line) or the reason it was not checked.
fn check_record(invariant: Invariant, name: &str, status: &Status) -> CheckRecord {
    let (word, message) = match status {
        Status::Pass => ("pass", String::new()),
        Status::Fail { violations } => ("fail", violations.join("\n")),
        Status::NotChecked { reason } => ("not_checked", reason.clone()),
    };
    let invariant = serde_json::to_value(invariant)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    CheckRecord {
        invariant,
        name: name.to_string(),
        status: word.into(),
        message,
    }
}

/// A scenario's record from its verdict and checks, however they were read.
fn record(
    id: &str,
    attempt: u32,
    verdict: &Verdict,
    (seconds, main_calls): (f64, u64),
    mut checks: Vec<CheckRecord>,
) -> ScenarioRecord {
    let word = verdict_word(verdict);
    checks.extend(verdict.detail().map(|d| detail_record(word, d)));
    ScenarioRecord {
        id: id.to_string(),
        attempt,
        verdict: word.to_string(),
        seconds,
        main_calls,
        checks,
    }
}

impl ScenarioRecord {
    /// From a live run's result.
    pub fn from_result(r: &ScenarioResult) -> ScenarioRecord {
        let checks = r
            .checks
            .iter()
            .map(|c| check_record(c.invariant, c.name, &c.status))
            .collect();
        record(
            &r.id,
            r.attempt,
            &r.verdict,
            (r.seconds, r.main_calls),
            checks,
        )
    }

    /// From one scenario entry of a report ([`crate::report::document`]).
    pub fn from_entry(s: &document::Scenario) -> ScenarioRecord {
        let checks = s
            .checks
            .iter()
            .map(|c| check_record(c.invariant, &c.name, &c.status))
            .collect();
        record(
            &s.id,
            s.attempt,
            &s.verdict,
            (s.seconds, s.calls.main),
            checks,
        )
    }
}

impl RunRecord {
    /// One run from a (merged) report, as `merge --history` records it. The
    /// report carries no table, so none is recorded.
    pub fn from_report(doc: &document::Report) -> RunRecord {
        let seed = match (&doc.seed, &doc.seeds) {
            (Some(n), _) => Some(n.to_string()),
            (None, Some(s)) if !s.is_empty() => Some(
                s.iter()
                    .map(|x| x.map_or_else(|| "null".to_string(), |n| n.to_string()))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => None,
        };
        let now = meta::now_ms();
        let wall_ms = (doc.wall_seconds.unwrap_or(0.0) * 1000.0) as i64;
        RunRecord {
            chaosrun_version: meta::CHAOSRUN_VERSION.to_string(),
            agent: doc.agent.names().join(", "),
            seed,
            started_ms: now - wall_ms,
            finished_ms: now,
            ci: meta::Ci::from_env(),
            scenarios: doc
                .scenarios
                .iter()
                .map(ScenarioRecord::from_entry)
                .collect(),
            ..RunRecord::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(v: serde_json::Value) -> document::Scenario {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_report_scenario_becomes_a_record() {
        let s = json!({"id": "x", "attempt": 2, "verdict": "fail", "seconds": 1.5,
            "calls": {"main": 4, "probe": 0, "aux": 0},
            "checks": [{"invariant": "provider_calls", "name": "call_bound", "status": "fail",
                        "violations": ["a", "b"]},
                       {"invariant": "store_integrity", "name": "readable", "status": "not_checked",
                        "reason": "no store"}]});
        let r = ScenarioRecord::from_entry(&entry(s.clone()));
        assert_eq!(
            (r.verdict.as_str(), r.attempt, r.main_calls),
            ("fail", 2, 4)
        );
        assert_eq!(r.checks[0].invariant, "provider_calls");
        assert_eq!(r.checks[0].message, "a\nb");
        assert_eq!(r.checks[1].message, "no store");
        let mut e = s.clone();
        e["verdict"] = json!("not_applicable");
        e["reason"] = json!("no breaker");
        let na = ScenarioRecord::from_entry(&entry(e));
        assert_eq!(na.verdict, "n/a");
        assert_eq!(na.checks.last().unwrap().message, "no breaker");
        let mut e = s.clone();
        e["verdict"] = json!("error");
        e["cause"] = json!("the scenario could not be run: spawn failed");
        let err = ScenarioRecord::from_entry(&entry(e));
        assert_eq!(err.verdict, "error");
        let last = err.checks.last().unwrap();
        assert_eq!(
            (last.status.as_str(), last.message.as_str()),
            ("error", "the scenario could not be run: spawn failed")
        );
    }
}
