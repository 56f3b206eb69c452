//! `chaosrun history DB`: read the window, print the answer (text or
//! `--json`), optionally write the HTML page, and choose the exit code.
//!
//! Exit codes: 0 printed (known failures and flakes are reported, not
//! failed); 1 only with `--fail-on new` when some scenario is `NEW FAIL`;
//! 2 a bad DB, date or output path (`Err`).

use std::path::PathBuf;

use super::store::Filter;
use super::{analyze, html, render, Store};

pub struct Args {
    pub db: String,
    pub last: usize,
    pub agent: Option<String>,
    pub since: Option<String>,
    pub json: bool,
    pub html: Option<PathBuf>,
    pub fail_on_new: bool,
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
        let same = std::fs::canonicalize(out)
            .ok()
            .zip(std::fs::canonicalize(&a.db).ok())
            .is_some_and(|(o, d)| o == d);
        if same {
            return Err(format!(
                "--html {} would overwrite the history DB; pick another file",
                out.display()
            ));
        }
    }
    let mut store = Store::open(&a.db, false)?;
    let window = store.window(&Filter {
        last: a.last,
        agent: a.agent.clone(),
        since_ms,
    })?;
    let summary = analyze::summarize(&window);
    if let Some(out) = &a.html {
        std::fs::write(out, html::page(&summary))
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    if a.json {
        print!("{}", render::json(&summary));
    } else {
        print!("{}", render::text(&summary));
    }
    Ok(if a.fail_on_new && summary.new_failures > 0 {
        1
    } else {
        0
    })
}
