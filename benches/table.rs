//! The whole scenario table, run at once, against its slowest scenario alone.
//!
//! `cargo bench --bench table` builds the `chaosrun` binary (cargo passes its
//! path as `CARGO_BIN_EXE_chaosrun`; if that is missing, `target/release/chaosrun`
//! beside this bench is used) and, from the repository root, for each round:
//!
//! 1. runs `chaosrun scenarios.yaml --stats --json REPORT --no-progress` (the
//!    default jobs: every scenario at once), times its wall clock, parses the
//!    `chaosrun self:` stats line and the JSON report, finds the slowest
//!    scenario (max `seconds`) and warns if any scenario failed;
//! 2. runs that slowest scenario alone (`--only ID --stats`) and times it.
//!
//! Rounds: `CHAOSRUN_BENCH_ROUNDS` (default 2; a table run takes ~17 s). It
//! prints per-round and median figures against the targets:
//!
//! - table wall / slowest scenario alone   ≤ 1.05x (with cgroup containment)
//! - chaosrun's own CPU seconds            ≤ 3% of the table's wall
//! - chaosrun's peak RSS (with `tool_huge_output` in the table)   ≤ 64 MB
//!
//! CPU and RSS are getrusage(RUSAGE_SELF) in chaosrun: the agents it spawns are
//! not counted. Figures are printed, never asserted (timing depends on the
//! machine). The report goes to `CARGO_TARGET_TMPDIR/table-bench/report.json`.

mod common;
use common::chaosrun_bin;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use serde_json::Value;

const DEFAULT_ROUNDS: usize = 2;
const RATIO_TARGET: f64 = 1.05;
const CPU_PCT_TARGET: f64 = 3.0;
const RSS_MB_TARGET: f64 = 64.0;
const HUGE: &str = "tool_huge_output";

/// `chaosrun self: cpu X.XX s (user U, sys S), peak rss Y.Y MB`
#[derive(Clone, Copy)]
struct SelfStats {
    cpu: f64,
    user: f64,
    sys: f64,
    rss_mb: f64,
}

fn parse_stats(stderr: &str) -> Option<SelfStats> {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("chaosrun self: cpu "))?;
    // "X.XX s (user U, sys S), peak rss Y.Y MB"
    let num = |s: &str| s.trim().parse::<f64>().ok();
    let (cpu, rest) = line.split_once(" s (user ")?;
    let (user, rest) = rest.split_once(", sys ")?;
    let (sys, rest) = rest.split_once("), peak rss ")?;
    let rss = rest.trim().strip_suffix("MB")?;
    Some(SelfStats {
        cpu: num(cpu)?,
        user: num(user)?,
        sys: num(sys)?,
        rss_mb: num(rss)?,
    })
}

struct Run {
    wall: f64,
    output: Output,
    stats: Option<SelfStats>,
}

fn run(bin: &Path, root: &Path, args: &[&str]) -> Run {
    let start = Instant::now();
    let output = Command::new(bin)
        .current_dir(root)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} {args:?}: {e}", bin.display()));
    let wall = start.elapsed().as_secs_f64();
    let stats = parse_stats(&String::from_utf8_lossy(&output.stderr));
    if stats.is_none() || !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<_> = stderr.lines().rev().take(10).collect();
        println!(
            "  warning: `chaosrun {}` exited {}{}; stderr tail:",
            args.join(" "),
            output.status,
            if stats.is_none() {
                ", no stats line"
            } else {
                ""
            },
        );
        for l in tail.iter().rev() {
            println!("    {l}");
        }
    }
    Run {
        wall,
        output,
        stats,
    }
}

/// The `N passed, N failed` line of a run's stdout, if any.
fn summary_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find(|l| l.contains(" passed, "))
        .map_or_else(|| "(no summary line)".to_string(), |l| l.trim().to_string())
}

struct Round {
    table_wall: f64,
    report_wall: Option<f64>,
    slowest: String,
    slowest_in_table: f64,
    alone_wall: f64,
    table: Option<SelfStats>,
    alone: Option<SelfStats>,
    huge_in_table: bool,
}

