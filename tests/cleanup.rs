//! chaosrun never leaves a process behind, even when it is itself interrupted
//! or killed mid-run: SIGINT and SIGTERM make it kill every process it tagged
//! and exit 130/143; after a SIGKILL its guard process sweeps them. The agent
//! here is busy with a background swarm (including a `setsid` escapee) and a
//! hung foreground tool when the signal lands.

mod common;

use common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start chaosrun on the busy table and wait (bounded) until the agent's
/// tools are all running: 3 background sleeps, the setsid one, the hung tool.
/// The caller waits for the returned child.
#[allow(clippy::zombie_processes)]
fn start_busy(mark: &str) -> Child {
    let mut child = Command::new(bin())
        .args(["tests/fixtures/hung_tool_table.yaml", "--no-progress"])
        .args(PASS_MARK)
        .env(MARK_VAR, mark)
        .current_dir(repo())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sleeping = marked(mark)
            .iter()
            .filter(|p| p.ends_with("sleep 3600 "))
            .count();
        if sleeping >= 5 {
            return child;
        }
        if Instant::now() >= deadline {
            let seen = marked(mark);
            let _ = child.kill();
            let _ = child.wait();
            kill_marked(mark);
            panic!("the busy agent never got its tools running: {seen:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

fn assert_nothing_left(mark: &str, within: Duration) {
    let left = wait_unmarked(mark, within);
    kill_marked(mark);
    assert!(left.is_empty(), "survived chaosrun: {left:?}");
}

#[test]
fn sigint_kills_every_tagged_process_and_exits_130() {
    let mark = new_mark("sigint");
    let mut child = start_busy(&mark);
    signal(&child, "-INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    // The handler swept before exiting; allow only for the kernel to finish.
    assert_nothing_left(&mark, Duration::from_secs(3));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("interrupted; killed"), "{err}");
}

#[test]
fn sigterm_kills_every_tagged_process_and_exits_143() {
    let mark = new_mark("sigterm");
    let mut child = start_busy(&mark);
    signal(&child, "-TERM");
    assert_eq!(child.wait().unwrap().code(), Some(143));
    assert_nothing_left(&mark, Duration::from_secs(3));
}

#[test]
fn sigkill_of_chaosrun_is_cleaned_up_by_its_guard() {
    let mark = new_mark("sigkill");
    let mut child = start_busy(&mark);
    signal(&child, "-KILL");
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9));
    // The guard notices its pipe closing and sweeps everything tagged.
    assert_nothing_left(&mark, Duration::from_secs(15));
}

#[test]
fn timeout_dash_s_kill_leaves_nothing_behind() {
    // As a CI job's `timeout -s KILL` would: the limit lands while the agent
    // is busy (its turn deadline is 90 s).
    let mark = new_mark("timeout");
    let out = Command::new("timeout")
        .args(["-s", "KILL", "8"])
        .arg(bin())
        .args(["tests/fixtures/hung_tool_table.yaml", "--no-progress"])
        .args(PASS_MARK)
        .env(MARK_VAR, &mark)
        .current_dir(repo())
        .output()
        .unwrap();
    // `timeout` signals its whole process group, itself included, so it dies
    // of the SIGKILL too (or exits 137 when run with --foreground).
    use std::os::unix::process::ExitStatusExt;
    assert!(
        out.status.signal() == Some(9) || out.status.code() == Some(137),
        "killed by timeout: {:?}",
        out.status
    );
    assert_nothing_left(&mark, Duration::from_secs(15));
}
