//! Fair timing for one-shot CLIs (exec mode): the fixture CLI
//! (tests/fixtures/agents/oneshot_cli.py) sleeps `--startup-sleep S` before
//! its first request, like a Node CLI on a loaded machine. A turn's deadline
//! runs from that first request, its start-up is bounded by the boot
//! deadline and reported, and a chaos row's faults land in a turn's working
//! time. Survivors are looked for by the test's marker in /proc.

mod common;

use common::*;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/oneshot_cli.yaml";

/// A start-up of 2.5 s and a turn of a 2.5 s tool within a 4 s turn
/// deadline (and a 4 s probe deadline): fair only if the start-up is not in
/// the turn's time. The boot deadline bounds the start-up.
const TABLE: &str = r#"
defaults:
  knobs: {model: fake-model, stale_timeout: 5, request_timeout: 5, api_max_retries: 1, max_turns: 4, tool_timeout: 10}
  deadlines: {boot: BOOT, turn: 4, interrupt: 3, probe: 4, exit: 5, reap: 5}
  max_calls: 6
  max_calls_after_interrupt: 2
scenarios:
  - id: slow_start_busy_turn
    about: a slow start-up, then a turn that needs most of its deadline
    responder:
      - when: {after_tool: false}
        reply: {kind: tool_call, calls: [{tool: shell, args: {command: "sleep 2.5; echo slept-{{nonce}}"}}]}
      - reply: {kind: text, text: "done {{nonce}}"}
    expect: {answer: "done"}
  - id: chaos_slow_start
    about: seeded kills and stops against a CLI whose every turn starts slowly
    chaos: {turns: 3, duration: 3, interval: [0.3, 0.6], kill_share: 0.5, stop_for: [0.1, 0.2], min_faults: 3}
    responder:
      - reply: {kind: text, text: "turn done {{nonce}}"}
    expect: survives
"#;

fn python() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

struct Run {
    code: i32,
    report: serde_json::Value,
    stdout: String,
    dir: tempfile::TempDir,
}

/// Run one row of [`TABLE`] (with the boot deadline `boot`) through the exec
/// profile, the CLI sleeping `startup` seconds before its first request.
fn run(id: &str, boot: &str, startup: &str) -> Run {
    require("python3", python(), "install python3");
    let mark = new_mark("exectiming");
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.yaml");
    std::fs::write(&table, TABLE.replace("BOOT", boot)).unwrap();
    let json = dir.path().join("r.json");
    let art = dir.path().join("art");
    let args = [
        table.to_str().unwrap(),
        "--agent",
        PROFILE,
        "--seed",
        "7",
        "--only",
        id,
        "--json",
        json.to_str().unwrap(),
        "--artifacts",
        art.to_str().unwrap(),
        "--keep-all",
    ];
    let mut cmd = command(&mark, &args);
    cmd.env("ONESHOT_STARTUP", format!("--startup-sleep={startup}"));
    let out = cmd.output().expect("chaosrun runs");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    Run {
        code: out.status.code().unwrap_or(-1),
        report: read_json(&json),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        dir,
    }
}

fn events(r: &Run, id: &str) -> Vec<serde_json::Value> {
    let obs = read_json(&r.dir.path().join("art").join(id).join("observation.json"));
    obs["events"].as_array().unwrap().clone()
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn a_slow_start_up_is_not_held_against_the_turn() {
    let id = "slow_start_busy_turn";
    let r = run(id, "8", "2.5");
    assert_eq!(r.code, 0, "{}", r.stdout);
    let ev = events(&r, id);
    // Each turn's start-up is recorded: its first request came after the
    // CLI's 2.5 s sleep, so spawn-to-end was past the 4 s turn deadline.
    for turn in [0, 1] {
        let first = ev
            .iter()
            .find(|e| e["ev"] == "first_call" && e["turn"] == turn)
            .unwrap_or_else(|| panic!("turn {turn}'s first_call in {ev:?}"));
        assert!(first["after_spawn"].as_f64().unwrap() >= 2.5, "{first}");
    }
    let at = |name: &str, i: u64| {
        ev.iter()
            .find(|e| e["ev"] == name && e["i"] == i)
            .unwrap_or_else(|| panic!("{name} {i} in {ev:?}"))["at"]
            .as_f64()
            .unwrap()
    };
    assert!(
        at("turn_end", 0) - at("turn_start", 0) > 4.0,
        "the row tests nothing unless start-up plus work exceeds the turn deadline: {ev:?}"
    );
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn a_start_up_past_the_boot_deadline_fails_naming_it() {
    let id = "slow_start_busy_turn";
    let r = run(id, "2", "4");
    assert_eq!(r.code, 1, "{}", r.stdout);
    let v = violations(&r.report, id).join("\n");
    assert!(
        v.contains("the agent's process never reached the provider within 2 s of its start"),
        "{v}"
    );
    let boots = scenario(&r.report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "boots")
        .cloned()
        .unwrap();
    assert_eq!(boots["status"], "fail", "{boots}");
    let ev = events(&r, id);
    assert!(
        ev.iter()
            .any(|e| e["ev"] == "deadline_missed" && e["phase"] == "start_up"),
        "{ev:?}"
    );
    assert!(!ev.iter().any(|e| e["ev"] == "first_call"), "{ev:?}");
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn chaos_faults_land_only_in_a_turns_working_time() {
    let id = "chaos_slow_start";
    // Each turn's process sleeps 1 s before its first request and then works
    // for milliseconds: scheduled every 0.3-0.6 s, nearly every fault comes
    // due in a start-up. Each must be held to the turn's first request.
    let r = run(id, "6", "1");
    assert_eq!(r.code, 0, "{}", r.stdout);
    // In time order: a fault is recorded when chaosrun sent it, the first
    // call when the CLI's request arrived (read from another task).
    let mut ev = events(&r, id);
    ev.sort_by(|a, b| {
        a["at"]
            .as_f64()
            .unwrap()
            .total_cmp(&b["at"].as_f64().unwrap())
    });
    let mut landed = 0;
    let mut working = false;
    for e in &ev {
        match e["ev"].as_str().unwrap_or("") {
            "turn_start" => working = false,
            "first_call" => working = true,
            "process_fault" if e["action"] != "cont" => {
                assert!(
                    working,
                    "a fault before its turn's first request: {e} in {ev:?}"
                );
                assert!(e.get("start_up").is_none(), "{e}");
                landed += usize::from(e["signalled"].as_u64().unwrap() > 0);
            }
            _ => {}
        }
    }
    assert!(landed >= 3, "{ev:?}");
    let chaos = &scenario(&r.report, id)["chaos"];
    assert_eq!(chaos["in_start_up"], 0, "{chaos}");
}
