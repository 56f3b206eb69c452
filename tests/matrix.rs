//! `chaosrun matrix`: the agent × scenario table from JSON reports. The
//! table of fixture reports (tests/fixtures/matrix/: two agents with a table
//! and a process-fault report, verdicts of every kind, repeated runs) must
//! match the committed tests/fixtures/matrix/expected.md byte for byte, and
//! the docs' results table (docs/results.md) must be the matrix of the real
//! agents' committed reports, byte for byte.
//! Regenerate it after a deliberate change with
//! `chaosrun matrix tests/fixtures/matrix/{hermes-scenarios,hermes-process-faults,codex-scenarios,reference-repeat}.json > tests/fixtures/matrix/expected.md`.

mod common;

use common::*;
use std::process::{Command, Output};

const REPORTS: &[&str] = &[
    "hermes-scenarios.json",
    "hermes-process-faults.json",
    "codex-scenarios.json",
    "reference-repeat.json",
];

fn matrix(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("matrix")
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

/// `chaosrun matrix ARGS`'s table; it must exit 0.
fn table(args: &[&str]) -> String {
    let out = matrix(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fixture(name: &str) -> String {
    format!("tests/fixtures/matrix/{name}")
}

#[test]
fn the_matrix_of_the_fixture_reports_is_the_committed_one() {
    let args: Vec<String> = REPORTS.iter().map(|r| fixture(r)).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdout = table(&args);
    let want = std::fs::read_to_string(repo().join(fixture("expected.md"))).unwrap();
    assert_eq!(stdout, want);
    // What the committed table says, spelled out.
    let row = |id: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("| `{id}` |")))
            .unwrap_or_else(|| panic!("no row {id}:\n{stdout}"))
            .to_string()
    };
    assert!(stdout.contains("| scenario | [hermes](examples/hermes/README.md) | [codex](examples/codex/README.md) | reference |"), "{stdout}");
    assert_eq!(
        row("provider_hang"),
        "| `provider_hang` | ✓ | **✗** | 2/3 |"
    );
    assert_eq!(
        row("provider_500_forever"),
        "| `provider_500_forever` | **✗** | ERROR | – |"
    );
    assert_eq!(
        row("tool_background_swarm"),
        "| `tool_background_swarm` | **✗** | N/A | – |"
    );
    assert_eq!(row("kill_mid_stream"), "| `kill_mid_stream` | ✓ | – | ✓ |");
    assert_eq!(row("chaos_soak"), "| `chaos_soak` | **✗** | – | – |");
    assert!(
        stdout.contains("| **passed** | **3/6** | **1/3** | **1/2** |"),
        "{stdout}"
    );
}

