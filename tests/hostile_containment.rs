//! Containment against a hostile agent (tests/fixtures/agents/hostile_containment.py):
//! processes started with a cleared environment, `env={}`, non-dumpable,
//! double-forked into a new session, and an agent process that carries no tag
//! at all. Each run must end with the right verdict within its deadlines, and
//! afterwards nothing may survive. Survivors are found here by the argv marker
//! `HOSTILE-<mark>` in /proc/PID/cmdline, never by CHAOS_TAG, and the run's
//! cgroup (named in the run header) must be gone.

mod common;

use common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A run of the hostile table may take this long before it counts as a hang.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Asserts this machine can give chaosrun a cgroup v2 (root and a cgroup2
/// mount): these tests are `#[ignore]`d by default and scripts/test.sh runs
/// them, so a machine without it fails them rather than passing them unseen.
fn cgroup_v2_usable() -> bool {
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .is_ok_and(|m| m.lines().any(|l| l.contains(" - cgroup2 ")));
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if mounted && root {
        return true;
    }
    require(
        "root and cgroup v2",
        false,
        &format!("root: {root}, cgroup2 mounted: {mounted}"),
    );
    false
}

/// Live processes whose command line holds `word`.
fn by_argv(word: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_none_or(|s| s == "Z");
        if !zombie && cmd.contains(word) {
            out.push((pid, cmd));
        }
    }
    out
}

/// Wait (bounded) until no process holds `word` in its argv; kill any left
/// (test cleanup) and fail naming them.
fn assert_none_by_argv(word: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut left = by_argv(word);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = by_argv(word);
    }
    for (pid, _) in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(left.is_empty(), "survived chaosrun: {left:?}");
}

struct Run {
    code: Option<i32>,
    stdout: String,
    report: Value,
}

/// chaosrun on the hostile table with `--mode=MODE`, bounded by
/// [`RUN_LIMIT`]; `env` is added to its environment.
fn run(mode: &str, word: &str, env: &[(&str, &str)]) -> Run {
    run_with(mode, word, env, &[])
}

/// [`run`] with more arguments for chaosrun.
fn run_with(mode: &str, word: &str, env: &[(&str, &str)], extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let marker = word.strip_prefix("HOSTILE-").unwrap();
    let mut cmd = Command::new(bin());
    cmd.args([
        "tests/fixtures/hostile_table.yaml",
        "--agent",
        "tests/fixtures/agents/hostile_containment.py",
        &format!("--agent-arg=--mode={mode}"),
        &format!("--agent-arg=--marker={marker}"),
        "--no-progress",
        "--json",
    ])
    .arg(&json)
    .args(extra)
    .current_dir(repo())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    let deadline = Instant::now() + RUN_LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            assert_none_by_argv(word);
            panic!("chaosrun did not finish within {RUN_LIMIT:?} (mode {mode})");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = reader.join().unwrap();
    let report = read_json(&json);
    Run {
        code: status.code(),
        stdout,
        report,
    }
}

/// The run cgroup named in the header, `containment: cgroup (PATH)`.
fn run_cgroup(stdout: &str) -> PathBuf {
    let line = stdout
        .lines()
        .find(|l| l.contains("containment: cgroup ("))
        .unwrap_or_else(|| panic!("the header names the run's cgroup:\n{stdout}"));
    let path = line.split("containment: cgroup (").nth(1).unwrap();
    PathBuf::from(path.trim_end_matches(')'))
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    scenario(report, "hostile")["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("check {name} in {report}"))
}

/// An escapee mode under cgroup containment: process hygiene fails on
/// `no_survivors` naming the escapee, nothing with the marker is left, and
/// the run's cgroup is removed.
fn escapee_is_caught(mode: &str) {
    if !cgroup_v2_usable() {
        return;
    }
    let word = format!("HOSTILE-{}", new_mark(mode));
    let r = run(mode, &word, &[]);
    let cgroup = run_cgroup(&r.stdout);
    assert_none_by_argv(&word);
    assert!(
        !cgroup.exists(),
        "the run's cgroup is left: {}",
        cgroup.display()
    );
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    assert_eq!(scenario(&r.report, "hostile")["containment"], "cgroup");
    let c = check(&r.report, "no_survivors");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        violations(&r.report, "hostile")
            .iter()
            .any(|v| v.contains(&word)),
        "the escapee is named: {c}"
    );
}

#[test]
#[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
fn env_cleared_escapee_fails_hygiene_and_is_killed() {
    escapee_is_caught("env_clear_escapee");
}

