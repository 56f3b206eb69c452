//! `chaosrun merge`: several JSON reports (shards of one table, or nightly
//! matrix jobs) become one report, one text summary and one exit code. Each
//! scenario's verdict is recomputed from its checks (a `passed` flag is never
//! trusted). A report that is incomplete (its run was killed), of another
//! schema, missing a scenario run its own selection promises, or that repeats
//! a scenario run another report already has, is an error; so is a set of
//! shards with a missing shard, or whose shard counts, selections or repeats
//! differ. Reports are read, merged and written as the typed
//! [`super::document::Report`].

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::document::{self, Agents, Report, RunKey, Scenario, SCHEMA};
use crate::oracle::Status;
use crate::runner::{Stats, Verdict};

/// A raw scenario entry typed: its verdict and each check's status must
/// carry exactly the names the run writes (`pass`, `fail`, `error`,
/// `not_applicable`; `pass`, `fail`, `not_checked`). Anything else (`FAIL`,
/// `null`, missing) is refused: merge is a CI gate and never guesses. The
/// verdict is then judged again from the checks, never taken from its
/// `passed` flag, by the run's own rule ([`Verdict::rejudge`]).
fn rejudged(raw: Value) -> Result<Scenario, String> {
    let mut s = Scenario::deserialize(raw).map_err(|e| e.to_string())?;
    let checks: Vec<Status> = s.checks.iter().map(|c| c.status.clone()).collect();
    let verdict = match Verdict::rejudge(s.verdict, &checks) {
        Verdict::Error { cause } if cause.is_empty() => Verdict::Error {
            cause: crate::oracle::ErrorCause::Unrecorded,
        },
        v => v,
    };
    s.passed = verdict.passed();
    s.verdict = verdict;
    Ok(s)
}

/// The scenario runs `doc` promises: its selection, sharded, × repeat.
fn promised<S>(doc: &Report<S>) -> Result<Vec<RunKey>, String> {
    let repeat = doc.repeat.max(1);
    let (k, n) = shard_of(doc)?.unwrap_or((1, 1));
    Ok(doc
        .selected
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as u64 % n + 1 == k)
        .flat_map(|(_, id)| {
            (1..=repeat).map(move |attempt| RunKey {
                id: id.clone(),
                attempt,
            })
        })
        .collect())
}

fn shard_of<S>(doc: &Report<S>) -> Result<Option<(u64, u64)>, String> {
    match doc.shard {
        None => Ok(None),
        Some(s) if 1 <= s.k && s.k <= s.n => Ok(Some((s.k, s.n))),
        Some(s) => Err(format!(
            "its shard {}/{} is not K/N with 1 ≤ K ≤ N",
            s.k, s.n
        )),
    }
}

/// Read and merge reports, in the order given.
pub fn merge(paths: &[PathBuf]) -> Result<Report, String> {
    if paths.is_empty() {
        return Err("merge needs at least one JSON report".into());
    }
    let mut m = Merger::default();
    for p in paths {
        m.add(p)?;
    }
    m.finish()
}

/// The first sharded report: its N, selection, repeat and path.
struct Sharding {
    n: u64,
    selected: Vec<String>,
    repeat: u32,
    first: PathBuf,
}

/// What the reports read so far add up to.
#[derive(Default)]
struct Merger {
    scenarios: Vec<Scenario>,
    /// Every scenario run taken.
    seen: HashSet<RunKey>,
    seeds: Vec<Option<u64>>,
    agents: Vec<String>,
    /// Each input report's agent version, in order.
    versions: Vec<Option<String>>,
    wall: f64,
    /// Run-wide warnings of every shard, once each.
    warnings: Vec<String>,
    sharding: Option<Sharding>,
    /// Each shard K seen.
    shards: BTreeSet<u64>,
    /// The first report of no shard.
    unsharded: Option<String>,
    selected: Vec<String>,
    repeat: Option<u32>,
}

