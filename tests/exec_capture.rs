//! Exec mode's captured values: the fixture CLI (tests/fixtures/agents/
//! oneshot_cli.py `--own-session`) makes its own session id and prints it on
//! every JSON line; the profile captures it and hands it back in the next
//! turn's argv, the resume argv after a kill, and the store query. A bad
//! capture section is exit 2 with FILE:LINE:COL; a capture that never matched
//! makes the turn that needs it an ERROR naming the capture.

mod common;

use common::*;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/oneshot_capture.yaml";

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

fn run(table: &str, profile: &str, ids: &[&str]) -> Run {
    let mark = new_mark("capture");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let art = dir.path().join("art");
    let (json_s, art_s) = (
        json.to_str().unwrap().to_string(),
        art.to_str().unwrap().to_string(),
    );
    let mut args = vec![
        table,
        "--agent",
        profile,
        "--seed",
        "5",
        "--json",
        &json_s,
        "--artifacts",
        &art_s,
        "--keep-all",
    ];
    for id in ids {
        args.extend(["--only", id]);
    }
    let out = command(&mark, &args).output().expect("chaosrun runs");
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

fn observation(r: &Run, id: &str) -> serde_json::Value {
    read_json(&r.dir.path().join("art").join(id).join("observation.json"))
}

/// Every argv chaosrun ran for the scenario (its `[chaosrun] turn N: [...]`
/// lines in the agent's stderr log).
fn argvs(r: &Run, id: &str) -> Vec<String> {
    let dir = r.dir.path().join("art").join(id);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with("stderr") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            out.extend(
                text.lines()
                    .filter(|l| l.starts_with("[chaosrun] turn "))
                    .map(str::to_string),
            );
        }
    }
    out
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn the_agents_own_session_id_is_captured_and_used_in_argv_resume_and_store() {
    require("python3", python(), "install python3");
    let plain = "provider_500_forever";
    let kill = "kill_mid_stream";
    let t = std::thread::spawn(move || run("process_faults.yaml", PROFILE, &[kill]));
    let seed = run("scenarios.yaml", PROFILE, &[plain]);
    let pf = t.join().unwrap();
    assert_eq!(seed.code, 0, "{}", seed.stdout);
    assert_eq!(pf.code, 0, "{}", pf.stdout);
    for (r, id) in [(&seed, plain), (&pf, kill)] {
        let obs = observation(r, id);
        let captured: Vec<&serde_json::Value> = obs["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ev"] == "captured")
            .collect();
        assert!(!captured.is_empty(), "{id}: no capture: {}", obs["events"]);
        let value = captured[0]["value"].as_str().unwrap().to_string();
        assert_eq!(captured[0]["name"], "session");
        assert!(value.starts_with("own-"), "{id}: {value}");
        // The CLI made one session: every later argv resumes it.
        assert!(
            captured.iter().all(|c| c["value"] == value.as_str()),
            "{id}: {captured:?}"
        );
        let argv = argvs(r, id);
        assert!(argv.len() >= 2, "{id}: {argv:?}");
        assert!(!argv[0].contains("--resume"), "{id}: {argv:?}");
        for later in &argv[1..] {
            assert!(
                later.contains(&format!("\"--resume\", \"{value}\"")),
                "{id}: a later turn without the captured id: {later}"
            );
        }
        // The store was read with the captured id (chaosrun's own session
        // id is nowhere in the CLI's table).
        let msgs = obs["store"]["messages"]["Ok"]
            .as_array()
            .or_else(|| obs["store"]["messages"].as_array())
            .unwrap_or_else(|| panic!("{id}: {}", obs["store"]));
        assert!(msgs.len() >= 4, "{id}: {}", obs["store"]);
    }
    // After the kill, the resumed turn ran with the id the killed turn printed.
    let ev = observation(&pf, kill)["events"].clone();
    assert!(
        ev.as_array()
            .unwrap()
            .iter()
            .any(|e| e["ev"] == "restarted"),
        "{ev}"
    );
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn a_capture_that_never_matched_is_an_error_naming_it() {
    require("python3", python(), "install python3");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join(PROFILE))
        .unwrap()
        .replace(
            "{where: {type: system}, field: session_id}",
            "{where: {type: no_such_type}, field: session_id}",
        );
    let p = dir.path().join("never.yaml");
    std::fs::write(&p, text).unwrap();
    std::fs::copy(
        repo().join("tests/fixtures/agents/oneshot_cli.py"),
        dir.path().join("oneshot_cli.py"),
    )
    .unwrap();
    let id = "provider_500_forever";
    let r = run("scenarios.yaml", p.to_str().unwrap(), &[id]);
    assert_ne!(r.code, 0, "{}", r.stdout);
    let s = scenario(&r.report, id);
    assert_eq!(s["verdict"], "error", "{s}");
    let cause = s["cause"].as_str().unwrap();
    assert!(
        cause.contains("captured.session") && cause.contains("exec.capture.session"),
        "{cause}"
    );
    // Never run with an empty string in its place.
    for a in argvs(&r, id) {
        assert!(!a.contains("\"--resume\", \"\""), "{a}");
    }
}

