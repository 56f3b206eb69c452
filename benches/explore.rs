//! chaosrun's own CPU per explore trial against the trial's wall time.
//!
//! `cargo bench --bench explore` runs `chaosrun explore --seed S --budget B
//! --jobs 2` on the healthy bundled reference agent (`CHAOSRUN_BENCH_SEED`,
//! default 1; `CHAOSRUN_BENCH_BUDGET`, default `60s`), from the repository
//! root, and reads its closing line (`chaosrun cpu X s`, getrusage of chaosrun
//! itself: the agents are not counted) and each trial's wall from the
//! progress lines (`trial N seed S: pass (W s)`). It prints:
//!
//! - chaosrun CPU per trial / mean trial wall   target ≤ 3%
//! - chaosrun CPU / the explore run's wall
//! - trials per minute
//!
//! Then, for each bug option of the reference agent (the combination bugs and
//! the persistence bugs; `CHAOSRUN_BENCH_BUGS`, comma-separated, default all;
//! `none` skips this part) and each seed (`CHAOSRUN_BENCH_SEEDS`, default
//! `1,2,3`), it runs `chaosrun explore --seed S --budget 3m --jobs 2
//! --agent-arg=--bug=B` and prints a row: the trial that found it, the
//! seconds to find it, to confirm it, to shrink it, to verify it (and end), and the
//! shrunk fault count (or "not found in 3m").
//!
//! Figures are printed, never asserted (timing depends on the machine).

mod common;
use common::chaosrun_bin;
use std::process::Command;
use std::time::Instant;

const CPU_PCT_TARGET: f64 = 3.0;

/// Every bug option `explore` should find, old (combination) and new
/// (persistence).
const BUGS: [&str; 6] = [
    "sticky_backoff_interrupt",
    "resend_batch_minus_one",
    "replay_after_5xx",
    "nested_retry_after_tool",
    "fallback_no_timeout",
    "shared_retry_budget",
];

/// The number right after `key` in `text`'s first line holding it.
fn after(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (_, rest) = l.split_once(key)?;
        rest.split_whitespace()
            .next()?
            .trim_end_matches(',')
            .parse()
            .ok()
    })
}

fn time_to_find(root: &std::path::Path) {
    let bugs = std::env::var("CHAOSRUN_BENCH_BUGS").unwrap_or_else(|_| BUGS.join(","));
    if bugs == "none" {
        return;
    }
    let seeds = std::env::var("CHAOSRUN_BENCH_SEEDS").unwrap_or_else(|_| "1,2,3".into());
    println!("time to find (budget 3m, --jobs 2): bug, seed, trial, find s, confirm s, shrink s, verify s, total s, faults");
    for bug in bugs.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        for seed in seeds.split(',').map(str::trim) {
            let started = Instant::now();
            let out = Command::new(chaosrun_bin())
                .args(["explore", "--seed", seed, "--budget", "3m", "--jobs", "2"])
                .arg(format!("--agent-arg=--bug={bug}"))
                .current_dir(root)
                .output()
                .expect("chaosrun runs");
            let total = started.elapsed().as_secs_f64();
            let err = String::from_utf8_lossy(&out.stderr);
            let so = String::from_utf8_lossy(&out.stdout);
            let found = after(&err, "failure found ");
            let confirmed = after(&err, "/3 ");
            let shrunk = after(&err, "candidate run(s), ");
            let trial = so.lines().find_map(|l| {
                l.split_once("(trial ")?
                    .1
                    .split(',')
                    .next()
                    .map(String::from)
            });
            let faults = after(&so, "shrunk: ");
            match (so.contains("FOUND"), found, confirmed, shrunk) {
                (true, Some(f), Some(c), Some(s)) => println!(
                    "  {bug:<26} {seed:>3}  trial {:>3}  {f:>6.1}  {:>6.1}  {:>6.1}  {:>6.1}  {total:>6.1}  {}",
                    trial.unwrap_or_default(),
                    c - f,
                    s - c,
                    total - s,
                    faults.map_or("?".into(), |n| n.to_string())
                ),
                _ => println!(
                    "  {bug:<26} {seed:>3}  not found in 3m ({total:.1} s, exit {:?})",
                    out.status.code()
                ),
            }
        }
    }
}

fn main() {
    let seed = std::env::var("CHAOSRUN_BENCH_SEED").unwrap_or_else(|_| "1".into());
    let budget = std::env::var("CHAOSRUN_BENCH_BUDGET").unwrap_or_else(|_| "60s".into());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let started = Instant::now();
    let out = Command::new(chaosrun_bin())
        .args([
            "explore", "--seed", &seed, "--budget", &budget, "--jobs", "2",
        ])
        .current_dir(root)
        .output()
        .expect("chaosrun runs");
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let trial_walls: Vec<f64> = stderr
        .lines()
        .filter(|l| l.starts_with("explore: trial ") && l.contains(" seed "))
        .filter_map(|l| {
            let (_, rest) = l.rsplit_once(" (")?;
            rest.split_once(" s)")?.0.parse().ok()
        })
        .collect();
    let cpu: f64 = stderr
        .lines()
        .rev()
        .find_map(|l| {
            let (_, rest) = l.split_once("chaosrun cpu ")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(f64::NAN);
    let runs: f64 = stderr
        .lines()
        .rev()
        .find_map(|l| {
            let (_, rest) = l.split_once(" trials (")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(trial_walls.len() as f64);
    let n = trial_walls.len().max(1) as f64;
    let mean_trial = trial_walls.iter().sum::<f64>() / n;
    let per_trial = cpu / runs.max(1.0);
    let pct = 100.0 * per_trial / mean_trial.max(1e-9);
    println!("explore bench: seed {seed}, budget {budget}, --jobs 2, healthy reference agent");
    println!(
        "  exit {:?}, {} trials ({runs} runs) in {wall:.1} s ({:.1} trials/min)",
        out.status.code(),
        trial_walls.len(),
        60.0 * trial_walls.len() as f64 / wall
    );
    println!("  mean trial wall            {mean_trial:.2} s");
    println!("  chaosrun cpu               {cpu:.2} s in all, {per_trial:.3} s per run");
    println!(
        "  cpu per trial / trial wall {pct:.2}%  (target ≤ {CPU_PCT_TARGET}%){}",
        if pct <= CPU_PCT_TARGET {
            ""
        } else {
            "  ABOVE TARGET"
        }
    );
    println!("  cpu / explore wall         {:.2}%", 100.0 * cpu / wall);
    time_to_find(root);
}
