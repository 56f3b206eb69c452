//! `chaosrun bisect`: the first release of an agent whose verdict on one
//! row differs from an older release's. The versions between `--good` and
//! `--bad` come from the agent's own registry client ([`packages`]); each
//! version tried is installed beside the others (`agents setup
//! NAME@VERSION`) and the row runs against it `--repeat N` times in a child
//! `chaosrun` (so process control and containment are the table run's own),
//! whose report is kept under `--reports DIR`. A version counts as failing
//! when `--fails K` of its N runs do not pass (default: a majority), so a
//! flaky row does not send the search the wrong way.
//!
//! Everything that can be checked without the registry is checked before it
//! is asked and before anything is installed ([`preflight`]): the versions
//! parse, the table loads and holds the row, the agent's shipped profile
//! loads and the row applies to it, `--wire`, `--deadline-scale`, `--fails`.
//!
//! Exit codes: 0 the first changed version found, 1 the verdict is the same
//! at both ends (or a run could not be judged), 2 a usage error (also a
//! child run that refused its arguments), 130/143 interrupted (the child run
//! is stopped first).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{say, usage};
use crate::catalog::{self, cli::setup_version, entry::Entry, install, packages, version};
use crate::provider::Wire;

/// The flags of `chaosrun bisect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The table the row is in (default: the built-in scenarios.yaml;
    /// `process_faults.yaml` names the other built-in table).
    pub scenarios: Option<PathBuf>,
    /// The agent (a catalog name; see `chaosrun agents`).
    #[arg(long)]
    pub agent: String,
    /// A version with the old verdict.
    #[arg(long, value_name = "VERSION")]
    pub good: String,
    /// A later version with the new verdict (`latest`: the newest release).
    #[arg(long, value_name = "VERSION")]
    pub bad: String,
    /// The row to run.
    #[arg(long, value_name = "ID")]
    pub only: String,
    /// Runs of the row per version.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// A version fails when K of its N runs do not pass (default: more than half).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub fails: Option<u32>,
    /// Where each version's report goes (must be new or empty).
    #[arg(long, value_name = "DIR", default_value = "bisect-reports")]
    pub reports: PathBuf,
    /// Passed to each run: the wire the agent speaks.
    #[arg(long, value_name = "WIRE")]
    pub wire: Option<Wire>,
    /// Passed to each run: multiply every deadline.
    #[arg(long, value_name = "F")]
    pub deadline_scale: Option<f64>,
    /// Passed to each run: the seed.
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
}

/// One version's runs of the row.
#[derive(Debug, Clone)]
struct Tried {
    version: String,
    /// Runs that did not pass, out of `runs`.
    failed: u32,
    runs: u32,
    report: PathBuf,
}

/// Why the search stopped early.
enum Stop {
    /// Exit with this code, the reason already printed.
    Code(u8),
}

/// `chaosrun bisect`.
pub fn main(args: Args) -> ExitCode {
    let k = args.fails.unwrap_or(args.repeat / 2 + 1);
    if k > args.repeat {
        return usage(format!("--fails {k} is more than --repeat {}", args.repeat));
    }
    let entry = match preflight(&args) {
        Ok(entry) => entry,
        Err(e) => return usage(e),
    };
    let list = match plan(entry, &args) {
        Ok(list) => list,
        Err(e) => return usage(e),
    };
    if let Err(e) = reports_dir(&args.reports) {
        return usage(e);
    }
    say(format_args!(
        "bisect {} on `{}`: {} versions from {} to {} ({}); a version fails when {k} of {} runs do not pass\n",
        entry.name,
        args.only,
        list.len(),
        list[0],
        list[list.len() - 1],
        packages::lister(entry).unwrap_or_default(),
        args.repeat
    ));
    let mut tried: Vec<Tried> = Vec::new();
    let mut probe = |i: usize| -> Result<bool, Stop> {
        let t = try_version(entry, &list[i], &args)?;
        let failing = t.failed >= k;
        say(format_args!(
            "  {:<14} {}/{} runs did not pass: {}\n",
            t.version,
            t.failed,
            t.runs,
            if failing { "FAIL" } else { "pass" }
        ));
        tried.push(t);
        Ok(failing)
    };
    let found = match search(list.len(), &mut probe) {
        Ok(found) => found,
        Err(Stop::Code(c)) => return ExitCode::from(c),
    };
    finish(entry, &list, &tried, found)
}

