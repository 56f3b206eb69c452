//! The reference agent's ACP mode (`agent.py --acp`, examples/reference/acp.py)
//! proved by hand, without chaosrun's ACP drive: `tests/fixtures/acp_client.py`
//! (a stdlib ACP client) runs one session through two agent processes against
//! `chaosrun serve` (a tool call, a cancel during a hung model call, a hung
//! tool and a hung subagent, a queued prompt, a SIGKILL and `session/load` in
//! a new process, `session/close`, stdin closed) and judges eight checks. The
//! healthy agent passes every check on every wire; each ACP bug option fails
//! exactly its own check.

mod common;

use common::{bin, repo};
use std::process::Command;

/// Run the client; its stdout (one `check: verdict` per line, then OK / NOT OK).
fn client(wire: &str, bug: Option<&str>, expect_fail: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("tests/fixtures/acp_client.py"))
        .arg("--chaosrun")
        .arg(bin())
        .args(["--wire", wire]);
    if let Some(b) = bug {
        cmd.arg(format!("--bug={b}"));
    }
    if let Some(c) = expect_fail {
        cmd.arg(format!("--expect-fail={c}"));
    }
    let out = cmd.output().expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_reference_agent_passes_every_acp_check_on_every_wire() {
    for wire in ["openai-chat", "openai-responses", "anthropic", "gemini"] {
        let (ok, out) = client(wire, None, None);
        assert!(ok, "{wire}:\n{out}");
        assert_eq!(out.matches(": pass").count(), 8, "{wire}:\n{out}");
    }
}

#[test]
fn each_acp_bug_option_fails_only_its_check() {
    let cases = [
        (
            "acp_tool_left_in_progress",
            "tool_status_final",
            "left in_progress",
        ),
        (
            "acp_update_after_cancel",
            "no_update_after_answer",
            "after an answer",
        ),
        ("acp_cancel_leaves_job", "cancel_kills_tool", "still runs"),
        (
            "acp_subagent_ignores_cancel",
            "cancel_stops_subagent",
            "still holds a connection",
        ),
    ];
    let wires = ["openai-chat", "openai-responses", "anthropic", "gemini"];
    for (i, (bug, check, why)) in cases.iter().enumerate() {
        // One wire each, taken in turn (the healthy run covers all four).
        let (ok, out) = client(wires[i % wires.len()], Some(bug), Some(check));
        assert!(ok, "{bug}:\n{out}");
        assert!(out.contains(&format!("{check}: fail: ")), "{bug}:\n{out}");
        assert!(out.contains(why), "{bug}:\n{out}");
        assert_eq!(out.matches(": pass").count(), 7, "{bug}:\n{out}");
    }
}

#[test]
fn acp_mode_takes_no_spec_path() {
    // `--acp` takes no spec path: a stray argument is an error, exit 2.
    let out = Command::new("python3")
        .arg(repo().join("examples/reference/agent.py"))
        .args(["--acp", "/tmp/spec.json"])
        .output()
        .expect("python3 runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--acp takes no spec path"), "{err}");
    assert!(out.stdout.is_empty(), "stdout carries only JSON-RPC frames");
}