impl Merger {
    /// Merge the report at `p` in.
    fn add(&mut self, p: &Path) -> Result<(), String> {
        let doc = document::read(p)?;
        let at = p.display();
        if !doc.complete {
            return Err(format!(
                "{at}: the report is incomplete (its run was stopped before the end); rerun that shard"
            ));
        }
        let promised = promised(&doc).map_err(|e| format!("{at}: {e}"))?;
        self.place_shard(&doc, p)?;
        if self.sharding.is_none() || self.selected.is_empty() {
            self.selected.extend(doc.selected.iter().cloned());
        }
        self.repeat.get_or_insert(doc.repeat);
        self.seeds.push(doc.seed);
        self.versions.push(doc.agent_version.clone());
        for a in doc.agent.names() {
            if !self.agents.contains(a) {
                self.agents.push(a.clone());
            }
        }
        self.wall = self.wall.max(doc.wall_seconds.unwrap_or(0.0));
        for w in &doc.warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
        let here = self.take_scenarios(doc.scenarios, p)?;
        let missing: Vec<String> = promised
            .iter()
            .filter(|k| !here.contains(*k))
            .map(|k| format!("{} (run {})", k.id, k.attempt))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{at}: the report says it is complete but has no result for {}; rerun it",
                missing.join(", ")
            ));
        }
        Ok(())
    }

    /// Check `doc`'s shard against the reports before it and note it.
    fn place_shard(&mut self, doc: &Report<Value>, p: &Path) -> Result<(), String> {
        let at = p.display();
        let Some((k, n)) = shard_of(doc).map_err(|e| format!("{at}: {e}"))? else {
            if let Some(s) = &self.sharding {
                return Err(format!(
                    "{at}: a report of no shard cannot be merged with {}, a shard of {}",
                    s.first.display(),
                    s.n
                ));
            }
            self.unsharded = Some(at.to_string());
            return Ok(());
        };
        if let Some(u) = &self.unsharded {
            return Err(format!(
                "{at}: shard {k}/{n} cannot be merged with {u}, a report of no shard"
            ));
        }
        match &self.sharding {
            None => {
                self.sharding = Some(Sharding {
                    n,
                    selected: doc.selected.clone(),
                    repeat: doc.repeat,
                    first: p.to_path_buf(),
                })
            }
            Some(s) => {
                let (n0, first) = (s.n, s.first.display());
                if n0 != n {
                    return Err(format!(
                        "{at}: shard {k}/{n} does not match {first}, a shard of {n0}"
                    ));
                }
                if s.selected != doc.selected || s.repeat != doc.repeat {
                    return Err(format!(
                        "{at}: its selected scenarios (or --repeat) differ from {first}'s: shards of different tables or selections"
                    ));
                }
            }
        }
        if !self.shards.insert(k) {
            return Err(format!(
                "{at}: shard {k}/{n} is already in an earlier report"
            ));
        }
        Ok(())
    }

    /// Take a report's scenario runs, each re-judged; the runs taken.
    fn take_scenarios(&mut self, raw: Vec<Value>, p: &Path) -> Result<HashSet<RunKey>, String> {
        let at = p.display();
        let mut here = HashSet::new();
        for s in raw {
            let key = RunKey::of(&s);
            if !self.seen.insert(key.clone()) {
                return Err(format!(
                    "{at}: scenario {} (run {}) is already in an earlier report; shards must not overlap",
                    key.id, key.attempt
                ));
            }
            let s = rejudged(s).map_err(|e| {
                format!(
                    "{at}: scenario {} (run {}): {e}; refused (a status or verdict merge does not know is never counted as a pass)",
                    key.id, key.attempt
                )
            })?;
            here.insert(key);
            self.scenarios.push(s);
        }
        Ok(here)
    }

    /// The merged report, once every shard is in.
    fn finish(self) -> Result<Report, String> {
        if let Some(Sharding { n, .. }) = &self.sharding {
            let absent: Vec<String> = (1..=*n)
                .filter(|k| !self.shards.contains(k))
                .map(|k| format!("{k}/{n}"))
                .collect();
            if !absent.is_empty() {
                return Err(format!(
                    "shard {} missing: merge needs every shard of the table",
                    absent.join(", ")
                ));
            }
        }
        let stats = Stats::tally(
            self.scenarios.iter().map(|s| &s.verdict),
            self.scenarios.len(),
        );
        let mut agents = self.agents;
        // One version when every input names the same one.
        let agent_version = match self.versions.split_first() {
            Some((first, rest)) if rest.iter().all(|v| v == first) => first.clone(),
            _ => None,
        };
        Ok(Report {
            schema: SCHEMA.into(),
            complete: true,
            seed: match self.seeds.as_slice() {
                [one] => *one,
                _ => None,
            },
            seeds: Some(self.seeds),
            agent: if agents.len() == 1 {
                Agents::One(agents.remove(0))
            } else {
                Agents::Several(agents)
            },
            agent_version,
            selected: self.selected,
            shard: None,
            repeat: self.repeat.unwrap_or(1),
            passed: stats.passed,
            failed: stats.failed,
            errors: stats.errors,
            not_applicable: stats.not_applicable,
            wall_seconds: Some(self.wall),
            warnings: self.warnings,
            scenarios: self.scenarios,
        })
    }
}

