//! `chaosrun merge`: several JSON reports (shards of one table, or nightly
//! matrix jobs) become one report, one text summary and one exit code. A report
//! that is incomplete (its run was killed), of another schema, or that repeats
//! a scenario run another report already has, is an error, never silently
//! merged.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::json::SCHEMA;

/// Read and merge reports, in the order given.
pub fn merge(paths: &[PathBuf]) -> Result<Value, String> {
    if paths.is_empty() {
        return Err("merge needs at least one JSON report".into());
    }
    let mut scenarios: Vec<Value> = Vec::new();
    let mut seen = HashSet::new();
    let mut seeds = Vec::new();
    let mut agents = Vec::new();
    let mut wall: f64 = 0.0;
    for p in paths {
        let doc = read(p)?;
        if doc["schema"] != SCHEMA {
            return Err(format!(
                "{}: not a {SCHEMA} report (schema {})",
                p.display(),
                doc["schema"]
            ));
        }
        if doc["complete"] != true {
            return Err(format!(
                "{}: the report is incomplete (its run was stopped before the end); rerun that shard",
                p.display()
            ));
        }
        seeds.push(doc["seed"].clone());
        if !agents.contains(&doc["agent"]) {
            agents.push(doc["agent"].clone());
        }
        wall = wall.max(doc["wall_seconds"].as_f64().unwrap_or(0.0));
        for s in doc["scenarios"].as_array().into_iter().flatten() {
            let key = (s["id"].to_string(), s["attempt"].as_u64().unwrap_or(1));
            if !seen.insert(key.clone()) {
                return Err(format!(
                    "{}: scenario {} (run {}) is already in an earlier report; shards must not overlap",
                    p.display(),
                    key.0,
                    key.1
                ));
            }
            scenarios.push(s.clone());
        }
    }
    let passed = scenarios.iter().filter(|s| s["passed"] == true).count();
    Ok(json!({
        "schema": SCHEMA,
        "complete": true,
        "seed": if seeds.len() == 1 { seeds[0].clone() } else { Value::Null },
        "seeds": seeds,
        "agent": if agents.len() == 1 { agents[0].clone() } else { Value::Array(agents) },
        "passed": passed,
        "failed": scenarios.len() - passed,
        "wall_seconds": wall,
        "scenarios": scenarios,
    }))
}

fn read(p: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{}:{}:{}: not JSON: {e}", p.display(), e.line(), e.column()))
}

/// The text summary of a (merged) report: a line per scenario run, every
/// violation of the failed ones, then `N passed, N failed`.
pub fn render_text(doc: &Value) -> String {
    let mut out = String::new();
    let mut failures = String::new();
    for s in doc["scenarios"].as_array().into_iter().flatten() {
        let ok = s["passed"] == true;
        let id = s["id"].as_str().unwrap_or("?");
        out.push_str(&format!(
            "{}  {:<44} {:>6.1} s  {:>3} calls\n",
            if ok { "PASS" } else { "FAIL" },
            id,
            s["seconds"].as_f64().unwrap_or(0.0),
            s["calls"]["main"].as_u64().unwrap_or(0)
        ));
        if !ok {
            failures.push_str(&format!("FAIL {id}\n"));
            for c in s["checks"].as_array().into_iter().flatten() {
                if c["status"] == "fail" {
                    failures.push_str(&format!(
                        "  {} / {}:\n",
                        c["invariant"].as_str().unwrap_or("?"),
                        c["name"].as_str().unwrap_or("?")
                    ));
                    for v in c["violations"].as_array().into_iter().flatten() {
                        for line in v.as_str().unwrap_or("").lines() {
                            failures.push_str(&format!("    {line}\n"));
                        }
                    }
                }
            }
        }
    }
    if !failures.is_empty() {
        out.push_str("\nfailures:\n\n");
        out.push_str(&failures);
    }
    out.push_str(&format!(
        "\n{} passed, {} failed\n",
        doc["passed"], doc["failed"]
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(dir: &Path, name: &str, complete: bool, ids: &[(&str, bool)]) -> PathBuf {
        let scenarios: Vec<Value> = ids
            .iter()
            .map(|(id, ok)| json!({"id": id, "attempt": 1, "attempts": 1, "passed": ok, "seconds": 1.0,
                "calls": {"main": 1, "probe": 1, "aux": 0},
                "checks": [{"invariant": "provider_calls", "name": "call_bound", "status": if *ok {"pass"} else {"fail"}, "violations": ["too many"]}],
                "artifacts": null}))
            .collect();
        let p = dir.join(name);
        let doc = json!({"schema": SCHEMA, "complete": complete, "seed": 7, "agent": "a", "passed": 0, "failed": 0, "wall_seconds": 2.0, "scenarios": scenarios});
        std::fs::write(&p, doc.to_string()).unwrap();
        p
    }

    #[test]
    fn merges_counts_and_renders_failures() {
        let d = tempfile::tempdir().unwrap();
        let a = report(d.path(), "a.json", true, &[("x", true)]);
        let b = report(d.path(), "b.json", true, &[("y", false), ("z", true)]);
        let m = merge(&[a, b]).unwrap();
        assert_eq!(
            (m["passed"].as_u64(), m["failed"].as_u64()),
            (Some(2), Some(1))
        );
        let text = render_text(&m);
        assert!(
            text.contains("FAIL  y")
                && text.contains("too many")
                && text.ends_with("2 passed, 1 failed\n"),
            "{text}"
        );
    }

    #[test]
    fn overlapping_or_incomplete_reports_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = report(d.path(), "a.json", true, &[("x", true)]);
        let b = report(d.path(), "b.json", true, &[("x", true)]);
        assert!(merge(&[a.clone(), b])
            .unwrap_err()
            .contains("already in an earlier report"));
        let c = report(d.path(), "c.json", false, &[("y", true)]);
        assert!(merge(&[a, c]).unwrap_err().contains("incomplete"));
    }
}