/// The real agents' complete full-table reports the docs' results table is
/// built from (docs/matrix.md says how to regenerate it).
const REAL_REPORTS: &[&str] = &[
    "examples/hermes/report.json",
    "examples/hermes/process-faults-report.json",
    "examples/hermes/store-kill-report.json",
    "examples/hermes/family-rows-report.json",
    "examples/hermes/sleep-report.json",
    "examples/hermes/sandbox-report.json",
    "examples/hermes/oom-report.json",
    "examples/hermes/acp-report.json",
    "examples/hermes/mcp-rows-acp-report.json",
    "examples/hermes/acp-process-faults-report.json",
    "examples/hermes/acp-long-session-report.json",
    "examples/hermes/acp-table-report.json",
    "examples/hermes/value-faults-report.json",
    "examples/hermes/usage-limit-report.json",
    "examples/hermes/long-faults-report.json",
    "examples/hermes/endpoints-report.json",
    "examples/claude-code/report.json",
    "examples/claude-code/process-faults-report.json",
    "examples/claude-code/store-kill-report.json",
    "examples/claude-code/family-rows-report.json",
    "examples/claude-code/sleep-report.json",
    "examples/claude-code/report-2.1.332.json",
    "examples/claude-code/process-faults-report-2.1.332.json",
    "examples/claude-code/sandbox-report-2.1.332.json",
    "examples/claude-code/sandbox-report.json",
    "examples/claude-code/oom-report.json",
    "examples/claude-code/acp-report.json",
    "examples/claude-code/mcp-rows-acp-report.json",
    "examples/claude-code/acp-process-faults-report.json",
    "examples/claude-code/acp-table-report.json",
    "examples/claude-code/store-damage-acp-report.json",
    "examples/claude-code/value-faults-report.json",
    "examples/claude-code/usage-limit-report.json",
    "examples/claude-code/long-faults-report.json",
    "examples/claude-code/endpoints-report.json",
    "examples/codex/report.json",
    "examples/codex/process-faults-report.json",
    "examples/codex/store-kill-report.json",
    "examples/codex/family-rows-report.json",
    "examples/codex/sleep-report.json",
    "examples/codex/report-0.171.0.json",
    "examples/codex/process-faults-report-0.171.0.json",
    "examples/codex/sandbox-report-0.171.0.json",
    "examples/codex/sandbox-report.json",
    "examples/codex/oom-report.json",
    "examples/codex/acp-report.json",
    "examples/codex/mcp-rows-acp-report.json",
    "examples/codex/acp-process-faults-report.json",
    "examples/codex/acp-table-report.json",
    "examples/codex/store-damage-acp-report.json",
    "examples/codex/value-faults-report.json",
    "examples/codex/usage-limit-report.json",
    "examples/codex/long-faults-report.json",
    "examples/codex/endpoints-report.json",
    "examples/gemini-cli/report.json",
    "examples/gemini-cli/process-faults-report.json",
    "examples/gemini-cli/store-kill-report.json",
    "examples/gemini-cli/family-rows-report.json",
    "examples/gemini-cli/sleep-report.json",
    "examples/gemini-cli/sandbox-report.json",
    "examples/gemini-cli/oom-report.json",
    "examples/gemini-cli/acp-report.json",
    "examples/gemini-cli/mcp-rows-acp-report.json",
    "examples/gemini-cli/acp-process-faults-report.json",
    "examples/gemini-cli/acp-table-report.json",
    "examples/gemini-cli/acp-fs-write-report.json",
    "examples/gemini-cli/value-faults-report.json",
    "examples/gemini-cli/usage-limit-report.json",
    "examples/gemini-cli/long-faults-report.json",
    "examples/gemini-cli/endpoints-report.json",
    "examples/qwen-code/report.json",
    "examples/qwen-code/process-faults-report.json",
    "examples/qwen-code/store-kill-report.json",
    "examples/qwen-code/family-rows-report.json",
    "examples/qwen-code/sleep-report.json",
    "examples/qwen-code/sandbox-report.json",
    "examples/qwen-code/oom-report.json",
    "examples/qwen-code/acp-report.json",
    "examples/qwen-code/mcp-rows-acp-report.json",
    "examples/qwen-code/acp-process-faults-report.json",
    "examples/qwen-code/acp-table-report.json",
    "examples/qwen-code/value-faults-report.json",
    "examples/qwen-code/usage-limit-report.json",
    "examples/qwen-code/long-faults-report.json",
    "examples/qwen-code/endpoints-report.json",
    "examples/pydantic-ai/report.json",
    "examples/pydantic-ai/process-faults-report.json",
    "examples/pydantic-ai/store-kill-report.json",
    "examples/pydantic-ai/family-rows-report.json",
    "examples/pydantic-ai/sleep-report.json",
    "examples/pydantic-ai/report-2.68.0.json",
    "examples/pydantic-ai/process-faults-report-2.68.0.json",
    "examples/pydantic-ai/sandbox-report-2.68.0.json",
    "examples/pydantic-ai/sandbox-report.json",
    "examples/pydantic-ai/oom-report.json",
    "examples/pydantic-ai/value-faults-report.json",
    "examples/pydantic-ai/usage-limit-report.json",
    "examples/pydantic-ai/long-faults-report.json",
    "examples/pydantic-ai/endpoints-report.json",
    "examples/opencode/report.json",
    "examples/opencode/process-faults-report.json",
    "examples/opencode/store-kill-report.json",
    "examples/opencode/family-rows-report.json",
    "examples/opencode/sleep-report.json",
    "examples/opencode/sandbox-report.json",
    "examples/opencode/oom-report.json",
    "examples/opencode/acp-report.json",
    "examples/opencode/mcp-rows-acp-report.json",
    "examples/opencode/acp-process-faults-report.json",
    "examples/opencode/acp-table-report.json",
    "examples/opencode/acp-long-session-report.json",
    "examples/opencode/value-faults-report.json",
    "examples/opencode/usage-limit-report.json",
    "examples/opencode/long-faults-report.json",
    "examples/opencode/endpoints-report.json",
    "examples/kilo/seed-table.json",
    "examples/kilo/process-faults-report.json",
    "examples/kilo/store-kill-report.json",
    "examples/kilo/family-rows-report.json",
    "examples/kilo/sleep-report.json",
    "examples/kilo/sandbox-report.json",
    "examples/kilo/oom-report.json",
    "examples/kilo/acp-report.json",
    "examples/kilo/mcp-rows-acp-report.json",
    "examples/kilo/acp-process-faults-report.json",
    "examples/kilo/acp-long-session-report.json",
    "examples/kilo/acp-table-report.json",
    "examples/kilo/value-faults-report.json",
    "examples/kilo/usage-limit-report.json",
    "examples/kilo/long-faults-report.json",
    "examples/kilo/endpoints-report.json",
    "examples/pi/report.json",
    "examples/pi/process-faults-report.json",
    "examples/pi/store-kill-report.json",
    "examples/pi/family-rows-report.json",
    "examples/pi/sleep-report.json",
    "examples/pi/sandbox-report.json",
    "examples/pi/oom-report.json",
    "examples/pi/value-faults-report.json",
    "examples/pi/usage-limit-report.json",
    "examples/pi/long-faults-report.json",
    "examples/pi/endpoints-report.json",
    "examples/copilot/report.json",
    "examples/copilot/process-faults-report.json",
    "examples/copilot/store-kill-report.json",
    "examples/copilot/family-rows-report.json",
    "examples/copilot/sleep-report.json",
    "examples/copilot/sandbox-report.json",
    "examples/copilot/oom-report.json",
    "examples/copilot/acp-report.json",
    "examples/copilot/mcp-rows-acp-report.json",
    "examples/copilot/acp-process-faults-report.json",
    "examples/copilot/acp-table-report.json",
    "examples/copilot/acp-long-session-report.json",
    "examples/copilot/store-damage-acp-report.json",
    "examples/copilot/value-faults-report.json",
    "examples/copilot/usage-limit-report.json",
    "examples/copilot/long-faults-report.json",
    "examples/copilot/endpoints-report.json",
    "examples/aider/report.json",
    "examples/aider/process-faults-report.json",
    "examples/aider/sandbox-report.json",
    "examples/aider/oom-report.json",
    "examples/continue/report.json",
    "examples/continue/process-faults-report.json",
    "examples/continue/oom-report.json",
    "examples/continue/sandbox-report.json",
    "examples/continue/value-faults-report.json",
    "examples/continue/usage-limit-report.json",
    "examples/continue/long-faults-report.json",
    "examples/continue/endpoints-report.json",
];

