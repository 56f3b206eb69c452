//! `chaosrun judge DIR`: re-run the oracle over saved scenario folders (what
//! `--artifacts DIR` keeps: `observation.json`, `row.json` with the resolved
//! row and the profile's capabilities, and the recorded `checks.json`) and
//! print the verdicts as a table run would (`--json`: one JSON document).
//! DIR is one scenario folder, or a folder of them (`--artifacts` root,
//! `--repeat` sub-folders included). Checks that differ from the recorded
//! `checks.json` are named. Exit 0 every scenario passed, 1 one failed or is
//! an error, 2 DIR holds no saved scenario or a saved file is unreadable.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::input::Cap;
use crate::observe::{Capabilities, Observation};
use crate::oracle::Status;
use crate::report::text::Text;
use crate::report::Reporter;
use crate::runner::{RunEvent, ScenarioResult, Stats, Verdict};
use crate::scenarios::Scenario;

/// The files of a saved scenario folder.
pub const OBSERVATION: &str = "observation.json";
pub const ROW: &str = "row.json";
pub const CHECKS: &str = "checks.json";
/// The schema `row.json` carries.
pub const ROW_SCHEMA: &str = "chaosrun-row/1";

/// The cap on a saved observation (its recording is bounded by chaosrun's
/// own caps, far below this).
const OBSERVATION_CAP: Cap = Cap {
    what: "saved observation",
    bytes: 256 * 1024 * 1024,
};
/// The cap on `row.json` and `checks.json`.
const SMALL_CAP: Cap = Cap {
    what: "saved row or checks",
    bytes: 16 * 1024 * 1024,
};
/// Scenario folders one `judge` reads at most.
const MAX_FOLDERS: usize = 10_000;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A saved scenario folder (`--artifacts DIR --keep-all` writes DIR/ID/),
    /// or a folder of them.
    pub dir: PathBuf,
    /// Print one JSON document (schema chaosrun-judge/1) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `row.json`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedRow {
    schema: String,
    row: Scenario,
    capabilities: Capabilities,
}

/// One saved scenario, re-judged.
#[derive(Debug)]
pub struct Judged {
    pub result: ScenarioResult,
    /// How the re-judged checks differ from the recorded `checks.json`
    /// (`invariant/name: recorded X, now Y`); None when none was recorded.
    pub changed: Option<Vec<String>>,
}

/// The saved scenario folders under `dir`: `dir` itself when it holds an
/// observation, else its sub-folders that do (two levels, for `--repeat`),
/// in name order. Symbolic links are never followed.
pub fn find_saved(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is {}, not a folder: give a saved scenario folder (`--artifacts DIR` keeps DIR/ID/)",
            dir.display(),
            crate::input::kind(&meta)
        ));
    }
    let mut out = Vec::new();
    collect(dir, 0, &mut out)?;
    if out.is_empty() {
        return Err(format!(
            "{} holds no saved scenario: a folder with {OBSERVATION} and {ROW}, as \
             `chaosrun TABLE --artifacts DIR --keep-all` writes under DIR/ID/",
            dir.display()
        ));
    }
    Ok(out)
}

fn collect(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if is_file(&dir.join(OBSERVATION)) {
        out.push(dir.to_path_buf());
        return Ok(());
    }
    if depth == 2 {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut subs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    subs.sort();
    for sub in subs {
        if out.len() >= MAX_FOLDERS {
            return Err(format!(
                "{} holds more than {MAX_FOLDERS} saved scenarios; judge a part of it",
                dir.display()
            ));
        }
        collect(&sub, depth + 1, out)?;
    }
    Ok(())
}

fn is_file(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

/// Parse `path` (at most `cap`) as JSON into `T`; errors name
/// `PATH:LINE:COL`.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path, cap: Cap) -> Result<T, String> {
    let bytes = crate::input::read_input(path, cap)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "{}:{}:{}: not a saved scenario file chaosrun can read: {e}",
            path.display(),
            e.line(),
            e.column()
        )
    })
}

/// Re-run the oracle over the saved scenario in `dir`.
pub fn judge_folder(dir: &Path) -> Result<Judged, String> {
    let row_path = dir.join(ROW);
    if !is_file(&row_path) {
        return Err(format!(
            "{}: no {ROW} beside {OBSERVATION} (saved by a chaosrun before `judge` existed, or \
             not by chaosrun): run the scenario again with --artifacts to judge it",
            dir.display()
        ));
    }
    let saved: SavedRow = read_json(&row_path, SMALL_CAP)?;
    if saved.schema != ROW_SCHEMA {
        return Err(format!(
            "{}: schema `{}`; this chaosrun reads `{ROW_SCHEMA}`",
            row_path.display(),
            saved.schema
        ));
    }
    let obs: Observation = read_json(&dir.join(OBSERVATION), OBSERVATION_CAP)?;
    if obs.scenario != saved.row.id {
        return Err(format!(
            "{}: the observation is of scenario `{}` but {ROW} of `{}`",
            dir.display(),
            obs.scenario,
            saved.row.id
        ));
    }
    let checks = crate::oracle::check(&saved.row, saved.capabilities, &obs);
    let verdict = Verdict::judge(&checks, &obs);
    let recorded = dir.join(CHECKS);
    let changed = if is_file(&recorded) {
        let recorded: Vec<Value> = read_json(&recorded, SMALL_CAP)?;
        Some(differences(
            &recorded,
            &serde_json::to_value(&checks).unwrap_or_default(),
        ))
    } else {
        None
    };
    Ok(Judged {
        result: ScenarioResult {
            id: saved.row.id.clone(),
            attempt: 1,
            attempts: 1,
            verdict,
            seconds: obs.wall,
            main_calls: obs.recording.main_calls,
            checks,
            observation: obs,
            artifacts: Some(dir.to_path_buf()),
        },
        changed,
    })
}

