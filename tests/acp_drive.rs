//! The ACP drive end to end: chaosrun as the Agent Client Protocol client of
//! a small stdlib ACP agent (tests/fixtures/acp/acp_agent.py, one process per
//! scenario) through its `acp:` profile. A well-behaved agent passes with
//! its tool statuses recorded and the ACP turn model in the observation; a
//! cancel ends the interrupted turn `cancelled`; after a kill the new
//! process gets the session back with `session/load`; the client side's fs reads
//! and writes inside the work dir. Each hostile mode ends in its named
//! failure or ERROR with nothing outside the scenario touched: a flood of
//! updates (bounded), invalid JSON-RPC and a response to an id never asked,
//! fs reads and writes outside the work dir (refused; the marker is in no
//! artifact), an agent that never answers `initialize` (the boot deadline
//! names it). Survivors are looked for by the test's marker in /proc.

mod common;

use common::*;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/acp/acp_agent.yaml";
const TABLE: &str = "tests/fixtures/acp/acp_table.yaml";

fn python() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One chaosrun run of the ACP table.
struct Run {
    code: i32,
    report: serde_json::Value,
    stdout: String,
    /// Holds `r.json` and `art/ID/...` for every scenario.
    dir: tempfile::TempDir,
}

/// Run row `id` of the ACP table with the agent's `--mode` (if any),
/// keeping every artifact; no marked process may outlive chaosrun.
fn run(id: &str, mode: Option<&str>) -> Run {
    run_with(PROFILE, id, mode)
}

