//! MCP discovery that hangs at start-up, through an exec-mode CLI (the
//! one-shot fixture with `--mcp-config`: tests/fixtures/agents/oneshot_mcp.yaml)
//! that lists its MCP server's tools before every turn's first model call
//! and drops the server silently when no answer comes within its wait (as
//! the Continue CLI does after 60 s). The server's `tools/list` hangs: a CLI
//! that waits past the turn's deadline in its start-up fails
//! `start_up_bounded` (before, the start-up was bounded by the boot deadline
//! alone and the row passed); one that gives up at once passes.

mod common;

use common::*;
use std::time::Duration;

const PROFILE: &str = "tests/fixtures/agents/oneshot_mcp.yaml";

/// `mcp_list_hangs_at_boot`'s shape with short deadlines: a 4 s turn and
/// probe, a 30 s boot bound for the start-up.
const TABLE: &str = r#"
defaults:
  knobs: {model: fake-model, stale_timeout: 5, request_timeout: 5, api_max_retries: 1, max_turns: 4, tool_timeout: 5}
  deadlines: {boot: 30, turn: 4, interrupt: 3, probe: 4, exit: 5, reap: 5}
  max_calls: 6
scenarios:
  - id: list_hangs
    about: the MCP server never answers tools/list
    mcp:
      rules:
        - when: {method: tools/list}
          reply: {kind: list_hang}
    responder:
      - when: {after_tool: false}
        reply: {kind: tool_call, calls: [{tool: mcp_probe, args: {text: "{{nonce}}"}}]}
      - reply: {kind: text, text: "tools settled {{nonce}}"}
    expect: {answer: "tools settled {{nonce}}"}
    calls: {max: 4}
"#;

/// Run the row with the CLI waiting `wait` seconds for each MCP answer.
fn run(wait: &str) -> (i32, serde_json::Value, String) {
    run_with(wait, "--startup-sleep=0")
}

/// [`run`], the CLI's `startup` option (`--startup-sleep=S`: a silent boot
/// of S seconds before anything else).
fn run_with(wait: &str, startup: &str) -> (i32, serde_json::Value, String) {
    require(
        "python3",
        std::process::Command::new("python3")
            .arg("--version")
            .output()
            .is_ok(),
        "install python3",
    );
    let mark = new_mark("mcpdisc");
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("t.yaml");
    std::fs::write(&table, TABLE).unwrap();
    let json = dir.path().join("r.json");
    let args = [
        table.to_str().unwrap(),
        "--agent",
        PROFILE,
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
    ];
    let art = dir.path().join("art");
    let args = [
        &args[..],
        &["--artifacts", art.to_str().unwrap(), "--keep-all"],
    ]
    .concat();
    let out = command(&mark, &args)
        .env("ONESHOT_MCP_WAIT", wait)
        .env("ONESHOT_STARTUP", startup)
        .output()
        .expect("chaosrun runs");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut report = read_json(&json);
    // The observation's `first_call` events, beside the report.
    let obs = read_json(&art.join("list_hangs").join("observation.json"));
    let first_calls: Vec<serde_json::Value> = obs["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ev"] == "first_call")
        .cloned()
        .collect();
    report["first_calls"] = first_calls.into();
    (out.status.code().unwrap_or(-1), report, stdout)
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    scenario(report, "list_hangs")["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
}

#[test]
fn a_start_up_that_waits_on_a_hung_listing_past_the_deadline_fails() {
    let (code, report, stdout) = run("6");
    assert_eq!(code, 1, "{stdout}");
    let c = check(&report, "start_up_bounded").expect("start_up_bounded is made");
    assert_eq!(c["status"], "fail", "{c}");
    let says = c["violations"].to_string();
    assert!(
        says.contains("starting up while the MCP server's tools/list"),
        "{says}"
    );
    assert!(says.contains("past the 4 s deadline"), "{says}");
    assert!(
        says.contains("from its first sign of life (its first message to the MCP server"),
        "{says}"
    );
    assert!(
        says.contains("the first model call offered: shell"),
        "{says}"
    );
}

#[test]
fn a_start_up_that_gives_up_on_the_listing_at_once_passes() {
    let (code, report, stdout) = run("0.5");
    assert_eq!(code, 0, "{stdout}");
    let c = check(&report, "start_up_bounded").expect("start_up_bounded is made");
    assert_eq!(c["status"], "pass", "{c}");
}

/// A CLI whose own boot is slow (6 s of silence before anything, past the
/// 4 s deadline: node's boot under load) and that then gives up on the
/// listing at once passes: the start-up counts from its first sign of life
/// (here its first MCP message), not from the spawn. On the old head the
/// check counted from the spawn and failed it ("turn 0 took 7.x s").
#[test]
fn a_slow_boot_before_the_first_sign_of_life_is_not_charged() {
    let (code, report, stdout) = run_with("0.5", "--startup-sleep=6");
    assert_eq!(code, 0, "{stdout}");
    let c = check(&report, "start_up_bounded").expect("start_up_bounded is made");
    assert_eq!(c["status"], "pass", "{c}");
    // The boot was silent and slow: each turn's first request came after
    // the 6 s sleep, past the 4 s deadline counted from the spawn.
    let first_calls: Vec<f64> = report["first_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["after_spawn"].as_f64().unwrap())
        .collect();
    assert_eq!(first_calls.len(), 2, "{first_calls:?}");
    assert!(first_calls.iter().all(|&s| s >= 6.0), "{first_calls:?}");
}

/// A profile that registers the MCP server but maps no `tools.mcp_probe`
/// (a copy of the fixture's without that line): the run warns at load, and
/// the row is an ERROR naming the fix from the tools the agent offered
/// (`mcp_chaos_probe`), never a "the MCP fault never landed" failure of the
/// agent.
#[test]
fn an_unmapped_mcp_probe_is_named_with_the_tool_the_agent_offered() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = repo().join("tests/fixtures/agents");
    let profile = std::fs::read_to_string(repo().join(PROFILE))
        .unwrap()
        .replace("{{profile_dir}}", fixtures.to_str().unwrap())
        .replace("  mcp_probe: {name: mcp_chaos_probe}\n", "");
    let path = dir.path().join("unmapped.yaml");
    std::fs::write(&path, profile).unwrap();
    let table = dir.path().join("t.yaml");
    // The listing answers: the agent offers the probe under its own name.
    std::fs::write(
        &table,
        TABLE
            .replace("reply: {kind: list_hang}", "reply: {kind: jsonrpc_error}")
            .replace("method: tools/list", "call: 0"),
    )
    .unwrap();
    let json = dir.path().join("r.json");
    let mark = new_mark("unmapped");
    let args = [
        table.to_str().unwrap(),
        "--agent",
        path.to_str().unwrap(),
        "--no-progress",
        "--json",
        json.to_str().unwrap(),
    ];
    let out = command(&mark, &args)
        .env("ONESHOT_MCP_WAIT", "5")
        .output()
        .unwrap();
    kill_marked(&mark);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("maps no `tools.mcp_probe`"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let row = scenario(&read_json(&json), "list_hangs").clone();
    assert_eq!(row["verdict"], "error", "{row}");
    let cause = row["cause"].as_str().unwrap();
    assert!(
        cause.contains("offered the chaos server's `probe` as `mcp_chaos_probe`: add `tools: {mcp_probe: {name: mcp_chaos_probe}}`"),
        "{cause}"
    );
}
