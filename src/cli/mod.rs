//! The subcommands of the `chaosrun` binary, one module each: flags
//! (clap `Args`) and wiring, returning the exit code. `main.rs` only parses
//! and dispatches here.
//!
//! Exit codes: 0 every selected, applicable scenario passed, 1 one or more
//! failed or could not be run (ERROR, or no verdict at all), 2 a usage or
//! configuration error (bad table, unknown id, missing agent, unreadable
//! saved run, ...), 130/143 interrupted by SIGINT/SIGTERM (after killing
//! every process it started).

pub mod bisect;
pub mod explore;
pub mod judge;
pub mod matrix;
pub mod merge;
pub mod run;
pub mod serve;
pub mod setup;

use std::io::Write;
use std::process::ExitCode;

/// A usage or configuration error: printed, exit 2.
pub fn usage(msg: impl std::fmt::Display) -> ExitCode {
    crate::say_err!("chaosrun: error: {msg}");
    ExitCode::from(2)
}

/// Print to stdout; a closed stdout (`| head -0`) is not an error: the text is
/// dropped and the exit code still comes from the run.
pub fn say(text: impl std::fmt::Display) {
    let text = text.to_string();
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", crate::term::escape(&crate::redact::text(&text)))
        .and_then(|()| out.flush());
}

/// `--history DB` as an output file to check (a Postgres URL is not a file).
pub fn history_file(db: Option<&str>) -> Option<(&'static str, &std::path::Path)> {
    db.filter(|d| !crate::history::store::is_postgres(d))
        .map(|d| ("--history", std::path::Path::new(d)))
}
