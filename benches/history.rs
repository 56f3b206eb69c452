//! Run history: what `--history` adds to a run, and how fast `chaosrun
//! history` answers over a long history.
//!
//! `cargo bench --bench history`:
//!
//! 1. recording: open a SQLite history (migrated, WAL) and write one run of 50
//!    scenarios with 7 checks each, into a fresh file and into the 10,000-run
//!    file below; target ≤ 50 ms per run (open + write);
//! 2. reading: `chaosrun history DB` (the real binary: text, `--json`,
//!    `--html`, `--agent`) over 10,000 recorded runs of 50 scenarios; target
//!    ≤ 1 s. The file is built once under `CARGO_TARGET_TMPDIR/history-bench/`
//!    (through the library, one transaction per run) and reused.
//!
//! Figures are printed, never asserted.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use chaosrun::history::{CheckRecord, RunRecord, ScenarioRecord, Store};

const SCENARIOS: usize = 50;
const RUNS: i64 = 10_000;
const ROUNDS: usize = 15;
const RECORD_TARGET_MS: f64 = 50.0;
const READ_TARGET_MS: f64 = 1000.0;

fn run(i: i64, checks: usize) -> RunRecord {
    RunRecord {
        chaosrun_version: "bench".into(),
        table_path: Some("scenarios.yaml".into()),
        table_sha256: Some("0".repeat(64)),
        agent: if i % 10 == 0 { "other" } else { "bench-agent" }.into(),
        seed: Some(i.to_string()),
        started_ms: 1_790_000_000_000 + i * 3_600_000,
        finished_ms: 1_790_000_000_000 + i * 3_600_000 + 60_000,
        scenarios: (0..SCENARIOS)
            .map(|s| {
                let fail = (i as usize + s) % 17 == 0;
                ScenarioRecord {
                    id: format!("scenario_{s:02}_with_a_realistic_name"),
                    attempt: 1,
                    verdict: if fail { "fail" } else { "pass" }.into(),
                    seconds: 1.0 + (s as f64) * 0.1 + (i % 7) as f64 * 0.01,
                    main_calls: 3,
                    checks: (0..checks)
                        .map(|c| CheckRecord {
                            invariant: "provider_calls".into(),
                            name: if c == 0 { "call_bound" } else { "other_check" }.into(),
                            status: if fail && c == 0 { "fail" } else { "pass" }.into(),
                            message: if fail && c == 0 {
                                "the faulted turn made 61 provider calls; the bound is 16".into()
                            } else {
                                String::new()
                            },
                        })
                        .collect(),
                }
            })
            .collect(),
        ..RunRecord::default()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Open + write one run of 50 scenarios, `ROUNDS` times; (median, max).
fn recording(db: &Path) -> (Duration, Duration) {
    let times: Vec<Duration> = (0..ROUNDS)
        .map(|i| {
            let r = run(RUNS + 1 + i as i64, 7);
            let t = Instant::now();
            let mut store = Store::open(db.to_str().unwrap(), true).expect("open");
            store.record(&r).expect("record");
            drop(store);
            t.elapsed()
        })
        .collect();
    let max = *times.iter().max().unwrap();
    (median(times), max)
}

fn build(db: &Path) {
    if let Ok(mut s) = Store::open(db.to_str().unwrap(), false) {
        if s.count_runs().unwrap_or(0) >= RUNS {
            println!(
                "reusing {} ({} runs)",
                db.display(),
                s.count_runs().unwrap()
            );
            return;
        }
    }
    let _ = std::fs::remove_file(db);
    let t = Instant::now();
    let mut store = Store::open(db.to_str().unwrap(), true).expect("open");
    for i in 0..RUNS {
        store.record(&run(i, 2)).expect("record");
    }
    println!(
        "built {} ({RUNS} runs of {SCENARIOS} scenarios) in {:.1} s, {:.0} MB",
        db.display(),
        t.elapsed().as_secs_f64(),
        std::fs::metadata(db).map_or(0, |m| m.len()) as f64 / 1e6
    );
}

fn time_cli(label: &str, args: &[&str]) {
    let bin = common::chaosrun_bin();
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let out = Command::new(&bin)
            .args(args)
            .output()
            .expect("chaosrun runs");
        times.push(t.elapsed());
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{label}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let m = ms(median(times));
    println!(
        "{label:<44} {m:>8.1} ms   (target ≤ {READ_TARGET_MS:.0} ms: {})",
        if m <= READ_TARGET_MS { "ok" } else { "OVER" }
    );
}

fn main() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("history-bench");
    std::fs::create_dir_all(&dir).unwrap();

    let fresh = dir.join("fresh.db");
    let _ = std::fs::remove_file(&fresh);
    let (med, max) = recording(&fresh);
    println!(
        "record 1 run x {SCENARIOS} scenarios x 7 checks, fresh file:  median {:.1} ms, max {:.1} ms (target ≤ {RECORD_TARGET_MS:.0} ms)",
        ms(med),
        ms(max)
    );

    let big = dir.join("10k.db");
    build(&big);
    let (med, max) = recording(&big);
    println!(
        "record 1 run x {SCENARIOS} scenarios x 7 checks, 10k-run file: median {:.1} ms, max {:.1} ms (target ≤ {RECORD_TARGET_MS:.0} ms)",
        ms(med),
        ms(max)
    );

    let db = big.to_str().unwrap();
    let html = dir.join("history.html");
    time_cli("chaosrun history DB (last 30)", &["history", db]);
    time_cli("chaosrun history DB --json", &["history", db, "--json"]);
    time_cli(
        "chaosrun history DB --html FILE",
        &["history", db, "--html", html.to_str().unwrap()],
    );
    time_cli(
        "chaosrun history DB --agent bench-agent",
        &["history", db, "--agent", "bench-agent"],
    );
    time_cli(
        "chaosrun history DB --last 1000",
        &["history", db, "--last", "1000"],
    );
}
