//! The whole seed table against the bundled reference agent, on every wire it
//! speaks (`--wire`, one wire at a time): every scenario passes, every check that the reference profile supports is actually made
//! (none reported "not checked" except where a scenario has nothing to check),
//! and no process outlives the run. Its MCP rows run on the profile's first
//! transport (stdio); they run again over streamable HTTP with the profile's
//! transports reversed.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn reference_agent_passes_the_seed_table_on_every_wire() {
    for wire in ["openai-chat", "openai-responses", "anthropic", "gemini"] {
        table_passes_on(wire);
    }
}

fn table_passes_on(wire: &str) {
    let mark = new_mark("table");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--wire",
            wire,
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0),
        "{wire}: exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("60 passed, 0 failed"), "{wire}: {stdout}");
    assert_eq!(stdout.matches("\nPASS  ").count(), 60, "{stdout}");

    let report = read_json(&json);
    assert_eq!(report["schema"], "chaosrun-report/2");
    assert_eq!(report["complete"], true);
    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 60);
    // Every scenario carries evidence that its fault landed.
    for s in scenarios {
        assert!(
            s["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["invariant"] == "exercised" && c["status"] == "pass"),
            "no exercised evidence: {s}"
        );
    }
    // The reference profile has a store, a breaker and a tool map: every check
    // that a scenario has is made.
    let skipped = skipped_checks(&report, &[]);
    assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "{wire}: left behind: {survivors:?}");
}

/// The table's MCP rows.
const MCP_ROWS: &[&str] = &[
    "mcp_call_hangs",
    "mcp_server_crashes_mid_call",
    "mcp_error_result",
    "mcp_malformed_frame",
    "mcp_huge_result",
    "mcp_list_hangs_at_boot",
    "mcp_progress_forever",
    "interrupt_mcp_call",
    "mcp_stdio_server_outlives_agent",
    "mcp_slow_initialize",
    "mcp_tool_schema_changes",
    "mcp_http_unauthorized",
    "mcp_parallel_calls",
    "mcp_server_restarts_between_turns",
];

#[test]
fn reference_agent_passes_the_mcp_rows_over_http_on_every_wire() {
    // The reference profile with `http` first: rows that pin no transport
    // run over streamable HTTP (mcp_stdio_server_outlives_agent pins stdio).
    let dir = tempfile::tempdir().unwrap();
    let profile = reference_profile_http_first(dir.path());
    for wire in ["openai-chat", "openai-responses", "anthropic", "gemini"] {
        mcp_rows_pass_over_http(wire, &profile, dir.path());
    }
}

fn mcp_rows_pass_over_http(wire: &str, profile: &std::path::Path, dir: &std::path::Path) {
    let mark = new_mark("mcp-http");
    let json = dir.join(format!("{wire}.json"));
    let artifacts = dir.join(format!("{wire}-artifacts"));
    let mut args = vec![
        "scenarios.yaml".to_string(),
        "--agent".into(),
        profile.to_str().unwrap().into(),
        "--wire".into(),
        wire.into(),
        "--json".into(),
        json.to_str().unwrap().into(),
        "--artifacts".into(),
        artifacts.to_str().unwrap().into(),
        "--keep-all".into(),
    ];
    for id in MCP_ROWS {
        args.push("--only".into());
        args.push((*id).into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = chaosrun(&mark, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code() == Some(0),
        "{wire}: exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("14 passed, 0 failed"), "{wire}: {stdout}");
    let report = read_json(&json);
    let skipped = skipped_checks(&report, &[]);
    assert!(skipped.is_empty(), "{wire}: skipped: {skipped:#?}");
    // The rows really ran over HTTP (the pinned stdio row over stdio).
    for id in MCP_ROWS {
        let obs = read_json(&artifacts.join(id).join("observation.json"));
        let want = if *id == "mcp_stdio_server_outlives_agent" {
            "stdio"
        } else {
            "http"
        };
        assert_eq!(obs["mcp"]["transport"], want, "{wire}: {id}");
    }
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "{wire}: left behind: {survivors:?}");
}

/// `context_overflow_tool_output` on `wire` with the reference agent's
/// `extra` options: chaosrun's exit code and the row's entry in the report.
fn overflow_row(wire: &str, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mark = new_mark("overflow");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let mut args = vec![
        "scenarios.yaml",
        "--only",
        "context_overflow_tool_output",
        "--wire",
        wire,
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = chaosrun(&mark, &args);
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "{wire}: left behind: {survivors:?}");
    let report = read_json(&json);
    let row = scenario(&report, "context_overflow_tool_output").clone();
    (out.status.code(), row)
}

fn check_named<'a>(row: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    row["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {row}"))
}

/// An agent that spills a large tool output to a file and sends the model
/// an excerpt (mistral-vibe) never overflows the window: the overflow row
/// passes it, naming the overflow as avoided with its evidence, on the wire
/// that puts results in messages of their own and on Anthropic's. An agent
/// that overflows and compacts still passes with the overflow seen; one
/// that overflows and loops on compaction still fails.
#[test]
fn the_overflow_row_passes_an_agent_that_avoids_the_overflow() {
    for wire in ["openai-chat", "anthropic"] {
        let (code, row) = overflow_row(wire, &["--agent-arg=--spill-tool-output"]);
        assert_eq!(
            (code, &row["verdict"]),
            (Some(0), &"pass".into()),
            "{wire}: {row}"
        );
        let c = check_named(&row, "context_overflowed");
        assert_eq!(c["status"], "not_checked", "{wire}: {c}");
        let why = c["reason"].as_str().unwrap();
        for says in [
            "not exercised: the agent avoided the overflow: it never sent more than ",
            "the tool output was not sent whole",
        ] {
            assert!(why.contains(says), "{wire}: {why}");
        }
    }
    let (code, row) = overflow_row("openai-chat", &[]);
    assert_eq!((code, &row["verdict"]), (Some(0), &"pass".into()), "{row}");
    assert_eq!(check_named(&row, "context_overflowed")["status"], "pass");
    let (code, row) = overflow_row("openai-chat", &["--agent-arg=--bug=compaction_loop"]);
    assert_eq!((code, &row["verdict"]), (Some(1), &"fail".into()), "{row}");
    assert_eq!(check_named(&row, "context_overflowed")["status"], "pass");
    assert_eq!(check_named(&row, "call_bound")["status"], "fail", "{row}");
}
