//! Honest verdicts through the real binary: a scenario whose run panics inside
//! chaosrun (the debug-build hook `CHAOSRUN_TEST_PANIC=<id>`) is reported
//! `ERROR` with its cause, counts as not passed (exit 1), appears in a
//! complete JSON report as an error and in JUnit as an `<error>`, and a merge
//! of that report exits 1 too.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "needs a debug build: the CHAOSRUN_TEST_PANIC hook (src/runner/mod.rs) is compiled only there"
)]
fn a_panicking_scenario_is_an_error_never_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (json, junit, html) = (
        dir.path().join("r.json"),
        dir.path().join("r.xml"),
        dir.path().join("r.html"),
    );
    let mark = new_mark("panic");
    let out = Command::new(bin())
        .args([
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--only",
            "tool_name_unknown",
            "--json",
            json.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .env(MARK_VAR, &mark)
        .env("CHAOSRUN_TEST_PANIC", "tool_args_garbage")
        .current_dir(repo())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ERROR tool_args_garbage")),
        "{stdout}"
    );
    assert!(stdout.contains("injected panic"), "{stdout}");
    assert!(stdout.contains("1 passed, 0 failed, 1 error"), "{stdout}");
    assert_eq!(
        wait_unmarked(&mark, Duration::from_secs(10)),
        Vec::<String>::new()
    );

    let report = read_json(&json);
    assert_eq!(report["complete"], true);
    assert_eq!(report["scenarios"].as_array().unwrap().len(), 2);
    assert_eq!(
        (&report["passed"], &report["failed"], &report["errors"]),
        (&1.into(), &0.into(), &1.into())
    );
    let crashed = scenario(&report, "tool_args_garbage");
    assert_eq!(crashed["verdict"], "error");
    assert_eq!(crashed["passed"], false);
    assert!(crashed["cause"]
        .as_str()
        .unwrap()
        .contains("injected panic"));
    assert_eq!(scenario(&report, "tool_name_unknown")["verdict"], "pass");

    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some("tool_args_garbage"))
        .expect("the crashed scenario has a test case");
    let error = case
        .children()
        .find(|n| n.has_tag_name("error"))
        .expect("an <error>");
    assert!(error
        .attribute("message")
        .unwrap()
        .contains("injected panic"));

    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("data-verdict=\"error\"").count(), 1);
    assert!(page.contains("1 passed, 0 failed, 1 error"));

    let merged = Command::new(bin())
        .args(["merge", json.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&merged.stdout);
    assert_eq!(merged.status.code(), Some(1), "{text}");
    assert!(text.contains("1 error"), "{text}");
}

/// A copy of the reference profile (and its agent) whose messages query is
/// `sql`, in `dir`.
fn profile_with_sql(dir: &std::path::Path, sql: &str) -> std::path::PathBuf {
    let reference = repo().join("examples/reference");
    copy_reference_agent(&reference, dir);
    let yaml = std::fs::read_to_string(reference.join("agent.yaml")).unwrap();
    let line = yaml
        .lines()
        .find(|l| l.trim_start().starts_with("messages_sql:"))
        .unwrap();
    let yaml = yaml.replace(line, &format!("  messages_sql: {sql:?}"));
    let p = dir.join("agent.yaml");
    std::fs::write(&p, yaml).unwrap();
    p
}

#[test]
fn a_store_query_without_session_id_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let p = profile_with_sql(
        dir.path(),
        "SELECT role, content, tool_call_id, tool_calls FROM messages WHERE session_id = ?1 ORDER BY id",
    );
    let out = chaosrun(
        &new_mark("qmark"),
        &[
            "--agent",
            p.to_str().unwrap(),
            "scenarios.yaml",
            "--only",
            "tool_name_unknown",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(":session_id") && stderr.contains("?1"),
        "{stderr}"
    );
}

