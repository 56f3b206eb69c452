//! Process faults on the agent itself (process_faults.yaml): the reference
//! agent, which resumes its durable session, passes every scenario with every
//! check made, including a seeded chaos run where at least 20 kills and stops
//! land and the same seed draws the same schedule; each of its restart bugs is
//! caught on its own invariant only. The kernel's OOM kill
//! (`oom_kill_mid_turn`) has its own test: it needs root and a memory cgroup
//! controller.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn reference_agent_survives_kills_stops_and_seeded_chaos() {
    let mark = new_mark("pf");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("pf.json");
    let replay = dir.path().join("replay.json");
    // The whole table, and the chaos run alone with the same seed, at once.
    let (m, r) = (new_mark("pf-replay"), replay.clone());
    let second = std::thread::spawn(move || {
        chaosrun(
            &m,
            &[
                "process_faults.yaml",
                "--only",
                "chaos_soak",
                "--seed",
                "7",
                "--json",
                r.to_str().unwrap(),
            ],
        )
    });
    let out = chaosrun(
        &mark,
        &[
            "process_faults.yaml",
            "--seed",
            "7",
            // Needs a memory cgroup controller: its own test below. The
            // store_damage_* rows need a JSONL store (tests/store_damage.rs).
            "--skip",
            "oom_kill_mid_turn,store_damage_truncate_last,store_damage_nul_tail,store_damage_fuse_records,store_damage_concurrent_append",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("12 passed, 0 failed"), "{stdout}");
    assert!(
        stdout.contains("[chaos seed "),
        "the report prints the chaos seed: {stdout}"
    );
    let report = read_json(&json);
    let skipped = skipped_checks(&report, &[]);
    assert!(skipped.is_empty(), "skipped: {skipped:#?}");
    // Every row carries evidence that its fault landed.
    for s in report["scenarios"].as_array().unwrap() {
        let checks = s["checks"].as_array().unwrap();
        assert!(
            checks.iter().any(|c| c["invariant"] == "exercised")
                && checks
                    .iter()
                    .filter(|c| c["invariant"] == "exercised")
                    .all(|c| c["status"] == "pass"),
            "no exercised evidence: {s}"
        );
    }
    // The journal checks ran where the table has side effects or heartbeats.
    let names: Vec<String> = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["checks"].as_array().unwrap().iter())
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    for want in [
        "no_side_effect_twice",
        "finished_calls_journalled_once",
        "background_silent_after_death",
        "resumes_after_kill",
        "store_kept_across_kill",
        "enough_faults_landed",
        "every_turn_finishes",
        "exits_on_hangup",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} never checked");
    }
    let chaos = |r: &serde_json::Value| scenario(r, "chaos_soak")["chaos"].clone();
    let first = chaos(&report);
    let landed = first["kills"].as_u64().unwrap() + first["stops"].as_u64().unwrap();
    assert!(landed >= 20, "only {landed} faults landed: {first}");
    assert!(first["kills"].as_u64().unwrap() > 0 && first["stops"].as_u64().unwrap() > 0);
    let again = second.join().unwrap();
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let replayed = chaos(&read_json(&replay));
    assert_eq!(first["seed"], replayed["seed"]);
    assert_eq!(
        first["schedule"], replayed["schedule"],
        "the same seed draws the same schedule"
    );
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A slow setup (a loaded machine: the namespace and the provider start
/// seconds after the run's clock) must not move the provider's request
/// times on that clock: measured from before the setup, every call looked
/// that much earlier, and a restarted agent's background job was charged to
/// the incarnation killed before it ("still wrote to the journal 7.3 s after
/// the restarted agent was ready" on the old head, with 5 s).
#[test]
fn a_slow_setup_does_not_move_request_times() {
    let mark = new_mark("pf-slow");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("slow.json");
    let out = command(
        &mark,
        &[
            "process_faults.yaml",
            "--only",
            "chaos_soak,kill_with_background_job",
            "--seed",
            "7",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .env("CHAOSRUN_TEST_SLOW_SETUP", "5")
    .output()
    .expect("chaosrun runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let report = read_json(&json);
    for id in ["chaos_soak", "kill_with_background_job"] {
        let check = scenario(&report, id)["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "background_silent_after_death")
            .cloned()
            .unwrap_or_else(|| panic!("{id}: background_silent_after_death not made"));
        assert_eq!(check["status"], "pass", "{id}: {check}");
    }
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Busy loops that load the machine while they live: each a child of this
/// test, killed (by its own pid) and reaped when dropped, and killed by the
/// kernel if the test dies first (`PR_SET_PDEATHSIG`: a test binary killed
/// mid-run, as by a CI run stopped by hand, once left eight loops spinning
/// for the next run on the machine).
struct BusyLoops(Vec<std::process::Child>);

impl BusyLoops {
    fn start(n: usize) -> BusyLoops {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as libc::pid_t;
        BusyLoops(
            (0..n)
                .map(|_| {
                    let mut cmd = std::process::Command::new("sh");
                    cmd.args(["-c", "while :; do :; done"]);
                    // SAFETY: between fork and exec only async-signal-safe
                    // calls (prctl, getppid, _exit).
                    unsafe {
                        cmd.pre_exec(move || {
                            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                            if libc::getppid() != parent {
                                libc::_exit(0);
                            }
                            Ok(())
                        });
                    }
                    cmd.spawn().expect("sh starts")
                })
                .collect(),
        )
    }
}

impl Drop for BusyLoops {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The reference process-fault table passes three times in a row with 8
/// busy loops on the machine's cores: no verdict of the table depends on
/// the load (issue 47.10a: `chaos_soak` failed
/// `background_silent_after_death` at load ~20).
#[test]
#[ignore = "load test: run by scripts/test.sh"]
fn the_table_holds_under_load() {
    let busy = BusyLoops::start(8);
    let mut results = Vec::new();
    for run in 1..=3 {
        let mark = new_mark(&format!("pf-load{run}"));
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("load.json");
        let out = chaosrun(
            &mark,
            &[
                "process_faults.yaml",
                "--skip",
                "oom_kill_mid_turn",
                // 60 turns; its memory per turn has its own test below.
                "--skip",
                "long_session_tool_output",
                "--json",
                json.to_str().unwrap(),
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let summary = stdout.lines().last().unwrap_or_default().to_string();
        eprintln!("load run {run}: exit {:?}, {summary}", out.status.code());
        kill_marked(&mark);
        results.push((out.status.code(), stdout));
    }
    drop(busy);
    for (run, (code, stdout)) in results.iter().enumerate() {
        assert_eq!(*code, Some(0), "load run {}:\n{stdout}", run + 1);
        assert!(stdout.contains("11 passed, 0 failed"), "{stdout}");
    }
}

/// A chaos row whose conversation cannot keep pace with its declaration
/// (30 turns of 2 s each, a 2 s duration, 6 s turn deadline) is cut at the
/// bound its declaration gives, which its report prints: a named violation
/// of `every_turn_finishes`, the probe not checked for that same cause, and
/// no run of all 30 turns (on the old head the row ran every turn and
/// passed).
#[test]
fn a_chaos_row_is_cut_at_its_bound() {
    const TABLE: &str = r#"
defaults:
  knobs: {model: fake-model, stale_timeout: 3, request_timeout: 5, api_max_retries: 2, max_turns: 8, tool_timeout: 10}
  deadlines: {boot: 5, turn: 6, interrupt: 5, probe: 5, exit: 10, reap: 5}
  max_calls: 16
scenarios:
  - id: slow_chaos
    about: 30 turns of 2 s each over a 2 s chaos duration
    chaos: {turns: 30, duration: 2, interval: [0.5, 0.8], kill_share: 0, stop_for: [0.2, 0.3], min_faults: 1}
    responder:
      - when: {after_tool: false}
        reply: {kind: tool_call, calls: [{tool: shell, args: {command: "sleep 2; echo slept-{{call}}"}}]}
      - reply: {kind: text, text: "turn done {{nonce}}"}
    expect: survives
    calls: {max: 6}
"#;
    let mark = new_mark("pf-cut");
    let dir = tempfile::tempdir().unwrap();
    let (table, json) = (dir.path().join("t.yaml"), dir.path().join("r.json"));
    std::fs::write(&table, TABLE).unwrap();
    let out = chaosrun(
        &mark,
        &[
            table.to_str().unwrap(),
            "--seed",
            "7",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = read_json(&json);
    let row = scenario(&report, "slow_chaos");
    let bound = row["chaos"]["bound"]
        .as_f64()
        .expect("the report carries the bound");
    assert!(bound > 2.0, "{row}");
    assert!(
        stdout.contains(&format!("; bound {bound:.0} s]")),
        "the row's line prints its bound: {stdout}"
    );
    let checks = row["checks"].as_array().unwrap();
    let named = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not made: {row}"))
    };
    let turns = named("every_turn_finishes");
    assert_eq!(turns["status"], "fail", "{turns}");
    assert!(
        turns["violations"]
            .to_string()
            .contains(&format!("reached its bound of {bound:.0} s")),
        "{turns}"
    );
    let probe = named("probe");
    assert_eq!(probe["status"], "not_checked", "{probe}");
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An exec-mode CLI's turn start-ups (a 3 s silent boot per turn, 15
/// processes: 45 s of sleeping, past the row's bound) do not count against
/// the chaos bound: each is bounded by the boot deadline on its own, and a
/// CLI that keeps pace once running passes.
#[test]
fn exec_start_ups_do_not_count_against_the_chaos_bound() {
    const TABLE: &str = r#"
defaults:
  knobs: {model: fake-model, stale_timeout: 3, request_timeout: 5, api_max_retries: 2, max_turns: 8, tool_timeout: 10}
  deadlines: {boot: 5, turn: 6, interrupt: 5, probe: 5, exit: 10, reap: 5}
  max_calls: 16
scenarios:
  - id: exec_chaos
    about: 14 turns of a CLI whose every start-up takes 3 s, over a 2 s chaos duration
    chaos: {turns: 14, duration: 2, interval: [0.5, 0.8], kill_share: 0, stop_for: [0.2, 0.3], min_faults: 1}
    responder:
      - reply: {kind: text, text: "turn done {{nonce}}"}
    expect: survives
    calls: {max: 6}
"#;
    let mark = new_mark("pf-exec-cut");
    let dir = tempfile::tempdir().unwrap();
    let (table, json) = (dir.path().join("t.yaml"), dir.path().join("r.json"));
    std::fs::write(&table, TABLE).unwrap();
    let args = [
        table.to_str().unwrap(),
        "--agent",
        "tests/fixtures/agents/oneshot_cli.yaml",
        "--seed",
        "7",
        "--json",
        json.to_str().unwrap(),
    ];
    let out = command(&mark, &args)
        .env("ONESHOT_STARTUP", "--startup-sleep=3")
        .output()
        .expect("chaosrun runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let row = scenario(&read_json(&json), "exec_chaos").clone();
    let bound = row["chaos"]["bound"].as_f64().unwrap();
    // The start-ups' sleeps alone outlast the bound.
    assert!(15.0 * 3.0 > bound, "{row}");
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn restart_bugs_are_caught_on_their_own_invariant() {
    let cases = [
        // The terminal closed and the agent ran on (claude-code #20117).
        (
            "hangup_ignored",
            "hangup_mid_turn",
            "process_hygiene",
            "after its terminal closed",
        ),
        (
            "replay_side_effect",
            "kill_during_tool_side_effect",
            "side_effects",
            "happened 2 times",
        ),
        (
            "orphan_bg_on_restart",
            "kill_with_background_job",
            "process_hygiene",
            "still wrote to the journal",
        ),
        (
            "lost_result_on_restart",
            "kill_during_tool_side_effect",
            "history_integrity",
            "without its result",
        ),
        (
            "resume_rolls_back_turn",
            "kill_at_store_write",
            "store_integrity",
            "gone after the restart",
        ),
        // Lost at the kill itself: only the copy taken when the trigger
        // armed shows it (the copy at the kill is already short).
        (
            "nonatomic_rewrite",
            "kill_at_store_write",
            "store_integrity",
            "the store held when the kill's trigger armed are gone as the kill left it",
        ),
        (
            "trusts_started_stream",
            "machine_sleeps_mid_stream",
            "termination",
            "deadline",
        ),
        (
            "replay_from_zero",
            "kill_mid_stream",
            "termination",
            "with start_turn 1 began with turn_start 0",
        ),
        // Counting `ready` events is not enough: every resumed incarnation
        // of the soak must start where it was told.
        (
            "replay_from_zero",
            "chaos_soak",
            "termination",
            "began with turn_start 0; a restarted agent must emit turn_start",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let handles: Vec<_> = cases
        .iter()
        .map(|&(bug, scenario, invariant, says)| {
            let json = dir.path().join(format!("{bug}-{scenario}.json"));
            let mark = new_mark(bug);
            let (j, m) = (json.clone(), mark.clone());
            let h = std::thread::spawn(move || {
                chaosrun(
                    &m,
                    &[
                        "process_faults.yaml",
                        "--only",
                        scenario,
                        &format!("--agent-arg=--bug={bug}"),
                        "--json",
                        j.to_str().unwrap(),
                    ],
                )
            });
            (bug, scenario, invariant, says, json, mark, h)
        })
        .collect();
    let mut problems = Vec::new();
    for (bug, scenario, invariant, says, json, mark, h) in handles {
        let out = h.join().unwrap();
        if out.status.code() != Some(1) {
            problems.push(format!(
                "{bug}: exit {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout)
            ));
            continue;
        }
        let report = read_json(&json);
        let failed = failed_invariants(&report, scenario);
        // Replaying from turn 0 also persists turn 0's user message again,
        // which the store's duplicate-user-turn check catches as well.
        let also_store = bug == "replay_from_zero"
            && failed == ["history_integrity", invariant]
            && report.to_string().contains("twice in a row");
        if failed != [invariant] && !also_store {
            problems.push(format!(
                "{bug}: failed {failed:?}, expected only [{invariant}]"
            ));
        }
        if !report.to_string().contains(says) {
            problems.push(format!("{bug}: no violation says {says:?}"));
        }
        let left = wait_unmarked(&mark, Duration::from_secs(5));
        kill_marked(&mark);
        if !left.is_empty() {
            problems.push(format!("{bug}: left behind {left:?}"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// oom_kill_mid_turn on every wire: the kernel OOM-kills the reference agent
/// mid-turn and the restarted agent passes. The kill is proven apart from
/// chaosrun's own reading of the cgroup counter: the agent runs as the child
/// of a wrapper (tests/fixtures/agents/oom_witness.sh) that chaosrun alone
/// signals, and the wrapper saw its child die of SIGKILL.
#[test]
#[ignore = "needs a memory cgroup controller (root; scripts/test.sh runs it)"]
fn the_kernel_oom_kills_the_agent_mid_turn_and_it_resumes() {
    let _one = OOM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let gap = chaosrun::proc_hygiene::memory_limit::host_gap();
    require(
        "a memory cgroup controller",
        gap.is_none(),
        &format!("run as root with a v2 or v1 memory controller ({gap:?})"),
    );
    let runs: Vec<_> = ["openai-chat", "openai-responses", "anthropic", "gemini"]
        .into_iter()
        .map(|wire| {
            let mark = new_mark(&format!("oom-{wire}"));
            let dir = tempfile::tempdir().unwrap();
            let (m, d) = (mark.clone(), dir.path().to_path_buf());
            let h = std::thread::spawn(move || {
                let (art, json) = (d.join("art"), d.join("r.json"));
                let out = chaosrun(
                    &m,
                    &[
                        "process_faults.yaml",
                        "--only",
                        "oom_kill_mid_turn",
                        "--agent",
                        "tests/fixtures/agents/oom_witness.yaml",
                        "--wire",
                        wire,
                        "--artifacts",
                        art.to_str().unwrap(),
                        "--keep-all",
                        "--json",
                        json.to_str().unwrap(),
                    ],
                );
                (out, art, json)
            });
            (wire, mark, dir, h)
        })
        .collect();
    for (wire, mark, _dir, h) in runs {
        let (out, art, json) = h.join().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{wire}: {stdout}");
        assert!(stdout.contains("OOM-killed under"), "{wire}: {stdout}");
        let report = read_json(&json);
        let skipped = skipped_checks(&report, &[]);
        assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
        // The report names the OOM kill, in the published schema.
        let oom = &scenario(&report, "oom_kill_mid_turn")["oom_kill"];
        assert!(oom["oom_kills"].as_u64() >= Some(1), "{wire}: {oom}");
        let schema = read_json(&repo().join("docs/report-schema.json"));
        let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(&report)
            .map(|e| format!("{}: {e}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{wire}: {errors:#?}");
        // The wrapper's own record: its first child (the agent of the
        // faulted turn) died of SIGKILL, which chaosrun never sent it.
        let log = std::fs::read_to_string(art.join("oom_kill_mid_turn/home/oom-witness.log"))
            .unwrap_or_else(|e| panic!("{wire}: no witness log: {e}"));
        // Each wrapper logs `start PID`, then its child's exit status.
        let first = log.lines().nth(1).unwrap_or_default();
        assert_eq!(first, "137", "{wire}: the first wrapper's log: {log}");
        let left = wait_unmarked(&mark, Duration::from_secs(5));
        kill_marked(&mark);
        assert!(left.is_empty(), "{wire}: left behind: {left:?}");
    }
}

/// oom_kill_mid_turn with the agent's memory in a child process (issue
/// 47.7, mistral-vibe's engine): the reference agent with `--engine-child`
/// runs the row's tool under an engine of its own that allocates and is the
/// OOM killer's pick. The kill of that engine is the agent's OOM: it lands
/// (`process_fault_landed`), chaosrun records it when the kernel says so,
/// before the agent's own `turn_end` of the faulted turn (the order of the
/// recorded events, not wall time), and the agent, which lived on and
/// answered, is never restarted, so no process is restarted after the
/// session closed and `exits_by_itself` judges the agent itself. On the old
/// head the kill was noticed only when the whole session had closed, called
/// "not the agent", and the agent restarted after `closed`.
#[test]
#[ignore = "needs a memory cgroup controller (root; scripts/test.sh runs it)"]
fn the_oom_kill_of_the_agents_engine_child_is_the_agents_and_is_noticed_at_once() {
    let _one = OOM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let gap = chaosrun::proc_hygiene::memory_limit::host_gap();
    require(
        "a memory cgroup controller",
        gap.is_none(),
        &format!("run as root with a v2 or v1 memory controller ({gap:?})"),
    );
    for wire in ["openai-chat", "anthropic"] {
        let mark = new_mark(&format!("oom-engine-{wire}"));
        let dir = tempfile::tempdir().unwrap();
        let (art, json) = (dir.path().join("art"), dir.path().join("r.json"));
        let out = chaosrun(
            &mark,
            &[
                "process_faults.yaml",
                "--only",
                "oom_kill_mid_turn",
                "--agent-arg=--engine-child",
                "--wire",
                wire,
                "--artifacts",
                art.to_str().unwrap(),
                "--keep-all",
                "--json",
                json.to_str().unwrap(),
            ],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{wire}: {stdout}");
        let report = read_json(&json);
        let checks = scenario(&report, "oom_kill_mid_turn")["checks"]
            .as_array()
            .unwrap()
            .clone();
        let status = |name: &str| {
            let c = checks.iter().find(|c| c["name"] == name);
            c.map(|c| c["status"].as_str().unwrap_or_default().to_string())
        };
        assert_eq!(
            status("process_fault_landed").as_deref(),
            Some("pass"),
            "{wire}: {checks:#?}"
        );
        assert_eq!(
            status("kill_landed_mid_turn").as_deref(),
            Some("pass"),
            "{wire}"
        );
        assert_eq!(status("exits_by_itself").as_deref(), Some("pass"), "{wire}");
        assert_eq!(
            status("resumes_after_kill").as_deref(),
            Some("not_checked"),
            "{wire}"
        );
        // `termination/resumes_after_kill` has nothing to resume; and the row
        // is over in under half a second, so on a host whose memory cgroup
        // keeps no `memory.peak` (v1) the twice-a-second sampler may have no
        // figure: `memory_bounded` is then honestly not checked. Neither is
        // what this test is about (who the OOM kill belongs to, and when).
        let skipped = skipped_checks(&report, &["termination", "memory"]);
        assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
        // The kernel killed the engine, not the agent (the agent said so).
        let row = art.join("oom_kill_mid_turn");
        let stderr = std::fs::read_to_string(row.join("stderr.log")).unwrap();
        assert!(stderr.contains("was killed by SIGKILL"), "{wire}: {stderr}");
        // The order of what was recorded: the OOM, then the faulted turn's
        // end, the probe, `closed`; no restart at all.
        let obs = read_json(&row.join("observation.json"));
        let events: Vec<&serde_json::Value> = obs["events"].as_array().unwrap().iter().collect();
        let first = |ev: &str, i: Option<u64>| {
            events
                .iter()
                .position(|e| e["ev"] == ev && i.is_none_or(|i| e["i"] == i))
                .unwrap_or_else(|| panic!("{wire}: no {ev} {i:?} in {events:#?}"))
        };
        let (oom, end0, closed) = (
            first("oom_kill", None),
            first("turn_end", Some(0)),
            first("closed", None),
        );
        assert!(
            events[oom]["oom_kills"].as_u64() >= Some(1),
            "{wire}: {}",
            events[oom]
        );
        // Recorded as it happened: before `closed`, and no later than the
        // notice lag after the faulted turn's end (an agent that hears of its
        // engine's death at once can end its turn a millisecond before the
        // kernel's notice is read; the old head noticed only after `closed`).
        assert!(oom < closed && end0 < closed, "{wire}: {events:#?}");
        let (oom_at, end_at) = (events[oom]["at"].as_f64(), events[end0]["at"].as_f64());
        assert!(
            oom_at
                .zip(end_at)
                .is_some_and(|(o, e)| o <= e + chaosrun::oracle::OOM_NOTICE_LAG),
            "{wire}: the OOM was recorded long after the turn it cut had ended: {events:#?}"
        );
        assert!(
            !events.iter().any(|e| e["ev"] == "restarted"),
            "{wire}: {events:#?}"
        );
        let left = wait_unmarked(&mark, Duration::from_secs(5));
        kill_marked(&mark);
        assert!(left.is_empty(), "{wire}: left behind: {left:?}");
    }
}

/// The OOM tests, one at a time: a_cancelled_oom_row_leaves_no_memory_cgroup
/// counts the memory cgroups that appear while it runs, so another OOM
/// test's cgroup must not appear meanwhile.
static OOM_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The OOM row's v1 memory cgroups (`chaosrun-oom-*`) under this process's
/// own v1 memory cgroup (where chaosrun, its child, makes them), listed from
/// /proc/self/cgroup and /proc/self/mountinfo, not through chaosrun.
fn oom_cgroups() -> Vec<std::path::PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut f = post.split_whitespace();
        (f.next()? == "cgroup" && f.nth(1)?.split(',').any(|o| o == "memory"))
            .then(|| pre.split_whitespace().nth(4).map(std::path::PathBuf::from))?
    });
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own = own.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',')
            .any(|c| c == "memory")
            .then(|| path.trim_start_matches('/').to_string())
    });
    let (Some(mount), Some(own)) = (mount, own) else {
        return Vec::new();
    };
    std::fs::read_dir(mount.join(own))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("chaosrun-oom-"))
        .map(|e| e.path())
        .collect()
}

/// A chaosrun killed (SIGKILL: no handler, no drop runs) while its OOM row
/// holds the agent under a v1 memory limit (the tool sleeps, so the kernel
/// never kills) leaves no memory cgroup behind: its guard sweeps the run's.
/// Listed independently of chaosrun, before and after. (A SIGTERM ends the
/// row through its own removal; a dropped row, through the limit's `Drop`:
/// memory_limit's `a_dropped_limit_removes_its_cgroup`.)
#[test]
#[ignore = "needs root and a memory cgroup"]
fn a_cancelled_oom_row_leaves_no_memory_cgroup() {
    let _one = OOM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let gap = chaosrun::proc_hygiene::memory_limit::host_gap();
    require(
        "a memory cgroup controller",
        gap.is_none(),
        &format!("run as root with a v2 or v1 memory controller ({gap:?})"),
    );
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("oom_hold.yaml");
    std::fs::write(
        &table,
        "defaults:\n  knobs: {model: fake-model, stale_timeout: 3, request_timeout: 5, api_max_retries: 2, max_turns: 8, tool_timeout: 600}\n  deadlines: {boot: 120, turn: 300, interrupt: 15, probe: 60, exit: 30, reap: 15}\nscenarios:\n  - id: oom_held\n    about: the limit is set and the tool sleeps under it\n    responder:\n      - when: {after_tool: false}\n        reply: {kind: tool_call, calls: [{tool: shell, args: {command: \"sleep 300\"}}]}\n      - reply: {kind: text, text: \"done {{nonce}}\"}\n    process_fault: {action: oom, at: {after_calls: 1}, headroom_mb: 512}\n    expect: killed\n",
    )
    .unwrap();
    let before = oom_cgroups();
    let mark = new_mark("oom-cancel");
    let mut child = command(&mark, &[table.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The row's cgroup, once the limit is set (a condition, bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let made = loop {
        let new: Vec<_> = oom_cgroups()
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        if !new.is_empty() || std::time::Instant::now() > deadline {
            break new;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if made.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        kill_marked(&mark);
        panic!("the OOM row never made a v1 memory cgroup (a v2 host keeps the limit in the scenario's own cgroup)");
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    // The guard (marked too) has swept once no marked process is left.
    let left = wait_unmarked(&mark, Duration::from_secs(60));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
    let remaining: Vec<_> = made.iter().filter(|p| p.exists()).collect();
    assert!(
        remaining.is_empty(),
        "chaosrun ({status:?}) left its OOM row's memory cgroup(s): {remaining:?}"
    );
}

/// A soak whose profile maps no `background` argument runs without its
/// background calls; the row says the share of its scheduled tool calls
/// that ran, under its line and as `exercised/schedule_ran` not checked
/// with the profile's gap, never as a plain pass (issue 47.11).
#[test]
fn a_soak_whose_profile_maps_no_background_says_the_share_that_ran() {
    let dir = tempfile::tempdir().unwrap();
    let agent = repo().join("examples/reference/agent.py");
    let yaml = std::fs::read_to_string(repo().join("examples/reference/agent.yaml")).unwrap();
    let without = yaml
        .replace("{{profile_dir}}/agent.py", agent.to_str().unwrap())
        .replace(", background: background}", "}");
    assert_ne!(
        without,
        yaml.replace("{{profile_dir}}/agent.py", agent.to_str().unwrap())
    );
    let profile = dir.path().join("no-background.yaml");
    std::fs::write(&profile, without).unwrap();
    let json = dir.path().join("r.json");
    let mark = new_mark("pf-part");
    let out = chaosrun(
        &mark,
        &[
            "process_faults.yaml",
            "--only",
            "chaos_soak",
            "--seed",
            "7",
            "--agent",
            profile.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = read_json(&json);
    let s = scenario(&report, "chaos_soak");
    let part = s["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "schedule_ran")
        .unwrap_or_else(|| panic!("no schedule_ran: {s}"));
    assert_eq!(part["status"], "not_checked", "{part}");
    let why = part["reason"].as_str().unwrap();
    let (ran, all) = why
        .strip_prefix("part of the row did not run: ")
        .and_then(|w| w.split_once(" tool calls"))
        .and_then(|(n, _)| n.split_once(" of "))
        .map(|(a, b)| (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()))
        .unwrap_or_else(|| panic!("{why}"));
    assert!(0 < ran && ran < all, "{why}");
    assert!(
        why.contains("maps no `background` argument; map it to run the whole row"),
        "{why}"
    );
    assert!(
        stdout.contains(
            "\n      ran in part (fault exercised / schedule_ran): part of the row did not run: "
        ),
        "{stdout}"
    );
}

/// The long session (`long_session_tool_output`, 60 turns in one process)
/// over ACP passes the reference agent (the driver protocol's run is the
/// whole table's, above), and `history_copies_per_turn` (a copy of the
/// history kept per turn) fails `memory_per_turn` alone, over the driver
/// protocol and over ACP. On the old head the row's `memory_per_turn_mb`
/// was an unknown key (a load error), and nothing judged growth per turn.
#[test]
fn a_long_session_bounds_memory_per_turn_on_both_drives() {
    let dir = tempfile::tempdir().unwrap();
    let runs = [
        ("reference-acp", None),
        ("reference", Some("history_copies_per_turn")),
        ("reference-acp", Some("history_copies_per_turn")),
    ];
    let handles: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, &(agent, bug))| {
            let json = dir.path().join(format!("long{i}.json"));
            let mark = new_mark(&format!("long{i}"));
            let (j, m) = (json.clone(), mark.clone());
            let h = std::thread::spawn(move || {
                let mut args = vec![
                    "--agent".to_string(),
                    agent.to_string(),
                    "process_faults.yaml".into(),
                    "--only".into(),
                    "long_session_tool_output".into(),
                    "--json".into(),
                    j.to_str().unwrap().to_string(),
                ];
                args.extend(bug.map(|b| format!("--agent-arg=--bug={b}")));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                chaosrun(&m, &args)
            });
            (agent, bug, json, mark, h)
        })
        .collect();
    let mut problems = Vec::new();
    for (agent, bug, json, mark, h) in handles {
        let out = h.join().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let want = if bug.is_some() { 1 } else { 0 };
        if out.status.code() != Some(want) {
            problems.push(format!("{agent} {bug:?}: exit {:?}\n{stdout}", out.status));
            continue;
        }
        let report = read_json(&json);
        let row = "long_session_tool_output";
        let status = scenario(&report, row)["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "memory_per_turn")
            .map(|c| c["status"].clone());
        let failed = failed_invariants(&report, row);
        match bug {
            None if status != Some("pass".into()) => {
                problems.push(format!("{agent}: memory_per_turn {status:?}\n{stdout}"))
            }
            Some(_) if status != Some("fail".into()) || failed != ["memory"] => problems.push(
                format!("{agent} {bug:?}: memory_per_turn {status:?}, failed {failed:?}"),
            ),
            Some(_) if !report.to_string().contains("MB per turn over") => {
                problems.push(format!("{agent} {bug:?}: no violation says the slope"))
            }
            _ => {}
        }
        let left = wait_unmarked(&mark, Duration::from_secs(5));
        kill_marked(&mark);
        if !left.is_empty() {
            problems.push(format!("{agent} {bug:?}: left behind {left:?}"));
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}