#[test]
#[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
fn python_env_empty_escapee_fails_hygiene_and_is_killed() {
    escapee_is_caught("python_env_empty");
}

#[test]
#[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
fn non_dumpable_child_fails_hygiene_and_is_killed() {
    escapee_is_caught("non_dumpable");
}

#[test]
#[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
fn double_forked_new_session_fails_hygiene_and_is_killed() {
    escapee_is_caught("double_fork_setsid");
}

#[test]
#[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
fn an_untagged_agent_is_killed_by_its_handle_and_the_run_ends() {
    if !cgroup_v2_usable() {
        return;
    }
    let word = format!("HOSTILE-{}", new_mark("untagged"));
    let r = run("untagged_self", &word, &[]);
    let cgroup = run_cgroup(&r.stdout);
    assert_none_by_argv(&word);
    assert!(
        !cgroup.exists(),
        "the run's cgroup is left: {}",
        cgroup.display()
    );
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    let c = check(&r.report, "exits_by_itself");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(c.to_string().contains("chaosrun killed it"), "{c}");
    // Killed, so whether it would have cleaned up is unknown: not a pass.
    assert_eq!(check(&r.report, "no_survivors")["status"], "not_checked");
}

/// A process started before the run (a decoy, by this test) that the agent
/// writes into its own cgroup is never signalled: after the run it is still
/// alive (found by its argv marker in /proc), the report names its pid in
/// `no_adopted_process`, nothing of the agent's is left and the run's cgroup
/// is gone. The test then kills the decoy itself.
#[test]
#[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
fn an_adopted_older_process_is_reported_and_never_signalled() {
    if !cgroup_v2_usable() {
        return;
    }
    let decoy_word = format!("DECOY-{}", new_mark("decoy"));
    let mut decoy = Command::new("python3")
        .args(["-c", "import time; time.sleep(3600)", &decoy_word])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = decoy.id();
    let word = format!("HOSTILE-{}", new_mark("adopt"));
    let decoy_arg = format!("--agent-arg=--decoy={pid}");
    let r = run_with("adopt_decoy", &word, &[], &[&decoy_arg]);
    let alive = by_argv(&decoy_word);
    let exited = decoy.try_wait().unwrap();
    let _ = decoy.kill();
    let _ = decoy.wait();
    assert!(
        exited.is_none(),
        "the decoy was signalled: {exited:?}\n{}",
        r.stdout
    );
    assert_eq!(alive.len(), 1, "the decoy is alive: {alive:?}");
    assert_eq!(alive[0].0, pid as i32);
    let cgroup = run_cgroup(&r.stdout);
    assert_none_by_argv(&word);
    assert!(
        !cgroup.exists(),
        "the run's cgroup is left: {}",
        cgroup.display()
    );
    assert_eq!(r.code, Some(1), "{}", r.stdout);
    let c = check(&r.report, "no_adopted_process");
    assert_eq!(c["status"], "fail", "{c}");
    assert!(
        c.to_string().contains(&format!(
            "the agent moved pid {pid}, started before the scenario, into its cgroup"
        )),
        "{c}"
    );
    assert!(c.to_string().contains(&decoy_word), "{c}");
    assert_eq!(check(&r.report, "no_survivors")["status"], "pass");
    assert!(
        r.stdout.contains(&format!("the agent moved pid {pid}")),
        "{}",
        r.stdout
    );
}

/// With `CHAOSRUN_NO_CGROUP=1` the run says it had only the tag fallback, and
/// an escapee with a cleared environment is either found (descendant tree)
/// or makes `no_survivors` "not checked" naming it: never a pass. Nothing is
/// left afterwards either way.
#[test]
fn the_tag_fallback_is_reported_and_never_passes_an_env_cleared_escapee() {
    for mode in ["env_clear_escapee", "python_env_empty"] {
        let word = format!("HOSTILE-{}", new_mark(mode));
        let r = run(mode, &word, &[("CHAOSRUN_NO_CGROUP", "1")]);
        assert_none_by_argv(&word);
        assert!(
            r.stdout
                .contains("containment: tag (no cgroup: CHAOSRUN_NO_CGROUP is set)"),
            "{}",
            r.stdout
        );
        assert_eq!(scenario(&r.report, "hostile")["containment"], "tag");
        let c = check(&r.report, "no_survivors");
        assert_ne!(c["status"], "pass", "{mode}: {c}");
        assert!(
            c.to_string().contains(&word),
            "{mode}: the escapee is named: {c}"
        );
    }
}
