//! Containment against an agent that attacks chaosrun's sandbox
//! (tests/fixtures/agents/escape_probe.py, with the raw-ABI calls of
//! escape_syscalls.c compiled here): issue 48.1–3. Inside its scenario the
//! agent, running as root, tries
//!
//! * `setns` into every `/proc/*/ns/net` it can open, chaosrun's own
//!   included (chaosrun's namespace reaches the host's 127.0.0.1);
//! * to connect to Unix sockets outside its scenario: a host service's
//!   under `/tmp` and under `/run`, a socket where another run's scenario
//!   keeps its MCP socket (`/tmp/chaosrun-TAG/mcp.sock`), a sibling
//!   scenario's in the same `--artifacts` folder, and an abstract socket of
//!   the host's network namespace; and every socket it can find;
//! * `unshare` through the native, i386 (`int $0x80`) and x32 entries on a
//!   `namespaces: denied` row, `CLONE_NEWTIME`, and `setns` through both.
//!
//! Every attempt must fail, and the listeners this test serves must never
//! see a connection. Survivors are found by the argv marker, never by tag.

mod common;

use common::*;
use serde_json::Value;
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/escape_probe.yaml";
const ROW: &str = "agent_sandbox_denied";

fn root() -> bool {
    // SAFETY: geteuid(2) takes no argument and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A listener nobody may reach, at `path` (its folder made).
fn listen(path: &Path) -> UnixListener {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let l = UnixListener::bind(path).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

/// An abstract socket in this test's (the host's) network namespace.
fn listen_abstract(name: &str) -> UnixListener {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).unwrap();
    let l = UnixListener::bind_addr(&addr).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

/// Paths outside the test's temp folders, removed however the test ends.
struct Remove(Vec<std::path::PathBuf>);

impl Drop for Remove {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
    }
}

/// A few characters no other test run uses.
fn hidden_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000_007
}

