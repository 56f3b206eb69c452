//! The JSON report (`--json FILE`), schema `chaosrun-report/2`: what was
//! selected (ids, shard K/N, repeat), every finished scenario's verdict (with
//! an error's cause), timings, provider calls, checks with violations, and
//! artifact paths. Rewritten atomically (temp file + rename) after every
//! scenario, so a killed run still leaves the finished ones, with
//! `"complete": false` until the run ends.
//!
//! ```json
//! {"schema": "chaosrun-report/2", "complete": true, "seed": 1, "agent": "...",
//!  "selected": ["a", "b"], "shard": {"k": 1, "n": 2}, "repeat": 1,
//!  "passed": 22, "failed": 1, "errors": 0, "not_applicable": 0, "wall_seconds": 17.0,
//!  "scenarios": [{"id": "...", "attempt": 1, "attempts": 1, "verdict": "fail",
//!                 "passed": false, "seconds": 3.1,
//!                 "calls": {"main": 3, "probe": 1, "aux": 0},
//!                 "checks": [{"invariant": "process_hygiene", "name": "no_survivors",
//!                             "status": "fail", "violations": ["..."]}],
//!                 "artifacts": "/path/or/null"}]}
//! ```

use std::path::PathBuf;

use super::document::{Agents, Report, Scenario, Shard, SCHEMA};
use super::Reporter;
use crate::runner::{RunEvent, Stats};

/// What a run selected: every id before sharding, the shard, the repeat.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub ids: Vec<String>,
    /// (K, N) of `--shard K/N`.
    pub shard: Option<(usize, usize)>,
    pub repeat: u32,
}

pub struct Json {
    path: PathBuf,
    seed: u64,
    agent: String,
    /// The agent's version, when the run could tell it.
    version: Option<String>,
    selection: Selection,
    scenarios: Vec<Scenario>,
    /// The tally of the finished scenarios so far (the runner's, at the end).
    stats: Stats,
    /// The first write error, reported once.
    error: Option<String>,
    /// Run-wide warnings from the runner.
    warnings: Vec<String>,
}

impl Json {
    pub fn new(path: PathBuf, seed: u64, agent: String, selection: Selection) -> Self {
        Json {
            path,
            seed,
            warnings: Vec::new(),
            agent,
            version: None,
            selection,
            scenarios: Vec::new(),
            stats: Stats::default(),
            error: None,
        }
    }

    /// The document as it stands.
    fn document(&self, complete: bool, wall: Option<f64>) -> Report {
        Report {
            schema: SCHEMA.into(),
            complete,
            seed: Some(self.seed),
            agent: Agents::One(self.agent.clone()),
            agent_version: self.version.clone(),
            seeds: None,
            selected: self.selection.ids.clone(),
            shard: self.selection.shard.map(|(k, n)| Shard {
                k: k as u64,
                n: n as u64,
            }),
            repeat: self.selection.repeat.max(1),
            passed: self.stats.passed,
            failed: self.stats.failed,
            errors: self.stats.errors,
            not_applicable: self.stats.not_applicable,
            wall_seconds: wall,
            warnings: self.warnings.clone(),
            scenarios: self.scenarios.clone(),
        }
    }

    fn write(&mut self, complete: bool, wall: Option<f64>) {
        let result = self
            .document(complete, wall)
            .to_json_pretty()
            .map_err(std::io::Error::other)
            .and_then(|bytes| crate::output::write_atomic(&self.path, &bytes));
        if let Err(e) = result {
            if self.error.is_none() {
                crate::say_err!("chaosrun: cannot write {}: {e}", self.path.display());
                self.error = Some(e.to_string());
            }
        }
    }
}

impl Json {
    /// Name the agent's version in the report.
    pub fn with_version(mut self, version: Option<String>) -> Self {
        self.version = version;
        self
    }
}

