//! `chaosrun matrix` on large reports: its time must grow linearly with the
//! rows (issue 48: the quadratic matrix took 2.3 s for 5,000 rows, 10 s for
//! 10,000, 61 s for 20,000 and printed nothing in 120 s for 200,000).
//!
//! `cargo bench --bench matrix` writes, under `CARGO_TARGET_TMPDIR/matrix/`,
//! for each size in `CHAOSRUN_BENCH_MATRIX_ROWS` (default
//! `5000,10000,20000,100000,200000`) two complete reports (one agent ran
//! every row, another every other row in reverse order, so rows are placed
//! across agents), runs `chaosrun matrix A B` on them and prints its wall
//! time, its CPU time (user + sys, getrusage of the child: steadier than
//! the wall on a loaded machine), the CPU per 1,000 rows (flat when linear)
//! and the output size. Figures are printed, never asserted (timing depends
//! on the machine).

mod common;
use common::chaosrun_bin;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const DEFAULT_ROWS: &str = "5000,10000,20000,100000,200000";

/// CPU seconds (user + sys) of this process's waited-for children so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// A complete report of `agent` holding a passing run of each of `ids`.
fn report(path: &Path, agent: &str, ids: &[String]) {
    let scenarios: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| {
            serde_json::json!({"id": id, "verdict": "pass", "checks": [{"invariant": "termination", "name": "faulted_turn_ends", "status": "pass"}]})
        })
        .collect();
    let doc = serde_json::json!({"schema": "chaosrun-report/2", "complete": true,
        "agent": agent, "selected": ids, "scenarios": scenarios});
    std::fs::write(path, doc.to_string()).expect("write report");
}

fn main() {
    let sizes = std::env::var("CHAOSRUN_BENCH_MATRIX_ROWS").unwrap_or(DEFAULT_ROWS.into());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("matrix");
    std::fs::create_dir_all(&dir).expect("bench dir");
    println!(
        "{:>9} {:>8} {:>8} {:>18} {:>10}",
        "rows", "wall s", "cpu s", "cpu ms/1000 rows", "output MB"
    );
    for n in sizes
        .split(',')
        .filter_map(|s| s.trim().parse::<usize>().ok())
    {
        let ids: Vec<String> = (0..n).map(|i| format!("row_{i}")).collect();
        let half: Vec<String> = ids.iter().rev().step_by(2).cloned().collect();
        let (a, b) = (
            dir.join(format!("a-{n}.json")),
            dir.join(format!("b-{n}.json")),
        );
        report(&a, "bundled", &ids);
        report(&b, "other/p.yaml", &half);
        let cpu = children_cpu();
        let start = Instant::now();
        let out = Command::new(chaosrun_bin())
            .arg("matrix")
            .args([&a, &b])
            .stderr(Stdio::inherit())
            .output()
            .expect("chaosrun matrix runs");
        let wall = start.elapsed().as_secs_f64();
        let cpu = children_cpu() - cpu;
        assert!(out.status.success(), "chaosrun matrix failed on {n} rows");
        println!(
            "{n:>9} {wall:>8.3} {cpu:>8.3} {:>18.2} {:>10.1}",
            cpu * 1e6 / n as f64,
            out.stdout.len() as f64 / 1e6
        );
    }
}
