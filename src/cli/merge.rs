//! `chaosrun merge REPORT.json...`: merge JSON reports (shards, matrix jobs)
//! into one report and one exit code, optionally recorded in a history.
//! Exit 0 every scenario of every report passed, 1 one failed, is an error
//! or a report is incomplete, 2 an unreadable report or output.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{history_file, say, usage};
use crate::output;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The reports, each written by `--json`.
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
    /// Write the merged report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Record the merged report as one run in this history (SQLite file, postgres:// URL or libpq `host=…` string).
    #[arg(long, value_name = "DB")]
    pub history: Option<String>,
}

/// `chaosrun merge`.
pub fn main(args: Args) -> ExitCode {
    let urls: Vec<&str> = args.history.iter().map(String::as_str).collect();
    crate::profile::install_redactor(None, &[], &urls);
    merge(&args.reports, args.json.as_deref(), args.history.as_deref())
}

fn merge(reports: &[PathBuf], out: Option<&Path>, history: Option<&str>) -> ExitCode {
    let outputs: Vec<(&str, &Path)> = out
        .map(|o| ("--json", o))
        .into_iter()
        .chain(history_file(history))
        .collect();
    let mut inputs = reports.to_vec();
    inputs.extend(std::env::current_exe().ok());
    if let Err(e) = output::check_outputs(&outputs, &inputs) {
        return usage(e);
    }
    let mut store = match history.map(|db| crate::history::Store::open(db, true)) {
        Some(Err(e)) => return usage(e),
        Some(Ok(s)) => Some(s),
        None => None,
    };
    let doc = match crate::report::merge::merge(reports) {
        Ok(d) => d,
        Err(e) => return usage(e),
    };
    if let Some(path) = out {
        if let Err(e) = output::write_atomic(path, &doc.to_json_pretty().unwrap_or_default()) {
            return usage(format!("cannot write {}: {e}", path.display()));
        }
    }
    say(crate::report::merge::render_text(&doc));
    if let Some(store) = &mut store {
        match crate::history::recorder::record_report(store, &doc) {
            Ok(id) => {
                crate::say_err!("chaosrun: history: recorded run #{id} in {}", store.shown())
            }
            Err(e) => return usage(e),
        }
    }
    if crate::report::merge::ok(&doc) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