/// `invariant/name` of a check as JSON.
fn check_key(c: &Value) -> String {
    format!(
        "{}/{}",
        c["invariant"].as_str().unwrap_or("?"),
        c["name"].as_str().unwrap_or("?")
    )
}

/// A check's status word (`pass`, `fail`, `not checked`), or `?`.
fn status_word(c: &Value) -> &'static str {
    match serde_json::from_value::<Status>(c.clone()) {
        Ok(Status::Pass) => "pass",
        Ok(Status::Fail { .. }) => "fail",
        Ok(Status::NotChecked { .. }) => "not checked",
        Err(_) => "?",
    }
}

/// How `now` differs from `recorded`, check by check (same order and
/// outcome, same violations); empty when they are the same.
fn differences(recorded: &[Value], now: &Value) -> Vec<String> {
    let now = now.as_array().map(Vec::as_slice).unwrap_or_default();
    let mut out = Vec::new();
    for c in now {
        let key = check_key(c);
        match recorded.iter().find(|r| check_key(r) == key) {
            None => out.push(format!("{key}: not recorded, now {}", status_word(c))),
            Some(r) if r != c => {
                let (was, is) = (status_word(r), status_word(c));
                if was == is {
                    out.push(format!("{key}: {is} both times, with other details"));
                } else {
                    out.push(format!("{key}: recorded {was}, now {is}"));
                }
            }
            Some(_) => {}
        }
    }
    for r in recorded {
        let key = check_key(r);
        if !now.iter().any(|c| check_key(c) == key) {
            out.push(format!(
                "{key}: recorded {}, no longer made",
                status_word(r)
            ));
        }
    }
    out
}

/// The `--json` document.
pub fn json_doc(judged: &[Judged], stats: &Stats) -> Value {
    let scenarios: Vec<Value> = judged
        .iter()
        .map(|j| {
            let mut v = crate::report::json::scenario_value(&j.result);
            v["changed_since_recorded"] = json!(j.changed);
            v
        })
        .collect();
    json!({
        "schema": "chaosrun-judge/1",
        "passed": stats.passed,
        "failed": stats.failed,
        "errors": stats.errors,
        "scenarios": scenarios,
    })
}

/// The text report: the table run's lines and failure details, then what
/// changed since the run was recorded.
pub fn text(judged: &[Judged], stats: Stats) -> String {
    let mut text = Text::new(Vec::new());
    for j in judged {
        text.on(&RunEvent::ScenarioFinished(Arc::new(j.result.clone())));
    }
    let wall = judged.iter().map(|j| j.result.seconds).sum();
    text.on(&RunEvent::Finished { stats, wall });
    let mut out = String::from_utf8_lossy(&text.into_inner()).into_owned();
    let changed: Vec<&Judged> = judged
        .iter()
        .filter(|j| j.changed.as_ref().is_some_and(|c| !c.is_empty()))
        .collect();
    if !changed.is_empty() {
        out.push_str("\njudged differently from the recorded checks.json:\n");
        for j in changed {
            out.push_str(&format!("  {}\n", j.result.id));
            for c in j.changed.iter().flatten() {
                out.push_str(&format!("    {c}\n"));
            }
        }
    }
    out
}

/// Judge every saved scenario under `dir`.
pub fn judge_all(dir: &Path) -> Result<(Vec<Judged>, Stats), String> {
    let folders = find_saved(dir)?;
    let judged = folders
        .iter()
        .map(|f| judge_folder(f))
        .collect::<Result<Vec<_>, _>>()?;
    let stats = Stats::tally(judged.iter().map(|j| &j.result.verdict), judged.len());
    Ok((judged, stats))
}

/// `chaosrun judge`.
pub fn main(args: Args) -> ExitCode {
    let (judged, stats) = match judge_all(&args.dir) {
        Ok(j) => j,
        Err(e) => return super::usage(e),
    };
    if args.json {
        let doc = json_doc(&judged, &stats);
        super::say(format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        ));
    } else {
        super::say(text(&judged, stats));
    }
    if stats.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
