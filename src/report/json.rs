//! The JSON report (`--json FILE`), schema `chaosrun-report/1`: every finished
//! scenario's verdict, timings, provider calls, checks with violations, and
//! artifact paths. Rewritten atomically (temp file + rename) after every
//! scenario, so a killed run still leaves the finished ones, with
//! `"complete": false` until the run ends.
//!
//! ```json
//! {"schema": "chaosrun-report/1", "complete": true, "seed": 1, "agent": "...",
//!  "passed": 22, "failed": 1, "wall_seconds": 17.0,
//!  "scenarios": [{"id": "...", "attempt": 1, "attempts": 1, "passed": false, "seconds": 3.1,
//!                 "calls": {"main": 3, "probe": 1, "aux": 0},
//!                 "checks": [{"invariant": "process_hygiene", "name": "no_survivors",
//!                             "status": "fail", "violations": ["..."]}],
//!                 "artifacts": "/path/or/null"}]}
//! ```

use std::path::PathBuf;

use serde_json::{json, Value};

use super::Reporter;
use crate::runner::{RunEvent, ScenarioResult};

pub const SCHEMA: &str = "chaosrun-report/1";

pub struct Json {
    path: PathBuf,
    seed: u64,
    agent: String,
    scenarios: Vec<Value>,
    /// The first write error, reported once.
    error: Option<String>,
}

/// One scenario's JSON object.
pub fn scenario_value(r: &ScenarioResult) -> Value {
    let rec = &r.observation.recording;
    json!({
        "id": r.id,
        "attempt": r.attempt,
        "attempts": r.attempts,
        "passed": r.passed,
        "seconds": (r.seconds * 1000.0).round() / 1000.0,
        "calls": {"main": rec.main_calls, "probe": rec.probe_calls, "aux": rec.aux_calls},
        "checks": r.checks,
        "artifacts": r.artifacts,
    })
}

impl Json {
    pub fn new(path: PathBuf, seed: u64, agent: String) -> Self {
        Json {
            path,
            seed,
            agent,
            scenarios: Vec::new(),
            error: None,
        }
    }

    fn write(&mut self, complete: bool, wall: Option<f64>) {
        let passed = self
            .scenarios
            .iter()
            .filter(|s| s["passed"] == true)
            .count();
        let doc = json!({
            "schema": SCHEMA,
            "complete": complete,
            "seed": self.seed,
            "agent": self.agent,
            "passed": passed,
            "failed": self.scenarios.len() - passed,
            "wall_seconds": wall,
            "scenarios": self.scenarios,
        });
        let tmp = self.path.with_extension("json.tmp");
        let result = serde_json::to_vec_pretty(&doc)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = result {
            if self.error.is_none() {
                eprintln!("chaosrun: cannot write {}: {e}", self.path.display());
                self.error = Some(e.to_string());
            }
        }
    }
}

impl Reporter for Json {
    fn on(&mut self, event: &RunEvent) {
        match event {
            RunEvent::Started { .. } => self.write(false, None),
            RunEvent::ScenarioFinished(r) => {
                self.scenarios.push(scenario_value(r));
                self.write(false, None);
            }
            RunEvent::Finished { wall, .. } => self.write(true, Some(*wall)),
            _ => {}
        }
    }
}
