//! `chaosrun judge DIR`: re-run the oracle over saved scenario folders (what
//! `--artifacts DIR` keeps: `observation.json`, `row.json` with the resolved
//! row and the profile's capabilities, and the recorded `checks.json`) and
//! print the verdicts as a table run would (`--json`: one JSON document).
//! DIR is one scenario folder, or a folder of them (`--artifacts` root,
//! `--repeat` sub-folders included). Checks that differ from the recorded
//! `checks.json` are named. Exit 0 every scenario passed, 1 one failed or is
//! an error, 2 DIR holds no saved scenario or a saved folder is unreadable
//! (each such folder is named; the others are still judged and printed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::oracle::Status;
use crate::report::document::Scenario;
use crate::report::text::Text;
use crate::report::Reporter;
use crate::runner::artifacts;
use crate::runner::{RunEvent, ScenarioResult, Stats};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A saved scenario folder (`--artifacts DIR --keep-all` writes DIR/ID/),
    /// or a folder of them.
    pub dir: PathBuf,
    /// Print one JSON document (schema chaosrun-judge/1) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One saved scenario, re-judged.
#[derive(Debug)]
pub struct Judged {
    pub result: ScenarioResult,
    /// How the re-judged checks differ from the recorded `checks.json`
    /// (`invariant/name: recorded X, now Y`); None when none was recorded.
    pub changed: Option<Vec<String>>,
}

/// Re-run the oracle over the saved scenario in `dir`.
pub fn judge_folder(dir: &Path) -> Result<Judged, String> {
    let saved = artifacts::read(dir)?;
    let (row, obs) = (saved.row, saved.observation);
    let crate::oracle::Judged { checks, verdict } =
        crate::oracle::judge(&row, saved.capabilities, &obs);
    let changed = saved.recorded_checks.map(|recorded| {
        differences(
            &recorded,
            &serde_json::to_value(&checks).unwrap_or_default(),
        )
    });
    Ok(Judged {
        result: ScenarioResult {
            id: row.id.clone(),
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

/// What names a check, read leniently (`?` for what a saved file lacks).
#[derive(Default, Deserialize)]
struct CheckName {
    #[serde(default)]
    invariant: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

/// `invariant/name` of a check as JSON.
fn check_key(c: &Value) -> String {
    let n = CheckName::deserialize(c).unwrap_or_default();
    format!(
        "{}/{}",
        n.invariant.as_deref().unwrap_or("?"),
        n.name.as_deref().unwrap_or("?")
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

/// One re-judged scenario in the `--json` document: the report's scenario
/// entry and how its checks changed since they were recorded.
#[derive(Serialize)]
struct JudgedEntry {
    #[serde(flatten)]
    scenario: Scenario,
    changed_since_recorded: Option<Vec<String>>,
}

/// The `--json` document (`chaosrun-judge/1`).
#[derive(Serialize)]
struct JudgeDocument {
    schema: &'static str,
    passed: usize,
    failed: usize,
    errors: usize,
    scenarios: Vec<JudgedEntry>,
    /// The folders that could not be read (not judged), each with why.
    unreadable: Vec<Unreadable>,
}

/// The `--json` document, as JSON (keys sorted, like the report's).
pub fn json_doc(judged: &[Judged], unreadable: &[Unreadable], stats: &Stats) -> Value {
    let doc = JudgeDocument {
        schema: "chaosrun-judge/1",
        passed: stats.passed,
        failed: stats.failed,
        errors: stats.errors,
        scenarios: judged
            .iter()
            .map(|j| JudgedEntry {
                scenario: Scenario::of(&j.result),
                changed_since_recorded: j.changed.clone(),
            })
            .collect(),
        unreadable: unreadable.to_vec(),
    };
    serde_json::to_value(doc).unwrap_or_default()
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

/// A saved folder that could not be read, and why (not judged).
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    pub folder: PathBuf,
    pub error: String,
}

/// Every saved scenario under `dir`: the judged ones, and the folders that
/// could not be read.
pub struct JudgedAll {
    pub judged: Vec<Judged>,
    pub unreadable: Vec<Unreadable>,
    pub stats: Stats,
}

/// Judge every saved scenario under `dir`; a folder that cannot be read is
/// named in `unreadable`, and the others are still judged.
pub fn judge_all(dir: &Path) -> Result<JudgedAll, String> {
    let folders = artifacts::find(dir)?;
    let (mut judged, mut unreadable) = (Vec::new(), Vec::new());
    for f in folders {
        match judge_folder(&f) {
            Ok(j) => judged.push(j),
            Err(error) => unreadable.push(Unreadable { folder: f, error }),
        }
    }
    let stats = Stats::tally(judged.iter().map(|j| &j.result.verdict), judged.len());
    Ok(JudgedAll {
        judged,
        unreadable,
        stats,
    })
}

/// What is said about the unreadable folders, at the end of the text
/// report and on stderr.
fn unreadable_note(unreadable: &[Unreadable]) -> String {
    let mut out = format!(
        "{} saved folder(s) could not be read, so were not judged (exit 2):\n",
        unreadable.len()
    );
    for u in unreadable {
        out.push_str(&format!("  {}\n", u.error));
    }
    out
}

/// `chaosrun judge`.
pub fn main(args: Args) -> ExitCode {
    let JudgedAll {
        judged,
        unreadable,
        stats,
    } = match judge_all(&args.dir) {
        Ok(j) => j,
        Err(e) => return super::usage(e),
    };
    if judged.is_empty() {
        let errors: Vec<&str> = unreadable.iter().map(|u| u.error.as_str()).collect();
        return super::usage(errors.join("\n"));
    }
    if args.json {
        let doc = json_doc(&judged, &unreadable, &stats);
        super::say(format!(
            "{}\n",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        ));
    } else {
        let mut out = text(&judged, stats);
        if !unreadable.is_empty() {
            out.push_str(&format!("\n{}", unreadable_note(&unreadable)));
        }
        super::say(out);
    }
    if !unreadable.is_empty() {
        return super::usage(unreadable_note(&unreadable).trim_end());
    }
    if stats.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
