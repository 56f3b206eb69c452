//! Exec mode end to end: a one-shot CLI (tests/fixtures/agents/oneshot_cli.py,
//! one process per turn, no driver script) through its exec-mode profile.
//! Seed rows with provider faults, a hung tool, interrupts and process faults
//! (kill then `--resume`, stop) pass with events chaosrun synthesised; each of
//! the CLI's `--bug` modes fails on its own invariant; a bad `exec:` section
//! is refused at load with FILE:LINE:COL. Survivors are looked for by the
//! test's marker in /proc, never by chaosrun's tag.

mod common;

use common::*;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/oneshot_cli.yaml";

fn python() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// One chaosrun run through the exec profile.
struct Run {
    code: i32,
    report: serde_json::Value,
    stdout: String,
    /// Holds `art/ID/observation.json` for every scenario.
    dir: tempfile::TempDir,
}

/// Run `table` with `--only` each of `ids` through the exec profile, with the
/// CLI's `--bug` (if any), keeping every scenario's artifacts.
fn run(table: &str, ids: &[&str], bug: Option<&str>, scale: &str) -> Run {
    let mark = new_mark("exec");
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
        PROFILE,
        "--seed",
        "11",
        "--deadline-scale",
        scale,
        "--json",
        &json_s,
        "--artifacts",
        &art_s,
        "--keep-all",
    ];
    for id in ids {
        args.extend(["--only", id]);
    }
    let mut cmd = command(&mark, &args);
    if let Some(b) = bug {
        cmd.env("ONESHOT_BUG", format!("--bug={b}"));
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

/// A scenario's recorded events.
fn events_of(r: &Run, id: &str) -> Vec<serde_json::Value> {
    let obs = read_json(&r.dir.path().join("art").join(id).join("observation.json"));
    obs["events"].as_array().unwrap().clone()
}

fn events(r: &Run, id: &str) -> Vec<String> {
    events_of(r, id)
        .iter()
        .map(|e| e["ev"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn seed_rows_pass_through_a_one_shot_cli_with_synthesised_events() {
    require("python3", python(), "install python3");
    let rows = [
        "provider_hang",
        "provider_500_forever",
        "tool_hang_past_timeout",
        "interrupt_hung_tool",
        "interrupt_provider_hang",
    ];
    let faults = [
        "kill_during_tool_side_effect",
        "kill_tree_during_tool",
        "kill_mid_stream",
        "stop_during_tool",
    ];
    let t = std::thread::spawn(move || run("process_faults.yaml", &faults, None, "1"));
    let seed = run("scenarios.yaml", &rows, None, "1");
    let pf = t.join().unwrap();
    assert_eq!(seed.code, 0, "{}", seed.stdout);
    assert_eq!(pf.code, 0, "{}", pf.stdout);
    for id in rows {
        let ev = events(&seed, id);
        // One process per turn: ready, then turn 0 and the probe turn, closed.
        let want = [
            "spawned",
            "ready",
            "turn_start",
            "turn_end",
            "turn_start",
            "turn_end",
            "closed",
        ];
        let got: Vec<&str> = ev
            .iter()
            .map(String::as_str)
            .filter(|e| want.contains(e))
            .collect();
        assert_eq!(got, want, "{id}: {ev:?}");
    }
    let interrupted = events_of(&seed, "interrupt_hung_tool")
        .iter()
        .find(|e| e["ev"] == "turn_end" && e["i"] == 0)
        .cloned()
        .unwrap();
    assert_eq!(interrupted["interrupted"], true, "{interrupted}");
    assert!(
        interrupted["exit_reason"]
            .as_str()
            .unwrap()
            .contains("SIGINT"),
        "{interrupted}"
    );
    for id in ["kill_during_tool_side_effect", "kill_mid_stream"] {
        let ev = events(&pf, id);
        assert!(ev.contains(&"restarted".to_string()), "{id}: {ev:?}");
        assert!(
            ev.iter().filter(|e| *e == "ready").count() == 2,
            "{id}: a restart is ready again: {ev:?}"
        );
    }
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn each_cli_bug_fails_on_its_own_invariant() {
    require("python3", python(), "install python3");
    let cases = [
        (
            "ignore_sigint",
            "interrupt_provider_hang",
            "termination",
            // The profile's 3 s grace, scaled by --deadline-scale 0.5.
            "did not stop within 1.5 s of SIGINT",
        ),
        (
            "leak_child",
            "tool_hang_past_timeout",
            "process_hygiene",
            "sleep 3599",
        ),
        (
            "zero_on_error",
            "provider_500_forever",
            "termination",
            "expected a surfaced error",
        ),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|&(bug, id, inv, says)| {
            let h = std::thread::spawn(move || run("scenarios.yaml", &[id], Some(bug), "0.5"));
            (bug, id, inv, says, h)
        })
        .collect();
    for (bug, id, inv, says, h) in runs {
        let r = h.join().unwrap();
        assert_eq!(r.code, 1, "{bug}: {}", r.stdout);
        assert_eq!(
            failed_invariants(&r.report, id),
            [inv],
            "{bug}: {}",
            r.stdout
        );
        let v = violations(&r.report, id).join("\n");
        assert!(v.contains(says), "{bug}: {v}");
    }
}

#[test]
fn a_bad_exec_section_is_refused_at_load_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    for (yaml, says) in [
        (
            "exec:\n  first: [python3, \"{{mesage}}\"]\n  final: {last_line: true}\n",
            "mesage",
        ),
        (
            "exec:\n  first: [python3]\n  final: {jsonl: {where: {type: result}}}\n",
            "needs a `field`",
        ),
        (
            "exec:\n  first: [python3]\n  final: {regex: \"(\"}\n",
            "not a valid regex",
        ),
        (
            "command: [python3]\nexec:\n  first: [python3]\n  final: {last_line: true}\n",
            "keep one",
        ),
    ] {
        let p = dir.path().join("p.yaml");
        std::fs::write(&p, yaml).unwrap();
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
        if says != "keep one" {
            assert!(err.contains("p.yaml:"), "{yaml}: {err}");
        }
    }
}