#[test]
fn the_docs_results_table_is_the_matrix_of_the_committed_reports() {
    let mut args = REAL_REPORTS.to_vec();
    args.extend(["--link-prefix", "../"]);
    let stdout = table(&args);
    let committed = std::fs::read_to_string(repo().join("docs/results.md")).unwrap();
    assert_eq!(
        stdout, committed,
        "docs/results.md is stale: regenerate it as docs/matrix.md says"
    );
    for r in REAL_REPORTS {
        let doc = read_json(&repo().join(r));
        assert_eq!(doc["complete"], true, "{r} is not a complete run");
        // Each names the version it ran; a `report-VERSION.json` that one.
        let version = doc["agent_version"].as_str();
        assert!(version.is_some(), "{r} names no agent_version");
        let file = r.rsplit('/').next().unwrap_or_default();
        if let Some(v) = file.split_once("report-").map(|(_, v)| v) {
            assert_eq!(version, v.strip_suffix(".json"), "{r}");
        }
    }
}

#[test]
fn the_html_matrix_links_each_agent_and_marks_each_cell() {
    let out = matrix(&[
        &fixture("hermes-scenarios.json"),
        &fixture("codex-scenarios.json"),
        "--html",
        "--link-prefix",
        "../",
    ]);
    let page = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(
        page.contains("<a href=\"../examples/hermes/README.md\">hermes</a>"),
        "{page}"
    );
    assert!(page.contains("<td class=\"error\">ERROR</td>"), "{page}");
    assert!(page.contains("<td class=\"na\">N/A</td>"), "{page}");
    assert_eq!(page.matches("<td class=\"fail\">").count(), 3, "{page}");
}

