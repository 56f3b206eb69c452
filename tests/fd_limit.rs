//! chaosrun's open-file limit (src/fd_limit.rs): a run raises its own soft
//! `RLIMIT_NOFILE` to the hard limit, and the agent gets the limit chaosrun
//! was started with. chaosrun is started here with a soft limit of a quarter
//! of the hard one; the exec-mode fixture
//! (tests/fixtures/agents/fd_limit_probe.sh) reports its own soft limit and
//! its parent's, read from /proc (not from anything chaosrun says).

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/fd_limit_probe.yaml";
const ROW: &str = "provider_400_forever";

fn hard_limit() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) into a local struct.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) }, 0);
    l.rlim_max
}

#[test]
fn the_run_raises_its_own_limit_and_the_agent_gets_the_starting_one() {
    let hard = hard_limit();
    require(
        "a hard open-file limit of at least 256",
        hard >= 256,
        "raise it (ulimit -Hn) so that a lower soft limit can be set",
    );
    let start = (hard / 4).min(4096);
    let mark = new_mark("fdlimit");
    let dir = tempfile::tempdir().unwrap();
    let art = dir.path().join("art");
    let mut cmd = command(
        &mark,
        &[
            "scenarios.yaml",
            "--agent",
            PROFILE,
            "--only",
            ROW,
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
        ],
    );
    let soft = libc::rlimit {
        rlim_cur: start,
        rlim_max: hard,
    };
    // SAFETY: setrlimit(2) of a value copied in, in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &soft) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("chaosrun runs");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    let log = std::fs::read_to_string(art.join(ROW).join("stdout.log")).unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.contains("\"type\": \"result\""))
        .unwrap_or_else(|| {
            panic!(
                "the probe printed no result: {log}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let seen: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(seen["own"], start.to_string(), "the agent's limit: {seen}");
    assert_eq!(seen["parent"], hard.to_string(), "chaosrun's limit: {seen}");
}
