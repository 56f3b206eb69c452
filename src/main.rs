//! The chaosrun command line: flags, exit codes and wiring; nothing else.
//!
//! Exit codes: 0 every selected, applicable scenario passed, 1 one or more
//! failed or could not be run (ERROR, or no verdict at all), 2 a
//! usage or configuration error (bad table, unknown id, missing agent, ...),
//! 130/143 interrupted by SIGINT/SIGTERM (after killing every process it
//! started). With `--history`, a run whose verdict is printed but cannot be
//! recorded exits 2. `chaosrun history`: 0 printed, 1 with `--fail-on new`
//! and a NEW FAIL, 2 a bad DB or argument.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use tokio::sync::mpsc;

use chaosrun::output;
use chaosrun::proc_hygiene::{self, Guard, RUN_VAR};
use chaosrun::profile::Profile;
use chaosrun::report::html::Html;
use chaosrun::report::json::{Json, Selection};
use chaosrun::report::junit::Junit;
use chaosrun::report::progress::{Live, Progress};
use chaosrun::report::text::Text;
use chaosrun::report::{Fanout, Reporter};
use chaosrun::runner::{self, Shared};
use chaosrun::scenarios;

#[derive(Parser)]
#[command(
    name = "chaosrun",
    version,
    about = "Chaos-test the liveness of an LLM agent from the outside",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  chaosrun scenarios.yaml                              # the bundled reference agent\n  chaosrun --agent examples/hermes/hermes scenarios.yaml\n  chaosrun scenarios.yaml --only provider_hang         # reproduce one locally"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The scenario table (YAML). Default: the built-in scenarios.yaml;
    /// `process_faults.yaml` names the other built-in table when no such file is here.
    scenarios: Option<PathBuf>,
    /// A known agent's name (see `chaosrun agents`), an adapter profile
    /// (*.yaml) or a driver executable (a profile beside it, `NAME.yaml`, is
    /// used when present). Default: the bundled reference agent.
    #[arg(long, value_name = "NAME|PATH")]
    agent: Option<String>,
    /// An extra argument for the agent command, before the spec path (repeatable).
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// Pass the caller's variable NAME to the agent (repeatable). The agent
    /// otherwise gets only PATH, LANG, LC_*, TERM, TZ, USER, LOGNAME, SHELL,
    /// its own HOME and TMPDIR, chaosrun's CHAOS_* and the profile's `env`.
    /// NAME must be set (else exit 2).
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// The model API wire the agent speaks (openai-chat, openai-responses,
    /// anthropic, gemini), overriding the profile's `wire:`.
    #[arg(long, value_name = "WIRE")]
    wire: Option<chaosrun::provider::Wire>,
    /// Proxy mode: forward unmatched model calls and `relay` rules to this
    /// real server on the agent's wire (its base URL, http://...), overriding
    /// the profile's `upstream.url`.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// The variable holding the upstream's API key (also give --pass-env NAME),
    /// overriding the profile's `upstream.key_env`.
    #[arg(long = "upstream-key-env", value_name = "NAME")]
    upstream_key_env: Option<String>,
    /// A PEM file of CA certificates to trust for an https:// upstream (a
    /// private CA), overriding the profile's `upstream.ca`.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
    /// Proxy mode: write each scenario's relayed main calls as a cassette,
    /// DIR/<scenario id>.jsonl (see "Record and replay" in the README).
    #[arg(long, value_name = "DIR", conflicts_with = "replay")]
    record: Option<PathBuf>,
    /// Answer each scenario's main calls that its own rules do not from
    /// DIR/<scenario id>.jsonl (a recorded session), without a network.
    #[arg(long, value_name = "DIR")]
    replay: Option<PathBuf>,
    /// Run only this scenario (repeatable).
    #[arg(long, value_name = "ID")]
    only: Vec<String>,
    /// Skip this scenario (repeatable).
    #[arg(long, value_name = "ID")]
    skip: Vec<String>,
    /// List the selected scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Scenarios run at once. Default: all selected (they mostly wait).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
    /// Keep artifacts of failed scenarios under DIR (must be empty or new).
    #[arg(
        long = "artifacts",
        visible_alias = "keep-artifacts",
        value_name = "DIR"
    )]
    keep_artifacts: Option<PathBuf>,
    /// With --artifacts, keep them for passing scenarios too.
    #[arg(long, requires = "keep_artifacts")]
    keep_all: bool,
    /// Run each selected scenario N times and report its pass rate.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// Run only shard K of N (the i-th selected scenario goes to shard i mod N + 1).
    #[arg(long, value_name = "K/N")]
    shard: Option<scenarios::Shard>,
    /// Multiply every deadline (for slow machines).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    deadline_scale: f64,
    /// Seed for every random choice (nonces); printed so a run can be replayed.
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// No progress bars (they are off anyway when stderr is not a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Also write the report as JSON (schema chaosrun-report/2) to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write the report as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Also write a self-contained HTML report with a timeline per scenario.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print chaosrun's own CPU seconds and peak RSS at the end (stderr).
    #[arg(long)]
    stats: bool,
    /// Record the run in a history: a SQLite file (created if new) or a
    /// Postgres database (a postgres:// URL or a libpq `host=… dbname=…`
    /// string). A failed write exits 2 after the verdict is printed.
    #[arg(long, value_name = "DB")]
    history: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the fault provider alone, for probing an agent by hand.
    Serve {
        /// Port on 127.0.0.1 (0 picks one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Responder script: a list of rules, or {nonce, tools, responder}.
        #[arg(long, value_name = "FILE")]
        script: Option<PathBuf>,
        /// Substituted for {{nonce}}.
        #[arg(long)]
        nonce: Option<String>,
        /// CHAOS_TAG value whose processes `wait_for` rules count.
        #[arg(long)]
        tag: Option<String>,
        /// Do not log each request on stderr.
        #[arg(long)]
        quiet: bool,
        /// The wire to serve: openai-chat, openai-responses, anthropic, gemini.
        #[arg(long, default_value = "openai-chat")]
        wire: chaosrun::provider::Wire,
        /// Proxy mode: relay unmatched calls and `relay` rules to this server.
        #[arg(long, value_name = "URL")]
        upstream: Option<String>,
        /// The variable in serve's environment holding the upstream's API key.
        #[arg(long = "upstream-key-env", value_name = "NAME", requires = "upstream")]
        upstream_key_env: Option<String>,
        /// A PEM file of CA certificates to trust for an https:// upstream.
        #[arg(long = "upstream-ca", value_name = "FILE", requires = "upstream")]
        upstream_ca: Option<PathBuf>,
        /// Write the relayed main calls as a cassette when stopped.
        #[arg(long, value_name = "FILE", requires = "upstream")]
        record: Option<PathBuf>,
        /// Serve the scripted MCP server instead (a row's `mcp:` section as
        /// YAML): stdio through `chaosrun mcp-stdio --socket PATH`, and HTTP.
        #[arg(long, value_name = "RULES", conflicts_with_all = ["script", "wire", "port", "tag", "upstream"])]
        mcp: Option<PathBuf>,
    },
    /// Merge JSON reports (shards, matrix jobs) into one report and one exit code.
    Merge {
        /// The reports, each written by `--json`.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Write the merged report here.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Record the merged report as one run in this history (SQLite file, postgres:// URL or libpq `host=…` string).
        #[arg(long, value_name = "DB")]
        history: Option<String>,
    },
    /// Per scenario over the last recorded runs: pass rate, NEW FAIL / FIXED /
    /// FLAKY / FAIL / PASS, where it last changed, and its duration trend.
    History(chaosrun::history::command::Args),
    /// The stdio MCP server an agent spawns from its config during a run: a
    /// relay to the scenario's private socket (started by the agent, never by hand).
    #[command(name = "mcp-stdio")]
    McpStdio {
        /// The scenario's MCP socket (from `{{mcp_args_json}}`).
        #[arg(long, value_name = "PATH")]
        socket: PathBuf,
    },
    /// Generate seeded trials (tool-using tasks with fault schedules), judge
    /// each with the oracle, confirm and shrink a failure to one table row.
    Explore(chaosrun::explore::Args),
    /// The known agents (pinned version, wire, capabilities, installed?);
    /// `agents setup NAME` installs one into the user's cache.
    Agents(chaosrun::catalog::cli::AgentsArgs),
    /// The built-in seed tables; `tables write DIR` writes them out for editing.
    Tables(chaosrun::catalog::cli::TablesArgs),
    #[command(name = "__guard", hide = true)]
    Guard {
        run: String,
        #[arg(long)]
        remove: Vec<PathBuf>,
    },
}

