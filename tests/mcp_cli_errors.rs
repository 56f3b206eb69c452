//! Bad MCP input: each is a configuration error at load (exit 2) with a
//! message naming what is missing, before any agent starts: a rule on a tool
//! the server does not list, a profile `mcp` with no or an unknown
//! transport, a bad `serve --mcp` file. A profile that lacks what an MCP row
//! needs (no `mcp` key, or not the transport the row pins) is no error: that
//! row is N/A with the reason and a one-line hint, the others still run.

mod common;

use std::path::Path;
use std::process::Command;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// Exit 2, and stderr.
fn refused(args: &[&str]) -> String {
    let out = Command::new(common::bin())
        .args(args)
        .current_dir(common::repo())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

const ROW: &str = "scenarios:
  - id: m
    mcp:
      RULES
    responder: [{reply: {kind: text, text: ok}}]
    expect: ended
";

fn table(dir: &Path, mcp: &str) -> String {
    write(dir, "t.yaml", &ROW.replace("RULES", mcp))
}

fn profile(dir: &Path, mcp: &str) -> String {
    write(dir, "p.yaml", &format!("command: [sh]\n{mcp}\n"))
}

#[test]
fn a_rule_on_a_tool_the_server_does_not_list() {
    let d = tempfile::tempdir().unwrap();
    let t = table(
        d.path(),
        "rules: [{when: {tool: search}, reply: {kind: hang}}]",
    );
    let e = refused(&[&t, "--list"]);
    assert!(
        e.contains("t.yaml:2:") && e.contains("tool `search` is not a tool the MCP server lists"),
        "{e}"
    );
}

#[test]
fn an_unknown_reply_kind_or_method_is_named_with_its_place() {
    let d = tempfile::tempdir().unwrap();
    let t = table(d.path(), "rules: [{reply: {kind: hung}}]");
    let e = refused(&[&t, "--list"]);
    assert!(
        e.contains("t.yaml:4:") && e.contains("hung") && e.contains("progress_forever"),
        "{e}"
    );
    let t = table(
        d.path(),
        "rules: [{when: {method: resources/list}, reply: {kind: hang}}]",
    );
    let e = refused(&[&t, "--list"]);
    assert!(e.contains("unknown method `resources/list`"), "{e}");
    let t = table(d.path(), "{transport: grpc}");
    let e = refused(&[&t, "--list"]);
    assert!(
        e.contains("grpc") && e.contains("stdio") && e.contains("http"),
        "{e}"
    );
}

/// Run the table against the profile: exit 0 (nothing applicable failed),
/// and stdout.
fn ran(args: &[&str]) -> String {
    let out = Command::new(common::bin())
        .args(args)
        .current_dir(common::repo())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    stdout
}

/// The row's N/A line of the text report.
fn na_line<'a>(stdout: &'a str, id: &str) -> &'a str {
    let tail = stdout
        .split("not applicable (not counted as passed):")
        .nth(1)
        .unwrap_or_else(|| panic!("no N/A section: {stdout}"));
    tail.lines()
        .find(|l| l.trim_start().starts_with(id))
        .unwrap_or_else(|| panic!("no N/A line for {id}: {stdout}"))
}

#[test]
fn an_mcp_row_against_a_profile_without_an_mcp_key_is_na_with_a_hint() {
    let d = tempfile::tempdir().unwrap();
    let t = table(d.path(), "{}");
    let p = profile(d.path(), "");
    let out = ran(&[&t, "--agent", &p]);
    let line = na_line(&out, "m");
    assert!(
        line.contains("profile has no `mcp:` key")
            && line.contains("add `mcp: {transports: [stdio]}`")
            && line.contains("`mcp: false`"),
        "{out}"
    );
    assert!(
        out.contains("0 passed, 0 failed, 1 not applicable"),
        "{out}"
    );
}

#[test]
fn a_row_pinning_a_transport_the_profile_does_not_register_is_na() {
    let d = tempfile::tempdir().unwrap();
    let t = table(d.path(), "{transport: stdio}");
    let p = profile(d.path(), "mcp: {transports: [http]}");
    let out = ran(&[&t, "--agent", &p]);
    let line = na_line(&out, "m");
    assert!(
        line.contains("pins MCP transport `stdio`") && line.contains("registers only http"),
        "{out}"
    );
}

#[test]
fn a_row_with_a_tool_argument_the_profile_does_not_map_is_na_not_sent() {
    let d = tempfile::tempdir().unwrap();
    let t = write(
        d.path(),
        "t.yaml",
        "scenarios:
  - id: bg
    responder: [{reply: {kind: tool_call, calls: [{tool: shell, args: {command: x, background: true}}]}}]
    expect: ended
  - id: sub
    responder: [{reply: {kind: tool_call, calls: [{tool: subagent, args: {prompt: go}}]}}]
    expect: ended
",
    );
    let p = write(
        d.path(),
        "p.yaml",
        "command: [sh]\nmcp: false\ntools:\n  shell: {name: exec, args: {command: cmd}}\n",
    );
    let out = ran(&[&t, "--agent", &p]);
    let bg = na_line(&out, "bg");
    assert!(
        bg.contains("maps no `background` argument")
            && bg.contains("add `background: <the agent's argument>` to `tools.shell.args`"),
        "{out}"
    );
    let sub = na_line(&out, "sub");
    assert!(
        sub.contains("maps no `subagent` tool") && sub.contains("tools: {subagent:"),
        "{out}"
    );
}

#[test]
fn a_profile_mcp_without_a_known_transport() {
    let d = tempfile::tempdir().unwrap();
    let t = table(d.path(), "{}");
    for (mcp, says) in [
        ("mcp: {transports: []}", "at least one transport"),
        ("mcp: {transports: [pigeon]}", "unknown variant `pigeon`"),
        ("mcp: true", "does not say how the agent reaches the server"),
    ] {
        let p = profile(d.path(), mcp);
        let e = refused(&[&t, "--agent", &p]);
        assert!(e.contains("p.yaml:2:") && e.contains(says), "{mcp}: {e}");
    }
}

#[test]
fn a_bad_serve_mcp_file() {
    let d = tempfile::tempdir().unwrap();
    let f = write(
        d.path(),
        "r.yaml",
        "rules: [{when: {tool: nope}, reply: {kind: hang}}]\n",
    );
    let e = refused(&["serve", "--mcp", &f]);
    assert!(e.contains("r.yaml") && e.contains("tool `nope`"), "{e}");
    let f = write(
        d.path(),
        "s.yaml",
        "rules: [{reply: {kind: huge, bytes: 0}}]\n",
    );
    assert!(refused(&["serve", "--mcp", &f]).contains("`huge.bytes`"));
    let e = refused(&["serve", "--mcp", "/nonexistent/r.yaml"]);
    assert!(e.contains("cannot read the MCP rules"), "{e}");
}
