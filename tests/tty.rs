//! `tty: true` (src/driver/pty.rs): an exec-mode agent runs under a
//! pseudo-terminal of its own, its controlling terminal and its stdin,
//! stdout and stderr, as in a user's terminal; chaosrun reads the answer
//! from what the terminal carried. The fixture (tests/fixtures/agents/
//! tty_probe.py) reads its terminal from /proc/self/stat and ttyname(3),
//! not from anything chaosrun says. Without the key it has none.

mod common;

use common::*;
use std::time::Duration;

const ROW: &str = "provider_400_forever";

/// Run the one row through `profile`; what the probe saw, from the
/// `result` line of its stdout log.
fn probe(profile: &str) -> serde_json::Value {
    let mark = new_mark("tty");
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("art");
    let out = command(
        &mark,
        &[
            "scenarios.yaml",
            "--agent",
            profile,
            "--only",
            ROW,
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
        ],
    )
    .output()
    .expect("chaosrun runs");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let log = std::fs::read_to_string(art.join(ROW).join("stdout.log")).unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.contains("\"type\": \"result\""))
        .unwrap_or_else(|| panic!("the probe printed no result: {log}\n{stdout}"));
    // The line arrived as the agent wrote it: no `\r` from the terminal.
    assert!(
        !log.contains('\r'),
        "the terminal rewrote the output: {log:?}"
    );
    serde_json::from_str(line).unwrap()
}

#[test]
fn a_tty_true_exec_agent_has_a_controlling_terminal_on_its_stdio() {
    let seen = probe("tests/fixtures/agents/tty_probe.yaml");
    assert_ne!(seen["tty_nr"], 0, "no controlling terminal: {seen}");
    assert_eq!(seen["session_leader"], true, "{seen}");
    assert_eq!(seen["dev_tty"], true, "/dev/tty does not open: {seen}");
    let stdio = seen["stdio"].as_array().unwrap();
    let pts = stdio[0].as_str().unwrap_or_default();
    assert!(
        pts.starts_with("/dev/pts/"),
        "stdin is not a terminal: {seen}"
    );
    assert!(
        stdio.iter().all(|s| s == pts),
        "stdio on one terminal: {seen}"
    );
}

#[test]
fn without_tty_the_agent_has_no_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string("tests/fixtures/agents/tty_probe.yaml").unwrap();
    let profile = dir.path().join("tty_probe.yaml");
    std::fs::write(&profile, text.replace("tty: true\n", "")).unwrap();
    std::fs::copy(
        "tests/fixtures/agents/tty_probe.py",
        dir.path().join("tty_probe.py"),
    )
    .unwrap();
    let seen = probe(profile.to_str().unwrap());
    assert_eq!(seen["tty_nr"], 0, "{seen}");
    assert_eq!(seen["dev_tty"], false, "{seen}");
    assert_eq!(
        seen["stdio"],
        serde_json::json!([null, null, null]),
        "{seen}"
    );
}
