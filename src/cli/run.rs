//! `chaosrun TABLE` (no subcommand): run a scenario table against an agent
//! and report. Its stages, in order: choose the rows ([`select_rows`]),
//! resolve the agent and its profile ([`agent_profile`]), vet the outputs and
//! open the history ([`outputs`]), run every scenario under one containment
//! and guard ([`execute`]), then tidy up and choose the exit code
//! ([`finish`]).
//!
//! Exit codes: 0 every selected, applicable scenario passed, 1 one or more
//! failed or could not be run, 2 a usage or configuration error, 130/143
//! interrupted by SIGINT/SIGTERM (after killing every process it started).
//! With `--history`, a run whose verdict is printed but cannot be recorded
//! exits 2.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::setup::{kill_leftovers, Agent, AgentFlags, Extra, Run};
use super::{history_file, say, usage};
use crate::history::recorder::{Recorder, Written};
use crate::output;
use crate::profile::Profile;
use crate::report::html::Html;
use crate::report::json::{Json, Selection};
use crate::report::junit::Junit;
use crate::report::progress::{Live, Progress};
use crate::report::text::Text;
use crate::report::{Fanout, Reporter};
use crate::runner::{self, Shared};
use crate::scenarios::{self, Scenario};

/// The flags of a table run.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The scenario table (YAML). Default: the built-in scenarios.yaml;
    /// `process_faults.yaml` names the other built-in table when no such file is here.
    pub scenarios: Option<PathBuf>,
    /// The agent and how it reaches a model.
    #[command(flatten)]
    pub agent: AgentFlags,
    /// Proxy mode: write each scenario's relayed main calls as a cassette,
    /// DIR/<scenario id>.jsonl (see docs/proxy.md#record-and-replay).
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    pub record: Option<PathBuf>,
    /// Answer each scenario's main calls that its own rules do not from
    /// DIR/<scenario id>.jsonl (a recorded session), without a network.
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
    /// Run only this scenario (repeatable, or comma-separated).
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub only: Vec<String>,
    /// Skip this scenario (repeatable, or comma-separated).
    #[arg(long, value_name = "ID", value_delimiter = ',')]
    pub skip: Vec<String>,
    /// List the selected scenarios and exit.
    #[arg(long)]
    pub list: bool,
    /// Scenarios run at once. Default: all selected (they mostly wait).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    pub jobs: Option<u64>,
    /// Keep artifacts of failed scenarios under DIR (must be empty or new).
    #[arg(
        long = "artifacts",
        visible_alias = "keep-artifacts",
        value_name = "DIR"
    )]
    pub keep_artifacts: Option<PathBuf>,
    /// With --artifacts, keep them for passing scenarios too.
    #[arg(long, requires = "keep_artifacts")]
    pub keep_all: bool,
    /// Run each selected scenario N times and report its pass rate.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Run only shard K of N (the i-th selected scenario goes to shard i mod N + 1).
    #[arg(long, value_name = "K/N")]
    pub shard: Option<scenarios::Shard>,
    /// Multiply every deadline (for slow machines).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub deadline_scale: f64,
    /// Seed for every random choice (nonces); printed so a run can be replayed.
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// No progress bars (they are off anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Also write the report as JSON (schema chaosrun-report/2) to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the report as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write a self-contained HTML report with a timeline per scenario.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Print chaosrun's own CPU seconds and peak RSS at the end (stderr).
    #[arg(long)]
    pub stats: bool,
    /// Record the run in a history: a SQLite file (created if new) or a
    /// Postgres database (a postgres:// URL or a libpq `host=… dbname=…`
    /// string). A failed write exits 2 after the verdict is printed.
    #[arg(long, value_name = "DB")]
    pub history: Option<String>,
}

/// Stop the command with this exit code (a usage error already printed, or
/// `--list` done).
type Stop = ExitCode;

/// The rows a run selected.
struct Rows {
    table_path: PathBuf,
    /// The folder a built-in table was written to, for the run's duration.
    _builtin: Option<tempfile::TempDir>,
    /// Every selected id, before `--shard`.
    ids: Vec<String>,
    /// The rows to run (this shard's), deadlines scaled.
    selected: Vec<Scenario>,
}

