//! `chaosrun explore`: its flags, and the glue around the search
//! (`crate::explore`): check the inputs, resolve the agent, open the run
//! ([`super::setup`]), search, close the run, write `--out`.
//!
//! Exit codes: 0 no new finding within the budget (known hits only), 1 a
//! confirmed new finding, 2 bad input, 130/143 interrupted.

use std::path::PathBuf;

use super::setup::{Agent, AgentFlags, Extra, Run};
use crate::explore::{config, coverage, emit, findings, schedule, search};

/// The flags of `chaosrun explore`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The agent and how it reaches a model (as for a table run; with an
    /// upstream, the calls a trial does not script, its probe, go to it).
    #[command(flatten)]
    pub agent: AgentFlags,
    /// How long to search: 90s, 10m, 1h (at most 24h). Confirming and
    /// shrinking a failure found in time may run past it.
    #[arg(long, default_value = "10m", value_name = "DURATION")]
    pub budget: String,
    /// Trials (and shrinking candidates) run at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub jobs: u64,
    /// Seed of the whole search; each trial's own seed is derived from it and printed.
    #[arg(long, value_name = "S")]
    pub seed: Option<u64>,
    /// Stop after this many trials even if budget is left.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub trials: Option<u64>,
    /// Runs that must all fail the same check to confirm a failure (else it is a flake).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub confirm: u32,
    /// Keep searching after the first confirmed failure.
    #[arg(long)]
    pub keep_going: bool,
    /// Write the found rows as a scenarios file (must not exist yet).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Weights, delays and shares (explore.yaml); see the README.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override one reply-kind weight: KIND=W (ok, error_500, error_429,
    /// drop_mid_stream, stall_mid_stream, hang). Repeatable.
    #[arg(long = "weight", value_name = "KIND=W")]
    pub weights: Vec<String>,
    /// Failures already known: a table run's JSON report (its failed checks)
    /// or an explore --out table (its rows' signatures). A trial matching
    /// one is counted as a known hit, not reported as a finding. Repeatable
    /// (e.g. the seed table's report and the process-fault table's).
    #[arg(long, value_name = "REPORT.json|TABLE.yaml")]
    pub known: Vec<PathBuf>,
    /// Multiply every calibrated deadline by F (slow machines).
    #[arg(long = "deadline-scale", default_value_t = 1.0, value_name = "F")]
    pub deadline_scale: f64,
    /// Print the first trials as a table (--trials of them, default 5) and run nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Apply `--weight KIND=W` overrides.
fn apply_weights(c: &mut config::Config, flags: &[String]) -> Result<(), String> {
    for f in flags {
        let (k, v) = f
            .split_once('=')
            .ok_or_else(|| format!("--weight {f:?}: expected KIND=W, e.g. error_429=0.3"))?;
        let v: f64 = v
            .trim()
            .parse()
            .map_err(|_| format!("--weight {f:?}: {v:?} is not a number"))?;
        let Some(slot) = c.weights.slot(k.trim()) else {
            return Err(format!(
                "--weight {:?}: unknown kind; use one of {}",
                k.trim(),
                config::Weights::names().join(", ")
            ));
        };
        *slot = v;
    }
    c.validate().map_err(|e| format!("--weight: {e}"))
}

/// Load the config file (if any) and the flag overrides.
fn load_config(args: &Args) -> Result<config::Config, String> {
    let mut c = match &args.config {
        Some(p) => {
            let text = crate::input::read_input_text(p, crate::input::EXPLORE_CONFIG)
                .map_err(String::from)?;
            if text.trim().is_empty() {
                config::Config::default()
            } else {
                config::Config::parse(&text, &p.display().to_string())?
            }
        }
        None => config::Config::default(),
    };
    apply_weights(&mut c, &args.weights)?;
    Ok(c)
}

/// Check `--deadline-scale` (0.1 to 100) and read `--known`.
fn known_and_scale(args: &Args) -> Result<findings::Known, String> {
    let f = args.deadline_scale;
    if !(f.is_finite() && (0.1..=100.0).contains(&f)) {
        return Err(format!(
            "--deadline-scale {f}: must be a number from 0.1 to 100"
        ));
    }
    let mut known = findings::Known::default();
    for p in &args.known {
        let k = findings::Known::load(p)?;
        known.checks.extend(k.checks);
        known.signatures.extend(k.signatures);
    }
    Ok(known)
}

