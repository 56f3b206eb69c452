//! `chaosrun explore` against the real reference agent: each combination bug
//! and each persistence bug (`--bug`) is found from a fixed seed within a
//! short budget, confirmed, shrunk to at most two faults, and the emitted
//! `--out` row — run as an ordinary table — fails the bug build and passes
//! the healthy one. The hang bug's row carries calibrated deadlines far below
//! the table's 90 s. `--keep-going` reports a finding once with its hits;
//! `--known` (the `--out` table of an earlier run) makes it a known hit. The
//! healthy agent explored for a fixed budget yields nothing. Bad input exits
//! 2. No process outlives a run (looked for by the marker in /proc).

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

/// `(bug, seed, the check its row must break)`: the seeds are ones whose
/// first wave of trials holds the bug's combination (see the README for
/// budgets-to-find).
const BUGS: [(&str, &str, &str); 6] = [
    (
        "sticky_backoff_interrupt",
        "9",
        "reusability / probe_answered",
    ),
    ("resend_batch_minus_one", "29", "history integrity / "),
    ("replay_after_5xx", "3", "exactly-once side effects / "),
    // The persistence bugs: each needs a fault that lasts.
    (
        "nested_retry_after_tool",
        "1",
        "bounded provider calls / call_bound",
    ),
    // Trial 0 of seed 1783 is the finding's least schedule (`[tool,
    // answer]`, a hang from step 1 on that never clears): little to shrink.
    (
        "fallback_no_timeout",
        "1783",
        "bounded termination / faulted_turn_ends",
    ),
    // Trial 0 of seed 51 is the finding (docs/explore.md): the known
    // search after it then runs one trial, not a second long search.
    (
        "shared_retry_budget",
        "51",
        "bounded termination / gave_up_with_retries_left",
    ),
];

/// The bugs whose confirming and shrinking runs each wait out a hang.
const SLOW: [&str; 2] = ["nested_retry_after_tool", "fallback_no_timeout"];