/// `chaosrun TABLE`.
pub fn main(args: Args) -> ExitCode {
    // `_table_dir` holds a built-in table's folder until the run ends.
    let Rows {
        table_path,
        _builtin: _table_dir,
        ids: selected_ids,
        mut selected,
    } = match select_rows(&args) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let mut agent = match agent_profile(&args, &mut selected) {
        Ok(a) => a,
        Err(code) => return code,
    };
    // Only the JSON report and the history name it: no `version_cmd` run
    // for a run that writes neither.
    if args.json.is_some() || args.history.is_some() {
        agent.version = agent_version(&args, &agent);
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let (artifacts, history) = match outputs(&args, &table_path, &agent, &selected, seed) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let (history, written) = match history {
        Some((h, w)) => (Some(h), Some(w)),
        None => (None, None),
    };
    let code = execute(
        &args,
        agent,
        selected,
        &selected_ids,
        artifacts,
        seed,
        history,
    );
    finish(&args, code, written)
}

/// The table's rows this run selects (`--only`, `--skip`, `--shard`), with
/// `--deadline-scale` applied, and every selected id before sharding; `--list`
/// prints them and stops.
fn select_rows(args: &Args) -> Result<Rows, Stop> {
    let (table_path, builtin) =
        crate::catalog::tables::resolve(args.scenarios.as_deref()).map_err(usage)?;
    let table_path = &table_path;
    if !(args.deadline_scale > 0.0 && args.deadline_scale.is_finite()) {
        return Err(usage("--deadline-scale must be a positive, finite number"));
    }
    let table = scenarios::load_file(table_path).map_err(usage)?;
    let mut selected =
        crate::catalog::tables::select(table_path, &table.scenarios, &args.only, &args.skip)
            .map_err(usage)?;
    if selected.is_empty() {
        return Err(usage("--only/--skip left no scenario to run"));
    }
    let selected_ids: Vec<String> = selected.iter().map(|s| s.id.clone()).collect();
    if let Some(sh) = args.shard {
        let before = selected.len();
        selected = scenarios::shard(selected, sh);
        if selected.is_empty() {
            return Err(usage(format!(
                "shard {}/{} has no scenario: only {before} are selected, so use at most {before} shards",
                sh.k, sh.n
            )));
        }
    }
    if args.list {
        for s in &selected {
            say(format_args!("{:<40} {}\n", s.id, s.about));
        }
        return Err(ExitCode::SUCCESS);
    }
    for s in &mut selected {
        s.deadlines = s
            .deadlines
            .scaled(args.deadline_scale)
            .map_err(|e| usage(format!("--deadline-scale: scenario `{}`: {e}", s.id)))?;
    }
    Ok(Rows {
        table_path: table_path.clone(),
        _builtin: builtin,
        ids: selected_ids,
        selected,
    })
}

/// The agent and its profile with the command line's overrides (`--wire`,
/// upstream, `--replay`, `--record`), and the redactor installed.
fn agent_profile(args: &Args, selected: &mut [Scenario]) -> Result<Agent, Stop> {
    let extra = Extra {
        replay: args.replay.as_deref(),
        record: args.record.clone(),
        urls: args.history.iter().map(String::as_str).collect(),
    };
    let mut agent = args.agent.resolve(selected, extra).map_err(usage)?;
    agent.profile.scale_deadlines(args.deadline_scale);
    Ok(agent)
}

/// Vet every output path against the inputs (and the artifacts folder),
/// print the profile's warnings, take the artifacts folder and open the
/// history, before anything runs: a foreign or corrupt DB costs no run.
#[allow(clippy::type_complexity)]
fn outputs(
    args: &Args,
    table_path: &Path,
    agent: &Agent,
    selected: &[Scenario],
    seed: u64,
) -> Result<(Option<output::ArtifactsDir>, Option<(Recorder, Written)>), Stop> {
    let profile = &agent.profile;
    let mut inputs = crate::profile::input_files(&agent.path, profile);
    inputs.push(table_path.to_path_buf());
    inputs.extend(std::env::current_exe().ok());
    inputs.extend(crate::profile::cassettes::read_files(profile, selected));
    let records = crate::profile::cassettes::record_files(profile, selected);
    let outputs: Vec<(&str, &Path)> = [
        ("--json", &args.json),
        ("--junit", &args.junit),
        ("--html", &args.html),
    ]
    .into_iter()
    .filter_map(|(flag, out)| out.as_deref().map(|p| (flag, p)))
    .chain(history_file(args.history.as_deref()))
    .chain(records.iter().map(|p| ("--record", p.as_path())))
    .collect();
    let targets = output::check_outputs(&outputs, &inputs).map_err(usage)?;
    if let Some(dir) = &args.keep_artifacts {
        if let Some(i) = targets.iter().position(|t| output::same_place(t, dir)) {
            return Err(usage(format!(
                "{} {} is the --artifacts directory; give each its own path",
                outputs[i].0,
                outputs[i].1.display()
            )));
        }
    }
    for w in crate::profile::needs::warnings(profile, selected) {
        crate::say_err!("chaosrun: warning: {w}");
    }
    let artifacts = match &args.keep_artifacts {
        Some(dir) => Some(output::ArtifactsDir::take(dir).map_err(usage)?),
        None => None,
    };
    warn_inherited(args.keep_artifacts.as_deref());
    let Some(db) = &args.history else {
        return Ok((artifacts, None));
    };
    let meta = crate::history::recorder::RunMeta {
        table: table_path,
        agent: agent_label(args, profile),
        agent_version: agent.version.clone(),
        seed,
        shard: args.shard.map(|s| (s.k, s.n)),
        html_report: args.html.as_deref(),
    };
    let history = crate::history::recorder::open(db, meta).map_err(usage)?;
    Ok((artifacts, Some(history)))
}

/// Warn when the folders above the runs' work dirs hold files agents read
/// from there (their instructions would reach the agent under test).
fn warn_inherited(artifacts: Option<&Path>) {
    let base = artifacts.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let found = crate::driver::home::inherited_files(&base);
    if found.is_empty() {
        return;
    }
    let shown: Vec<String> = found
        .iter()
        .take(4)
        .map(|p| p.display().to_string())
        .collect();
    let more = found.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    crate::say_err!(
        "chaosrun: warning: the agents' work dirs sit below {}, and the folders above hold {}{more}: \
         an agent that reads project instructions or config from parent folders will see them \
         (put --artifacts outside a project, or set the agent's switch for it in the profile)",
        base.display(),
        shown.join(", ")
    );
}

/// The agent as reports name it: the profile's source, or `bundled`.
/// The agent's version for the report and the history: the bundled agent's
/// is chaosrun's; a known agent's is its install's package metadata (no
/// process started); otherwise the profile's `version_cmd` (bounded, warned
/// about when it fails); otherwise not known.
fn agent_version(args: &Args, agent: &Agent) -> Option<String> {
    if args.agent.agent.is_none() {
        return Some(format!(
            "bundled with chaosrun {}",
            crate::history::meta::CHAOSRUN_VERSION
        ));
    }
    if let Some(v) = crate::catalog::version_at(Path::new(&agent.path)) {
        return Some(v);
    }
    if agent.profile.version_cmd.is_empty() {
        return None;
    }
    crate::history::meta::agent_version(&agent.profile.version_cmd)
        .map_err(|e| crate::say_err!("chaosrun: warning: no agent version for the report: {e}"))
        .ok()
}

fn agent_label(args: &Args, profile: &Profile) -> String {
    if args.agent.agent.is_some() {
        profile.source.clone()
    } else {
        "bundled".into()
    }
}

/// The reporters the flags ask for, fanned out: text (or live progress) on
/// stdout, then JSON, JUnit, HTML and the history recorder.
fn reporters(
    args: &Args,
    shared: &Shared,
    seed: u64,
    version: Option<String>,
    selected_ids: &[String],
    history: Option<Recorder>,
) -> Box<dyn Reporter> {
    let progress = !args.no_progress
        && std::io::stderr().is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let text = Text::new(crate::redact::Lines::new(std::io::stdout()));
    let mut all: Vec<Box<dyn Reporter>> = vec![if progress {
        Box::new(Live {
            progress: Progress::new(),
            lines: text,
        })
    } else {
        Box::new(text)
    }];
    if let Some(path) = &args.json {
        let selection = Selection {
            ids: selected_ids.to_vec(),
            shard: args.shard.map(|sh| (sh.k, sh.n)),
            repeat: args.repeat,
        };
        let agent = agent_label(args, &shared.profile);
        let json = Json::new(path.clone(), seed, agent, selection).with_version(version);
        all.push(Box::new(json));
    }
    if let Some(path) = &args.junit {
        all.push(Box::new(Junit::new(path.clone(), seed)));
    }
    if let Some(path) = &args.html {
        all.push(Box::new(Html::new(path.clone(), seed)));
    }
    if let Some(recorder) = history {
        all.push(Box::new(recorder));
    }
    Box::new(Fanout(all))
}

/// Run every selected scenario under one run id, containment and cleanup
/// guard, feeding the reporters; the exit code (0, 1, or 130/143 when
/// interrupted).
fn execute(
    args: &Args,
    agent: Agent,
    selected: Vec<Scenario>,
    selected_ids: &[String],
    artifacts: Option<output::ArtifactsDir>,
    seed: u64,
    history: Option<Recorder>,
) -> u8 {
    let version = agent.version.clone();
    let keep = artifacts.as_ref().map(|a| a.path.clone());
    let run = Run::open(agent, &args.agent.agent_args, keep);
    let shared = run.shared.clone();
    // One wave of the table at a time: repeats queue behind it rather than
    // multiplying the load (which would itself make scenarios flaky).
    let jobs = args.jobs.map_or(selected.len(), |j| j as usize).min(256);
    say(format_args!(
        "chaosrun: {} scenario{}, {jobs} at once, agent {}, seed {seed}\n",
        selected.len(),
        if selected.len() == 1 { "" } else { "s" },
        args.agent.shown(&shared.profile),
    ));
    say(format_args!(
        "chaosrun: {}\n",
        shared.containment.describe()
    ));
    let host = shared.profile.network == crate::profile::NetworkMode::Host;
    let network = crate::driver::netns::NetNs::for_scenario(host).1;
    say(format_args!("chaosrun: {}\n", network.describe()));
    say(format_args!(
        "chaosrun: {}\n",
        crate::driver::mountns::describe()
    ));
    let opts = runner::Options {
        jobs,
        artifacts: artifacts.as_ref().map(|a| a.path.clone()),
        keep_all: args.keep_all,
        seed,
        repeat: args.repeat,
    };
    let reporter = reporters(args, &shared, seed, version, selected_ids, history);
    let code = run
        .runtime()
        .block_on(drive(shared, selected, opts, reporter));
    run.close();
    drop(artifacts);
    code
}

/// Run the scenarios until they all have a verdict, or until SIGINT/SIGTERM
/// (then every process of the run is killed and there is no verdict).
async fn drive(
    shared: Arc<Shared>,
    selected: Vec<Scenario>,
    opts: runner::Options,
    mut reporter: Box<dyn Reporter>,
) -> u8 {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let consumer = tokio::task::spawn_blocking(move || {
        while let Some(ev) = rx.blocking_recv() {
            reporter.on(&ev);
        }
    });
    let mut sigint =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).expect("signal");
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal");
    // Every selected scenario run (selected × repeat) must end in a
    // verdict: the exit code comes from all of them, a missing one is an
    // error, never from what survived.
    let expected = selected.len() * opts.repeat.max(1) as usize;
    let run = runner::run_all(shared.clone(), selected, opts, tx);
    tokio::pin!(run);
    let stopped_by = tokio::select! {
        results = &mut run => {
            let _ = consumer.await;
            let stats = runner::Stats::tally(results.iter().map(|r| &r.verdict), expected);
            return if stats.ok() { 0u8 } else { 1 };
        }
        _ = sigint.recv() => 130u8,
        _ = sigterm.recv() => 143,
    };
    let killed = tokio::task::spawn_blocking(move || kill_leftovers(&shared))
        .await
        .unwrap_or(0);
    crate::say_err!("\nchaosrun: interrupted; killed {killed} agent process(es); no verdict");
    stopped_by
}