#[test]
fn a_store_query_that_fails_at_first_use_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = profile_with_sql(
        dir.path(),
        "SELECT role, content, tool_call_id, tool_calls FROM no_such_table WHERE session_id = :session_id",
    );
    let json = dir.path().join("r.json");
    let mark = new_mark("badtable");
    let out = chaosrun(
        &mark,
        &[
            "--agent",
            p.to_str().unwrap(),
            "scenarios.yaml",
            "--only",
            "tool_name_unknown",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("ERROR tool_name_unknown"), "{stdout}");
    assert!(stdout.contains("no such table: no_such_table"), "{stdout}");
    let report = read_json(&json);
    assert_eq!(scenario(&report, "tool_name_unknown")["verdict"], "error");
    assert_eq!(
        wait_unmarked(&mark, Duration::from_secs(10)),
        Vec::<String>::new()
    );
}

/// A hung-tool row whose tool never ran (here the agent refuses it as an
/// unknown tool, as a command validator would) is not a pass: `tool_gone` is
/// trivially true, so the `exercised` check fails, quoting the agent.
#[test]
fn a_hung_tool_that_never_ran_fails_the_exercised_check() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.yaml");
    std::fs::write(
        &table,
        r#"scenarios:
  - id: tool_never_ran
    responder:
      - when: {after_tool: false}
        reply: {kind: tool_call, calls: [{tool: no_such_tool_chaos, args: {command: "sleep 3600"}}]}
      - reply: {kind: text, text: "tools settled {{nonce}}"}
    expect: {answer: "tools settled {{nonce}}"}
    calls: {max: 4}
    tool_gone: "sleep 3600"
"#,
    )
    .unwrap();
    let json = dir.path().join("r.json");
    let mark = new_mark("neverran");
    let out = chaosrun(
        &mark,
        &[table.to_str().unwrap(), "--json", json.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = read_json(&json);
    assert_eq!(failed_invariants(&report, "tool_never_ran"), ["exercised"]);
    let v = violations(&report, "tool_never_ran").join("\n");
    assert!(
        v.contains("the tool never ran: no process whose command line contains `sleep 3600` was seen; the agent answered `"),
        "{v}"
    );
    assert!(stdout.contains("fault exercised / tool_ran"), "{stdout}");
    assert_eq!(
        wait_unmarked(&mark, Duration::from_secs(10)),
        Vec::<String>::new()
    );
}

/// A profile that declares `resume: false` makes kill scenarios N/A: shown
/// apart, never run, never counted as passed, and not a failure either.
#[test]
fn kill_scenarios_are_not_applicable_without_resume() {
    let dir = tempfile::tempdir().unwrap();
    let reference = repo().join("examples/reference");
    copy_reference_agent(&reference, dir.path());
    let yaml = std::fs::read_to_string(reference.join("agent.yaml")).unwrap();
    let p = dir.path().join("agent.yaml");
    std::fs::write(&p, format!("{yaml}resume: false\n")).unwrap();
    let json = dir.path().join("r.json");
    let junit = dir.path().join("r.xml");
    let out = chaosrun(
        &new_mark("noresume"),
        &[
            "--agent",
            p.to_str().unwrap(),
            "process_faults.yaml",
            "--only",
            "kill_mid_stream",
            "--only",
            "stop_past_stale_timeout",
            "--json",
            json.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("N/A   kill_mid_stream")),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 passed, 0 failed, 1 not applicable"),
        "{stdout}"
    );
    assert!(stdout.contains("resume: false"), "{stdout}");
    let report = read_json(&json);
    let na = scenario(&report, "kill_mid_stream");
    assert_eq!(
        (&na["verdict"], &na["passed"]),
        (&"not_applicable".into(), &false.into())
    );
    assert_eq!(report["not_applicable"], 1);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = doc
        .descendants()
        .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some("kill_mid_stream"))
        .unwrap();
    assert!(case.children().any(|n| n.has_tag_name("skipped")), "{xml}");
}