fn no_survivors(mark: &str) {
    let left = wait_unmarked(mark, Duration::from_secs(5));
    kill_marked(mark);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The number N in the finding's `shrunk: N fault(s)` line.
fn shrunk_faults(stdout: &str) -> usize {
    let line = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("shrunk: "))
        .unwrap_or_else(|| panic!("no shrunk line:\n{stdout}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// The row's `turn:` deadline in the finding's printed row.
fn turn_deadline(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("turn: "))
        .unwrap_or_else(|| panic!("no calibrated turn deadline in the row:\n{stdout}"));
    line.parse().unwrap()
}

fn finds(bug: &str, seed: &str, check: &str) -> String {
    let mark = new_mark(bug);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("found.yaml");
    let bug_arg = format!("--agent-arg=--bug={bug}");
    let start = std::time::Instant::now();
    // The two searches whose confirmations wait out hangs confirm less:
    // `fallback_no_timeout`, whose every confirming, shrinking and
    // verifying run waits out a calibrated hang (the test's long pole),
    // once (its emitted row is then run again below, with the bug and
    // without), `nested_retry_after_tool` twice; the rest three times (the
    // default, passed here too).
    let k = match bug {
        "fallback_no_timeout" => "1",
        b if SLOW.contains(&b) => "2",
        _ => "3",
    };
    let run = chaosrun(
        &mark,
        &[
            "explore",
            "--seed",
            seed,
            "--budget",
            "120s",
            "--jobs",
            "2",
            "--confirm",
            k,
            &bug_arg,
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{bug}:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("breaks {check}")),
        "{bug}: wrong check:\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("chaosrun explore --seed {seed}")),
        "{stdout}"
    );
    assert!(stderr.contains(&format!("confirmed {k}/{k}")), "{stderr}");
    assert!(stderr.contains("explore: calibrated on "), "{stderr}");
    assert!(
        stdout.contains(&format!("verified: the row fails alone ({k}/{k})")),
        "{stdout}"
    );
    assert!(
        stderr.contains("tally: 1 distinct new finding(s)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("trial 0 seed "),
        "each trial's seed is printed: {stderr}"
    );
    // A budget shared across the turn's steps is spent by api_max_retries
    // (2) + 1 faults, none persistent: three is that bug's least schedule.
    let most = if bug == "shared_retry_budget" { 3 } else { 2 };
    let faults = shrunk_faults(&stdout);
    assert!(
        (1..=most).contains(&faults),
        "{bug}: {faults} faults:\n{stdout}"
    );
    no_survivors(&mark);
    eprintln!("{bug}: found in {:.0} s", start.elapsed().as_secs_f64());

    // The emitted file is a table: the row fails the bug build on the same
    // invariant, and passes the healthy agent. A race the search confirmed
    // k/k (`sticky_backoff_interrupt`: an interrupt that must land while the
    // 500 is read or backed off) may miss one run on a loaded machine (clean
    // clone run V at 624cfb5: "1 passed" once, 6/6 failed after it on a
    // quiet one): it gets three runs to fail, on the same invariant.
    let table = out.to_str().unwrap();
    let mut runs = Vec::new();
    for _ in 0..3 {
        let with_bug = chaosrun(&mark, &[table, &bug_arg, "--no-progress"]);
        let text = String::from_utf8_lossy(&with_bug.stdout).into_owned();
        let failed = with_bug.status.code() == Some(1);
        runs.push(text);
        if failed {
            break;
        }
    }
    let text = runs.last().unwrap();
    assert!(
        text.contains("0 passed, 1 failed"),
        "{bug}: row with the bug passed {} run(s):\n{}",
        runs.len(),
        runs.join("\n---\n")
    );
    assert!(
        text.contains(check.trim_end_matches(" / ")),
        "{bug}:\n{text}"
    );
    let healthy = chaosrun(&mark, &[table, "--no-progress"]);
    let text = String::from_utf8_lossy(&healthy.stdout);
    assert_eq!(
        healthy.status.code(),
        Some(0),
        "{bug}: row, healthy:\n{text}"
    );
    no_survivors(&mark);
    stdout.into_owned()
}

/// The extra assertions each bug's finding carries beyond [`finds`].
fn check_finding(bug: &str, seed: &str, out: &str) {
    match bug {
        "nested_retry_after_tool" => {
            assert!(out.contains("never clears"), "{out}");
            assert!(out.contains("expect: error"), "{out}");
        }
        "fallback_no_timeout" => {
            assert!(out.contains("kind: hang"), "{out}");
            // The confirmed and shrunk hang waited out a calibrated deadline,
            // far below the table's default 90 s.
            let turn = turn_deadline(out);
            assert!(turn < 60.0, "turn deadline {turn}:\n{out}");
        }
        "shared_retry_budget" => {
            assert!(out.contains("violation: gave up with "), "{out}");
            // The per-turn budget is spent by an episode that lasts then
            // clears, or by api_max_retries + 1 faults spread over steps
            // (what seeds 31 and 51 draw once explore served value faults too).
            assert!(
                out.contains("then clears") || shrunk_faults(out) == 3,
                "{out}"
            );
            known_on_a_second_search(bug, seed, out);
        }
        _ => {}
    }
}

/// The same search, told the finding is known (by the emitted table, whose
/// rows carry their signatures): a known hit, not a finding; exit 0.
fn known_on_a_second_search(b: &str, s: &str, out: &str) {
    let dir = tempfile::tempdir().unwrap();
    let known = dir.path().join("known.yaml");
    let rows: String = out
        .lines()
        .skip_while(|l| !l.contains("row (paste under"))
        .skip(1)
        .map(|l| format!("  {}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    std::fs::write(&known, format!("scenarios:\n{rows}")).unwrap();
    // The same trials again, up to the one that found it.
    let found_at: usize = out
        .split("(trial ")
        .nth(1)
        .and_then(|t| t.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `(trial N,` in the finding:\n{out}"));
    let trials = (found_at + 1).to_string();
    let mark = new_mark("known");
    let bug_arg = format!("--agent-arg=--bug={b}");
    let run = chaosrun(
        &mark,
        &[
            "explore",
            "--seed",
            s,
            "--trials",
            &trials,
            "--jobs",
            "2",
            &bug_arg,
            "--known",
            known.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stdout.contains("FOUND"), "{stdout}");
    assert!(stderr.contains("KNOWN (known signature "), "{stderr}");
    assert!(
        stderr.contains("tally: 0 distinct new finding(s), 1 known hit(s)"),
        "{stderr}"
    );
    no_survivors(&mark);
}

/// Every bug option, old (combination) and new (persistence), searched at
/// once: each search is a separate `chaosrun explore` with its own seed and
/// marker, mostly waiting on the reference agent's faults and deadlines, so
/// running the six side by side costs the longest one's wall, not their sum
/// (each calibrates its deadlines under the same load). Every failure is
/// reported by bug name, all at once.
#[test]
fn finds_every_bug_option_from_its_seed() {
    let searches: Vec<_> = BUGS
        .iter()
        .map(|&(bug, seed, check)| {
            let t = std::thread::spawn(move || {
                let start = std::time::Instant::now();
                check_finding(bug, seed, &finds(bug, seed, check));
                // Which search is the test's long pole (shown with
                // --nocapture, or beside a failure).
                let took = start.elapsed().as_secs_f64();
                eprintln!("{bug}: searched and checked in {took:.0} s");
            });
            (bug, t)
        })
        .collect();
    let failed: Vec<&str> = searches
        .into_iter()
        .filter_map(|(bug, t)| t.join().is_err().then_some(bug))
        .collect();
    assert!(
        failed.is_empty(),
        "not found or wrongly reported (panics above): {failed:?}"
    );
}

#[test]
fn the_healthy_agent_yields_nothing() {
    let mark = new_mark("healthy");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("found.yaml");
    let run = chaosrun(
        &mark,
        &[
            "explore",
            "--seed",
            "1",
            "--trials",
            "6",
            "--jobs",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stdout.contains("FOUND"), "{stdout}");
    assert!(stderr.contains(" 0 failure(s)"), "{stderr}");
    assert!(!out.exists(), "nothing found, nothing written");
    // It ran its six trials (a count, not a budget: under load a budget
    // buys fewer), each judged pass.
    assert_eq!(stderr.matches(": pass (").count(), 6, "{stderr}");
    no_survivors(&mark);
}

fn exit2(args: &[&str], needle: &str) {
    let run = chaosrun("explore-bad", args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
}

#[test]
fn bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("exists.yaml");
    std::fs::write(&existing, "keep me").unwrap();
    let bad = dir.path().join("explore.yaml");
    std::fs::write(&bad, "weights:\n  error_500: 0.1\n  nope: 1\n").unwrap();
    let p = |p: &Path| p.to_str().unwrap().to_string();
    exit2(&["explore", "--budget", "0s"], "--budget");
    exit2(&["explore", "--budget", "25h"], "--budget");
    exit2(&["explore", "--budget", "ten"], "--budget");
    exit2(&["explore", "--weight", "typo=1"], "unknown kind");
    exit2(&["explore", "--weight", "hang=-1"], "weights");
    exit2(&["explore", "--config", &p(&bad)], "explore.yaml:3:");
    exit2(&["explore", "--out", &p(&existing)], "exists");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");
    exit2(&["explore", "--agent", "/no/such/agent"], "");
    exit2(&["explore", "--deadline-scale", "0"], "--deadline-scale");
    exit2(&["explore", "--known", "/no/such/report.json"], "--known");
    // A hand-written table names no signature: say what to give instead.
    exit2(&["explore", "--known", "scenarios.yaml"], "JSON report");
    let bad_report = dir.path().join("r.json");
    std::fs::write(&bad_report, "{\"schema\": 1}").unwrap();
    exit2(
        &["explore", "--known", &p(&bad_report)],
        "not a chaosrun JSON report",
    );
}

#[test]
fn dry_run_prints_the_same_trials_for_the_same_seed() {
    let a = chaosrun(
        "dry",
        &["explore", "--dry-run", "--seed", "7", "--trials", "3"],
    );
    let b = chaosrun(
        "dry",
        &["explore", "--dry-run", "--seed", "7", "--trials", "3"],
    );
    assert_eq!(a.status.code(), Some(0));
    assert_eq!(a.stdout, b.stdout);
    let text = String::from_utf8_lossy(&a.stdout);
    assert_eq!(text.matches("\n- id: trial_").count(), 3, "{text}");
    // What it prints is a table the ordinary loader takes.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("t.yaml");
    std::fs::write(&f, &a.stdout).unwrap();
    let list = chaosrun("dry", &[f.to_str().unwrap(), "--list"]);
    assert_eq!(
        list.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
}

#[test]
fn sigint_stops_the_search_with_nothing_left_behind() {
    use std::process::Stdio;
    let mark = new_mark("explore-sigint");
    let mut child = command(
        &mark,
        &["explore", "--seed", "1", "--budget", "10m", "--jobs", "2"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Wait (bounded) until a trial's agent is running.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !marked(&mark).iter().any(|p| p.contains("agent.py")) {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            kill_marked(&mark);
            panic!("no trial agent ever ran");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let ok = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted; stopping"), "{err}");
    no_survivors(&mark);
}
