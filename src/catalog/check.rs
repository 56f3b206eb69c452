//! `chaosrun agents check AGENT`: the smoke that says whether a profile
//! still drives an agent version. It owns running the built-in check.yaml
//! ([`super::tables::CHECK`]) as a table run of a child chaosrun (this same
//! executable, so every process control, containment and cleanup is the
//! table run's), forwarding SIGINT/SIGTERM to it, and printing the steps its
//! JSON report makes ([`super::steps`]).
//!
//! Exit codes: 0 every applicable step passed, 1 a step failed (or the
//! smoke left no report to read), 2 a usage error (the child's own, such as
//! an unknown agent, is forwarded), and the child's 130/143 when interrupted.

use std::path::{Path, PathBuf};

use super::steps;
use crate::report::document::{self, Report};

/// `chaosrun agents check AGENT [flags]`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The agent: anything `--agent` takes (a known agent's name, an adapter
    /// profile, a driver executable).
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// An extra argument for the agent command, as a table run's (repeatable).
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// Pass the caller's variable NAME to the agent (repeatable), as a table run's.
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// The model API wire the agent speaks, overriding the profile's `wire:`.
    #[arg(long, value_name = "WIRE")]
    pub wire: Option<crate::provider::Wire>,
    /// Multiply every deadline (for slow machines).
    #[arg(long, value_name = "F")]
    pub deadline_scale: Option<f64>,
    /// Keep the smoke's JSON report (schema chaosrun-report/2) in FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep the artifacts of the rows that failed under DIR (must be empty or new).
    #[arg(long, value_name = "DIR")]
    pub artifacts: Option<PathBuf>,
}

fn fail(code: u8, msg: impl std::fmt::Display) -> u8 {
    crate::say_err!("chaosrun: error: {msg}");
    code
}

/// Run the smoke; returns the exit code.
pub fn run(args: &CheckArgs) -> u8 {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return fail(2, format!("cannot find this chaosrun executable: {e}")),
    };
    let dir = match tempfile::Builder::new().prefix("chaosrun-check-").tempdir() {
        Ok(d) => d,
        Err(e) => return fail(2, format!("cannot make a temp folder for the smoke: {e}")),
    };
    let table = dir.path().join("check.yaml");
    if let Err(e) = std::fs::write(&table, super::tables::CHECK) {
        return fail(2, format!("cannot write {}: {e}", table.display()));
    }
    let report_path = args
        .json
        .clone()
        .unwrap_or_else(|| dir.path().join("report.json"));
    let mut cmd = std::process::Command::new(exe);
    cmd.args(child_args(args, &table, &report_path))
        .stdin(std::process::Stdio::null())
        // The table run's own lines are the smoke's log; stdout is the steps.
        .stdout(std::process::Stdio::from(std::io::stderr()));
    let code =
        match crate::children::run_forwarding_signals(&mut cmd, crate::children::Forward::Child) {
            Ok(c) => c,
            Err(e) => return fail(2, format!("cannot run the smoke: {e}")),
        };
    if code > 1 {
        return code;
    }
    let report = match read_report(&report_path) {
        Ok(r) => r,
        Err(e) => return fail(1, format!("the smoke left no report to read: {e}")),
    };
    let steps = steps::steps(&report);
    super::cli::say(&steps::render_warned(&steps, &report.warnings, &args.agent));
    let verdict = steps::exit_code(&steps);
    if code > verdict {
        crate::say_err!(
            "chaosrun: the smoke's table run failed (exit {code}) though no step did; see its lines above"
        );
    }
    verdict.max(code)
}

/// The child's command line: a table run of `table` against the agent,
/// one row at a time, writing its JSON report to `report`.
fn child_args(args: &CheckArgs, table: &Path, report: &Path) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = vec!["--agent".into(), args.agent.clone().into()];
    out.push(table.into());
    out.extend(["--json".into(), report.into()]);
    out.extend(["--no-progress", "--jobs", "1"].map(Into::into));
    for a in &args.agent_args {
        out.push(format!("--agent-arg={a}").into());
    }
    for name in &args.pass_env {
        out.extend(["--pass-env".into(), name.into()]);
    }
    if let Some(w) = args.wire {
        out.extend(["--wire".into(), w.to_string().into()]);
    }
    if let Some(f) = args.deadline_scale {
        out.extend(["--deadline-scale".into(), f.to_string().into()]);
    }
    if let Some(d) = &args.artifacts {
        out.extend(["--artifacts".into(), d.into()]);
    }
    out
}

/// A child run's `--json` report, typed (also `bisect`'s).
pub fn read_report(path: &Path) -> Result<Report, String> {
    let value = document::read_json(path)?;
    serde_json::from_value(value)
        .map_err(|e| format!("{}: not a {} report: {e}", path.display(), document::SCHEMA))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_runs_the_table_with_the_flags_passed_through() {
        let args = CheckArgs {
            agent: "codex@0.171.0".into(),
            agent_args: vec!["--bug=x".into()],
            pass_env: vec!["KEY".into()],
            wire: Some(crate::provider::Wire::Anthropic),
            deadline_scale: Some(2.5),
            json: None,
            artifacts: Some("art".into()),
        };
        let got: Vec<String> =
            child_args(&args, Path::new("/t/check.yaml"), Path::new("/t/r.json"))
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
        let want = "--agent codex@0.171.0 /t/check.yaml --json /t/r.json --no-progress --jobs 1 \
                    --agent-arg=--bug=x --pass-env KEY --wire anthropic --deadline-scale 2.5 \
                    --artifacts art";
        assert_eq!(got.join(" "), want);
    }
}