/// [`run`] through `profile`.
fn run_with(profile: &str, id: &str, mode: Option<&str>) -> Run {
    require("python3", python(), "install python3");
    let mark = new_mark("acp");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let art = dir.path().join("art");
    let (json_s, art_s) = (json.to_str().unwrap(), art.to_str().unwrap());
    let args = [
        TABLE,
        "--agent",
        profile,
        "--only",
        id,
        "--json",
        json_s,
        "--artifacts",
        art_s,
        "--keep-all",
    ];
    let mut cmd = command(&mark, &args);
    if let Some(m) = mode {
        cmd.env("ACP_MODE", format!("--mode={m}"));
    }
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

impl Run {
    fn observation(&self, id: &str) -> serde_json::Value {
        read_json(
            &self
                .dir
                .path()
                .join("art")
                .join(id)
                .join("observation.json"),
        )
    }

    fn events(&self, id: &str, ev: &str) -> Vec<serde_json::Value> {
        let obs = self.observation(id);
        let all = obs["events"].as_array().unwrap().clone();
        all.into_iter().filter(|e| e["ev"] == ev).collect()
    }

    /// Every file the run wrote (report, artifacts) and its stdout hold
    /// `needle` nowhere.
    fn nowhere(&self, needle: &str) {
        assert!(!self.stdout.contains(needle), "{}", self.stdout);
        for (path, _) in listing(self.dir.path()) {
            if path.is_symlink() {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(needle), "{needle} in {}", path.display());
        }
    }
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn a_well_behaved_acp_agent_passes_with_its_updates_recorded() {
    let r = run("acp_answers", None);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let obs = r.observation("acp_answers");
    assert_eq!(
        obs["turn_model"]["clock"], "turn_start",
        "{}",
        obs["turn_model"]
    );
    assert_eq!(obs["turn_model"]["session_from_agent"], true);
    let names: Vec<String> = obs["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ev"].as_str().unwrap().to_string())
        .filter(|e| ["ready", "turn_start", "turn_end", "closed", "exited"].contains(&e.as_str()))
        .collect();
    let want = [
        "ready",
        "turn_start",
        "turn_end",
        "turn_start",
        "turn_end",
        "closed",
        "exited",
    ];
    assert_eq!(names, want, "one process for every turn: {names:?}");
    let statuses: Vec<(u64, String)> = r
        .events("acp_answers", "tool_status")
        .iter()
        .map(|e| {
            (
                e["turn"].as_u64().unwrap(),
                e["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            (0, "pending".into()),
            (0, "completed".into()),
            (1, "pending".into()),
            (1, "completed".into())
        ]
    );
    let ends = r.events("acp_answers", "turn_end");
    let nonce = obs["nonce"].as_str().unwrap_or_default().to_string();
    assert!(
        ends[0]["final"].as_str().unwrap().contains("done"),
        "{}",
        ends[0]
    );
    assert!(
        ends[1]["final"].as_str().unwrap().contains("alive"),
        "the probe's own answer: {} (nonce {nonce})",
        ends[1]
    );
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn session_cancel_ends_the_interrupted_turn_cancelled() {
    let r = run("acp_cancel", None);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(r.events("acp_cancel", "interrupt_sent").len(), 1);
    let ends = r.events("acp_cancel", "turn_end");
    assert_eq!(ends[0]["interrupted"], true, "{}", ends[0]);
    assert_eq!(ends[0]["exit_reason"], "cancelled", "{}", ends[0]);
    assert_eq!(ends[1]["completed"], true, "{}", ends[1]);
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn after_a_kill_the_new_process_loads_the_session_and_answers_the_probe() {
    let r = run("acp_kill", None);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(r.events("acp_kill", "restarted").len(), 1);
    assert_eq!(
        r.events("acp_kill", "ready").len(),
        2,
        "a restart is ready again"
    );
    let log = std::fs::read_to_string(r.dir.path().join("art/acp_kill/stderr.log")).unwrap();
    assert!(log.contains("ACP: session/load of acp-"), "{log}");
}

/// `load: never`: the restart asks `session/new`; this agent's new session
/// has no history, so the probe shows the lost turn.
#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn load_never_starts_a_new_session_after_a_kill() {
    let r = run_with(
        "tests/fixtures/acp/acp_agent_no_load.yaml",
        "acp_kill",
        None,
    );
    assert_eq!(r.code, 1, "{}", r.stdout);
    let log = std::fs::read_to_string(r.dir.path().join("art/acp_kill/stderr.log")).unwrap();
    assert!(!log.contains("session/load"), "{log}");
    let v = violations(&r.report, "acp_kill").join("\n");
    assert!(v.contains("lost its history"), "{v}");
}

/// An update after the last prompt's response (before `session/close`) is
/// work after the turn: recorded against that turn. (Turn 0's may land
/// after the next prompt went out, and is then that turn's: not asserted.)
#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn an_update_after_the_turns_answer_is_recorded_as_such() {
    let r = run("acp_answers", Some("late_update"));
    let after = r.events("acp_answers", "update_after_turn");
    assert!(
        after
            .iter()
            .any(|e| e["turn"] == 1 && e["kind"] == "agent_message_chunk"),
        "{after:?}"
    );
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn the_client_side_reads_and_writes_inside_the_work_dir() {
    let r = run("acp_hostile", Some("rw_inside"));
    assert_eq!(r.code, 0, "{}", r.stdout);
    let calls = r.events("acp_hostile", "client_call");
    let got: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["method"].as_str().unwrap(),
                c["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got[..2],
        [("fs/write_text_file", "ok"), ("fs/read_text_file", "ok")]
    );
    let ends = r.events("acp_hostile", "turn_end");
    // Line 2, one line: the `line`/`limit` window of what was written.
    assert!(
        ends[0]["final"]
            .as_str()
            .unwrap()
            .contains(r#"{"content": "line two\n"}"#),
        "{}",
        ends[0]
    );
    let note = r.dir.path().join("art/acp_hostile/work/note.txt");
    assert_eq!(
        std::fs::read_to_string(note).unwrap(),
        "line one\nline two\n"
    );
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn a_flood_of_session_updates_stays_within_the_budget_and_fails_protocol() {
    let r = run("acp_hostile", Some("flood"));
    assert_eq!(r.code, 1, "{}", r.stdout);
    let failed = failed_invariants(&r.report, "acp_hostile");
    assert!(failed.contains(&"termination".to_string()), "{failed:?}");
    let v = violations(&r.report, "acp_hostile").join("\n");
    assert!(v.contains("past chaosrun's cap of 10000"), "{v}");
    let obs = r.observation("acp_hostile");
    assert!(obs["events"].as_array().unwrap().len() <= 10_100);
    for end in r.events("acp_hostile", "turn_end") {
        let kept = end["final"].as_str().unwrap().chars().count();
        assert!(kept <= 16 * 1024, "an answer of 40 MB is clipped: {kept}");
    }
    let log = r.dir.path().join("art/acp_hostile/stdout.log");
    assert!(std::fs::metadata(log).unwrap().len() <= 16 << 20);
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn a_flood_of_requests_a_client_fault_holds_stays_bounded_and_fails_protocol() {
    let r = run("acp_ask_flood", Some("ask_flood"));
    assert_eq!(r.code, 1, "{}", r.stdout);
    let v = violations(&r.report, "acp_ask_flood").join("\n");
    assert!(v.contains("more than 64 client requests"), "{v}");
    let calls = r.events("acp_ask_flood", "client_call");
    let held = calls
        .iter()
        .filter(|c| c["outcome"] == "held: never answered");
    assert_eq!(held.count(), 64, "held at most 64");
    let refused = calls.iter().filter(|c| {
        c["outcome"]
            .as_str()
            .is_some_and(|o| o.contains("too many requests left unanswered"))
    });
    assert_eq!(
        refused.count(),
        500 * 2 - 64,
        "the rest refused (turn and probe)"
    );
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn invalid_json_rpc_and_a_response_never_asked_are_bad_events() {
    let r = run("acp_hostile", Some("bad_rpc"));
    assert_eq!(r.code, 1, "{}", r.stdout);
    let bad: Vec<String> = r
        .events("acp_hostile", "bad_event")
        .iter()
        .map(|e| e["line"].as_str().unwrap().to_string())
        .collect();
    assert!(bad.iter().any(|l| l == "this is not json-rpc"), "{bad:?}");
    assert!(
        bad.iter().any(|l| l.contains("id 424242, never asked")),
        "{bad:?}"
    );
    let v = violations(&r.report, "acp_hostile").join("\n");
    assert!(
        v.contains("bad ACP frame from the agent: this is not json-rpc"),
        "{v}"
    );
    assert!(
        v.contains("bad ACP frame from the agent: a response to id 424242"),
        "{v}"
    );
}

/// A file outside the scenario holding a marker string.
fn outside() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let d = tempfile::tempdir().unwrap();
    let marker = format!("ACP-SECRET-{}", std::process::id());
    let secret = d.path().join("secret.txt");
    std::fs::write(&secret, &marker).unwrap();
    (d, secret, marker)
}

fn refused(r: &Run, method: &str) {
    let calls = r.events("acp_hostile", "client_call");
    assert!(!calls.is_empty());
    for c in calls {
        assert_eq!(c["method"], method, "{c}");
        let outcome = c["outcome"].as_str().unwrap();
        assert!(
            outcome.starts_with("error -32602") && outcome.contains("outside"),
            "{c}"
        );
    }
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn fs_reads_outside_the_work_dir_are_refused_and_nothing_is_read() {
    let (_d, secret, marker) = outside();
    for mode in [
        format!("read:{}", secret.display()),
        format!("readlink:{}", secret.display()),
    ] {
        let r = run("acp_hostile", Some(&mode));
        refused(&r, "fs/read_text_file");
        r.nowhere(&marker);
    }
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn fs_writes_outside_the_work_dir_are_refused_and_nothing_is_created() {
    let d = tempfile::tempdir().unwrap();
    let target = d.path().join("created.txt");
    let r = run("acp_hostile", Some(&format!("write:{}", target.display())));
    refused(&r, "fs/write_text_file");
    assert!(!target.exists());
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn an_agent_that_never_answers_initialize_fails_boot_naming_it() {
    let r = run("acp_hostile", Some("no_init"));
    assert_eq!(r.code, 1, "{}", r.stdout);
    let v = violations(&r.report, "acp_hostile").join("\n");
    assert!(v.contains("never said ready within 10 s"), "{v}");
    assert!(v.contains("initialize sent, waiting for its answer"), "{v}");
    assert!(r.events("acp_hostile", "ready").is_empty());
}

#[test]
fn a_bad_acp_section_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, says, placed) in [
        (
            "acp:\n  command: [python3, \"{{mesage}}\"]\n",
            "mesage",
            true,
        ),
        (
            "acp:\n  command: [python3]\n  lod: never\n",
            "unknown field `lod`",
            true,
        ),
        ("acp:\n  command: []\n", "non-empty argv", true),
        (
            "command: [python3]\nacp:\n  command: [python3]\n",
            "keep one",
            false,
        ),
        (
            "exec:\n  first: [python3]\n  final: {last_line: true}\nacp:\n  command: [python3]\n",
            "keep one",
            false,
        ),
        (
            "workers: 2\nacp:\n  command: [python3]\n",
            "`workers` must be 1",
            false,
        ),
    ] {
        let p = dir.path().join("p.yaml");
        std::fs::write(&p, yaml).unwrap();
        let out = std::process::Command::new(bin())
            .args([
                TABLE,
                "--agent",
                p.to_str().unwrap(),
                "--only",
                "acp_answers",
            ])
            .current_dir(repo())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {err}");
        assert!(err.contains(says), "{yaml}: {err}");
        if placed {
            assert!(err.contains("p.yaml:"), "{yaml}: {err}");
        }
    }
}

/// `agents check` on an ACP profile: `start` is ok when `initialize` is
/// answered and `session/new` returns a session id, and fails (naming the
/// missing id) when it returns none.
#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn agents_check_covers_an_acp_profile() {
    require("python3", python(), "install python3");
    for (mode, ok) in [(None, true), (Some("no_session"), false)] {
        let mark = new_mark("acpcheck");
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let args = ["agents", "check", PROFILE, "--json", json.to_str().unwrap()];
        let mut cmd = command(&mark, &args);
        cmd.args(PASS_MARK);
        if let Some(m) = mode {
            cmd.env("ACP_MODE", format!("--mode={m}"));
        }
        let out = cmd.output().expect("chaosrun runs");
        let left = wait_unmarked(&mark, Duration::from_secs(10));
        kill_marked(&mark);
        assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
        let steps = String::from_utf8_lossy(&out.stdout).to_string();
        let start = steps.lines().find(|l| l.starts_with("start")).unwrap_or("");
        assert_eq!(start.ends_with(" ok"), ok, "{mode:?}: {steps}");
        if !ok {
            let report = read_json(&json);
            let bad = report.to_string();
            assert!(
                bad.contains("session/new answered without a sessionId"),
                "{bad}"
            );
        }
    }
}