/// Everything checked before the registry is asked or anything installed:
/// the agent is a catalog agent with versions, `--good`/`--bad` parse,
/// `--deadline-scale` is positive, the table loads and holds `--only`, and
/// the agent's shipped profile loads (its command is not installed yet) with
/// `--wire`, and the row applies to it (an N/A row has no verdict to bisect).
fn preflight(args: &Args) -> Result<&'static Entry, String> {
    let entry = catalog::find(&args.agent)?.ok_or_else(|| {
        format!(
            "unknown agent `{}` (known: {}); bisect takes a catalog name",
            args.agent,
            catalog::names()
        )
    })?;
    if entry.install == catalog::entry::Install::Bundled {
        return Err(format!(
            "agent `{}` is bundled: it has no versions",
            entry.name
        ));
    }
    version::check(&args.good).map_err(|e| format!("--good: {e}"))?;
    if args.bad != "latest" {
        version::check(&args.bad).map_err(|e| format!("--bad: {e}"))?;
    }
    let scale = args.deadline_scale.unwrap_or(1.0);
    if !(scale > 0.0 && scale.is_finite()) {
        return Err("--deadline-scale must be a positive, finite number".into());
    }
    let (path, _builtin) = catalog::tables::resolve(args.scenarios.as_deref())?;
    let table = crate::scenarios::load_file(&path).map_err(|e| e.to_string())?;
    let rows = catalog::tables::select(
        &path,
        &table.scenarios,
        std::slice::from_ref(&args.only),
        &[],
    )?;
    let row = &rows[0];
    row.deadlines
        .scaled(scale)
        .map_err(|e| format!("--deadline-scale: scenario `{}`: {e}", row.id))?;
    let profile = shipped_profile(entry, args.wire)?;
    if let Some(why) = crate::profile::needs::not_applicable(&profile, row) {
        return Err(format!(
            "`{}` is not applicable to agent `{}` ({why}): no version has a verdict on it",
            row.id, entry.name
        ));
    }
    Ok(entry)
}

/// Write `entry`'s shipped folder into a temp cache at `root` (through the
/// cache's own writer: no link followed); its path.
fn write_shipped(root: &Path, entry: &Entry) -> Result<PathBuf, String> {
    let folder = catalog::cache::open(root, entry.name, true)?
        .ok_or_else(|| format!("cannot make a folder for agent `{}`", entry.name))?;
    folder
        .write_out(&catalog::files(entry))
        .map_err(|e| format!("cannot write agent `{}`'s profile: {e}", entry.name))?;
    Ok(root.join("agents").join(entry.name))
}

/// The agent's profile as this chaosrun ships it (written into a temp
/// folder, so nothing in the cache changes), with `--wire` applied.
fn shipped_profile(entry: &Entry, wire: Option<Wire>) -> Result<crate::profile::Profile, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a temp folder: {e}"))?;
    let at = write_shipped(dir.path(), entry)?;
    let path = at.join(entry.profile).display().to_string();
    let mut profile = crate::profile::Profile::resolve_uninstalled(&path)?;
    if let Some(wire) = wire {
        profile.wire = wire;
    }
    Ok(profile)
}

/// The versions to decide, `--good` first and `--bad` last, from the
/// registry's list.
fn plan(entry: &'static Entry, args: &Args) -> Result<Vec<String>, String> {
    let good = catalog::resolve(entry, &version::Want::Exact(args.good.clone()))?;
    let want_bad = match args.bad.as_str() {
        "latest" => version::Want::Latest,
        v => version::Want::Exact(v.to_string()),
    };
    let bad = catalog::resolve(entry, &want_bad)?;
    let all = packages::versions(entry)?;
    let lister = packages::lister(entry).unwrap_or_default();
    for v in [&good, &bad] {
        if !all.contains(v) {
            return Err(format!("`{lister}` does not list {v}"));
        }
    }
    let mut list = vec![good.clone()];
    list.extend(version::between(&all, &good, &bad));
    if list.len() < 2 || list.last() != Some(&bad) {
        return Err(format!("--bad {bad} is not a release after --good {good}"));
    }
    Ok(list)
}

