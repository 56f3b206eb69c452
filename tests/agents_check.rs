//! `chaosrun agents check AGENT` through the real binary, on the bundled
//! reference agent: its shipped profile passes every step (exit 0); the same
//! profile with one part broken (the shell tool's name, the store path) fails
//! exactly that step, naming the check and the profile key (exit 1); a profile
//! that declares no resume and no MCP has those steps "not checked", never ok;
//! a knob the profile declares (`agent_knobs`) and renders nowhere is a
//! `warning:` line that fails no step; an unknown agent is the table run's
//! usage error (exit 2); SIGTERM reaches
//! the table run and its 143 is forwarded. No process of a smoke outlives it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::{repo, wait_unmarked, MARK_VAR};

/// `chaosrun agents check AGENT EXTRA...` with a fresh cache, the test's
/// marker passed to the agent; (exit code, stdout, stderr).
fn check(name: &str, agent: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mark = common::new_mark(name);
    let cache = tempfile::tempdir().unwrap();
    let mut args = vec!["agents", "check", agent, "--pass-env", MARK_VAR];
    args.extend(extra);
    let out: Output = common::command(&mark, &args)
        .env("CHAOSRUN_CACHE", cache.path())
        .output()
        .unwrap();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    common::kill_marked(&mark);
    assert!(left.is_empty(), "left running after the smoke: {left:?}");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The reference profile, written into `dir` with `edit` applied (each
/// `(from, to)` must change it).
fn reference_profile(dir: &Path, edit: &[(&str, &str)]) -> PathBuf {
    let agent = repo().join("examples/reference/agent.py");
    let mut yaml = std::fs::read_to_string(repo().join("examples/reference/agent.yaml"))
        .unwrap()
        .replace("{{profile_dir}}/agent.py", agent.to_str().unwrap());
    for (from, to) in edit {
        assert!(yaml.contains(from), "{from} not in the profile");
        yaml = yaml.replace(from, to);
    }
    let path = dir.join("agent.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The line of step `name` (its first line).
fn step<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with("  ")))
        .unwrap_or_else(|| panic!("no step `{name}` in:\n{out}"))
}

const STEPS: [&str; 5] = ["start", "tool call", "resume", "store read", "mcp listing"];

#[test]
fn the_shipped_reference_profile_passes_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("check.json");
    let (code, out, err) = check(
        "check-ok",
        "reference",
        &["--json", report.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    for name in STEPS {
        assert!(step(&out, name).ends_with(" ok"), "{name}:\n{out}");
    }
    assert!(
        out.ends_with("the profile drives this agent: 5 step(s) ok\n"),
        "{out}"
    );
    // The table run's own lines are on stderr, its report kept with --json.
    assert!(err.contains("PASS  check_resume"), "{err}");
    let json = common::read_json(&report);
    assert_eq!(json["scenarios"].as_array().unwrap().len(), 4, "{json}");
}

/// A renamed shell tool loses the tool's output: only the tool step fails,
/// naming `own_outputs` and the profile's `tools.shell`.
#[test]
fn a_wrong_tool_name_fails_the_tool_step_alone() {
    let dir = tempfile::tempdir().unwrap();
    let profile = reference_profile(
        dir.path(),
        &[("shell: {name: shell,", "shell: {name: run_shell,")],
    );
    let (code, out, err) = check("check-tool", profile.to_str().unwrap(), &[]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    let line = step(&out, "tool call");
    assert!(line.contains("FAILED: own_outputs: "), "{out}");
    assert!(line.contains("unknown tool run_shell"), "{out}");
    assert!(
        out.contains("hint: look at the profile's `tools.shell`"),
        "{out}"
    );
    assert!(
        out.contains("--only check_tool_call --artifacts DIR"),
        "{out}"
    );
    for name in ["start", "resume", "store read", "mcp listing"] {
        assert!(step(&out, name).ends_with(" ok"), "{name}:\n{out}");
    }
    assert!(out.ends_with("\n1 step(s) FAILED, 4 ok\n"), "{out}");
}

/// A store path the agent never writes: only the store step fails, naming
/// `store_written` and `store.path`; the rows that wrote a store pass.
#[test]
fn a_wrong_store_path_fails_the_store_step_alone() {
    let dir = tempfile::tempdir().unwrap();
    let profile = reference_profile(
        dir.path(),
        &[("path: .refagent/state.db", "path: .refagent/elsewhere.db")],
    );
    let (code, out, err) = check("check-store", profile.to_str().unwrap(), &[]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    let line = step(&out, "store read");
    assert!(line.contains("FAILED: store_written: "), "{out}");
    assert!(line.contains("elsewhere.db"), "{out}");
    assert!(
        out.contains("hint: look at the profile's `store.path`"),
        "{out}"
    );
    for name in ["start", "tool call", "resume", "mcp listing"] {
        assert!(step(&out, name).ends_with(" ok"), "{name}:\n{out}");
    }
}

/// A profile that declares no resume and no MCP: those steps are not
/// checked, with the run's reason, and the smoke still passes (exit 0).
#[test]
fn steps_the_profile_cannot_express_are_not_checked() {
    let dir = tempfile::tempdir().unwrap();
    let profile = reference_profile(
        dir.path(),
        &[
            ("breaker: true", "breaker: true\nresume: false"),
            ("mcp: {transports: [stdio, http, sse]}", "mcp: false"),
        ],
    );
    let (code, out, err) = check("check-na", profile.to_str().unwrap(), &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    for name in ["resume", "mcp listing"] {
        let line = step(&out, name);
        assert!(line.contains(" not checked: "), "{name}:\n{out}");
    }
    assert!(step(&out, "resume").contains("resume"), "{out}");
    assert!(step(&out, "mcp listing").contains("mcp"), "{out}");
    assert!(
        out.ends_with("\nno step failed: 3 ok, 2 not checked (never a pass)\n"),
        "{out}"
    );
}

/// A profile that declares the agent's request and tool timeouts
/// (`agent_knobs`) but renders only the tool timeout: the smoke warns once,
/// naming `request_timeout` (not `tool_timeout`), between the steps and the
/// summary; a warning fails no step (exit 0).
#[test]
fn a_declared_knob_the_profile_renders_nowhere_is_warned() {
    let dir = tempfile::tempdir().unwrap();
    let profile = reference_profile(
        dir.path(),
        &[
            (
                "agent_knobs: [stale_timeout, request_timeout, api_max_retries, max_turns, tool_timeout]",
                "agent_knobs: [request_timeout, tool_timeout]",
            ),
            (
                "\"request_timeout\": {{request_timeout}}",
                "\"request_timeout\": 600",
            ),
        ],
    );
    let (code, out, err) = check("check-knobs", profile.to_str().unwrap(), &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let warned: Vec<&str> = out.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warned.len(), 1, "{out}");
    assert!(
        warned[0].contains("setting for `request_timeout` (`agent_knobs`)")
            && warned[0].contains("renders `{{request_timeout}}` nowhere"),
        "{out}"
    );
    for name in STEPS {
        assert!(step(&out, name).ends_with(" ok"), "{name}:\n{out}");
    }
    assert!(
        out.ends_with("\nthe profile drives this agent: 5 step(s) ok\n"),
        "{out}"
    );
}

#[test]
fn an_unknown_agent_is_a_usage_error() {
    let (code, out, err) = check("check-unknown", "no-such-agent-xyz", &[]);
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("unknown agent `no-such-agent-xyz`"), "{err}");
}

/// SIGTERM to `agents check` alone (not its process group) reaches the
/// table run it started: that run kills the agent it is waiting on and
/// exits 143, which `agents check` forwards, and nothing is left running.
#[test]
fn sigterm_is_passed_to_the_smoke_and_its_exit_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    // An agent that never gets ready: the smoke waits on its boot deadline.
    let hang = "import time; time.sleep(3600)";
    let profile = reference_profile(
        dir.path(),
        &[(
            "command: [\"python3\", \"",
            &format!("command: [\"python3\", \"-c\", \"{hang}\", \""),
        )],
    );
    let mark = common::new_mark("check-term");
    let cache = tempfile::tempdir().unwrap();
    let args = [
        "agents",
        "check",
        profile.to_str().unwrap(),
        "--pass-env",
        MARK_VAR,
    ];
    let child = common::command(&mark, &args)
        .env("CHAOSRUN_CACHE", cache.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !common::marked(&mark).iter().any(|p| p.contains(hang)) {
        if std::time::Instant::now() > deadline {
            common::kill_marked(&mark);
            panic!("the agent never started: {:?}", common::marked(&mark));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    common::kill_marked(&mark);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("interrupted; killed"), "{err}");
    assert!(out.stdout.is_empty(), "no steps without a verdict");
    assert!(left.is_empty(), "left running: {left:?}");
}

/// An install put into the cache by hand (not by `agents setup`) is not
/// run: `agents check` on it is the table run's refusal (exit 2, naming the
/// folder and the fix), and the planted agent binary never starts (it would
/// leave a marker outside the cache).
#[test]
fn an_install_made_by_hand_is_refused_not_run() {
    let cache = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran");
    let dir = cache.path().join("agents/qwen-code");
    let pkg = dir.join("prefix/lib/node_modules/@qwen-code/qwen-code");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("package.json"), "{\"version\": \"0.24.4\"}").unwrap();
    std::fs::create_dir_all(dir.join("prefix/bin")).unwrap();
    let bin = dir.join("prefix/bin/qwen");
    std::fs::write(
        &bin,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mark = common::new_mark("check-by-hand");
    let out = common::command(&mark, &["agents", "check", "qwen-code"])
        .env("CHAOSRUN_CACHE", cache.path())
        .output()
        .unwrap();
    common::kill_marked(&mark);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!marker.exists(), "the planted agent ran: {err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&dir.display().to_string())
            && err.contains("not made by chaosrun")
            && err.contains("chaosrun agents setup qwen-code"),
        "{err}"
    );
}