/// Compile escape_syscalls.c into `dir`.
fn syscalls(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("escape_syscalls");
    let src = repo().join("tests/fixtures/agents/escape_syscalls.c");
    let st = std::process::Command::new("cc")
        .args(["-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(st.success(), "cc failed on {}", src.display());
    out
}

/// What the probe saw, from its `result` line in the kept stdout.log.
fn seen(art: &Path, stdout: &str) -> Value {
    let log = std::fs::read_to_string(art.join(ROW).join("stdout.log")).unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.contains("\"type\": \"result\""))
        .unwrap_or_else(|| panic!("the probe printed no result: {log}\n{stdout}"));
    serde_json::from_str::<Value>(line).unwrap()["seen"].clone()
}

#[test]
#[ignore = "needs root (namespaces, capabilities; scripts/test.sh runs it)"]
#[cfg(target_arch = "x86_64")]
fn a_hostile_agent_cannot_leave_its_scenario() {
    require(
        "root",
        root(),
        "run as root: the sandbox is what a root agent is denied",
    );
    let mark = new_mark("escape");
    // Not the mark: chaosrun redacts it (a --pass-env value) in what it keeps.
    let id = format!("{}-{}", std::process::id(), hidden_suffix());
    let tools = tempfile::tempdir().unwrap();
    let bin = syscalls(tools.path());
    let hidden = tempfile::Builder::new()
        .prefix("host-svc-")
        .tempdir_in("/tmp")
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let art = work.path().join("art");
    let other_run = Path::new("/tmp").join(format!("chaosrun-{id}-other/mcp.sock"));
    let in_run = Path::new("/run").join(format!("chaosrun-test-{id}.sock"));
    let sibling = art.join("some_other_row/mcp.sock");
    let _gone = Remove(vec![
        other_run.parent().unwrap().to_path_buf(),
        in_run.clone(),
    ]);
    let targets = [
        hidden.path().join("host.sock"),
        in_run.clone(),
        other_run.clone(),
    ];
    let mut listeners: Vec<UnixListener> = targets.iter().map(|p| listen(p)).collect();
    listeners.push(listen_abstract(&format!("chaosrun-test-{id}")));
    let sockets: Vec<String> = targets
        .iter()
        .chain([&sibling])
        .map(|p| p.display().to_string())
        .collect();
    let spec = serde_json::json!({"sockets": sockets, "abstract": [format!("chaosrun-test-{id}")]});
    // The sibling scenario's socket appears once chaosrun has taken the
    // artifacts folder (it must be empty or new), as the row starts.
    let ino = watch(&art);
    let json = work.path().join("r.json");
    let child = command(
        &mark,
        &[
            "scenarios.yaml",
            "--agent",
            repo().join(PROFILE).to_str().unwrap(),
            "--only",
            ROW,
            "--json",
            json.to_str().unwrap(),
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
        ],
    )
    .env("ESCAPE_SYSCALLS", &bin)
    .env("ESCAPE_TARGETS", spec.to_string())
    .stdout(std::process::Stdio::piped())
    .spawn()
    .expect("chaosrun runs");
    listeners.push(await_artifacts_then_listen(ino, &sibling));
    let out = child.wait_with_output().unwrap();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let seen = seen(&art, &stdout);
    judge_seen(&seen, &sockets);
    for l in &listeners {
        assert!(
            l.accept().is_err(),
            "a connection reached {:?}",
            l.local_addr()
        );
    }
    assert!(
        stdout.contains("sandbox: each agent with no capabilities"),
        "{stdout}"
    );
}

/// Watch `art` (made here, empty) for chaosrun taking it.
fn watch(art: &Path) -> nix::sys::inotify::Inotify {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    std::fs::create_dir_all(art).unwrap();
    let ino = Inotify::init(InitFlags::IN_CLOEXEC).unwrap();
    ino.add_watch(art, AddWatchFlags::IN_CREATE).unwrap();
    ino
}

/// Once chaosrun has made the row's folder in `art` (the inotify event;
/// it checked the folder was empty before), serve the sibling scenario's
/// socket there, before the agent starts.
fn await_artifacts_then_listen(ino: nix::sys::inotify::Inotify, sibling: &Path) -> UnixListener {
    use std::os::fd::AsRawFd;
    loop {
        let mut fds = [libc::pollfd {
            fd: ino.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: poll(2) on one valid fd.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 30_000) };
        assert!(n > 0, "chaosrun never took its artifacts folder");
        let events = ino.read_events().unwrap();
        if events
            .iter()
            .any(|e| e.name.as_deref() == Some(std::ffi::OsStr::new(ROW)))
        {
            return listen(sibling);
        }
    }
}

/// Every attack of the probe failed.
fn judge_seen(seen: &Value, sockets: &[String]) {
    let st = &seen["status"];
    // CAP_SETFCAP (31) alone: the agent's own `unshare -r` needs it.
    assert_eq!(st["CapEff"], "0000000080000000", "{seen}");
    assert_eq!(st["CapBnd"], "0000000080000000", "{seen}");
    assert_eq!(st["NoNewPrivs"], "1", "{seen}");
    assert_eq!(
        seen["joined"],
        serde_json::json!([]),
        "joined a namespace: {seen}"
    );
    let parent = seen["parent_ns"].as_str().unwrap_or("");
    assert!(
        parent.starts_with("open failed"),
        "chaosrun's ns/net: {parent}"
    );
    let reached = seen["reached"].as_object().unwrap();
    for s in sockets {
        assert!(reached.contains_key(s), "{s} not tried: {seen}");
    }
    let connected: Vec<&String> = reached
        .iter()
        .filter(|(_, v)| *v == "connected")
        .map(|(k, _)| k)
        .collect();
    assert!(
        connected.is_empty(),
        "reached outside the scenario: {connected:?}"
    );
    let calls = seen["calls"].as_object().unwrap();
    for (attack, r) in calls {
        assert_eq!(r["ret"], -1, "{attack} succeeded: {r}");
        assert_eq!(r["uts_changed"], false, "{attack} made a namespace: {r}");
    }
    let errno = |a: &str| calls[a]["errno"].as_i64().unwrap();
    assert_eq!(errno("i386_unshare"), libc::ENOSYS as i64);
    assert_eq!(errno("i386_setns"), libc::ENOSYS as i64);
    assert_eq!(errno("x32_unshare"), libc::ENOSYS as i64);
    assert_eq!(errno("native_unshare_user"), libc::EPERM as i64);
    assert_eq!(errno("native_unshare_time"), libc::EPERM as i64);
    assert_eq!(errno("native_setns"), libc::EPERM as i64);
}