/// The reports folder: created, or empty.
fn reports_dir(dir: &Path) -> Result<(), String> {
    match std::fs::read_dir(dir).map(|mut list| list.next().is_some()) {
        Ok(true) => Err(format!(
            "--reports {}: the folder is not empty (give a new one)",
            dir.display()
        )),
        Ok(false) => Ok(()),
        Err(_) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("--reports {}: {e}", dir.display()))
        }
    }
}

/// Binary search over versions `0..n` (0 the good end, `n - 1` the bad
/// end): both ends are run first, and the verdict must differ between them;
/// then the first index whose verdict is the bad end's. `probe(i)` says
/// whether version `i` fails.
fn search(
    n: usize,
    probe: &mut dyn FnMut(usize) -> Result<bool, Stop>,
) -> Result<Option<usize>, Stop> {
    let old = probe(0)?;
    let new = probe(n - 1)?;
    if old == new {
        return Ok(None);
    }
    // Invariant: lo has the old verdict, hi the new one.
    let (mut lo, mut hi) = (0, n - 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if probe(mid)? == new {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

/// Install `v` (kept when already there) and run the row against it.
fn try_version(entry: &Entry, v: &str, args: &Args) -> Result<Tried, Stop> {
    let cache = install::cache_dir().map_err(|e| fail(2, e))?;
    let dir = install::version_dir(&cache, entry, v);
    let have = install::trusted_version(entry, &cache, v).map_err(|e| fail(2, e))?;
    if have.as_deref() != Some(v) {
        say(format_args!(
            "  installing {}@{v} into {}\n",
            entry.name,
            dir.display()
        ));
        setup_version(entry, &cache, v)
            .map_err(|e| fail(e.code(), format!("{}@{v}: {e}", entry.name)))?;
    }
    let report = args.reports.join(format!("{}@{v}.json", entry.name));
    let text = args.reports.join(format!("{}@{v}.txt", entry.name));
    let status = child::run(&child_args(entry, v, args, &report), &text)
        .map_err(|e| fail(2, format!("{}@{v}: {e}", entry.name)))?;
    if let Some(code) = child::interrupted(status) {
        return Err(Stop::Code(code));
    }
    if status == 2 {
        return Err(fail(
            2,
            format!(
                "{}@{v}: the run refused its arguments (exit 2; its output: {})",
                entry.name,
                text.display()
            ),
        ));
    }
    count(&report, &args.only, args.repeat)
        .map_err(|e| {
            fail(
                1,
                format!(
                    "{}@{v}: the run left no verdict to judge ({e}; its output: {}, exit {status})",
                    entry.name,
                    text.display()
                ),
            )
        })
        .map(|(failed, runs)| Tried {
            version: v.to_string(),
            failed,
            runs,
            report,
        })
}

fn fail(code: u8, msg: impl std::fmt::Display) -> Stop {
    crate::say_err!("chaosrun: error: {msg}");
    Stop::Code(code)
}

/// The child run's arguments.
fn child_args(entry: &Entry, v: &str, args: &Args, report: &Path) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = vec![
        "--agent".into(),
        format!("{}@{v}", entry.name).into(),
        "--only".into(),
        args.only.clone().into(),
        "--repeat".into(),
        args.repeat.to_string().into(),
        "--json".into(),
        report.into(),
        "--no-progress".into(),
    ];
    let pass = [
        ("--wire", args.wire.map(|w| w.name().to_string())),
        (
            "--deadline-scale",
            args.deadline_scale.map(|f| f.to_string()),
        ),
        ("--seed", args.seed.map(|s| s.to_string())),
    ];
    for (flag, value) in pass {
        if let Some(value) = value {
            out.push(flag.into());
            out.push(value.into());
        }
    }
    out.extend(args.scenarios.iter().map(|p| p.clone().into_os_string()));
    out
}

/// Runs of `row` in a finished report that did not pass, and runs in all.
/// A report cut short, a row missing, or a row not applicable is no verdict.
fn count(report: &Path, row: &str, repeat: u32) -> Result<(u32, u32), String> {
    let doc = crate::catalog::check::read_report(report)?;
    if !doc.complete {
        return Err("the report is not complete".into());
    }
    let mut runs = 0;
    let mut failed = 0;
    for s in &doc.scenarios {
        if s.id != row {
            continue;
        }
        if matches!(s.verdict, crate::runner::Verdict::NotApplicable { .. }) {
            return Err(format!("`{row}` is not applicable to this agent"));
        }
        runs += 1;
        failed += u32::from(!s.passed);
    }
    if runs != repeat {
        return Err(format!("{runs} of {repeat} runs of `{row}` reported"));
    }
    Ok((failed, runs))
}

/// Print the result: the first version with the new verdict, the last one
/// with the old, and their reports.
fn finish(entry: &Entry, list: &[String], tried: &[Tried], found: Option<usize>) -> ExitCode {
    let by = |v: &str| tried.iter().find(|t| t.version == v);
    let Some(i) = found else {
        let ends = [&list[0], &list[list.len() - 1]].map(|v| by(v));
        say(format_args!(
            "\nno change: {} {} and {} have the same verdict ({}/{} and {}/{} runs did not pass)\n",
            entry.name,
            list[0],
            list[list.len() - 1],
            ends[0].map_or(0, |t| t.failed),
            ends[0].map_or(0, |t| t.runs),
            ends[1].map_or(0, |t| t.failed),
            ends[1].map_or(0, |t| t.runs),
        ));
        return ExitCode::from(1);
    };
    let (last, first) = (by(&list[i - 1]), by(&list[i]));
    say(format_args!(
        "\nfirst version with the new verdict: {} {}\nlast version with the old verdict: {} {}\n",
        entry.name,
        list[i],
        entry.name,
        list[i - 1]
    ));
    for t in [last, first].into_iter().flatten() {
        say(format_args!(
            "  report {}: {}\n",
            t.version,
            t.report.display()
        ));
    }
    ExitCode::SUCCESS
}

/// The child `chaosrun` a version's row runs in.
mod child {
    use std::path::Path;

    /// Run this chaosrun with `args`, its stdout into `out`; a SIGINT or
    /// SIGTERM sent to bisect is passed on to the child, which stops its
    /// run (killing everything it started). Its exit code.
    pub fn run(args: &[std::ffi::OsString], out: &Path) -> Result<u8, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find chaosrun itself: {e}"))?;
        let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .stdout(file);
        crate::children::run_forwarding_signals(&mut cmd, crate::children::Forward::Child)
            .map_err(|e| format!("cannot run the row: {e}"))
    }

    /// The exit code for a run stopped by a signal (130/143), if it was.
    pub fn interrupted(code: u8) -> Option<u8> {
        matches!(code, 130 | 143).then_some(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shipped agent's profile is checked before any version of it is
    /// installed: it loads though its command is not there yet (a full
    /// resolve refuses it), and a row it cannot run is named.
    #[test]
    fn a_shipped_profile_is_checked_without_its_install() {
        let entry = catalog::find("pi").unwrap().unwrap();
        let profile = shipped_profile(entry, Some(Wire::Anthropic)).unwrap();
        assert_eq!(profile.wire, Wire::Anthropic);
        let dir = tempfile::tempdir().unwrap();
        let at = write_shipped(dir.path(), entry).unwrap();
        let path = at.join(entry.profile).display().to_string();
        let e = crate::profile::Profile::resolve(&path).unwrap_err();
        assert!(e.contains("not found"), "{e}");
    }

    /// The search finds the first version with the bad end's verdict, in a
    /// regression and in a fix, trying few versions; equal ends stop it.
    #[test]
    fn search_finds_the_first_changed_version() {
        for (n, first) in [(2, 1), (5, 3), (9, 1), (9, 8), (16, 11)] {
            for regression in [true, false] {
                let mut seen = Vec::new();
                let got = search(n, &mut |i| {
                    seen.push(i);
                    Ok((i >= first) == regression)
                })
                .ok()
                .flatten();
                assert_eq!(got, Some(first), "n={n} first={first}");
                let bound = 2 + (n as f64).log2().ceil() as usize;
                assert!(seen.len() <= bound, "{seen:?}");
            }
        }
        assert_eq!(search(4, &mut |_| Ok(true)).ok().flatten(), None);
    }
}
