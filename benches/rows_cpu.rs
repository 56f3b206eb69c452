//! chaosrun's own cost per scenario row: CPU (user, sys) per 1,000 generated
//! rows and peak RSS, against the bundled reference agent.
//!
//! `cargo bench --bench rows_cpu` writes a table of `CHAOSRUN_BENCH_ROWS`
//! (default 100) healthy rows (a tool call, then an answer; the probe turn)
//! under `CARGO_TARGET_TMPDIR/rows-cpu/`, runs
//! `chaosrun TABLE --stats --no-progress` on it (default jobs), and prints
//! chaosrun's own CPU from its `chaosrun self:` line (getrusage of chaosrun
//! itself: the agents it spawns are not counted), scaled to 1,000 rows,
//! with its peak RSS; then again with the rows' scratch folders on a tmpfs
//! (`/dev/shm`), where there is one. Issue 23's target: <= 3 s of CPU per 1,000 rows (it was
//! 8.2 s: user 2.3, sys 5.9). Figures are printed, never asserted; the last
//! measured ones are in docs/testing.md.

mod common;
use common::chaosrun_bin;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const DEFAULT_ROWS: usize = 100;
const CPU_PER_1000_TARGET: f64 = 3.0;

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

/// Run the table once (with `TMPDIR` set to `tmp` when given: the rows'
/// scratch folders go there) and print chaosrun's own figures.
fn measure(path: &Path, rows: usize, tmp: Option<&Path>, label: &str) {
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
    println!("rows_cpu ({label}): {rows} generated rows, wall {wall:.1} s, {summary}");
    if !out.status.success() {
        println!("  warning: chaosrun exited {}", out.status);
    }
    let Some((cpu, user, sys, rss)) = parse_stats(&stderr) else {
        println!("  no `chaosrun self:` line; stderr tail:");
        let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
        for l in tail.iter().rev() {
            println!("    {l}");
        }
        return;
    };
    let per = 1000.0 / rows as f64;
    let verdict = if cpu * per <= CPU_PER_1000_TARGET {
        "ok"
    } else {
        "OVER"
    };
    println!(
        "  chaosrun cpu per 1,000 rows {:>7.2} s (user {:.2}, sys {:.2})   target <= {CPU_PER_1000_TARGET} s   {verdict}",
        cpu * per,
        user * per,
        sys * per
    );
    println!("  chaosrun peak rss          {rss:>7.1} MB");
}

fn main() {
    let rows: usize = std::env::var("CHAOSRUN_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_ROWS);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rows-cpu");
    std::fs::create_dir_all(&dir).expect("bench dir");
    let path = dir.join("rows.yaml");
    std::fs::write(&path, table(rows)).expect("write the table");
    measure(&path, rows, None, "temp dir as set");
    // The same rows with their scratch folders on a tmpfs: on a journal-less
    // ext4, each inode chaosrun creates costs a scan of the recently deleted
    // ones (docs/testing.md); this figure is chaosrun's own cost without it.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let scratch = tempfile::tempdir_in(shm).expect("a folder in /dev/shm");
        measure(&path, rows, Some(scratch.path()), "temp dir on tmpfs");
    }
}
