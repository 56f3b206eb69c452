//! Bad input, tried as a new user would: each gets a clear message and the
//! right exit code (2 for usage and configuration errors, 1 for an agent that
//! fails), and none leaves a process behind.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// No table is the built-in seed table (`--list` shows its rows), said on stderr.
#[test]
fn no_table_given_is_the_built_in_one() {
    let (stdout, stderr) = run("notable", &["--list"], 0);
    assert!(
        stderr.contains("table: built-in scenarios.yaml"),
        "{stderr}"
    );
    assert!(stdout.contains("provider_hang"), "{stdout}");
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
    assert!(stderr.contains("would overwrite"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "{}");
}

/// A scenario table with `row` (YAML lines, 4-space indented) added to its
/// only scenario.
fn with(row: &str) -> String {
    ONE.replace("    expect: error\n", &format!("    expect: error\n{row}"))
}

#[test]
fn durations_out_of_bounds_are_errors_with_their_place_never_panics() {
    let d = tempfile::tempdir().unwrap();
    for (i, (row, said)) in [
        (
            "    deadlines: {turn: 1e30}\n",
            "exceeds the ceiling of 604800 s",
        ),
        ("    deadlines: {turn: .inf}\n", "finite"),
        ("    deadlines: {probe: -1}\n", "negative"),
        ("    deadlines: {boot: .nan}\n", "NaN"),
        ("    deadlines: {exit: '5'}\n", "a number of seconds"),
        ("    knobs: {stale_timeout: 1e30}\n", "exceeds the ceiling"),
        (
            "    process_fault: {action: stop, at: {after_seconds: 1e30}}\n",
            "exceeds the ceiling",
        ),
        (
            "    process_fault: {action: stop, at: {after_calls: 1}, stop_for: 1e9}\n",
            "exceeds the ceiling",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let p = write(d.path(), &format!("t{i}.yaml"), &with(row));
        let (_, stderr) = run("durations", &[&p, "--list"], 2);
        assert!(stderr.contains(&format!("{p}:")), "{row}: {stderr}");
        assert!(stderr.contains(said), "{row}: {stderr}");
    }
    // Inside a reply and a chaos block, too.
    let hang = ONE.replace("{kind: error, status: 500}", "{kind: hang, seconds: 1e30}");
    let p = write(d.path(), "hang.yaml", &hang);
    let (_, stderr) = run("durations", &[&p, "--list"], 2);
    assert!(stderr.contains("exceeds the ceiling"), "{stderr}");
    let chaos = ONE.replace(
        "    expect: error\n",
        "    expect: survives\n    chaos: {turns: 2, duration: 1e30, min_faults: 1}\n",
    );
    let p = write(d.path(), "chaos.yaml", &chaos);
    let (_, stderr) = run("durations", &[&p, "--list"], 2);
    assert!(stderr.contains("exceeds the ceiling"), "{stderr}");
}

#[test]
fn counts_above_their_ceiling_are_errors() {
    let d = tempfile::tempdir().unwrap();
    let repeat = ONE.replace(
        "{kind: error, status: 500}",
        "{kind: tool_call, calls: [{tool: shell, args: {command: 'true'}}], repeat: 100000000}",
    );
    let p = write(d.path(), "repeat.yaml", &repeat);
    let (_, stderr) = run("counts", &[&p, "--list"], 2);
    assert!(
        stderr.contains("`repeat` is 100000000; it is 1 to 1000"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{p}:4:")), "{stderr}");
    let turns = ONE.replace(
        "    expect: error\n",
        "    expect: survives\n    chaos: {turns: 100000000, duration: 5, min_faults: 1}\n",
    );
    let p = write(d.path(), "turns.yaml", &turns);
    let (_, stderr) = run("counts", &[&p, "--list"], 2);
    assert!(stderr.contains("`chaos.turns` is 100000000"), "{stderr}");
    // A schedule is finite: no interval so short, or run so long, that the
    // faults would not fit in memory.
    for (chaos, said) in [
        (
            "{turns: 2, duration: 1, interval: [1.0e-300, 1.0e-300], min_faults: 1}",
            "`interval` starts at 0.05 s at least",
        ),
        (
            "{turns: 2, duration: 600000, interval: [0.1, 0.2], min_faults: 1}",
            "allows more than 10000 faults",
        ),
    ] {
        let t = ONE.replace(
            "    expect: error\n",
            &format!("    expect: survives\n    chaos: {chaos}\n"),
        );
        let p = write(d.path(), "schedule.yaml", &t);
        let (_, stderr) = run("counts", &[&p, "--list"], 2);
        assert!(stderr.contains(said), "{chaos}: {stderr}");
    }
}

#[test]
fn deadline_scale_must_keep_every_deadline_in_bounds() {
    for (scale, said) in [
        ("1e300", "deadline `boot` (120 s) scaled by 1e300"),
        ("10000", "exceeds the ceiling"),
        ("0", "positive, finite"),
        ("-1", "positive, finite"),
        ("NaN", "positive, finite"),
        ("inf", "positive, finite"),
    ] {
        let arg = format!("--deadline-scale={scale}");
        let (_, stderr) = run(
            "scale",
            &["scenarios.yaml", "--only", "provider_hang", &arg],
            2,
        );
        assert!(stderr.contains(said), "{scale}: {stderr}");
    }
}

#[test]
fn outputs_that_are_not_regular_files_or_unwritable_are_refused_up_front() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap().to_string();
    let fifo = d.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let victim = write(d.path(), "victim.txt", "keep");
    let link = d.path().join("link.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = fifo.to_str().unwrap().to_string();
    let link = link.to_str().unwrap().to_string();
    for (flag, path, said) in [
        ("--json", "/proc/nope/x.json", "does not exist"),
        ("--junit", dir.as_str(), "is a directory"),
        ("--html", fifo.as_str(), "is a fifo"),
        ("--json", link.as_str(), "is a symbolic link"),
        ("--json", "/dev/full", "is a device"),
    ] {
        let (stdout, stderr) = run(
            "outputs",
            &[
                "scenarios.yaml",
                "--only",
                "provider_500_forever",
                flag,
                path,
            ],
            2,
        );
        assert!(stderr.contains(said), "{flag} {path}: {stderr}");
        assert!(
            !stdout.contains("PASS") && !stdout.contains("FAIL"),
            "nothing ran: {stdout}"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata("/dev/full")
            .unwrap()
            .file_type()
            .is_char_device(),
        "/dev/full is still a device"
    );
}

#[test]
fn two_outputs_on_one_path_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out").to_str().unwrap().to_string();
    let (_, stderr) = run(
        "dup",
        &["scenarios.yaml", "--json", &out, "--junit", &out],
        2,
    );
    assert!(stderr.contains("--json and --junit both write"), "{stderr}");
    assert!(!Path::new(&out).exists());
    let (_, stderr) = run(
        "dup-art",
        &["scenarios.yaml", "--html", &out, "--artifacts", &out],
        2,
    );
    assert!(stderr.contains("is the --artifacts directory"), "{stderr}");
    assert!(!Path::new(&out).exists());
}

#[test]
fn outputs_never_overwrite_the_agent_or_chaosrun_itself() {
    let d = tempfile::tempdir().unwrap();
    let script = write(d.path(), "agent.sh", "#!/bin/sh\nexit 3\n");
    let profile = write(
        d.path(),
        "agent.yaml",
        &format!("command: [\"sh\", \"{script}\"]\n"),
    );
    let (_, stderr) = run(
        "clobber-agent",
        &["scenarios.yaml", "--agent", &profile, "--junit", &script],
        2,
    );
    assert!(stderr.contains("would overwrite"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&script).unwrap(),
        "#!/bin/sh\nexit 3\n"
    );
    let (_, stderr) = run(
        "clobber-profile",
        &["scenarios.yaml", "--agent", &profile, "--html", &profile],
        2,
    );
    assert!(stderr.contains("would overwrite"), "{stderr}");
    let exe = bin();
    let before = std::fs::metadata(&exe).unwrap().len();
    let (_, stderr) = run(
        "clobber-exe",
        &["scenarios.yaml", "--json", exe.to_str().unwrap()],
        2,
    );
    assert!(stderr.contains("would overwrite"), "{stderr}");
    assert_eq!(std::fs::metadata(&exe).unwrap().len(), before);
}

#[test]
fn profile_paths_outside_home_are_refused_at_load() {
    let d = tempfile::tempdir().unwrap();
    let profile = write(
        d.path(),
        "agent.yaml",
        "command: [sh]\nlogs: [../../etc/shadow]\n",
    );
    let (_, stderr) = run(
        "shadow",
        &[
            "scenarios.yaml",
            "--agent",
            &profile,
            "--only",
            "provider_hang",
        ],
        2,
    );
    assert!(
        stderr.contains("must stay inside the agent's HOME"),
        "{stderr}"
    );
}

#[test]
fn relative_artifacts_directory_works() {
    // The README's own example: `--artifacts art`, relative to the caller's
    // working directory (not the repository's).
    let d = tempfile::tempdir().unwrap();
    let table = repo().join("scenarios.yaml");
    let mark = new_mark("relart");
    let out = command(
        &mark,
        &[
            table.to_str().unwrap(),
            "--only",
            "tool_args_garbage",
            "--artifacts",
            "art",
            "--keep-all",
            "--no-progress",
        ],
    )
    .current_dir(d.path())
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = d.path().join("art/tool_args_garbage");
    for f in ["spec.json", "observation.json", "checks.json"] {
        assert!(run.join(f).is_file(), "{f} kept");
    }
    assert!(
        !d.path().join("art/.chaosrun.lock").exists(),
        "the lock is released"
    );
    assert!(wait_unmarked(&mark, Duration::from_secs(5)).is_empty());
}

#[test]
fn two_runs_cannot_share_an_artifacts_directory() {
    let d = tempfile::tempdir().unwrap();
    let art = d.path().join("art");
    let art_s = art.to_str().unwrap();
    let mark = new_mark("artlock");
    let mut first = command(
        &mark,
        &[
            "tests/fixtures/hung_tool_table.yaml",
            "--artifacts",
            art_s,
            "--no-progress",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // Wait (bounded) for the first run's lock, an event on the file system.
    let lock = art.join(".chaosrun.lock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lock.is_file() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--only",
            "provider_hang",
            "--artifacts",
            art_s,
        ],
    );
    let _ = Command::new("kill")
        .args(["-TERM", &first.id().to_string()])
        .status();
    let status = first.wait().unwrap();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert!(err.contains("locked by another chaosrun run"), "{err}");
    assert_eq!(status.code(), Some(143));
    assert!(!lock.exists(), "the first run released its lock on SIGTERM");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    // `chaosrun scenarios.yaml --list | head -0`: the pipe's reader is gone
    // before chaosrun writes a byte.
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let out = Command::new(bin())
        .args(["scenarios.yaml", "--list"])
        .current_dir(repo())
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "quiet: {err}");
    // A run too: the verdict (exit code) survives a closed stdout.
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let out = Command::new(bin())
        .args([
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--no-progress",
        ])
        .current_dir(repo())
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // And closed stdout and stderr together: a usage error is still exit 2
    // (not 101 from a panic while saying it), a failing run still exit 1.
    for (args, code) in [
        (vec!["no-such-table.yaml"], 2),
        (
            vec![
                "scenarios.yaml",
                "--only",
                "provider_500_forever",
                "--agent-arg=--bug=retry_storm",
                "--no-progress",
            ],
            1,
        ),
    ] {
        let (r1, w1) = nix::unistd::pipe().unwrap();
        let (r2, w2) = nix::unistd::pipe().unwrap();
        drop((r1, r2));
        let status = Command::new(bin())
            .args(&args)
            .current_dir(repo())
            .stdout(Stdio::from(w1))
            .stderr(Stdio::from(w2))
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "{args:?}");
    }
}

#[test]
fn run_folders_are_removed_after_sigint() {
    let tmp = tempfile::tempdir().unwrap();
    let mark = new_mark("folders");
    let mut child = command(
        &mark,
        &["tests/fixtures/hung_tool_table.yaml", "--no-progress"],
    )
    .env("TMPDIR", tmp.path())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marked(&mark).iter().any(|p| p.contains("sleep 3600")) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let busy: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().collect();
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(
        !busy.is_empty(),
        "the run had its folders in TMPDIR while busy"
    );
    assert_eq!(status.code(), Some(130));
    let after: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(after.is_empty(), "left in TMPDIR: {after:?}");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_report_that_cannot_be_written_at_the_end_is_exit_2() {
    // The checks up front pass; then, while the run is busy, the report's
    // path becomes a directory, so the final write is refused.
    let d = tempfile::tempdir().unwrap();
    let report = d.path().join("r.json");
    let mark = new_mark("late-write");
    let child = command(
        &mark,
        &[
            "scenarios.yaml",
            "--only",
            "provider_hang",
            "--deadline-scale",
            "0.05",
            "--json",
            report.to_str().unwrap(),
            "--no-progress",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The first (incomplete) report is written when the run starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !report.is_file() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::remove_file(&report).unwrap();
    std::fs::create_dir(&report).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a report could not be written"), "{err}");
    assert!(report.is_dir(), "the directory was not replaced");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_bad_context_window_is_exit_2_with_its_place() {
    let d = tempfile::tempdir().unwrap();
    let says = "a context window's size must be a whole number of bytes from 1 to 67108864";
    for (i, bad) in ["-1", "0", "2.5", "'lots'", "1e12", "{a: 1}"]
        .into_iter()
        .enumerate()
    {
        let row = format!("    context_window: {{max_request_bytes: {bad}}}\n");
        let p = write(d.path(), &format!("cw{i}.yaml"), &with(&row));
        let (_, stderr) = run("context-window", &[&p, "--list"], 2);
        // The row is the table's sixth line.
        assert!(stderr.contains(&format!("{p}:6:")), "{bad}: {stderr}");
        assert!(stderr.contains(says), "{bad}: {stderr}");
    }
    for (name, row, said) in [
        ("typo", "{max_bytes: 5}", "max_bytes"),
        (
            "both",
            "{max_request_bytes: 5, headroom_bytes: 5}",
            "exactly one",
        ),
        ("none", "{}", "exactly one"),
        ("neg", "{headroom_bytes: -5}", says),
    ] {
        let p = write(
            d.path(),
            &format!("{name}.yaml"),
            &with(&format!("    context_window: {row}\n")),
        );
        let (_, stderr) = run("context-window", &[&p, "--list"], 2);
        assert!(stderr.contains(&format!("{p}:6:")), "{row}: {stderr}");
        assert!(stderr.contains(said), "{row}: {stderr}");
    }
    for ok in ["{max_request_bytes: 4096}", "{headroom_bytes: 8000}"] {
        let p = write(
            d.path(),
            "ok.yaml",
            &with(&format!("    context_window: {ok}\n")),
        );
        run("context-window", &[&p, "--list"], 0);
    }
}

#[test]
fn a_subagent_call_without_a_prompt_or_a_zero_trigger_is_named_with_its_place() {
    let d = tempfile::tempdir().unwrap();
    for (i, (reply, extra, said)) in [
        (
            "{kind: tool_call, calls: [{tool: subagent, args: {task: x}}]}",
            "",
            "a `subagent` call needs `args: {prompt: TEXT}`",
        ),
        (
            "{kind: tool_call, calls: [{tool: subagent, args: {prompt: '  '}}]}",
            "",
            "a `subagent` call needs `args: {prompt: TEXT}`",
        ),
        (
            "{kind: hang}",
            "    interrupt: {when_subagent_call: 0}\n",
            "`when_subagent_call` counts from 1",
        ),
        (
            "{kind: hang}",
            "    responder_extra: 1\n",
            "unknown field `responder_extra`",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let t = ONE.replace("{kind: error, status: 500}", reply).replace(
            "    expect: error\n",
            &format!("    expect: error\n{extra}"),
        );
        let p = write(d.path(), &format!("s{i}.yaml"), &t);
        let (_, stderr) = run("subagent", &[&p, "--list"], 2);
        assert!(
            stderr.contains(&format!("{p}:")) && stderr.contains(said),
            "{reply} {extra}: {stderr}"
        );
    }
    // `subagent` in a rule's `when` must be a boolean.
    let t = ONE.replace(
        "      - reply: {kind: error, status: 500}",
        "      - when: {subagent: sometimes}\n        reply: {kind: hang}",
    );
    let p = write(d.path(), "w.yaml", &t);
    let (_, stderr) = run("subagent", &[&p, "--list"], 2);
    assert!(
        stderr.contains(&format!("{p}:4:")) && stderr.contains("subagent"),
        "{stderr}"
    );
}

/// Table runs and `explore` take one set of agent flags, resolved by one
/// set-up: each mistake is refused by both, exit 2, with the same message,
/// before anything runs.
#[test]
fn table_runs_and_explore_refuse_bad_agent_flags_alike() {
    let unset = "CHAOSRUN_TEST_SURELY_UNSET_VAR";
    assert!(std::env::var_os(unset).is_none());
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "--agent",
                "examples/claude-code/claude-code.yaml",
                "--agent-arg",
                "x",
            ],
            "--agent-arg is for a driver-protocol agent; `examples/claude-code/claude-code.yaml` is an exec-mode profile",
        ),
        (&["--pass-env", unset], "is not set in chaosrun's environment"),
        (
            &["--upstream", "http://127.0.0.1:9", "--upstream-key-env", "KEYX"],
            "add --pass-env KEYX",
        ),
        (
            &["--upstream", "http://127.0.0.1:9", "--upstream-ca", "/no/such/ca.pem"],
            "upstream CA /no/such/ca.pem",
        ),
    ];
    for (flags, said) in cases {
        let mut table = vec!["scenarios.yaml"];
        table.extend_from_slice(flags);
        let mut explore = vec!["explore"];
        explore.extend_from_slice(flags);
        let (_, t) = run("agentflags", &table, 2);
        let (_, e) = run("agentflags", &explore, 2);
        let error = |s: &str| {
            s.lines()
                .find(|l| l.starts_with("chaosrun: error: "))
                .map(str::to_string)
        };
        assert!(t.contains(said), "{flags:?}: {t}");
        assert_eq!(error(&t), error(&e), "{flags:?}:\n{t}\n---\n{e}");
    }
}

/// A filter that does not fit its variable's value (a unit filter on the
/// `agent_sandbox` switch or on text, also after `json`) made every row an
/// ERROR at run time; it is a load error (exit 2) naming the profile's
/// FILE:LINE:COL of the template, in `env`, a home file and an `exec` argv.
#[test]
fn a_filter_on_the_wrong_kind_of_value_is_a_load_error_at_its_place() {
    let d = tempfile::tempdir().unwrap();
    let agent = repo().join("examples/reference/agent.py");
    let driver = format!("command: [\"python3\", \"{}\"]\n", agent.display());
    let cases = [
        (
            format!("{driver}env:\n  A: \"1\"\n  SANDBOX: \"--sandbox={{{{ agent_sandbox | ms }}}}\"\n"),
            ":4:23: ",
            "`agent_sandbox` is an on/off switch",
        ),
        (
            format!("{driver}home_files:\n  - path: c.json\n    template: |\n      {{\"m\": {{{{model | int}}}}}}\n"),
            ":5:13: ",
            "`model` is text",
        ),
        (
            "exec:\n  first: [\"true\",\n    \"{{agent_sandbox|int}}\"]\n  final: {last_line: true}\n"
                .to_string(),
            ":3:6: ",
            "`agent_sandbox` is an on/off switch",
        ),
        (
            format!("{driver}env:\n  T: \"{{{{tool_timeout | json | ms}}}}\"\n"),
            ":3:7: ",
            "`json` made it a quoted JSON string",
        ),
    ];
    for (i, (yaml, at, why)) in cases.iter().enumerate() {
        let profile = write(d.path(), &format!("agent{i}.yaml"), yaml);
        let args = [
            "scenarios.yaml",
            "--agent",
            &profile,
            "--only",
            "provider_500_forever",
        ];
        let (_, stderr) = run(&format!("kind{i}"), &args, 2);
        assert!(
            stderr.contains(&format!("{profile}{at}")),
            "{yaml}\n{stderr}"
        );
        assert!(stderr.contains(why), "{stderr}");
        assert!(stderr.contains("every row would end in ERROR"), "{stderr}");
    }
}

/// An exec-mode agent whose first turn crashes at config load prints
/// nothing a capture could match: the ERROR quotes the crash (its exit and
/// stderr) as the cause, never "fix the capture's selector" (issue 47.16).
#[test]
fn a_turn_that_crashed_at_config_load_is_quoted_not_blamed_on_the_capture() {
    let d = tempfile::tempdir().unwrap();
    let table = write(d.path(), "t.yaml", ONE);
    let crash = "import sys; sys.stderr.write(\"Error: cannot load ~/.cli/config.json: unknown key 'modle'\\n\"); sys.exit(1)";
    let profile = format!(
        "exec:\n  first: [\"python3\", \"-c\", {crash:?}, \"{{{{message}}}}\"]\n  next: [\"python3\", \"-c\", {crash:?}, \"--resume\", \"{{{{captured.session}}}}\", \"{{{{message}}}}\"]\n  capture:\n    session: {{jsonl: {{where: {{type: system}}, field: session_id}}}}\n  stdin: closed\n  final: {{jsonl: {{where: {{type: result}}, field: result}}}}\n  failed: {{exit_code_nonzero: true}}\n"
    );
    let p = write(d.path(), "crash.yaml", &profile);
    let (stdout, _) = run("crash", &[&table, "--agent", &p], 1);
    assert!(stdout.contains("ERROR a"), "{stdout}");
    assert!(
        stdout.contains("turn 0 crashed before it printed anything to capture (exit 1)"),
        "{stdout}"
    );
    assert!(stdout.contains("unknown key 'modle'"), "{stdout}");
    assert!(!stdout.contains("fix the capture's selector"), "{stdout}");
}

/// An id that is a row of the other built-in table says which table has
/// it and the command that runs it (issue 47.16), both ways; a typo still
/// lists the known ids.
#[test]
fn an_id_of_the_other_built_in_table_names_it_and_the_command() {
    let (_, stderr) = run("other", &["--only", "kill_mid_stream", "--list"], 2);
    assert!(
        stderr.contains(
            "unknown scenario id `kill_mid_stream` in scenarios.yaml: it is a row of the built-in process_faults.yaml; run it with `chaosrun process_faults.yaml --only kill_mid_stream`"
        ),
        "{stderr}"
    );
    let (_, stderr) = run(
        "other2",
        &["process_faults.yaml", "--only", "provider_hang", "--list"],
        2,
    );
    assert!(
        stderr.contains("`chaosrun scenarios.yaml --only provider_hang`"),
        "{stderr}"
    );
    let (_, stderr) = run("typo", &["--only", "kill_mid_strem", "--list"], 2);
    assert!(stderr.contains("known ids: "), "{stderr}");
}

/// `NAME-acp` runs a known agent through its ACP profile: one without one is
/// exit 2 naming it, before anything is installed or started.
#[test]
fn an_acp_name_for_an_agent_without_an_acp_profile_is_refused() {
    let (stdout, stderr) = run(
        "noacp",
        &["--agent", "aider-acp", "--only", "provider_hang"],
        2,
    );
    assert!(
        stderr.contains("agent `aider` has no ACP profile (no aider-acp.yaml in examples/aider/)"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "{stdout}");
}

/// A shipped profile run from a copy of its folder with no install beside
/// it is refused before anything runs (exit 2, naming the setup script),
/// not run as an agent that fails every row.
#[test]
fn a_shipped_profile_without_its_install_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("claude-code");
    std::fs::create_dir(&dir).unwrap();
    let src = repo().join("examples/claude-code");
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    assert!(!dir.join("prefix").exists());
    let profile = dir.join("claude-code.yaml");
    let (_, stderr) = run(
        "uninstalled",
        &["value_faults.yaml", "--agent", profile.to_str().unwrap()],
        2,
    );
    assert!(
        stderr.contains("claude-code is not installed beside")
            && stderr.contains("claude-code/setup.sh` first"),
        "{stderr}"
    );
}
