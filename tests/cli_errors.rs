//! Bad input, tried as a new user would: each gets a clear message and the
//! right exit code (2 for usage and configuration errors, 1 for an agent that
//! fails), and none leaves a process behind.

mod common;

use common::*;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Run, then assert the exit code and that nothing the run started survives.
fn run(name: &str, args: &[&str], code: i32) -> (String, String) {
    let mark = new_mark(name);
    let out = chaosrun(&mark, args);
    let (stdout, stderr) = text(&out);
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    (stdout, stderr)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const ONE: &str = "scenarios:\n  - id: a\n    responder:\n      - reply: {kind: error, status: 500}\n    expect: error\n";

#[test]
fn missing_table_file() {
    let (stdout, stderr) = run("missing", &["/nonexistent/table.yaml"], 2);
    assert!(
        stderr.contains("/nonexistent/table.yaml: cannot read the scenario table"),
        "{stderr}"
    );
    assert!(stdout.is_empty());
}

#[test]
fn no_table_given() {
    let (_, stderr) = run("notable", &[], 2);
    assert!(stderr.contains("no scenario table given"), "{stderr}");
}

#[test]
fn yaml_syntax_error_names_file_line_and_column() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "t.yaml",
        "scenarios:\n  - id: a\n    responder: [\n      {reply: {kind: hang}\n",
    );
    let (_, stderr) = run("syntax", &[&p], 2);
    assert!(stderr.contains(&format!("{p}:")), "{stderr}");
    let loc = stderr.split(&format!("{p}:")).nth(1).unwrap();
    let mut parts = loc.split(':');
    assert!(
        parts.next().unwrap().parse::<u32>().is_ok(),
        "line in {stderr}"
    );
    assert!(
        parts.next().unwrap().parse::<u32>().is_ok(),
        "column in {stderr}"
    );
}

#[test]
fn unknown_fault_kind_lists_known_kinds() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "t.yaml",
        &ONE.replace("kind: error, status: 500", "kind: explode"),
    );
    let (_, stderr) = run("kind", &[&p], 2);
    assert!(stderr.contains(&format!("{p}:4:")), "{stderr}");
    assert!(stderr.contains("explode"), "{stderr}");
    for k in [
        "text",
        "tool_call",
        "hang",
        "stall_mid_stream",
        "drop_mid_stream",
        "silent_after_headers",
        "raw",
    ] {
        assert!(stderr.contains(k), "{k} missing: {stderr}");
    }
}

#[test]
fn loose_call_bound_is_rejected_at_load() {
    let d = tempfile::tempdir().unwrap();
    let p = write(
        d.path(),
        "t.yaml",
        &format!("{ONE}    calls: {{max: 40}}\n"),
    );
    let (_, stderr) = run("bound", &[&p], 2);
    assert!(stderr.contains("exceeds 8 x api_max_retries"), "{stderr}");
}

#[test]
fn unknown_scenario_id_lists_known_ones() {
    let (_, stderr) = run("only", &["scenarios.yaml", "--only", "provider_hnag"], 2);
    assert!(
        stderr.contains("unknown scenario id `provider_hnag`"),
        "{stderr}"
    );
    assert!(stderr.contains("provider_hang"), "{stderr}");
}

#[test]
fn missing_agent_command() {
    let (_, stderr) = run(
        "noagent",
        &[
            "scenarios.yaml",
            "--agent",
            "./no/such/agent",
            "--only",
            "provider_500_forever",
        ],
        2,
    );
    assert!(
        stderr.contains("agent command `./no/such/agent` not found"),
        "{stderr}"
    );
}

#[test]
fn agent_that_exits_at_once_fails_with_its_stderr() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "t.yaml", ONE);
    let (stdout, _) = run(
        "exits",
        &[&p, "--agent", "tests/fixtures/agents/exits_at_once.sh"],
        1,
    );
    assert!(stdout.contains("FAIL  a"), "{stdout}");
    assert!(stdout.contains("exited before it was ready"), "{stdout}");
    assert!(stdout.contains("code Some(3)"), "{stdout}");
    assert!(
        stdout.contains("cannot import the agent"),
        "stderr tail as evidence: {stdout}"
    );
    assert!(stdout.contains("0 passed, 1 failed"), "{stdout}");
}

#[test]
fn agent_that_prints_garbage_fails_on_the_protocol() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "t.yaml", ONE);
    let (stdout, _) = run(
        "garbage",
        &[&p, "--agent", "tests/fixtures/agents/garbage.sh"],
        1,
    );
    assert!(
        stdout.contains("unparseable event line: CHAOS {this is not json"),
        "{stdout}"
    );
}

#[test]
fn agent_that_never_says_ready_is_stopped_with_its_children() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "t.yaml", ONE);
    let (stdout, _) = run(
        "never",
        &[
            &p,
            "--agent",
            "tests/fixtures/agents/never_ready.sh",
            "--deadline-scale",
            "0.02",
        ],
        1,
    );
    assert!(stdout.contains("never said ready within 2 s"), "{stdout}");
}

#[test]
fn artifacts_directory_is_never_overwritten() {
    let d = tempfile::tempdir().unwrap();
    let keep = write(d.path(), "precious.txt", "mine");
    let (_, stderr) = run(
        "artifacts",
        &[
            "scenarios.yaml",
            "--only",
            "provider_500_forever",
            "--keep-artifacts",
            d.path().to_str().unwrap(),
        ],
        2,
    );
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(std::fs::read_to_string(keep).unwrap(), "mine");
}

#[test]
fn an_output_never_overwrites_an_input() {
    let d = tempfile::tempdir().unwrap();
    let table = write(d.path(), "t.yaml", ONE);
    let (_, stderr) = run("clobber", &[&table, "--json", &table], 2);
    assert!(stderr.contains("would overwrite"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&table).unwrap(),
        ONE,
        "the table is intact"
    );
    let report = write(d.path(), "r.json", "{}");
    let (_, stderr) = run("clobber-merge", &["merge", &report, "--json", &report], 2);
    assert!(stderr.contains("would overwrite the report"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "{}");
}