/// A `logs:` entry that matches no file in any scenario run is a run-wide
/// warning (text and JSON), naming that entry and not the logs that exist;
/// it does not change a verdict.
#[test]
fn a_declared_log_that_never_appears_is_a_run_warning() {
    let dir = tempfile::tempdir().unwrap();
    let reference = repo().join("examples/reference");
    copy_reference_agent(&reference, dir.path());
    let yaml = std::fs::read_to_string(reference.join("agent.yaml")).unwrap();
    let p = dir.path().join("agent.yaml");
    std::fs::write(
        &p,
        format!("{yaml}logs: [.refagent/never-*.log, .refagent/state.db]\n"),
    )
    .unwrap();
    let json = dir.path().join("r.json");
    let out = chaosrun(
        &new_mark("logwarn"),
        &[
            "--agent",
            p.to_str().unwrap(),
            "scenarios.yaml",
            "--only",
            "provider_400_forever",
            "--only",
            "tool_args_garbage",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(warnings[0].contains("never-*.log"), "{stdout}");
    assert!(warnings[0].contains("2 scenario runs"), "{stdout}");
    let report = read_json(&json);
    let w = report["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{report}");
    assert!(w[0].as_str().unwrap().contains("never-*.log"));
}

/// The reference agent's code (agent.py and the MCP client it imports) in `dir`.
fn copy_reference_agent(reference: &std::path::Path, dir: &std::path::Path) {
    for f in ["agent.py", "mcp_client.py"] {
        std::fs::copy(reference.join(f), dir.join(f)).unwrap();
    }
}

/// A scenario can never outlive its bound (every deadline plus the grace,
/// src/runner/drive/bound.rs): a drive stuck inside chaosrun (the
/// debug-build hook `CHAOSRUN_TEST_STUCK=<id>` sticks it after the boot,
/// with a 3 s bound) ends in ERROR naming the bound, with the checks of
/// what the agent did still made (a run error, not a setup error); the
/// agent it had started is gone (found by the test's marker), and the run
/// ends.
#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "needs a debug build: the CHAOSRUN_TEST_STUCK hook (src/runner/drive/bound.rs) is compiled only there"
)]
fn a_stuck_drive_ends_at_its_bound_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mark = new_mark("stuck");
    let json_arg = json.to_str().unwrap();
    let args = [
        "scenarios.yaml",
        "--only",
        "tool_args_garbage",
        "--no-progress",
        "--json",
        json_arg,
    ];
    let mut cmd = command(&mark, &args);
    cmd.env("CHAOSRUN_TEST_STUCK", "tool_args_garbage");
    let child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    // The bound is 3 s after the boot, the close within the exit deadline:
    // far inside a minute unless the bound does not hold.
    let Ok(out) = rx.recv_timeout(Duration::from_secs(60)) else {
        let _ = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status();
        panic!("chaosrun did not end within 60 s: the bound did not hold");
    };
    let out = out.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("ERROR tool_args_garbage")),
        "{stdout}"
    );
    let report = read_json(&json);
    let row = scenario(&report, "tool_args_garbage");
    assert_eq!(row["verdict"], "error");
    let cause = row["cause"].as_str().unwrap_or_default();
    assert!(cause.contains("ran past its bound of 3 s"), "{row}");
    // The agent ran: its checks are made, not replaced by "never ran".
    assert!(cause.contains("after the agent ran"), "{row}");
    let checks = row["checks"].as_array().expect("checks");
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "turn_returned" || c["invariant"] == "termination"),
        "{row}"
    );
    assert!(!row.to_string().contains("the agent never ran"), "{row}");
    assert_eq!(
        wait_unmarked(&mark, Duration::from_secs(10)),
        Vec::<String>::new()
    );
}