/// `--dry-run`: the first `n` trials (coverage-chosen, as the search would)
/// as a table on stdout.
fn dry_run(seed: u64, n: u64, cfg: &config::Config) -> u8 {
    let mut cov = coverage::Coverage::default();
    let rows: Vec<_> = (0..n)
        .map(|i| {
            let t = cov.choose(seed, i, cfg, true);
            schedule::row(&t, &format!("trial_{i}_{}", t.seed), None)
        })
        .collect();
    let text = schedule::table_text(
        &format!("chaosrun explore --seed {seed}: first {n} trials"),
        &rows,
    );
    let mut out = std::io::stdout().lock();
    let _ = std::io::Write::write_all(&mut out, text.as_bytes());
    0
}

fn usage(msg: impl std::fmt::Display) -> u8 {
    crate::say_err!("chaosrun: error: {msg}");
    2
}

/// Run `chaosrun explore`; returns the exit code.
pub fn main(args: Args) -> u8 {
    let budget = match config::parse_budget(&args.budget) {
        Ok(b) => b,
        Err(e) => return usage(e),
    };
    let cfg = match load_config(&args) {
        Ok(c) => c,
        Err(e) => return usage(e),
    };
    let known = match known_and_scale(&args) {
        Ok(k) => k,
        Err(e) => return usage(e),
    };
    let seed = args.seed.unwrap_or_else(rand::random);
    if args.dry_run {
        return dry_run(seed, args.trials.unwrap_or(5).min(1000), &cfg);
    }
    let mut agent = match args.agent.resolve(&mut [], Extra::default()) {
        Ok(a) => a,
        Err(e) => return usage(e),
    };
    agent.profile.scale_deadlines(args.deadline_scale);
    if let Some(out) = &args.out {
        if let Err(e) = check_out(&args, out, &agent) {
            return usage(e);
        }
    }
    let mut cfg = cfg;
    if let Some(why) = crate::profile::needs::background_gap(&agent.profile) {
        cfg.background_share = 0.0;
        crate::say_err!("explore: no background steps for this agent: {why}");
    }
    let plan = search::Plan {
        seed,
        budget,
        jobs: args.jobs as usize,
        max_trials: args.trials,
        confirm: args.confirm,
        keep_going: args.keep_going,
        resume: agent.profile.resume,
        cfg,
        agent: args.agent.shown(&agent.profile),
        known,
        deadline_scale: args.deadline_scale,
    };
    let run = Run::open(agent, &args.agent.agent_args, None);
    let outcome = search::run(run.runtime(), run.shared.clone(), &plan);
    let killed = run.close();
    if killed > 0 {
        crate::say_err!("explore: killed {killed} leftover agent process(es)");
    }
    let (code, findings) = match outcome {
        search::Outcome::Done(f) => (u8::from(!f.is_empty()), f),
        search::Outcome::Interrupted(code, f) => (code, f),
    };
    if let (Some(out), false) = (&args.out, findings.is_empty()) {
        if let Err(e) = write_out(out, &emit::table(&findings), findings.len()) {
            return usage(e);
        }
    }
    code
}

/// `--out` must not exist yet, nor be one of the inputs.
fn check_out(args: &Args, out: &std::path::Path, agent: &Agent) -> Result<(), String> {
    if std::fs::symlink_metadata(out).is_ok() {
        return Err(format!(
            "--out {}: the file exists; explore never overwrites one: pick a new path",
            out.display()
        ));
    }
    let mut inputs = crate::profile::input_files(&agent.path, &agent.profile);
    inputs.extend(args.config.clone());
    inputs.extend(args.known.clone());
    inputs.extend(std::env::current_exe().ok());
    crate::output::check_outputs(&[("--out", out)], &inputs).map(|_| ())
}

/// Write the found rows to `--out`, created exclusively: a file that appeared
/// there during the search is never replaced; the rows go to a sibling file
/// instead, and the error says where.
fn write_out(out: &std::path::Path, table: &str, rows: usize) -> Result<(), String> {
    let shown = out.display();
    match crate::output::write_new(out, table.as_bytes()) {
        Ok(()) => {
            crate::say_err!("explore: wrote {rows} row(s) to {shown}");
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let kept = crate::output::write_sibling(out, table.as_bytes()).map_err(|e2| {
                format!(
                    "--out {shown}: a file appeared there during the search and explore never \
                     overwrites one; nor could it keep the {rows} row(s) beside it ({e2}): they \
                     are printed above"
                )
            })?;
            Err(format!(
                "--out {shown}: a file appeared there during the search and explore never \
                 overwrites one; the {rows} row(s) are in {} instead",
                kept.display()
            ))
        }
        Err(e) => Err(format!("cannot write {shown}: {e}")),
    }
}
