//! The MCP proxy in front of a real server from the npm registry, pinned:
//! `@modelcontextprotocol/server-everything` (installed by
//! examples/mcp-everything/setup.sh; scripts/test.sh runs it in a lane).
//! Every `mcp_*` row of scenarios.yaml runs against the bundled reference
//! agent with the server's `echo` tool standing for `probe`, so each row's
//! MCP fault lands on a real tool call; a server command that exits at once
//! is an ERROR naming it with its stderr.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The installed server's entry script (failing, not skipping, when missing).
fn entry() -> PathBuf {
    let p = common::repo().join(
        "target/mcp-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    common::require(
        "@modelcontextprotocol/server-everything",
        p.exists(),
        "run examples/mcp-everything/setup.sh (or scripts/test.sh)",
    );
    p
}

/// The reference agent's profile, its `mcp_probe` mapped to the server's
/// `echo` (`text` → `message`), with `mcp.upstream` = `upstream`.
fn profile(dir: &Path, upstream: &str) -> PathBuf {
    let reference = common::repo().join("examples/reference");
    let text = std::fs::read_to_string(reference.join("agent.yaml")).unwrap();
    let text = text.replace("{{profile_dir}}", &reference.display().to_string());
    let line = |p: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(p))
            .unwrap()
            .to_string()
    };
    let text = text
        .replace(
            &line("mcp:"),
            &format!("mcp: {{transports: [stdio, http, sse], upstream: {upstream}}}"),
        )
        .replace(
            &line("mcp_probe:"),
            "  mcp_probe: {name: mcp_chaos_echo, args: {text: message}}",
        );
    let path = dir.join("agent.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `mcp.upstream` for the installed server-everything on stdio, its argv
/// carrying `mark` (so a survivor is found by it), `echo` standing for `probe`.
fn everything(mark: &str) -> String {
    format!(
        "{{command: [node, '{}', stdio, '--{mark}'], probe: echo}}",
        entry().display()
    )
}

fn run(table: &Path, profile: &Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = Command::new(common::bin())
        .arg(table)
        .arg("--agent")
        .arg(profile)
        .args(args)
        .args(["--no-progress", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), report, text)
}

/// Live processes whose argv holds `mark` (zombies excluded).
fn alive(mark: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let cmd = String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).ok()?)
                .replace('\0', " ");
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let zombie = stat.rsplit(')').next()?.split_whitespace().next() == Some("Z");
            (!zombie && cmd.contains(mark)).then_some(cmd)
        })
        .collect()
}

