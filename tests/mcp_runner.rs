//! MCP rows run end to end: chaosrun starts the scenario's MCP server, the
//! fixture agent (tests/fixtures/agents/mcp_mini.py) registers it from its
//! rendered config and calls it, and the oracle judges the recording: the
//! call arrived (or the fault never landed), an interrupted call was
//! cancelled (or not), and a stdio server left running is named as such.
//! Leftover relays are found by their socket path in /proc (argv), not by
//! chaosrun's own bookkeeping.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

struct Run {
    report: Value,
    art: PathBuf,
    out: String,
    _dir: tempfile::TempDir,
}

impl Run {
    fn check(&self, name: &str) -> &Value {
        self.report["scenarios"][0]["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {}\n{}", self.report, self.out))
    }

    fn status(&self, name: &str) -> String {
        self.check(name)["status"].as_str().unwrap().to_string()
    }

    fn violations(&self, name: &str) -> String {
        self.check(name)["violations"].to_string()
    }

    fn observation(&self) -> Value {
        common::read_json(&self.art.join("observation.json"))
    }

    /// The socket the agent's config was given.
    fn socket(&self) -> PathBuf {
        let cfg = common::read_json(&self.art.join("home/.mini/mcp.json"));
        PathBuf::from(cfg["args"][2].as_str().unwrap())
    }
}

fn run(id: &str, agent_args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let art = dir.path().join("art");
    let mut cmd = Command::new(common::bin());
    cmd.arg(common::repo().join("tests/fixtures/mcp_table.yaml"))
        .arg("--agent")
        .arg(common::repo().join("tests/fixtures/agents/mcp_mini.yaml"))
        .args(["--only", id, "--no-progress", "--keep-all", "--json"])
        .arg(&json)
        .arg("--artifacts")
        .arg(&art);
    for a in agent_args {
        cmd.arg(format!("--agent-arg={a}"));
    }
    // Bounded (a hang fails the test); the agent never calls the model, so
    // every run fails on provider checks: only the MCP checks are judged here.
    let (_, out, err) = common::run_bounded(cmd, std::time::Duration::from_secs(120));
    Run {
        report: common::read_json(&json),
        art: art.join(id),
        out: format!("{out}\n{err}"),
        _dir: dir,
    }
}

/// Live processes whose argv holds `needle` (zombies excluded).
fn alive_with(needle: &Path) -> Vec<String> {
    let needle = needle.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if e.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let cmd =
            String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).unwrap_or_default())
                .replace('\0', " ");
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            == Some("Z");
        if !zombie && cmd.contains(&needle) {
            out.push(cmd);
        }
    }
    out
}

#[test]
fn a_stdio_server_the_agent_stops_passes_and_one_it_leaves_is_named() {
    let clean = run("mini_linger", &[]);
    assert_eq!(clean.status("mcp_call_arrived"), "pass", "{}", clean.out);
    assert_eq!(clean.status("no_survivors"), "pass", "{}", clean.out);
    let obs = clean.observation();
    assert_eq!(obs["mcp"]["transport"], "stdio");
    assert_eq!(obs["mcp"]["stdio_connections"], 1);

    let leaky = run("mini_linger", &["--leak"]);
    let v = leaky.violations("no_survivors");
    assert!(
        v.contains("MCP stdio server left running") && v.contains("mcp-stdio"),
        "{v}\n{}",
        leaky.out
    );
    assert_eq!(leaky.report["scenarios"][0]["verdict"], "fail");
    // The run is over: the relay is gone too (swept, and its socket closed).
    let left = alive_with(&leaky.socket());
    assert!(left.is_empty(), "relay left after the run: {left:?}");
}

#[test]
fn an_interrupted_mcp_call_must_be_cancelled() {
    let good = run("mini_interrupt", &[]);
    assert_eq!(good.status("cancellation"), "pass", "{}", good.out);
    let ex = &good.observation()["mcp"]["exchanges"];
    assert!(ex
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["method"] == "notifications/cancelled" && e["cancels"] == 2));

    let bad = run("mini_interrupt", &["--no-cancel"]);
    let v = bad.violations("cancellation");
    assert!(
        v.contains("tools/call 2") && v.contains("no notifications/cancelled"),
        "{v}\n{}",
        bad.out
    );
}

#[test]
fn the_http_transport_is_registered_by_url_and_recorded() {
    let r = run("mini_http", &[]);
    assert_eq!(r.status("mcp_call_arrived"), "pass", "{}", r.out);
    let cfg = common::read_json(&r.art.join("home/.mini/mcp.json"));
    assert_eq!(
        (
            cfg["command"].as_str(),
            cfg["args"].as_array().map(Vec::len)
        ),
        (Some(""), Some(0))
    );
    assert!(cfg["url"]
        .as_str()
        .unwrap()
        .starts_with("http://127.0.0.1:"));
    let obs = r.observation();
    assert_eq!(
        (
            obs["mcp"]["transport"].as_str(),
            obs["mcp"]["http_sessions"].as_u64()
        ),
        (Some("http"), Some(1))
    );
    assert_eq!(obs["mcp"]["tool_calls"], 1);
}

#[test]
fn a_fault_that_never_landed_fails_exercised() {
    let r = run("mini_never_called", &[]);
    assert_eq!(r.status("mcp_call_arrived"), "fail");
    assert!(
        r.violations("mcp_call_arrived")
            .contains("no `tools/list` request matched"),
        "{}",
        r.out
    );
}