impl Round {
    fn ratio(&self) -> f64 {
        self.table_wall / self.alone_wall
    }
    fn cpu(&self) -> Option<f64> {
        self.table.map(|s| s.cpu)
    }
    fn cpu_pct(&self) -> Option<f64> {
        self.cpu().map(|c| 100.0 * c / self.table_wall)
    }
    fn rss(&self) -> Option<f64> {
        self.table.map(|s| s.rss_mb)
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "MISSED"
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "?".to_string(), |v| format!("{v:.prec$}"))
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn one_round(bin: &Path, root: &Path, report: &Path) -> Option<Round> {
    let _ = std::fs::remove_file(report);
    let report_arg = report.to_str().expect("utf-8 report path");
    let table = run(
        bin,
        root,
        &[
            "scenarios.yaml",
            "--stats",
            "--json",
            report_arg,
            "--no-progress",
        ],
    );
    println!(
        "  table: {:.2} s wall, {}",
        table.wall,
        summary_line(&table.output)
    );
    let doc: Value = match std::fs::read(report)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(doc) => doc,
        Err(e) => {
            println!("  warning: cannot read report {}: {e}", report.display());
            return None;
        }
    };
    let scenarios = doc["scenarios"].as_array().cloned().unwrap_or_default();
    if doc["complete"] != true {
        println!("  warning: report is not complete");
    }
    let failed: Vec<&str> = scenarios
        .iter()
        .filter(|s| s["passed"] != true)
        .filter_map(|s| s["id"].as_str())
        .collect();
    if !failed.is_empty() {
        println!(
            "  warning: {} scenario(s) failed in the table: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    let huge_in_table = scenarios.iter().any(|s| s["id"] == HUGE);
    if !huge_in_table {
        println!("  warning: {HUGE} is not in the table; peak RSS does not cover it");
    }
    let (slowest, slowest_in_table) = scenarios
        .iter()
        .filter_map(|s| Some((s["id"].as_str()?.to_string(), s["seconds"].as_f64()?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    println!(
        "  slowest in table: {slowest} ({slowest_in_table:.2} s of {} scenarios)",
        scenarios.len()
    );
    let _ = std::io::stdout().flush();

    let alone = run(
        bin,
        root,
        &[
            "scenarios.yaml",
            "--only",
            &slowest,
            "--stats",
            "--no-progress",
        ],
    );
    println!(
        "  alone: {:.2} s wall, {}",
        alone.wall,
        summary_line(&alone.output)
    );
    Some(Round {
        table_wall: table.wall,
        report_wall: doc["wall_seconds"].as_f64(),
        slowest,
        slowest_in_table,
        alone_wall: alone.wall,
        table: table.stats,
        alone: alone.stats,
        huge_in_table,
    })
}

fn print_round(r: &Round) {
    println!(
        "  table wall           {:>8.2} s   (report wall_seconds {} s)",
        r.table_wall,
        opt(r.report_wall, 2)
    );
    println!(
        "  slowest alone wall   {:>8.2} s   ({}; {:.2} s in table)",
        r.alone_wall, r.slowest, r.slowest_in_table
    );
    println!(
        "  ratio                {:>8.3} x   target <= {RATIO_TARGET:.2}   {}",
        r.ratio(),
        verdict(r.ratio() <= RATIO_TARGET)
    );
    match r.table {
        Some(s) => {
            let pct = r.cpu_pct().unwrap_or(f64::NAN);
            println!(
                "  chaosrun cpu         {:>8.2} s   (user {:.2}, sys {:.2}) = {pct:.2}% of wall   target <= {CPU_PCT_TARGET}%   {}",
                s.cpu,
                s.user,
                s.sys,
                verdict(pct < CPU_PCT_TARGET)
            );
            println!(
                "  chaosrun peak rss    {:>8.1} MB  target <= {RSS_MB_TARGET} MB{}   {}",
                s.rss_mb,
                if r.huge_in_table {
                    format!(" (with {HUGE})")
                } else {
                    format!(" (WITHOUT {HUGE})")
                },
                verdict(s.rss_mb < RSS_MB_TARGET)
            );
        }
        None => println!("  chaosrun cpu / rss          ?   (no stats line from the table run)"),
    }
    if let Some(a) = r.alone {
        println!(
            "  (alone: chaosrun cpu {:.2} s, peak rss {:.1} MB)",
            a.cpu, a.rss_mb
        );
    }
}

fn main() {
    let rounds = std::env::var("CHAOSRUN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_ROUNDS);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = chaosrun_bin();
    assert!(
        bin.exists(),
        "{} missing: run `cargo build --release` first",
        bin.display()
    );
    let report_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("table-bench");
    std::fs::create_dir_all(&report_dir).expect("report dir");
    let report = report_dir.join("report.json");
    println!(
        "chaosrun table bench: {rounds} round(s), default jobs, binary {}",
        bin.display()
    );
    println!("report: {}", report.display());

    let started = Instant::now();
    let mut done = Vec::new();
    for i in 1..=rounds {
        println!("round {i}/{rounds}:");
        let _ = std::io::stdout().flush();
        match one_round(&bin, &root, &report) {
            Some(r) => {
                print_round(&r);
                done.push(r);
            }
            None => println!("  round {i} gave no figures"),
        }
        let _ = std::io::stdout().flush();
    }

    println!();
    println!(
        "summary: median of {} round(s), bench took {:.1} s",
        done.len(),
        started.elapsed().as_secs_f64()
    );
    if done.is_empty() {
        println!("  no figures");
        return;
    }
    let med = |f: fn(&Round) -> Option<f64>| median(done.iter().filter_map(f).collect());
    let table_wall = med(|r| Some(r.table_wall));
    let alone_wall = med(|r| Some(r.alone_wall));
    let ratio = med(|r| Some(r.ratio()));
    let cpu = med(Round::cpu);
    let pct = med(Round::cpu_pct);
    let rss = med(Round::rss);
    let max_rss = done.iter().filter_map(Round::rss).max_by(f64::total_cmp);
    let mut slowest: Vec<&str> = Vec::new();
    for r in &done {
        if !slowest.contains(&r.slowest.as_str()) {
            slowest.push(&r.slowest);
        }
    }
    let check = |v: Option<f64>, ok: fn(f64) -> bool| v.map_or("?", |v| verdict(ok(v)));
    println!("  table wall           {:>8} s", opt(table_wall, 2));
    println!(
        "  slowest alone wall   {:>8} s   ({})",
        opt(alone_wall, 2),
        slowest.join(", ")
    );
    println!(
        "  ratio                {:>8} x   target <= {RATIO_TARGET:.2}   {}",
        opt(ratio, 3),
        check(ratio, |v| v <= RATIO_TARGET)
    );
    println!(
        "  chaosrun cpu         {:>8} s   = {}% of wall   target <= {CPU_PCT_TARGET}%   {}",
        opt(cpu, 2),
        opt(pct, 2),
        check(pct, |v| v < CPU_PCT_TARGET)
    );
    println!(
        "  chaosrun peak rss    {:>8} MB  (max {} MB)   target <= {RSS_MB_TARGET} MB   {}",
        opt(rss, 1),
        opt(max_rss, 1),
        check(rss, |v| v < RSS_MB_TARGET)
    );
}