/// The sampler's view of a scenario's processes (CPU and RSS over time,
/// every command line) is taken inside the run's collect stage and saved
/// with the observation: a hung tool's `sleep` is among the processes seen.
#[test]
fn the_saved_observation_keeps_what_the_sampler_saw() {
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("art");
    let mark = new_mark("sampled");
    let args = [
        "scenarios.yaml",
        "--only",
        "tool_hang_past_timeout",
        "--no-progress",
    ];
    let out = command(&mark, &args)
        .args(["--artifacts", art.to_str().unwrap(), "--keep-all"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let obs = read_json(&art.join("tool_hang_past_timeout/observation.json"));
    assert!(
        !obs["proc_samples"].as_array().unwrap().is_empty(),
        "no samples"
    );
    let seen = obs["processes_seen"].to_string();
    assert!(seen.contains("sleep"), "the hung tool was not seen: {seen}");
}

/// `interrupt: {after_reply: N}` goes out once the N-th main call's reply
/// was sent whole, never as the call arrives (which `after_calls` does,
/// racing the reply: the race that lost explore's `500 then interrupt` rows
/// on a loaded CI machine). The reference agent's `sticky_backoff_interrupt`
/// bug shows only for an interrupt that lands while the 500 is read or
/// backed off (0.2 s): every copy of the row fails on it, each with its
/// interrupt stamped after the 500's answer ended (the provider's clock
/// moved onto the drive's). A hang never fires it: the interrupt is named
/// as never sent. A stall of a second, then a cut, is over a second after
/// it arrived: its interrupt is stamped after that too. The healthy agent
/// passes the error rows.
#[test]
fn an_interrupt_after_a_reply_lands_after_it_every_time() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.yaml");
    let row = |id: &str| {
        format!(
            r#"  - id: {id}
    responder:
      - when: {{call: 0}}
        reply: {{kind: error, status: 500, message: internal server error}}
    expect: ended
    calls: {{max: 5}}
    interrupt: {{after_reply: 1}}
"#
        )
    };
    let ids = ["after_500_a", "after_500_b", "after_500_c", "after_500_d"];
    let mut text = String::from("scenarios:\n");
    for id in ids {
        text.push_str(&row(id));
    }
    // A reply that takes a second to be over (a stall, then a cut): an
    // interrupt sent as the call arrives would be stamped a second early.
    text.push_str(
        r#"  - id: after_a_stall
    responder:
      - when: {call: 0}
        reply: {kind: stall_mid_stream, chars: "a partial answer", seconds: 1}
    expect: ended
    calls: {max: 5}
    interrupt: {after_reply: 1}
  - id: after_a_hang
    deadlines: {turn: 3}
    responder:
      - reply: {kind: hang}
    expect: interrupted
    interrupt: {after_reply: 1}
"#,
    );
    std::fs::write(&table, text).unwrap();
    let art = dir.path().join("art");
    let json = dir.path().join("r.json");
    let mark = new_mark("afterreply");
    let out = chaosrun(
        &mark,
        &[
            table.to_str().unwrap(),
            "--agent-arg=--bug=sticky_backoff_interrupt",
            "--json",
            json.to_str().unwrap(),
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = read_json(&json);
    for id in ids.into_iter().chain(["after_a_stall"]) {
        if id != "after_a_stall" {
            assert_eq!(
                check_status(&report, id, "probe_answered"),
                "fail",
                "{id}: {stdout}"
            );
        }
        let obs = read_json(&art.join(id).join("observation.json"));
        let offset = obs["provider_offset"].as_f64().unwrap();
        let call = obs["recording"]["requests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["main_index"] == 0)
            .unwrap_or_else(|| panic!("{id}: no main call 0: {obs}"));
        let ended = call["ended"]
            .as_f64()
            .unwrap_or_else(|| panic!("{id}: main call 0 never answered: {call}"));
        if id == "after_a_stall" {
            // Served whole, not given up under an early interrupt.
            let took = ended - call["at"].as_f64().unwrap();
            assert!(took >= 0.9, "{id}: the stall was over after {took:.3} s");
        }
        let sent = obs["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["ev"] == "interrupt_sent")
            .and_then(|e| e["at"].as_f64())
            .unwrap_or_else(|| panic!("{id}: no interrupt_sent: {obs}"));
        assert!(
            sent >= ended + offset,
            "{id}: interrupt at {sent:.4} s, call 0's answer over at {:.4} s",
            ended + offset
        );
    }
    let v = violations(&report, "after_a_hang").join("\n");
    assert!(
        v.contains("the interrupt was never sent: its trigger did not hold"),
        "{v}"
    );
    assert_eq!(
        wait_unmarked(&mark, Duration::from_secs(10)),
        Vec::<String>::new()
    );

    // The healthy agent: each error row passes (the hang row is left out).
    let healthy = chaosrun(
        &mark,
        &[
            table.to_str().unwrap(),
            "--only",
            "after_500_a,after_500_b",
            "--no-progress",
        ],
    );
    let stdout = String::from_utf8_lossy(&healthy.stdout);
    assert_eq!(healthy.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("2 passed, 0 failed"), "{stdout}");
    assert_eq!(
        wait_unmarked(&mark, Duration::from_secs(10)),
        Vec::<String>::new()
    );
}
