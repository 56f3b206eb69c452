//! `chaosrun history DB`: read the window, print the answer (text or
//! `--json`), optionally write the HTML page, and choose the exit code.
//!
//! Exit codes: 0 printed (known failures and flakes are reported, not
//! failed); 1 only with `--fail-on new` when some scenario is `NEW FAIL`;
//! 2 a bad DB, date or output path (`Err`).

use std::io::Write;
use std::path::PathBuf;

use super::store::Filter;
use super::{analyze, html, render, Store};

/// `chaosrun history DB [--last N] [--agent SRC] [--since DATE] [--json]
/// [--html FILE] [--fail-on new]`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The history: a SQLite file written by `--history`, a postgres:// URL or a
    /// libpq `host=… dbname=…` string.
    pub db: String,
    /// How many of the latest runs to read.
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub last: u64,
    /// Only runs of this agent (as recorded: the --agent value, or `bundled`).
    #[arg(long, value_name = "SRC")]
    pub agent: Option<String>,
    /// Only runs started on or after this date (YYYY-MM-DD, UTC, or RFC 3339).
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Print JSON (schema chaosrun-history/1) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML page with each scenario's outcome strip.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// `new`: exit 1 when some scenario is a NEW FAIL (known failures and
    /// flakes still exit 0).
    #[arg(long, value_name = "WHAT", value_parser = ["new"])]
    pub fail_on: Option<String>,
}

/// `2026-11-01` (midnight UTC) or an RFC 3339 time, as Unix milliseconds.
pub fn parse_since(s: &str) -> Result<i64, String> {
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d
            .and_hms_opt(0, 0, 0)
            .map_or(0, |t| t.and_utc().timestamp_millis()));
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            format!("--since `{s}` is not a date: write YYYY-MM-DD or an RFC 3339 time (2026-11-01T03:00:00Z)")
        })
}

/// Run the command; the exit code, or the message of a usage error.
pub fn run(a: &Args) -> Result<u8, String> {
    let since_ms = a.since.as_deref().map(parse_since).transpose()?;
    if let Some(out) = &a.html {
        let db = (!super::store::is_postgres(&a.db)).then(|| PathBuf::from(&a.db));
        let inputs: Vec<PathBuf> = db.into_iter().collect();
        crate::output::check_outputs(&[("--html", out.as_path())], &inputs)?;
    }
    // Reading never writes: no migration, no journal-mode switch.
    let mut store = Store::open_read(&a.db)?;
    let window = store.window(&Filter {
        last: a.last as usize,
        agent: a.agent.clone(),
        since_ms,
    })?;
    let summary = analyze::summarize(&window);
    if let Some(out) = &a.html {
        crate::output::write_atomic(out, html::page(&summary).as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    let answer = if a.json {
        render::json(&summary)
    } else {
        render::text(&summary)
    };
    // A closed stdout (`| head -0`) is not an error: the exit code still counts.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(crate::term::escape(&crate::redact::text(&answer)).as_bytes())
        .and_then(|()| stdout.flush());
    Ok(if a.fail_on.is_some() && summary.new_failures > 0 {
        1
    } else {
        0
    })
}
