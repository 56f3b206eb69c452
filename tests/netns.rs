//! Network containment: the agent (an exec-mode fixture,
//! tests/fixtures/agents/netns_probe.py) runs in a network namespace of its
//! own. Inside a scenario it sees only `lo`; a port this test serves on the
//! HOST's 127.0.0.1 is unreachable from inside, while the scenario's provider
//! is reachable; the JSON report and the text output say the run was
//! contained. With `network: host` the same port IS reachable (so the probe
//! can see what it must catch) and the report says the run was not
//! network-contained. Loopback addresses only.

mod common;

use common::*;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/netns_probe.yaml";
const ROW: &str = "provider_400_forever";

fn root() -> bool {
    // SAFETY: geteuid(2) takes no argument and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

struct Run {
    report: serde_json::Value,
    stdout: String,
    /// What the probe saw, from its `result` line.
    seen: serde_json::Value,
}

fn run(profile: &std::path::Path, port: u16) -> Run {
    let mark = new_mark("netns");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let art = dir.path().join("art");
    let out = command(
        &mark,
        &[
            "scenarios.yaml",
            "--agent",
            profile.to_str().unwrap(),
            "--only",
            ROW,
            "--json",
            json.to_str().unwrap(),
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
        ],
    )
    .env("NETNS_HOST_PORT", port.to_string())
    .output()
    .expect("chaosrun runs");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let log = std::fs::read_to_string(art.join(ROW).join("stdout.log")).unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.contains("\"type\": \"result\""))
        .unwrap_or_else(|| panic!("the probe printed no result: {log}\n{stdout}"));
    Run {
        report: read_json(&json),
        stdout,
        seen: serde_json::from_str(line).unwrap(),
    }
}

/// A listener on the HOST's 127.0.0.1 (this test's own network namespace).
fn host_listener() -> std::net::TcpListener {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

#[test]
#[ignore = "needs root (a network namespace per scenario; scripts/test.sh runs it)"]
fn the_agent_sees_only_loopback_and_reaches_only_the_scenarios_servers() {
    require(
        "root",
        root(),
        "run as root (CAP_SYS_ADMIN makes network namespaces)",
    );
    let host = host_listener();
    let port = host.local_addr().unwrap().port();
    let r = run(&repo().join(PROFILE), port);
    assert_eq!(r.seen["ifaces"], serde_json::json!(["lo"]), "{}", r.seen);
    let reached = r.seen["host_port"].as_str().unwrap();
    assert!(
        reached.starts_with("failed"),
        "the host's port was reachable: {reached}"
    );
    // The scenario's provider answered HTTP.
    let provider = r.seen["provider"].as_str().unwrap();
    assert!(provider.starts_with("http "), "{}", r.seen);
    // Nothing ever connected to the host port.
    assert!(host.accept().is_err(), "a connection reached the host port");
    let s = scenario(&r.report, ROW);
    assert_eq!(s["network"]["contained"], true, "{s}");
    assert!(
        r.stdout
            .contains("network: each scenario's agent in its own network namespace"),
        "{}",
        r.stdout
    );
}

#[test]
#[ignore = "needs root (a network namespace per scenario; scripts/test.sh runs it)"]
fn network_host_is_reported_as_not_contained_and_reaches_the_host() {
    require(
        "root",
        root(),
        "run as root (CAP_SYS_ADMIN makes network namespaces)",
    );
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo().join(PROFILE)).unwrap();
    let p = dir.path().join("host.yaml");
    std::fs::write(&p, text.replace("network: namespace", "network: host")).unwrap();
    std::fs::copy(
        repo().join("tests/fixtures/agents/netns_probe.py"),
        dir.path().join("netns_probe.py"),
    )
    .unwrap();
    let host = host_listener();
    let port = host.local_addr().unwrap().port();
    let r = run(&p, port);
    assert_eq!(r.seen["host_port"], "connected", "{}", r.seen);
    let provider = r.seen["provider"].as_str().unwrap();
    assert!(provider.starts_with("http "), "{}", r.seen);
    let s = scenario(&r.report, ROW);
    assert_eq!(s["network"]["contained"], false, "{s}");
    assert!(
        s["network"]["reason"]
            .as_str()
            .unwrap()
            .contains("network: host"),
        "{s}"
    );
    assert!(r.stdout.contains("network: NOT contained"), "{}", r.stdout);
}