#[test]
#[ignore = "needs server-everything: examples/mcp-everything/setup.sh"]
fn every_mcp_row_passes_in_front_of_server_everything() {
    let mark = common::new_mark("everything");
    let dir = tempfile::tempdir().unwrap();
    let profile = profile(dir.path(), &everything(&mark));
    let yaml = std::fs::read_to_string(common::repo().join("scenarios.yaml")).unwrap();
    let ids: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- id: "))
        .filter(|id| id.contains("mcp"))
        .collect();
    assert!(ids.len() >= 12, "{ids:?}");
    let art = dir.path().join("art");
    let mut args = vec!["--keep-all", "--artifacts", art.to_str().unwrap()];
    for id in &ids {
        args.extend(["--only", id]);
    }
    let (_, report, out) = run(&common::repo().join("scenarios.yaml"), &profile, &args);
    for id in &ids {
        let s = common::scenario(&report, id);
        // chaosrun's own probe tool changed, chaosrun's own server
        // restarted: neither applies to a real server.
        if [
            "mcp_tool_schema_changes",
            "mcp_server_restarts_between_turns",
        ]
        .contains(id)
        {
            assert_eq!(s["verdict"], "not_applicable", "{s}");
            continue;
        }
        assert_eq!(s["verdict"], "pass", "{id}: {s}\n{out}");
        let obs = common::read_json(&art.join(id).join("observation.json"));
        let mcp = &obs["mcp"];
        assert!(
            mcp["upstream"]
                .as_str()
                .unwrap_or_default()
                .contains("server-everything"),
            "{id}"
        );
        // The row's fault landed on a real `echo` call (or on the method it names).
        let hit = mcp["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["rule"] == 0 && (e["tool"] == "echo" || e["method"] != "tools/call"));
        let no_rule = mcp["rule_hits"].as_array().is_none_or(Vec::is_empty);
        assert!(
            hit || no_rule,
            "{id}: the fault did not land on a real call: {mcp}"
        );
    }
    assert!(
        alive(&mark).is_empty(),
        "server-everything left after the run: {:?}",
        alive(&mark)
    );
}

#[test]
#[ignore = "needs server-everything: examples/mcp-everything/setup.sh"]
fn a_server_command_that_exits_at_once_is_an_error_with_its_stderr() {
    let _ = entry();
    let dir = tempfile::tempdir().unwrap();
    // `node` on a script that is not there: exits at once with its error.
    let p = profile(
        dir.path(),
        "{command: [node, /nonexistent/everything.js, stdio]}",
    );
    let (_, report, out) = run(
        &common::repo().join("scenarios.yaml"),
        &p,
        &["--only", "mcp_call_hangs"],
    );
    let s = common::scenario(&report, "mcp_call_hangs");
    assert_eq!(s["verdict"], "error", "{s}\n{out}");
    let t = s.to_string();
    assert!(
        t.contains("node /nonexistent/everything.js") && t.contains("Cannot find module"),
        "{t}"
    );
}

/// The two MCP faults no `mcp_*` row puts on a real tool, each on the real
/// `echo`: a JSON-RPC error in place of its answer (handed to the model as
/// the tool's error), and a storm of `tools/list_changed` before the real
/// answer (which still reaches the model).
const REAL_TOOL_FAULTS: &str = r#"scenarios:
  - id: mcp_real_echo_jsonrpc_error
    mcp:
      rules:
        - when: {call: 0}
          reply: {kind: jsonrpc_error, code: -32603, message: "echo refused {{nonce}}"}
    responder:
      - when: {after_tool: false}
        reply: {kind: tool_call, calls: [{tool: mcp_probe, args: {text: "{{nonce}}"}}]}
      - reply: {kind: text, text: "tools settled {{nonce}}"}
    expect: {answer: "tools settled {{nonce}}"}
    calls: {max: 4}
    tool_result_contains: "echo refused {{nonce}}"
  - id: mcp_real_echo_list_changed_storm
    mcp:
      rules:
        - when: {call: 0}
          reply: {kind: list_changed_storm, count: 20, interval: 0.01}
    responder:
      - when: {after_tool: false}
        reply: {kind: tool_call, calls: [{tool: mcp_probe, args: {text: "{{nonce}}"}}]}
      - reply: {kind: text, text: "tools settled {{nonce}}"}
    expect: {answer: "tools settled {{nonce}}"}
    calls: {max: 4}
    tool_result_contains: "{{nonce}}"
"#;

#[test]
#[ignore = "needs server-everything: examples/mcp-everything/setup.sh"]
fn an_error_and_a_list_changed_storm_land_on_the_real_echo() {
    let mark = common::new_mark("everything-faults");
    let dir = tempfile::tempdir().unwrap();
    let profile = profile(dir.path(), &everything(&mark));
    let table = dir.path().join("faults.yaml");
    std::fs::write(&table, REAL_TOOL_FAULTS).unwrap();
    let art = dir.path().join("art");
    let args = ["--keep-all", "--artifacts", art.to_str().unwrap()];
    let (code, report, out) = run(&table, &profile, &args);
    assert_eq!(code, Some(0), "{out}");
    for id in [
        "mcp_real_echo_jsonrpc_error",
        "mcp_real_echo_list_changed_storm",
    ] {
        let s = common::scenario(&report, id);
        assert_eq!(s["verdict"], "pass", "{id}: {s}\n{out}");
        let obs = common::read_json(&art.join(id).join("observation.json"));
        let landed = obs["mcp"]["exchanges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["rule"] == 0 && e["tool"] == "echo");
        assert!(
            landed,
            "{id}: the fault did not land on the real echo: {}",
            obs["mcp"]
        );
    }
    assert!(
        alive(&mark).is_empty(),
        "server-everything left after the run: {:?}",
        alive(&mark)
    );
}