/// A usage or configuration error: printed, exit 2.
fn usage(msg: impl std::fmt::Display) -> ExitCode {
    chaosrun::say_err!("chaosrun: error: {msg}");
    ExitCode::from(2)
}

/// Print to stdout; a closed stdout (`| head -0`) is not an error: the text is
/// dropped and the exit code still comes from the run.
fn say(text: impl std::fmt::Display) {
    let text = text.to_string();
    let mut out = std::io::stdout().lock();
    let _ = write!(
        out,
        "{}",
        chaosrun::term::escape(&chaosrun::redact::text(&text))
    )
    .and_then(|()| out.flush());
}

/// Blocks of 128 KiB and more are always mapped on their own, so freeing one
/// gives it back to the system at once. glibc's default raises this
/// threshold to the largest block freed so far (up to 32 MiB), after which a
/// multi-MB request body or argument lives in a per-thread arena that keeps
/// it resident: a flood of such requests then holds one per arena for good.
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets one allocator parameter; called before any thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    fixed_mmap_threshold();
    let cli = Cli::parse();
    match cli.command {
        Some(Command::McpStdio { socket }) => {
            ExitCode::from(chaosrun::mcp::shim::run(&socket).clamp(0, 255) as u8)
        }
        Some(Command::Guard { run, remove }) => {
            ExitCode::from(proc_hygiene::run_guard(&run, &remove) as u8)
        }
        Some(Command::Serve {
            port,
            script,
            nonce,
            tag,
            quiet,
            wire,
            upstream,
            upstream_key_env,
            upstream_ca,
            record,
            mcp,
        }) => {
            let names: Vec<String> = upstream_key_env.iter().cloned().collect();
            let urls: Vec<&str> = upstream.iter().map(String::as_str).collect();
            chaosrun::profile::install_redactor(None, &names, &urls);
            let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
            if let Some(rules) = mcp {
                return match rt.block_on(chaosrun::mcp::serve::run(&rules, nonce)) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => usage(format!("{e:#}")),
                };
            }
            let upstream = upstream.map(|url| chaosrun::provider::upstream::UpstreamSpec {
                url,
                key_env: upstream_key_env,
                ca: upstream_ca,
                record,
                ..Default::default()
            });
            let args = chaosrun::provider::serve::ServeArgs {
                port,
                script,
                nonce,
                tag,
                quiet,
                wire,
                upstream,
            };
            match rt.block_on(chaosrun::provider::serve::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => usage(format!("{e:#}")),
            }
        }
        Some(Command::Merge {
            reports,
            json,
            history,
        }) => {
            let urls: Vec<&str> = history.iter().map(String::as_str).collect();
            chaosrun::profile::install_redactor(None, &[], &urls);
            merge(&reports, json.as_deref(), history.as_deref())
        }
        Some(Command::History(args)) => match chaosrun::history::command::run(&args) {
            Ok(code) => ExitCode::from(code),
            Err(e) => usage(e),
        },
        Some(Command::Explore(args)) => ExitCode::from(chaosrun::explore::main(args)),
        Some(Command::Agents(args)) => ExitCode::from(chaosrun::catalog::cli::agents(&args)),
        Some(Command::Tables(args)) => ExitCode::from(chaosrun::catalog::cli::tables(&args)),
        None => run(cli.run),
    }
}

