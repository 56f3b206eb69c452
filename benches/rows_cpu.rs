//! chaosrun's own cost per scenario row: CPU (user, sys) per 1,000 generated
//! rows and peak RSS, against the bundled reference agent.
//!
//! `cargo bench --bench rows_cpu` writes a table of `CHAOSRUN_BENCH_ROWS`
//! (default 100) healthy rows (a tool call, then an answer; the probe turn)
//! under `CARGO_TARGET_TMPDIR/rows-cpu/`, runs
//! `chaosrun TABLE --stats --no-progress` on it (default jobs)
//! `CHAOSRUN_BENCH_RUNS` times (default 3, at most 20), and prints
//! chaosrun's own CPU from its `chaosrun self:` line (getrusage of chaosrun
//! itself: the agents it spawns are not counted), scaled to 1,000 rows:
//! each run's, then their median and range, with the largest peak RSS.
//! Then again with the rows' scratch folders on a tmpfs (`/dev/shm`), where
//! there is one. A regression guard, with no absolute target (issue 23's
//! 3 s per 1,000 rows was withdrawn): no change may raise chaosrun's CPU per
//! row by more than 10% on the same machine, measured by running this bench
//! on the base commit and on the change, alternating. Figures are printed,
//! never asserted; the last measured ones are in docs/testing.md.

mod common;
use common::chaosrun_bin;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const DEFAULT_ROWS: usize = 100;
const DEFAULT_RUNS: usize = 3;

/// A table of `n` healthy rows.
fn table(n: usize) -> String {
    let mut t = String::from("scenarios:\n");
    for i in 0..n {
        let _ = write!(
            t,
            r#"  - id: row_{i:05}
    responder:
      - when: {{call: 0}}
        reply: {{kind: tool_call, calls: [{{tool: shell, args: {{command: "echo row {i}"}}}}]}}
      - reply: {{kind: text, text: "done {{{{nonce}}}}"}}
    expect: {{answer: "done {{{{nonce}}}}"}}
"#
        );
    }
    t
}

/// (cpu, user, sys, peak rss MB) from `chaosrun self: cpu X.XX s (user U, sys S), peak rss Y.Y MB`.
fn parse_stats(stderr: &str) -> Option<(f64, f64, f64, f64)> {
    let line = stderr
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("chaosrun self: cpu "))?;
    let num = |s: &str| s.trim().parse::<f64>().ok();
    let (cpu, rest) = line.split_once(" s (user ")?;
    let (user, rest) = rest.split_once(", sys ")?;
    let (sys, rest) = rest.split_once("), peak rss ")?;
    let rss = rest.trim().strip_suffix("MB")?;
    Some((num(cpu)?, num(user)?, num(sys)?, num(rss)?))
}

/// chaosrun's own figures of one run: (cpu, user, sys) seconds, peak RSS MB.
type Figures = (f64, f64, f64, f64);

/// Run the table once (with `TMPDIR` set to `tmp` when given: the rows'
/// scratch folders go there); print its line and return its figures.
fn run_once(path: &Path, rows: usize, tmp: Option<&Path>) -> Option<Figures> {
    let bin = chaosrun_bin();
    let start = Instant::now();
    let mut cmd = Command::new(&bin);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg(path)
        .args(["--stats", "--no-progress"])
        .stdin(Stdio::null());
    if let Some(t) = tmp {
        cmd.env("TMPDIR", t);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let wall = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed"))
        .unwrap_or("(no summary line)");
    if !out.status.success() {
        println!("  warning: chaosrun exited {}", out.status);
    }
    let Some(f) = parse_stats(&stderr) else {
        println!("  no `chaosrun self:` line; stderr tail:");
        let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
        for l in tail.iter().rev() {
            println!("    {l}");
        }
        return None;
    };
    let per = 1000.0 / rows as f64;
    println!(
        "  run: wall {wall:.1} s, {summary}; cpu per 1,000 rows {:.2} s (user {:.2}, sys {:.2}), peak rss {:.1} MB",
        f.0 * per,
        f.1 * per,
        f.2 * per,
        f.3
    );
    Some(f)
}

/// Run the table `runs` times and print the median of chaosrun's own CPU
/// per 1,000 rows (with the range: the same binary varies by about 10%
/// from run to run on a 2-core machine) and the largest peak RSS.
fn measure(path: &Path, rows: usize, runs: usize, tmp: Option<&Path>, label: &str) {
    println!("rows_cpu ({label}): {rows} generated rows, {runs} run(s)");
    let mut all: Vec<Figures> = (0..runs)
        .filter_map(|_| run_once(path, rows, tmp))
        .collect();
    if all.is_empty() {
        return;
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    let per = 1000.0 / rows as f64;
    let (cpu, user, sys, _) = all[all.len() / 2];
    let (low, high) = (all[0].0 * per, all[all.len() - 1].0 * per);
    let rss = all.iter().map(|f| f.3).fold(0.0, f64::max);
    println!(
        "  chaosrun cpu per 1,000 rows {:>7.2} s median (user {:.2}, sys {:.2}; range {low:.2}-{high:.2})",
        cpu * per,
        user * per,
        sys * per
    );
    println!("  chaosrun peak rss          {rss:>7.1} MB (largest)");
    println!(
        "  regression guard, no absolute target: run this bench on the base commit and on the change, alternating, on one machine; the change may raise the median by at most 10%"
    );
}

/// A positive count from the environment variable `var`, at most `max`.
fn count(var: &str, default: usize, max: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0 && n <= max)
        .unwrap_or(default)
}

fn main() {
    let rows = count("CHAOSRUN_BENCH_ROWS", DEFAULT_ROWS, 100_000);
    let runs = count("CHAOSRUN_BENCH_RUNS", DEFAULT_RUNS, 20);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rows-cpu");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join("rows.yaml");
    std::fs::write(&path, table(rows)).expect("write the table");
    measure(&path, rows, runs, None, "temp dir as set");
    // The same rows with their scratch folders on a tmpfs: on a journal-less
    // ext4, each inode chaosrun creates costs a scan of the recently deleted
    // ones (docs/testing.md); this figure is chaosrun's own cost without it.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let scratch = tempfile::tempdir_in(shm).expect("a folder in /dev/shm");
        measure(&path, rows, runs, Some(scratch.path()), "temp dir on tmpfs");
    }
}
