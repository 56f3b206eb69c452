//! Run history (`--history DB`, `chaosrun history DB`, `merge --history DB`):
//! every run recorded in SQLite or Postgres, and each scenario's recent
//! outcomes read back as regressions (`NEW FAIL`), fixes, flakes and duration
//! trends.
//!
//! This file owns the records written per run and their two sources: the run
//! events of a live run ([`ScenarioRecord::from_result`]) and a (merged) JSON
//! report ([`RunRecord::from_report`]). [`store`] persists them, [`meta`]
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
use serde_json::Value;

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
    match r.verdict {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Error { .. } => "error",
        Verdict::NotApplicable { .. } => "n/a",
    }
}

/// Why the scenario is `error` or `n/a`: its cause or reason.
pub fn verdict_detail(r: &ScenarioResult) -> Option<String> {
    r.verdict.detail().map(str::to_string)
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

fn derive_verdict(passed: bool, checks: usize, not_checked: usize) -> &'static str {
    if passed {
        "pass"
    } else if checks > 0 && not_checked == checks {
        "error"
    } else {
        "fail"
    }
}

/// A check from its JSON form (the report's, which is also its serde form).
fn check_from_json(c: &Value) -> CheckRecord {
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let message = match &c["violations"] {
        Value::Array(v) => v
            .iter()
            .map(|x| x.as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => c["reason"].as_str().unwrap_or_default().to_string(),
    };
    CheckRecord {
        invariant: text(&c["invariant"]),
        name: text(&c["name"]),
        status: text(&c["status"]),
        message,
    }
}

impl ScenarioRecord {
    /// From a live run's result.
    pub fn from_result(r: &ScenarioResult) -> ScenarioRecord {
        let verdict = verdict_of(r);
        let mut checks: Vec<CheckRecord> = r
            .checks
            .iter()
            .map(|c| check_from_json(&serde_json::to_value(c).unwrap_or_default()))
            .collect();
        checks.extend(verdict_detail(r).map(|d| detail_record(verdict, d)));
        ScenarioRecord {
            id: r.id.clone(),
            attempt: r.attempt,
            verdict: verdict.to_string(),
            seconds: r.seconds,
            main_calls: r.main_calls,
            checks,
        }
    }

    /// From one scenario object of a `chaosrun-report/1` JSON report. A
    /// `verdict` field, when the report has one, wins over `passed`.
    pub fn from_json(s: &Value) -> Result<ScenarioRecord, String> {
        let id = s["id"]
            .as_str()
            .ok_or("a scenario in the report has no `id`")?
            .to_string();
        let mut checks: Vec<CheckRecord> = s["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(check_from_json)
            .collect();
        let verdict = match &s["verdict"] {
            Value::String(v) => normalize_verdict(v),
            Value::Object(o) => o
                .get("kind")
                .or_else(|| o.get("verdict"))
                .and_then(Value::as_str)
                .map(normalize_verdict)
                .unwrap_or("fail"),
            _ => derive_verdict(
                s["passed"] == true,
                checks.len(),
                checks.iter().filter(|c| c.status == "not_checked").count(),
            ),
        };
        let detail = s["cause"].as_str().or_else(|| s["reason"].as_str());
        if let (Some(d), "error" | "n/a") = (detail, verdict) {
            checks.push(detail_record(verdict, d.to_string()));
        }
        Ok(ScenarioRecord {
            id,
            attempt: s["attempt"].as_u64().unwrap_or(1) as u32,
            verdict: verdict.to_string(),
            seconds: s["seconds"].as_f64().unwrap_or(0.0),
            main_calls: s["calls"]["main"]
                .as_u64()
                .or_else(|| s["main_calls"].as_u64())
                .unwrap_or(0),
            checks,
        })
    }
}

/// A verdict word from a report, in this module's vocabulary.
fn normalize_verdict(v: &str) -> &'static str {
    match v.to_ascii_lowercase().replace(['_', ' ', '-'], "").as_str() {
        "pass" | "passed" => "pass",
        "error" => "error",
        "n/a" | "na" | "notapplicable" => "n/a",
        _ => "fail",
    }
}

impl RunRecord {
    /// One run from a (merged) `chaosrun-report/1` JSON report, as `merge
    /// --history` records it. The report carries no table, so none is recorded.
    pub fn from_report(doc: &Value) -> Result<RunRecord, String> {
        let scenarios = doc["scenarios"]
            .as_array()
            .ok_or("the report has no `scenarios` list")?
            .iter()
            .map(ScenarioRecord::from_json)
            .collect::<Result<Vec<_>, _>>()?;
        let agent = match &doc["agent"] {
            Value::String(a) => a.clone(),
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(", "),
            _ => "unknown".into(),
        };
        let seed = match (&doc["seed"], &doc["seeds"]) {
            (Value::Number(n), _) => Some(n.to_string()),
            (_, Value::Array(s)) if !s.is_empty() => Some(
                s.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => None,
        };
        let now = meta::now_ms();
        let wall_ms = (doc["wall_seconds"].as_f64().unwrap_or(0.0) * 1000.0) as i64;
        Ok(RunRecord {
            chaosrun_version: meta::CHAOSRUN_VERSION.to_string(),
            agent,
            seed,
            started_ms: now - wall_ms,
            finished_ms: now,
            ci: meta::Ci::from_env(),
            scenarios,
            ..RunRecord::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_report_scenario_becomes_a_record() {
        let s = json!({"id": "x", "attempt": 2, "passed": false, "seconds": 1.5,
            "calls": {"main": 4, "probe": 0, "aux": 0},
            "checks": [{"invariant": "provider_calls", "name": "call_bound", "status": "fail",
                        "violations": ["a", "b"]},
                       {"invariant": "store_integrity", "name": "readable", "status": "not_checked",
                        "reason": "no store"}]});
        let r = ScenarioRecord::from_json(&s).unwrap();
        assert_eq!(
            (r.verdict.as_str(), r.attempt, r.main_calls),
            ("fail", 2, 4)
        );
        assert_eq!(r.checks[0].message, "a\nb");
        assert_eq!(r.checks[1].message, "no store");
        let mut e = s.clone();
        e["checks"] = json!([{"invariant": "termination", "name": "t", "status": "not_checked", "reason": "r"}]);
        assert_eq!(ScenarioRecord::from_json(&e).unwrap().verdict, "error");
        e["verdict"] = json!("not_applicable");
        e["reason"] = json!("no breaker");
        let na = ScenarioRecord::from_json(&e).unwrap();
        assert_eq!(na.verdict, "n/a");
        assert_eq!(na.checks.last().unwrap().message, "no breaker");
        assert!(ScenarioRecord::from_json(&json!({"passed": true})).is_err());
    }
}
