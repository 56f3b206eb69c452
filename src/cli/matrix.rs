//! `chaosrun matrix REPORT.json...`: print the agent × scenario results
//! table ([`crate::report::matrix`]) from JSON reports, markdown by default,
//! `--html` for a page. Exit 0 printed (failures are cells, not an exit
//! code), 2 a report that cannot be read or merged.

use std::path::PathBuf;
use std::process::ExitCode;

use super::{say, usage};
use crate::report::matrix;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSON reports (`--json`); an agent's several reports (its tables,
    /// shards) are merged into its one column.
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
    /// Print an HTML page instead of markdown.
    #[arg(long)]
    pub html: bool,
    /// Put this before each README link (e.g. `../` for a page under docs/).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub link_prefix: String,
}

/// `chaosrun matrix`.
pub fn main(args: Args) -> ExitCode {
    let m = match matrix::build(&args.reports, &args.link_prefix) {
        Ok(m) => m,
        Err(e) => return usage(e),
    };
    if args.html {
        say(matrix::html(&m));
    } else {
        say(matrix::markdown(&m));
    }
    ExitCode::SUCCESS
}