/// Whether a merged report is green: no failure, no error.
pub fn ok(doc: &Report) -> bool {
    doc.stats().ok()
}

/// The text summary of a (merged) report: a line per scenario run, every
/// violation of the failed ones and the cause of the errors, then
/// `N passed, N failed[, N errors][, N not applicable]`.
pub fn render_text(doc: &Report) -> String {
    let mut out = String::new();
    let mut failures = String::new();
    for s in &doc.scenarios {
        let label = s.verdict.label();
        out.push_str(&format!(
            "{label:<5} {:<44} {:>6.1} s  {:>3} calls\n",
            s.id, s.seconds, s.calls.main
        ));
        match &s.verdict {
            Verdict::Error { cause } => {
                failures.push_str(&format!("ERROR {}\n", s.id));
                for line in cause.to_string().lines() {
                    failures.push_str(&format!("  {line}\n"));
                }
            }
            Verdict::Fail => {
                failures.push_str(&format!("FAIL {}\n", s.id));
                for c in &s.checks {
                    let Status::Fail { violations } = &c.status else {
                        continue;
                    };
                    let invariant = serde_json::to_value(c.invariant).unwrap_or_default();
                    let invariant = invariant.as_str().unwrap_or("?");
                    failures.push_str(&format!("  {invariant} / {}:\n", c.name));
                    for line in violations.iter().flat_map(|v| v.lines()) {
                        failures.push_str(&format!("    {line}\n"));
                    }
                }
            }
            Verdict::Pass | Verdict::NotApplicable { .. } => {}
        }
    }
    if !failures.is_empty() {
        out.push_str("\nfailures:\n\n");
        out.push_str(&failures);
    }
    out.push_str(&format!("\n{}\n", doc.stats().summary()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // The tests look at the merged document as the JSON it writes.
    fn merge(paths: &[PathBuf]) -> Result<Value, String> {
        super::merge(paths).map(|m| m.to_value().unwrap())
    }

    fn typed(doc: &Value) -> Report {
        serde_json::from_value(doc.clone()).unwrap()
    }

    fn ok(doc: &Value) -> bool {
        super::ok(&typed(doc))
    }

    fn render_text(doc: &Value) -> String {
        super::render_text(&typed(doc))
    }

    fn read(p: &Path) -> Result<Value, String> {
        document::read_json(p)
    }

    /// A report of shard `shard` (None: the whole selection) over `selected`,
    /// holding `runs` (id, verdict, check status).
    fn report(
        dir: &Path,
        name: &str,
        complete: bool,
        selected: &[&str],
        shard: Option<(u64, u64)>,
        runs: &[(&str, &str, &str)],
    ) -> PathBuf {
        let scenarios: Vec<Value> = runs
            .iter()
            .map(|(id, verdict, status)| {
                let mut s = json!({"id": id, "attempt": 1, "attempts": 1, "verdict": verdict,
                    "passed": *verdict == "pass", "seconds": 1.0,
                    "calls": {"main": 1, "probe": 1, "aux": 0},
                    "checks": [{"invariant": "provider_calls", "name": "call_bound", "status": status, "violations": ["too many"]}],
                    "artifacts": null});
                if *status != "fail" {
                    s["checks"][0].as_object_mut().unwrap().remove("violations");
                }
                if *verdict == "error" {
                    s["cause"] = "panic: boom".into();
                    s["checks"] = json!([]);
                }
                s
            })
            .collect();
        let p = dir.join(name);
        let doc = json!({"schema": SCHEMA, "complete": complete, "seed": 7, "agent": "a",
            "selected": selected, "shard": shard.map(|(k, n)| json!({"k": k, "n": n})), "repeat": 1,
            "passed": 0, "failed": 0, "errors": 0, "not_applicable": 0,
            "wall_seconds": 2.0, "scenarios": scenarios});
        std::fs::write(&p, doc.to_string()).unwrap();
        p
    }

    const XYZ: &[&str] = &["x", "y", "z"];

    /// Rewrite the report at `p` to name `version` as its agent's.
    fn with_version(p: &Path, version: &str) {
        let mut doc = read(p).unwrap();
        doc["agent_version"] = version.into();
        std::fs::write(p, doc.to_string()).unwrap();
    }

    #[test]
    fn a_merge_keeps_the_agent_version_only_when_every_shard_names_it() {
        let d = tempfile::tempdir().unwrap();
        let shard = |name: &str, k: u64, id: &'static str, v: &str| {
            let p = report(
                d.path(),
                name,
                true,
                &["x", "y"],
                Some((k, 2)),
                &[(id, "pass", "pass")],
            );
            with_version(&p, v);
            p
        };
        let same = merge(&[shard("a", 1, "x", "1.2.0"), shard("b", 2, "y", "1.2.0")]).unwrap();
        assert_eq!(same["agent_version"], "1.2.0");
        let mixed = merge(&[shard("c", 1, "x", "1.2.0"), shard("d", 2, "y", "1.3.0")]).unwrap();
        assert!(mixed.get("agent_version").is_none(), "{mixed}");
    }

    #[test]
    fn merges_counts_and_renders_failures() {
        let d = tempfile::tempdir().unwrap();
        let a = report(
            d.path(),
            "a.json",
            true,
            XYZ,
            Some((1, 2)),
            &[("x", "pass", "pass"), ("z", "pass", "pass")],
        );
        let b = report(
            d.path(),
            "b.json",
            true,
            XYZ,
            Some((2, 2)),
            &[("y", "fail", "fail")],
        );
        let m = merge(&[a, b]).unwrap();
        assert_eq!(
            (m["passed"].as_u64(), m["failed"].as_u64()),
            (Some(2), Some(1))
        );
        assert!(!ok(&m));
        let text = render_text(&m);
        assert!(
            text.contains("FAIL  y")
                && text.contains("too many")
                && text.ends_with("2 passed, 1 failed\n"),
            "{text}"
        );
    }

    #[test]
    fn the_merged_report_matches_docs_report_schema() {
        let d = tempfile::tempdir().unwrap();
        let a = report(
            d.path(),
            "a.json",
            true,
            XYZ,
            Some((1, 2)),
            &[("x", "pass", "pass"), ("z", "error", "pass")],
        );
        let b = report(
            d.path(),
            "b.json",
            true,
            XYZ,
            Some((2, 2)),
            &[("y", "fail", "fail")],
        );
        let m = merge(&[a, b]).unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/report-schema.json");
        let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let v = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = v
            .iter_errors(&m)
            .map(|e| format!("{}: {e}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        assert_eq!(
            (
                m["passed"].as_u64(),
                m["failed"].as_u64(),
                m["errors"].as_u64()
            ),
            (Some(1), Some(1), Some(1))
        );
    }

    #[test]
    fn verdicts_come_from_the_checks_not_the_passed_flag() {
        let d = tempfile::tempdir().unwrap();
        // Says pass, a check failed: a failure.
        let a = report(
            d.path(),
            "a.json",
            true,
            &["x"],
            None,
            &[("x", "pass", "fail")],
        );
        let m = merge(&[a]).unwrap();
        assert_eq!(
            (m["failed"].as_u64(), m["scenarios"][0]["passed"].as_bool()),
            (Some(1), Some(false))
        );
        // An error merges to an error, and the merge is not green.
        let b = report(
            d.path(),
            "b.json",
            true,
            &["y"],
            None,
            &[("y", "error", "pass")],
        );
        let m = merge(&[b]).unwrap();
        assert_eq!(m["errors"].as_u64(), Some(1));
        assert!(!ok(&m));
        assert!(render_text(&m).contains("ERROR y") && render_text(&m).contains("panic: boom"));
    }

    #[test]
    fn an_unknown_status_or_verdict_is_refused_naming_file_and_scenario() {
        let d = tempfile::tempdir().unwrap();
        let bad_status = [json!("FAIL"), json!("error"), json!(null), json!("passed")];
        for (n, st) in bad_status.iter().enumerate() {
            let p = report(
                d.path(),
                &format!("s{n}.json"),
                true,
                &["x"],
                None,
                &[("x", "fail", "fail")],
            );
            let mut doc = read(&p).unwrap();
            doc["scenarios"][0]["checks"][0]["status"] = st.clone();
            std::fs::write(&p, doc.to_string()).unwrap();
            let e = merge(std::slice::from_ref(&p)).unwrap_err();
            assert!(
                e.starts_with(&format!("{}: scenario x (run 1): ", p.display())),
                "{e}"
            );
            assert!(e.contains("refused"), "{e}");
        }
        // A status missing altogether.
        let p = report(
            d.path(),
            "m.json",
            true,
            &["x"],
            None,
            &[("x", "fail", "fail")],
        );
        let mut doc = read(&p).unwrap();
        doc["scenarios"][0]["checks"][0]
            .as_object_mut()
            .unwrap()
            .remove("status");
        std::fs::write(&p, doc.to_string()).unwrap();
        let e = merge(&[p]).unwrap_err();
        assert!(e.contains("scenario x") && e.contains("`status`"), "{e}");
        // Unknown, null or missing verdicts.
        for (n, v) in [json!("FAIL"), json!("error "), json!(null), json!("PASS")]
            .iter()
            .enumerate()
        {
            let p = report(
                d.path(),
                &format!("v{n}.json"),
                true,
                &["y"],
                None,
                &[("y", "pass", "pass")],
            );
            let mut doc = read(&p).unwrap();
            doc["scenarios"][0]["verdict"] = v.clone();
            std::fs::write(&p, doc.to_string()).unwrap();
            let e = merge(std::slice::from_ref(&p)).unwrap_err();
            assert!(
                e.starts_with(&format!("{}: scenario y (run 1): ", p.display())),
                "{e}"
            );
        }
        let p = report(
            d.path(),
            "vm.json",
            true,
            &["y"],
            None,
            &[("y", "pass", "pass")],
        );
        let mut doc = read(&p).unwrap();
        doc["scenarios"][0]
            .as_object_mut()
            .unwrap()
            .remove("verdict");
        std::fs::write(&p, doc.to_string()).unwrap();
        assert!(merge(&[p]).unwrap_err().contains("`verdict`"));
    }

    #[test]
    fn overlapping_or_incomplete_reports_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let a = report(
            d.path(),
            "a.json",
            true,
            &["x"],
            None,
            &[("x", "pass", "pass")],
        );
        let b = report(
            d.path(),
            "b.json",
            true,
            &["x"],
            None,
            &[("x", "pass", "pass")],
        );
        assert!(merge(&[a.clone(), b])
            .unwrap_err()
            .contains("already in an earlier report"));
        let c = report(
            d.path(),
            "c.json",
            false,
            &["y"],
            None,
            &[("y", "pass", "pass")],
        );
        assert!(merge(&[a, c]).unwrap_err().contains("incomplete"));
    }

    #[test]
    fn a_missing_shard_or_mismatched_shards_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let s1 = report(
            d.path(),
            "1.json",
            true,
            XYZ,
            Some((1, 3)),
            &[("x", "pass", "pass")],
        );
        let s3 = report(
            d.path(),
            "3.json",
            true,
            XYZ,
            Some((3, 3)),
            &[("z", "pass", "pass")],
        );
        let e = merge(&[s1.clone(), s3.clone()]).unwrap_err();
        assert!(e.contains("shard 2/3 missing"), "{e}");
        let other_n = report(
            d.path(),
            "o.json",
            true,
            XYZ,
            Some((2, 2)),
            &[("y", "pass", "pass")],
        );
        let e = merge(&[s1.clone(), other_n]).unwrap_err();
        assert!(e.contains("a shard of 3"), "{e}");
        let other_table = report(
            d.path(),
            "t.json",
            true,
            &["x", "y", "w"],
            Some((2, 3)),
            &[("y", "pass", "pass")],
        );
        let e = merge(&[s1.clone(), other_table, s3.clone()]).unwrap_err();
        assert!(e.contains("differ"), "{e}");
        let s2 = report(
            d.path(),
            "2.json",
            true,
            XYZ,
            Some((2, 3)),
            &[("y", "pass", "pass")],
        );
        assert!(ok(&merge(&[s1, s2, s3]).unwrap()));
    }

    #[test]
    fn a_complete_report_without_its_scenarios_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let empty = report(d.path(), "e.json", true, &["x", "y"], None, &[]);
        let e = merge(&[empty]).unwrap_err();
        assert!(e.contains("no result for x (run 1), y (run 1)"), "{e}");
        let old = d.path().join("old.json");
        std::fs::write(
            &old,
            json!({"schema": "chaosrun-report/1", "complete": true, "scenarios": []}).to_string(),
        )
        .unwrap();
        assert!(merge(&[old])
            .unwrap_err()
            .contains("not a chaosrun-report/2"));
    }
}
