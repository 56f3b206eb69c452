//! Exec mode with an agent that answers, and prints its error JSON, on
//! stderr only (tests/fixtures/agents/oneshot_cli.py `--stderr`, as the
//! Continue CLI does). With `from: stderr` on the profile's `final`, `failed`
//! and `capture` the turn's answer, its failure and its session id are read
//! there and the row passes; without it the violation quotes what stderr
//! held and names a stderr selector beside the stdout one. An agent that
//! answers on stdout and errs on stderr (`--errors-on-stderr`) is read with a
//! `final.jsonl` list whose error selector says `from: stderr`. A bad
//! `from:` is exit 2 with FILE:LINE:COL.

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/oneshot_stderr.yaml";
const ROW: &str = "provider_500_forever";

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

/// Run the one row through `profile`, keeping its artifacts.
fn run(profile: &str) -> Run {
    let mark = new_mark("stderr");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let art = dir.path().join("art");
    let (json_s, art_s) = (
        json.to_str().unwrap().to_string(),
        art.to_str().unwrap().to_string(),
    );
    let args = [
        "scenarios.yaml",
        "--agent",
        profile,
        "--seed",
        "3",
        "--json",
        &json_s,
        "--artifacts",
        &art_s,
        "--keep-all",
        "--only",
        ROW,
    ];
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

/// The row's `turn_end` events, in order.
fn turn_ends(r: &Run) -> Vec<serde_json::Value> {
    let obs = read_json(&r.dir.path().join("art").join(ROW).join("observation.json"));
    obs["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ev"] == "turn_end")
        .cloned()
        .collect()
}

/// The fixture profile, with its script's directory spelled out (it is
/// written elsewhere) and each line passed through `edit`.
fn profile_copy(dir: &Path, edit: impl Fn(&str) -> String) -> String {
    let fixtures = repo().join("tests/fixtures/agents");
    let text = std::fs::read_to_string(repo().join(PROFILE)).unwrap();
    let text: Vec<String> = text
        .replace("{{profile_dir}}", fixtures.to_str().unwrap())
        .lines()
        .map(edit)
        .collect();
    let p = dir.join("p.yaml");
    std::fs::write(&p, text.join("\n") + "\n").unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn answers_errors_and_captures_are_read_from_stderr() {
    require("python3", python(), "install python3");
    let r = run(PROFILE);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let ends = turn_ends(&r);
    assert_eq!(ends.len(), 2, "{ends:?}");
    // The faulted turn: failed through the stderr error line alone (the
    // profile does not judge the exit code), its message the final.
    assert_eq!(ends[0]["failed"], true, "{}", ends[0]);
    assert!(
        ends[0]["final"].as_str().unwrap().contains("500"),
        "{}",
        ends[0]
    );
    // The probe turn resumed the captured session and answered on stderr.
    assert_eq!(ends[1]["completed"], true, "{}", ends[1]);
    assert!(
        ends[1]["final"].as_str().unwrap().starts_with("alive "),
        "{}",
        ends[1]
    );
    // The turn's stderr tail is kept, bounded, in the observation.
    let held = ends[0]["stderr"].as_str().unwrap();
    assert!(held.contains("\"is_error\": true"), "{held}");
    assert!(held.chars().count() <= 2000, "{held}");
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn without_from_stderr_the_violation_quotes_what_stderr_held() {
    require("python3", python(), "install python3");
    let dir = tempfile::tempdir().unwrap();
    // The session id is still captured from stderr: only `final` and
    // `failed` read stdout, where this CLI prints nothing.
    let p = profile_copy(dir.path(), |l| {
        if l.trim_start().starts_with("final:") || l.trim_start().starts_with("failed:") {
            l.replace(", from: stderr}", "}")
        } else {
            l.to_string()
        }
    });
    let text = std::fs::read_to_string(&p).unwrap();
    let reads = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("from: stderr"));
    assert_eq!(reads.count(), 1, "only the capture reads stderr: {text}");
    let r = run(&p);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let v = violations(&r.report, ROW).join("\n");
    assert!(v.contains("stderr held: "), "{v}");
    assert!(v.contains(r#"\"is_error\": true"#), "{v}");
    // The fix named keeps the stdout selector (a whole-`final` move to
    // stderr would break every healthy row of an agent answering on stdout).
    assert!(
        v.contains("its own `from: stderr` after the one that reads stdout"),
        "{v}"
    );
}

/// The answer on stdout and the error on stderr (the Continue CLI's `cn -p`):
/// one `final.jsonl` list, the error selector with its own `from: stderr`,
/// reads both without a `2>&1` wrapper.
#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn an_answer_on_stdout_and_an_error_on_stderr_are_both_read() {
    require("python3", python(), "install python3");
    let r = run("tests/fixtures/agents/oneshot_split.yaml");
    assert_eq!(r.code, 0, "{}", r.stdout);
    let ends = turn_ends(&r);
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0]["failed"], true, "{}", ends[0]);
    let fault = ends[0]["final"].as_str().unwrap();
    assert!(fault.contains("500"), "{}", ends[0]);
    assert!(
        ends[0]["stderr"].as_str().unwrap().contains("500"),
        "{}",
        ends[0]
    );
    assert_eq!(ends[1]["completed"], true, "{}", ends[1]);
    let probe = ends[1]["final"].as_str().unwrap();
    assert!(probe.starts_with("alive "), "{}", ends[1]);
    assert!(
        !ends[1]["stderr"].as_str().unwrap_or("").contains("alive"),
        "{}",
        ends[1]
    );
}

#[test]
fn a_bad_from_is_exit_2_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    for (edit_at, bad, says) in [
        ("final:", "from: stdrr", "unknown variant `stdrr`"),
        ("failed:", "from: both", "unknown variant `both`"),
        ("session:", "from: [stderr]", "invalid type: sequence"),
    ] {
        let p = profile_copy(dir.path(), |l| {
            if l.trim_start().starts_with(edit_at) {
                l.replace("from: stderr", bad)
            } else {
                l.to_string()
            }
        });
        let out = std::process::Command::new(bin())
            .args(["scenarios.yaml", "--agent", &p, "--only", ROW])
            .current_dir(repo())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(says), "{bad}: {err}");
        assert!(
            err.contains("stdout") && err.contains("stderr"),
            "{bad}: {err}"
        );
        let loc = err
            .split(&format!("{p}:"))
            .nth(1)
            .unwrap_or_else(|| panic!("{bad}: no place in {err}"));
        let mut parts = loc.split(':');
        assert!(parts.next().unwrap().parse::<u32>().is_ok(), "{bad}: {err}");
        assert!(parts.next().unwrap().parse::<u32>().is_ok(), "{bad}: {err}");
    }
}