impl Reporter for Json {
    fn on(&mut self, event: &RunEvent) {
        match event {
            RunEvent::Started { .. } => self.write(false, None),
            RunEvent::ScenarioFinished(r) => {
                self.scenarios.push(Scenario::of(r));
                self.stats.add(&r.verdict);
                self.write(false, None);
            }
            RunEvent::Warning(w) => self.warnings.push(w.clone()),
            RunEvent::Finished { stats, wall } => {
                self.stats = *stats;
                self.write(true, Some(*wall));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{feed, sample_results, sample_with_error};
    use serde_json::{json, Value};

    fn selection() -> Selection {
        Selection {
            ids: vec![
                "healthy_one".into(),
                "storm<&>".into(),
                "crashed_one".into(),
            ],
            shard: Some((1, 1)),
            repeat: 1,
        }
    }

    fn validator() -> jsonschema::Validator {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/report-schema.json");
        let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        jsonschema::validator_for(&schema).expect("docs/report-schema.json is a valid schema")
    }

    fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
        v.iter_errors(doc)
            .map(|e| format!("{}: {e}", e.instance_path))
            .collect()
    }

    #[test]
    fn the_report_matches_docs_report_schema() {
        let v = validator();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let mut json = Json::new(
            path.clone(),
            u64::MAX,
            "reference agent".into(),
            selection(),
        );
        json.on(&RunEvent::Started { total: 2, jobs: 2 });
        let partial: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(errors(&v, &partial), Vec::<String>::new());
        assert_eq!(partial["wall_seconds"], Value::Null);

        feed(&mut json, sample_with_error());
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(errors(&v, &doc), Vec::<String>::new());
        assert_eq!(doc["complete"], true);
        assert_eq!(
            (&doc["passed"], &doc["failed"], &doc["errors"]),
            (&json!(1), &json!(1), &json!(1))
        );
        assert_eq!(
            doc["selected"],
            json!(["healthy_one", "storm<&>", "crashed_one"])
        );
        assert_eq!(doc["shard"], json!({"k": 1, "n": 1}));
        let crashed = &doc["scenarios"][2];
        assert_eq!(
            (&crashed["verdict"], &crashed["passed"]),
            (&json!("error"), &json!(false))
        );
        assert!(crashed["cause"].as_str().unwrap().contains("<boom>"));
        assert_eq!(doc["scenarios"][1]["verdict"], "fail");
        let statuses: Vec<&str> = doc["scenarios"][1]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["pass", "fail", "fail", "not_checked"]);
    }

    #[test]
    fn the_schema_rejects_what_the_format_does_not_allow() {
        let v = validator();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let mut json = Json::new(path.clone(), 1, "a".into(), selection());
        feed(&mut json, sample_results());
        let good: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let broken = |f: &dyn Fn(&mut Value)| {
            let mut d = good.clone();
            f(&mut d);
            d
        };
        let cases = [
            broken(&|d| d["schema"] = "chaosrun-report/1".into()),
            broken(&|d| d["scenarios"][1]["verdict"] = "flaky".into()),
            broken(&|d| {
                d["scenarios"][1]["cause"] = "an error that is not one".into();
            }),
            broken(&|d| {
                d.as_object_mut().unwrap().remove("selected");
            }),
            broken(&|d| d["scenarios"][1]["checks"][1]["invariant"] = "liveness".into()),
            broken(&|d| {
                d["scenarios"][1]["checks"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("violations");
            }),
            broken(&|d| d["scenarios"][1]["checks"][3]["status"] = "pass".into()),
            broken(&|d| d["scenarios"][0]["calls"]["main"] = (-1).into()),
            broken(&|d| d["scenarios"][0]["artifacts"] = 3.into()),
            broken(&|d| d["wall_seconds"] = "soon".into()),
            broken(&|d| d["surprise"] = true.into()),
        ];
        for (i, bad) in cases.iter().enumerate() {
            assert!(!v.is_valid(bad), "case {i} should be rejected");
        }
    }

    /// The file, byte for byte, for a run with every optional part of an
    /// entry (a chaos run, a subagent's calls, an error, an N/A): the
    /// snapshot was written by the hand-built (`json!`) writer this typed
    /// one replaced, so the typed document writes the same file.
    #[test]
    fn the_report_file_snapshot() {
        let results = crate::report::test_support::sample_with_optional_parts();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let selection = Selection {
            ids: results.iter().map(|r| r.id.clone()).collect(),
            shard: Some((1, 1)),
            repeat: 1,
        };
        let mut json = Json::new(path.clone(), 3, "agent.yaml".into(), selection);
        feed(&mut json, results);
        insta::assert_snapshot!(String::from_utf8(std::fs::read(&path).unwrap()).unwrap());
    }
}