/// A catalog agent run by name (its profile in the cache) and the same
/// profile run from `examples/NAME/` are one column when their reports name
/// one version; reports naming two versions under one column are refused.
#[test]
fn a_cached_and_a_shipped_run_of_one_agent_are_one_column() {
    let dir = tempfile::tempdir().unwrap();
    let base = read_json(&repo().join(fixture("codex-scenarios.json")));
    let write = |name: &str, agent: &str, version: &str, id: &str| {
        let mut doc = base.clone();
        doc["agent"] = agent.into();
        doc["agent_version"] = version.into();
        doc["scenarios"][0]["id"] = id.into();
        doc["scenarios"] = serde_json::Value::Array(vec![doc["scenarios"][0].clone()]);
        doc["selected"] = serde_json::json!([id]);
        let p = dir.path().join(name);
        std::fs::write(&p, doc.to_string()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let shipped = write("a.json", "examples/codex/codex.yaml", "0.169.0", "row_a");
    let cached = write(
        "b.json",
        "/root/.cache/chaosrun/agents/codex/codex.yaml",
        "0.169.0",
        "row_b",
    );
    let out = matrix(&[&shipped, &cached]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}");
    let head = table.lines().find(|l| l.starts_with("| scenario")).unwrap();
    assert_eq!(
        head, "| scenario | [codex](examples/codex/README.md) |",
        "one column: {table}"
    );
    assert!(
        table.contains("`row_a`") && table.contains("`row_b`"),
        "{table}"
    );
    let other = write(
        "c.json",
        "/root/.cache/chaosrun/agents/codex/codex.yaml",
        "0.171.0",
        "row_c",
    );
    let out = matrix(&[&shipped, &other]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("name different agent versions"), "{stderr}");
}

#[test]
fn a_report_merge_refuses_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut doc = read_json(&repo().join(fixture("codex-scenarios.json")));
    doc["scenarios"][0]["verdict"] = "PASSED".into();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, doc.to_string()).unwrap();
    let out = matrix(&[bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bad.json"), "{stderr}");
    assert!(out.stdout.is_empty());

    // Two reports of one agent holding the same scenario run: refused as `merge` does.
    let twice = fixture("hermes-scenarios.json");
    let out = matrix(&[&twice, &twice]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in an earlier report"));

    let out = matrix(&["/nonexistent/report.json"]);
    assert_eq!(out.status.code(), Some(2));
    let out = matrix(&[]);
    assert_eq!(out.status.code(), Some(2));
}

/// A complete report of `agent` whose runs are `ids`, each with `verdict`.
fn crafted(dir: &std::path::Path, name: &str, agent: &str, ids: &[String]) -> String {
    let scenarios: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| serde_json::json!({"id": id, "verdict": "pass", "checks": [{"invariant": "termination", "name": "faulted_turn_ends", "status": "pass"}]}))
        .collect();
    let doc = serde_json::json!({"schema": "chaosrun-report/2", "complete": true,
        "agent": agent, "selected": ids, "scenarios": scenarios});
    let p = dir.join(name);
    std::fs::write(&p, doc.to_string()).unwrap();
    p.to_str().unwrap().to_string()
}

/// A GFM table row's cells: split at each `|` no backslash escapes.
fn gfm_cells(line: &str) -> Vec<String> {
    let (mut cells, mut cell, mut chars) = (Vec::new(), String::new(), line.chars());
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cell.push(c);
                cell.extend(chars.next());
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}

/// Scenario ids and an agent's folder that try to forge a row (a newline
/// then `| ... |`), split a cell (`|`), close the code span (a backtick) and
/// slip raw HTML in: each is one row of three cells, no HTML renders.
#[test]
fn hostile_ids_and_agent_names_cannot_forge_rows_or_inject_html() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = [
        "x\n| `forged` | ✓ | ✓ |",
        "y\r\n| `forged2` | ✓ |",
        "a|b",
        "c` <img src=x onerror=alert(1)> `",
        "<script>alert(1)</script>",
        "&lt;b&gt;",
        "plain_row",
    ]
    .map(String::from)
    .to_vec();
    let a = crafted(dir.path(), "a.json", "bundled", &ids);
    let evil = dir.path().join("ev|l\n<img src=x onerror=alert(2)>");
    std::fs::create_dir(&evil).unwrap();
    std::fs::write(evil.join("README.md"), "").unwrap();
    let agent = evil.join("p.yaml");
    let b = crafted(dir.path(), "b.json", agent.to_str().unwrap(), &ids[..2]);
    let md = table(&[&a, &b]);
    let lines: Vec<&str> = md.lines().collect();
    // Legend, blank, header, separator, a row per id, the tally.
    assert_eq!(lines.len(), 4 + ids.len() + 1, "{md}");
    for line in &lines[2..] {
        assert_eq!(gfm_cells(line).len(), 5, "not 3 cells: {line}\n{md}");
    }
    assert!(!md.contains("<img") && !md.contains("<script"), "{md}");
    assert!(
        !md.contains("&lt;b&gt;"),
        "an entity renders as its character: {md}"
    );
    assert!(md.contains("&amp;lt;b&amp;gt;"), "{md}");
    assert!(lines.iter().all(|l| !l.contains("| `forged")), "{md}");
    assert!(md.contains("| `plain_row` | ✓ | – |"), "{md}");
}

/// 100,000 rows (the quadratic matrix took ~10 s for 10,000 and gave no
/// output in 120 s for 200,000): they must all be printed, in order, well
/// within a minute (the bound is not a timing: a quadratic build does not
/// come near it; `cargo bench --bench matrix` prints the figures).
#[test]
fn a_hundred_thousand_rows_are_printed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..100_000).map(|i| format!("row_{i}")).collect();
    let a = crafted(dir.path(), "a.json", "bundled", &ids);
    let half: Vec<String> = ids.iter().rev().step_by(2).cloned().collect();
    let b = crafted(dir.path(), "b.json", "other/p.yaml", &half);
    let mut cmd = Command::new(bin());
    cmd.args(["matrix", &a, &b]).current_dir(repo());
    let (ok, md, err) = run_bounded(cmd, std::time::Duration::from_secs(60));
    assert!(ok, "{err}");
    let rows: Vec<&str> = md.lines().skip(4).collect();
    assert_eq!(rows.len(), ids.len() + 1);
    assert_eq!(rows[0], "| `row_0` | ✓ | – |");
    assert_eq!(rows[99_999], "| `row_99999` | ✓ | ✓ |");
    assert_eq!(
        rows[100_000],
        "| **passed** | **100000/100000** | **50000/50000** |"
    );
}