/// `--history DB` as an output file to check (a Postgres URL is not a file).
fn history_file(db: Option<&str>) -> Option<(&'static str, &std::path::Path)> {
    db.filter(|d| !chaosrun::history::store::is_postgres(d))
        .map(|d| ("--history", std::path::Path::new(d)))
}

fn merge(reports: &[PathBuf], out: Option<&std::path::Path>, history: Option<&str>) -> ExitCode {
    let outputs: Vec<(&str, &std::path::Path)> = out
        .map(|o| ("--json", o))
        .into_iter()
        .chain(history_file(history))
        .collect();
    let mut inputs = reports.to_vec();
    inputs.extend(std::env::current_exe().ok());
    if let Err(e) = output::check_outputs(&outputs, &inputs) {
        return usage(e);
    }
    let mut store = match history.map(|db| chaosrun::history::Store::open(db, true)) {
        Some(Err(e)) => return usage(e),
        Some(Ok(s)) => Some(s),
        None => None,
    };
    let doc = match chaosrun::report::merge::merge(reports) {
        Ok(d) => d,
        Err(e) => return usage(e),
    };
    if let Some(path) = out {
        if let Err(e) =
            output::write_atomic(path, &serde_json::to_vec_pretty(&doc).unwrap_or_default())
        {
            return usage(format!("cannot write {}: {e}", path.display()));
        }
    }
    say(chaosrun::report::merge::render_text(&doc));
    if let Some(store) = &mut store {
        match chaosrun::history::recorder::record_report(store, &doc) {
            Ok(id) => {
                chaosrun::say_err!("chaosrun: history: recorded run #{id} in {}", store.shown())
            }
            Err(e) => return usage(e),
        }
    }
    if chaosrun::report::merge::ok(&doc) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run(args: RunArgs) -> ExitCode {
    let (table_path, _builtin_table) =
        match chaosrun::catalog::tables::resolve(args.scenarios.as_deref()) {
            Ok(t) => t,
            Err(e) => return usage(e),
        };
    let table_path = &table_path;
    if !(args.deadline_scale > 0.0 && args.deadline_scale.is_finite()) {
        return usage("--deadline-scale must be a positive, finite number");
    }
    let table = match scenarios::load_file(table_path) {
        Ok(t) => t,
        Err(e) => return usage(e),
    };
    let mut selected = match scenarios::select(&table.scenarios, &args.only, &args.skip) {
        Ok(s) => s,
        Err(e) => return usage(e),
    };
    if selected.is_empty() {
        return usage("--only/--skip left no scenario to run");
    }
    let selected_ids: Vec<String> = selected.iter().map(|s| s.id.clone()).collect();
    if let Some(sh) = args.shard {
        let before = selected.len();
        selected = scenarios::shard(selected, sh);
        if selected.is_empty() {
            return usage(format!(
                "shard {}/{} has no scenario: only {before} are selected, so use at most {before} shards",
                sh.k, sh.n
            ));
        }
    }
    if args.list {
        for s in &selected {
            say(format_args!("{:<40} {}\n", s.id, s.about));
        }
        return ExitCode::SUCCESS;
    }
    for s in &mut selected {
        s.deadlines = match s.deadlines.scaled(args.deadline_scale) {
            Ok(d) => d,
            Err(e) => return usage(format!("--deadline-scale: scenario `{}`: {e}", s.id)),
        };
    }
    // The bundled agent lives in a temp dir for the run's duration.
    let (agent, bundled_dir) = match chaosrun::catalog::agent_or_bundled(args.agent.as_deref()) {
        Ok(a) => a,
        Err(e) => return usage(e),
    };
    let mut profile = match Profile::resolve(&agent) {
        Ok(mut p) => {
            if let Some(wire) = args.wire {
                p.wire = wire;
            }
            p
        }
        Err(e) => return usage(e),
    };
    if profile.exec.is_some() && !args.agent_args.is_empty() {
        return usage(format!(
            "--agent-arg is for a driver-protocol agent; `{}` is an exec-mode profile: put \
             the arguments in its `exec.first`/`next`/`resume` argv (or read them there with \
             `{{{{env:NAME}}}}`)",
            profile.source
        ));
    }
    let urls: Vec<&str> = args
        .upstream
        .iter()
        .chain(&args.history)
        .map(String::as_str)
        .collect();
    if let Err(e) = chaosrun::profile::cassettes::replay(&mut selected, args.replay.as_deref()) {
        return usage(e);
    }
    let flags = chaosrun::provider::upstream::setup::Flags {
        url: args.upstream.clone(),
        key_env: args.upstream_key_env.clone(),
        ca: args.upstream_ca.clone(),
    };
    if let Err(e) =
        chaosrun::profile::apply_cli_upstream(&mut profile, &args.pass_env, flags, &selected)
    {
        let mut names = args.pass_env.clone();
        names.extend(args.upstream_key_env.clone());
        chaosrun::profile::install_redactor(None, &names, &urls);
        return usage(e);
    }
    if let Err(e) = chaosrun::profile::cassettes::record(&mut profile, args.record.clone()) {
        return usage(e);
    }
    chaosrun::profile::install_redactor(Some(&profile), &args.pass_env, &urls);
    let mut inputs = chaosrun::profile::input_files(&agent, &profile);
    inputs.push(table_path.clone());
    inputs.extend(std::env::current_exe().ok());
    let outputs: Vec<(&str, &std::path::Path)> = [
        ("--json", &args.json),
        ("--junit", &args.junit),
        ("--html", &args.html),
    ]
    .into_iter()
    .filter_map(|(flag, out)| out.as_deref().map(|p| (flag, p)))
    .chain(history_file(args.history.as_deref()))
    .collect();
    let targets = match output::check_outputs(&outputs, &inputs) {
        Ok(t) => t,
        Err(e) => return usage(e),
    };
    if let Some(dir) = &args.keep_artifacts {
        if let Some(i) = targets.iter().position(|t| output::same_place(t, dir)) {
            return usage(format!(
                "{} {} is the --artifacts directory; give each its own path",
                outputs[i].0,
                outputs[i].1.display()
            ));
        }
    }
    for w in chaosrun::profile::needs::warnings(&profile, &selected) {
        chaosrun::say_err!("chaosrun: warning: {w}");
    }
    let artifacts = match &args.keep_artifacts {
        Some(dir) => match output::ArtifactsDir::take(dir) {
            Ok(a) => Some(a),
            Err(e) => return usage(e),
        },
        None => None,
    };
    let seed = args.seed.unwrap_or_else(rand::random);
    // Opened before anything runs: a foreign or corrupt DB costs no run.
    let history = match &args.history {
        Some(db) => {
            let meta = chaosrun::history::recorder::RunMeta {
                table: table_path,
                agent: if args.agent.is_some() {
                    profile.source.clone()
                } else {
                    "bundled".into()
                },
                version_cmd: &profile.version_cmd,
                seed,
                shard: args.shard.map(|s| (s.k, s.n)),
                html_report: args.html.as_deref(),
            };
            match chaosrun::history::recorder::open(db, meta) {
                Ok(h) => Some(h),
                Err(e) => return usage(e),
            }
        }
        None => None,
    };
    let run_id = format!("chaos{}", proc_hygiene::new_id(&mut rand::thread_rng()));
    if let Err(e) = proc_hygiene::become_subreaper() {
        chaosrun::say_err!("chaosrun: warning: cannot become a child subreaper ({e}); orphans re-parent to init but are still found by their tag");
    }
    let containment = Arc::new(proc_hygiene::RunContainment::new(&run_id));
    let temp: Vec<&std::path::Path> = bundled_dir.iter().map(|d| d.path()).collect();
    let guard = std::env::current_exe()
        .and_then(|exe| Guard::spawn(&exe, &run_id, &temp))
        .map_err(|e| chaosrun::say_err!("chaosrun: warning: no cleanup guard ({e}); a SIGKILL of chaosrun may leave processes behind"))
        .ok();
    // One wave of the table at a time: repeats queue behind it rather than
    // multiplying the load (which would itself make scenarios flaky).
    let jobs = args.jobs.map_or(selected.len(), |j| j as usize).min(256);
    say(format_args!(
        "chaosrun: {} scenario{}, {jobs} at once, agent {}, seed {seed}\n",
        selected.len(),
        if selected.len() == 1 { "" } else { "s" },
        if args.agent.is_some() {
            profile.source.as_str()
        } else {
            "bundled reference agent"
        },
    ));
    say(format_args!("chaosrun: {}\n", containment.describe()));
    let host = profile.network == chaosrun::profile::NetworkMode::Host;
    let network = chaosrun::driver::netns::NetNs::for_scenario(host).1;
    say(format_args!("chaosrun: {}\n", network.describe()));
    let shared = Arc::new(Shared {
        profile,
        agent_args: args.agent_args.clone(),
        run_id: run_id.clone(),
        containment: containment.clone(),
        boot_gate: Shared::boot_gate(),
    });
    let opts = runner::Options {
        jobs,
        artifacts: artifacts.as_ref().map(|a| a.path.clone()),
        keep_all: args.keep_all,
        seed,
        repeat: args.repeat,
    };
    let progress = !args.no_progress
        && std::io::stderr().is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb");
    let mut reporter: Box<dyn Reporter> = if progress {
        Box::new(Live {
            progress: Progress::new(),
            lines: Text::new(chaosrun::redact::Lines::new(std::io::stdout())),
        })
    } else {
        Box::new(Text::new(chaosrun::redact::Lines::new(std::io::stdout())))
    };
    if let Some(path) = &args.json {
        let agent = if args.agent.is_some() {
            shared.profile.source.clone()
        } else {
            "bundled".into()
        };
        reporter = Box::new(Fanout(vec![
            reporter,
            Box::new(Json::new(
                path.clone(),
                seed,
                agent,
                Selection {
                    ids: selected_ids.clone(),
                    shard: args.shard.map(|sh| (sh.k, sh.n)),
                    repeat: args.repeat,
                },
            )),
        ]));
    }
    if let Some(path) = &args.junit {
        reporter = Box::new(Fanout(vec![
            reporter,
            Box::new(Junit::new(path.clone(), seed)),
        ]));
    }
    if let Some(path) = &args.html {
        reporter = Box::new(Fanout(vec![
            reporter,
            Box::new(Html::new(path.clone(), seed)),
        ]));
    }
    let mut written = None;
    if let Some((recorder, w)) = history {
        written = Some(w);
        reporter = Box::new(Fanout(vec![reporter, Box::new(recorder)]));
    }
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let run_id_for_cleanup = run_id.clone();
    let ended = containment.clone();
    let code = rt.block_on(async move {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let consumer = tokio::task::spawn_blocking(move || {
            while let Some(ev) = rx.blocking_recv() {
                reporter.on(&ev);
            }
        });
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .expect("signal");
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal");
        // Every selected scenario run (selected × repeat) must end in a
        // verdict: the exit code comes from all of them, a missing one is an
        // error, never from what survived.
        let expected = selected.len() * opts.repeat.max(1) as usize;
        let run = runner::run_all(shared, selected, opts, tx);
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
        let killed = tokio::task::spawn_blocking(move || {
            ended.end()
                + proc_hygiene::sweep_marked(RUN_VAR, &run_id, std::time::Duration::from_secs(10))
        })
        .await
        .unwrap_or(0);
        chaosrun::say_err!(
            "\nchaosrun: interrupted; killed {killed} agent process(es); no verdict"
        );
        stopped_by
    });
    // Never waits long for a blocking read that has not returned.
    runner::end_runtime(rt);
    containment.end();
    remove_run_folders(&run_id_for_cleanup);
    drop(artifacts);
    drop(bundled_dir);
    if let Some(g) = guard {
        g.finish();
    }
    if args.stats {
        print_self_stats();
    }
    // The verdict is printed; a run that could not be recorded still exits 2.
    let unrecorded = written.and_then(|w| w.take()).filter(|_| code <= 1);
    if let Some(Err(e)) = &unrecorded {
        chaosrun::say_err!("chaosrun: error: {e}");
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

/// Remove what is left of this run's scenario folders in the temp dir
/// (`chaosrun-RUN-N`): after an interrupt, or a scenario whose run ended
/// early. Artifacts the user asked for live elsewhere and stay.
fn remove_run_folders(run_id: &str) {
    let prefix = format!("chaosrun-{run_id}-");
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// chaosrun's own CPU time and peak RSS (children excluded).
fn print_self_stats() {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    chaosrun::say_err!(
        "chaosrun self: cpu {:.2} s (user {:.2}, sys {:.2}), peak rss {:.1} MB",
        secs(u.ru_utime) + secs(u.ru_stime),
        secs(u.ru_utime),
        secs(u.ru_stime),
        u.ru_maxrss as f64 / 1024.0
    );
}
