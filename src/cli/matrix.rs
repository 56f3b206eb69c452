//! `chaosrun matrix REPORT.json...`: the agent × scenario results table.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSON reports (`--json`), one per agent.
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
    /// Print an HTML table instead of markdown.
    #[arg(long)]
    pub html: bool,
}

/// `chaosrun matrix`.
pub fn main(_args: Args) -> ExitCode {
    super::usage("matrix: not implemented yet")
}