/// The exit code once the verdict is printed: 2 when a report the caller
/// asked for, or the history record, could not be written.
fn finish(args: &Args, code: u8, written: Option<Written>) -> ExitCode {
    if args.stats {
        print_self_stats();
    }
    // The verdict is printed; a run that could not be recorded still exits 2.
    let unrecorded = written.and_then(|w| w.take()).filter(|_| code <= 1);
    if let Some(Err(e)) = &unrecorded {
        crate::say_err!("chaosrun: error: {e}");
    }
    if code <= 1 && output::write_failed() {
        // A report the caller asked for is missing or stale: a gate must not
        // read that as green, nor as the agent's own failure.
        return usage("a report could not be written (see above); no verdict to gate on");
    }
    let code = match unrecorded {
        Some(Err(_)) => 2,
        _ => code,
    };
    ExitCode::from(code)
}

/// chaosrun's own CPU time and peak RSS (children excluded).
fn print_self_stats() {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    crate::say_err!(
        "chaosrun self: cpu {:.2} s (user {:.2}, sys {:.2}), peak rss {:.1} MB",
        secs(u.ru_utime) + secs(u.ru_stime),
        secs(u.ru_utime),
        secs(u.ru_stime),
        u.ru_maxrss as f64 / 1024.0
    );
}