#[test]
fn a_bad_capture_section_is_refused_at_load_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let head = "exec:\n  first: [python3, \"{{message}}\"]\n  final: {last_line: true}\n";
    for (yaml, says) in [
        (
            "exec:\n  first: [python3, \"{{captured.session}}\"]\n  final: {last_line: true}\n  capture:\n    session: {regex: \"id=(\\\\S+)\"}\n".to_string(),
            "before anything is captured",
        ),
        (
            format!("{head}  next: [python3, \"{{{{captured.sesion}}}}\"]\n  capture:\n    session: {{regex: \"id=(\\\\S+)\"}}\n"),
            "declare it under `exec.capture`",
        ),
        (
            format!("{head}  capture:\n    session: {{regex: \"(\"}}\n"),
            "not a valid regex",
        ),
        (
            format!("{head}  capture:\n    session: {{jsonl: {{where: {{type: system}}}}}}\n"),
            "needs a `field`",
        ),
        (
            format!("{head}  capture:\n    session: {{regex: x, jsonl: {{field: a}}}}\n"),
            "exactly one",
        ),
        (
            format!("{head}  capture:\n    a-b: {{regex: x}}\n"),
            "is not a name",
        ),
        (
            format!("{head}  store_session: \"{{{{captured.nope}}}}\"\n"),
            "captured.nope",
        ),
    ] {
        let p = dir.path().join("p.yaml");
        std::fs::write(&p, &yaml).unwrap();
        let out = std::process::Command::new(bin())
            .args([
                "scenarios.yaml",
                "--agent",
                p.to_str().unwrap(),
                "--only",
                "provider_hang",
            ])
            .current_dir(repo())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}: {err}");
        assert!(err.contains(says), "{yaml}: {err}");
        assert!(err.contains("p.yaml:"), "{yaml}: {err}");
        // FILE:LINE:COL, the line inside the exec section.
        let place = err.split("p.yaml:").nth(1).unwrap_or("");
        let line: u32 = place.split(':').next().unwrap_or("0").parse().unwrap_or(0);
        assert!(line >= 1, "{yaml}: {err}");
    }
}

/// `if_set` in an exec argv: on a row without MCP, `{{mcp_url}}` is empty,
/// so `{{mcp_url | if_set: "--mcp-url={}"}}` renders nothing and the
/// argument is left out (the fixture CLI's argparse would refuse an empty
/// extra argument as well as an unknown flag: the row passes only if it is
/// gone).
#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn an_if_set_argument_without_a_value_is_left_out_of_the_argv() {
    require("python3", python(), "install python3");
    let dir = tempfile::tempdir().unwrap();
    let fixtures = repo().join("tests/fixtures/agents");
    let text = std::fs::read_to_string(repo().join(PROFILE))
        .unwrap()
        .replace("{{profile_dir}}", fixtures.to_str().unwrap())
        .replace(
            "\"{{message}}\"]",
            "\"{{mcp_url | if_set: \\\"--mcp-url={}\\\"}}\", \"{{message}}\"]",
        );
    assert_eq!(text.matches("if_set").count(), 2, "{text}");
    let p = dir.path().join("p.yaml");
    std::fs::write(&p, text).unwrap();
    let id = "provider_500_forever";
    let r = run("scenarios.yaml", p.to_str().unwrap(), &[id]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let argv = argvs(&r, id);
    assert!(argv.len() >= 2, "{argv:?}");
    for a in &argv {
        assert!(!a.contains("\"\"") && !a.contains("--mcp-url"), "{a}");
    }
}
