//! The MCP proxy without npm: `chaosrun serve --mcp RULES` with
//! `upstream: {command: [python3, tests/fixtures/mcp_fake_upstream.py]}`, a
//! client speaking through `chaosrun mcp-stdio` like an agent. Unmatched
//! traffic is relayed as is (the client's ids kept, the server's own
//! notifications and requests reach the client and its answer goes back, a
//! cancellation reaches the server under the id it knows); rules apply to the
//! relayed traffic; the upstream child is gone once its connection or the
//! server ends (found by an argv marker in /proc); a server that exits at
//! once is refused naming its command and stderr.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

/// `chaosrun serve --mcp` on a rules file whose upstream is the fake server
/// tagged with `mark` in its argv.
struct Serve {
    child: Child,
    socket: String,
    url: String,
    _dir: tempfile::TempDir,
}

fn fake(mark: &str, extra: &str) -> String {
    let script = common::repo().join("tests/fixtures/mcp_fake_upstream.py");
    format!("[python3, '{}', '{mark}'{extra}]", script.display())
}

fn serve(rules: &str) -> Result<Serve, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, rules).unwrap();
    let mut child = Command::new(common::bin())
        .args(["serve", "--mcp"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let Some(socket) = first.split_whitespace().nth(4) else {
        let out = child.wait_with_output().unwrap();
        return Err(format!(
            "exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    };
    Ok(Serve {
        socket: socket.to_string(),
        url: first
            .split_whitespace()
            .nth(6)
            .unwrap_or_default()
            .to_string(),
        child,
        _dir: dir,
    })
}

impl Serve {
    fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let _ = self.child.wait();
    }
}

/// A client on `chaosrun mcp-stdio`, its stdout read on a thread.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: mpsc::Receiver<Value>,
}

fn client(socket: &str) -> Client {
    let mut child = Command::new(common::bin())
        .args(["mcp-stdio", "--socket", socket])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                if tx.send(v).is_err() {
                    return;
                }
            }
        }
    });
    Client {
        stdin: child.stdin.take(),
        child,
        rx,
    }
}

impl Client {
    fn send(&mut self, v: Value) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{v}").unwrap();
        s.flush().unwrap();
    }

    fn recv(&self) -> Value {
        self.rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a frame from the proxy")
    }

    /// The next frame with this id.
    fn answer(&self, id: &Value) -> Value {
        loop {
            let v = self.recv();
            if &v["id"] == id && v.get("method").is_none() {
                return v;
            }
        }
    }

    fn call(&mut self, id: Value, tool: &str, args: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}));
        self.answer(&id)
    }

    fn init(&mut self) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
                "clientInfo": {"name": "t", "version": "1"}}}),
        );
        let a = self.answer(&json!("init-1"));
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        a
    }

    fn close(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

fn text(v: &Value) -> String {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Live, non-zombie processes whose argv holds `mark`.
fn alive(mark: &str) -> Vec<String> {
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
        if !zombie && cmd.contains(mark) {
            out.push(cmd);
        }
    }
    out
}

/// Poll /proc (an independent view) until nothing carries `mark`, bounded.
fn gone(mark: &str) -> Vec<String> {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = alive(mark);
        if left.is_empty() || std::time::Instant::now() > end {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn unmatched_traffic_is_relayed_as_is_both_ways() {
    let mark = common::new_mark("mcp-relay");
    let s = serve(&format!("upstream: {{command: {}}}\n", fake(&mark, ""))).unwrap();
    let mut c = client(&s.socket);
    let init = c.init();
    assert_eq!(
        init["result"]["serverInfo"]["name"], "fake-upstream",
        "{init}"
    );
    c.send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}));
    let list = c.answer(&json!(7));
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["probe", "echo", "ask", "seen"]);
    // A string id comes back as sent; the upstream's answer, not chaosrun's.
    let a = c.call(json!("a-b"), "echo", json!({"message": "hi"}));
    assert_eq!(
        (a["id"].clone(), text(&a)),
        (json!("a-b"), "Echo: hi".into()),
        "{a}"
    );
    // The server's own notification and request reach the client; its answer goes back.
    c.send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "ask", "arguments": {}}}));
    let note = c.recv();
    assert_eq!(note["method"], "notifications/message", "{note}");
    let req = c.recv();
    assert_eq!(
        (req["method"].clone(), req["id"].clone()),
        (json!("roots/list"), json!("srv-1")),
        "{req}"
    );
    c.send(json!({"jsonrpc": "2.0", "id": "srv-1", "result": {"roots": [{"uri": "file:///w"}]}}));
    assert_eq!(
        text(&c.answer(&json!(9))),
        r#"roots: {"roots": [{"uri": "file:///w"}]}"#
    );
    // What the server saw: fresh numeric ids, the notifications forwarded.
    let seen: Value = serde_json::from_str(&text(&c.call(json!(10), "seen", json!({})))).unwrap();
    let methods: Vec<&str> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["method"].as_str().unwrap_or("<response>"))
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call",
            "tools/call",
            "<response>",
            "tools/call"
        ]
    );
    assert!(
        seen.as_array()
            .unwrap()
            .iter()
            .filter(|m| m
                .get("method")
                .is_some_and(|m| m != "notifications/initialized"))
            .all(|m| m["id"].is_u64()),
        "{seen}"
    );
    // The child lives while its connection does, and goes with it.
    assert_eq!(alive(&mark).len(), 1, "{:?}", alive(&mark));
    c.close();
    assert!(
        gone(&mark).is_empty(),
        "upstream left after its connection: {:?}",
        alive(&mark)
    );
    s.stop();
}

#[test]
fn rules_apply_to_relayed_calls() {
    let mark = common::new_mark("mcp-rules");
    let rules = format!(
        "upstream: {{command: {}, probe: echo}}\nrules:\n\
         \x20 - {{when: {{call: 0, tool: probe}}, reply: {{kind: hang}}}}\n\
         \x20 - {{when: {{call: 1}}, reply: {{kind: jsonrpc_error, code: -32000, message: replaced}}}}\n\
         \x20 - {{when: {{call: 2}}, reply: {{kind: slow, seconds: 0.2}}}}\n\
         \x20 - {{when: {{call: 3}}, reply: {{kind: list_changed_storm, count: 3, interval: 0}}}}\n",
        fake(&mark, "")
    );
    let s = serve(&rules).unwrap();
    let mut c = client(&s.socket);
    c.init();
    // Call 0 (echo, `probe` in the rule) hangs; later calls are still served.
    c.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "x"}}}));
    let e = c.call(json!(2), "echo", json!({"message": "y"}));
    assert_eq!(e["error"]["message"], "replaced", "{e}");
    assert_eq!(
        text(&c.call(json!(3), "echo", json!({"message": "slow"}))),
        "Echo: slow"
    );
    c.send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "s"}}}));
    let storm: Vec<Value> = (0..4).map(|_| c.recv()).collect();
    assert!(
        storm[..3]
            .iter()
            .all(|n| n["method"] == "notifications/tools/list_changed"),
        "{storm:?}"
    );
    assert_eq!(
        (storm[3]["id"].clone(), text(&storm[3])),
        (json!(4), "Echo: s".into())
    );
    // The hung call was never answered; its cancellation reaches nobody
    // upstream (the server had answered it already), the client's next call works.
    c.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}),
    );
    assert_eq!(
        text(&c.call(json!(5), "echo", json!({"message": "after"}))),
        "Echo: after"
    );
    c.close();
    s.stop();
    assert!(
        gone(&mark).is_empty(),
        "upstream left after the server stopped: {:?}",
        alive(&mark)
    );
}

#[test]
fn a_cancellation_reaches_the_server_under_its_own_id() {
    let mark = common::new_mark("mcp-cancel");
    let s = serve(&format!("upstream: {{command: {}}}\n", fake(&mark, ""))).unwrap();
    let mut c = client(&s.socket);
    c.init();
    c.send(json!({"jsonrpc": "2.0", "id": "w", "method": "tools/call", "params": {"name": "wait", "arguments": {}}}));
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w", "reason": "t"}}));
    let seen: Value = serde_json::from_str(&text(&c.call(json!(3), "seen", json!({})))).unwrap();
    let seen = seen.as_array().unwrap();
    let wait_id = seen.iter().find(|m| m["method"] == "tools/call").unwrap()["id"].clone();
    assert!(wait_id.is_u64(), "{seen:?}");
    let cancel = seen
        .iter()
        .find(|m| m["method"] == "notifications/cancelled")
        .expect("forwarded");
    assert_eq!(cancel["params"]["requestId"], wait_id, "{seen:?}");
    c.close();
    s.stop();
    assert!(gone(&mark).is_empty(), "{:?}", alive(&mark));
}

#[test]
fn a_server_that_never_answers_initialize_is_refused_within_its_bound() {
    let mark = common::new_mark("mcp-silent");
    let err = serve(&format!(
        "upstream: {{command: {}, init_timeout: 1}}\n",
        fake(&mark, ", --silent")
    ))
    .err()
    .expect("refused");
    assert!(
        err.contains("exit Some(2)")
            && err.contains("did not answer within 1 s")
            && err.contains("initialize"),
        "{err}"
    );
    assert!(gone(&mark).is_empty(), "{:?}", alive(&mark));
}

#[test]
fn a_server_that_exits_at_once_is_refused_with_its_stderr() {
    let mark = common::new_mark("mcp-exit");
    let err = serve(&format!(
        "upstream: {{command: {}}}\n",
        fake(&mark, ", --exit-at-once")
    ))
    .err()
    .expect("refused");
    assert!(err.contains("exit Some(2)"), "{err}");
    assert!(
        err.contains("mcp_fake_upstream.py"),
        "names the command: {err}"
    );
    assert!(
        err.contains("exit status: 3") && err.contains("cannot open its config (boom)"),
        "{err}"
    );
    let err = serve("upstream: {command: [/nonexistent/mcp-server]}\n")
        .err()
        .expect("refused");
    assert!(
        err.contains("cannot start `/nonexistent/mcp-server`"),
        "{err}"
    );
}

/// The reference agent's profile with `mcp.upstream` set to `upstream` (YAML).
fn proxied_profile(dir: &std::path::Path, upstream: &str) -> std::path::PathBuf {
    let reference = common::repo().join("examples/reference");
    let text = std::fs::read_to_string(reference.join("agent.yaml")).unwrap();
    let text = text.replace("{{profile_dir}}", &reference.display().to_string());
    let mcp_line = text
        .lines()
        .find(|l| l.starts_with("mcp:"))
        .unwrap()
        .to_string();
    let text = text.replace(
        &mcp_line,
        &format!("mcp: {{transports: [stdio, http, sse], upstream: {upstream}}}"),
    );
    let path = dir.join("agent.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `chaosrun TABLE --agent PROFILE ARGS --json` (bounded): exit code, report, output.
fn table(
    table: &std::path::Path,
    profile: &std::path::Path,
    args: &[&str],
) -> (Option<i32>, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut cmd = Command::new(common::bin());
    cmd.arg(table)
        .arg("--agent")
        .arg(profile)
        .args(args)
        .args(["--no-progress", "--json"])
        .arg(&json);
    let out = cmd.output().unwrap();
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

/// Every `mcp_*` row of scenarios.yaml against the reference agent, with a
/// real (fake) server behind chaosrun's: all pass but the schema swap and
/// the restart between turns (chaosrun's own server only), N/A.
#[test]
fn the_tables_mcp_rows_pass_through_the_proxy() {
    let mark = common::new_mark("mcp-rows");
    let dir = tempfile::tempdir().unwrap();
    let profile = proxied_profile(dir.path(), &format!("{{command: {}}}", fake(&mark, "")));
    let yaml = std::fs::read_to_string(common::repo().join("scenarios.yaml")).unwrap();
    let ids: Vec<String> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- id: "))
        .filter(|id| id.contains("mcp"))
        .map(str::to_string)
        .collect();
    assert!(ids.len() >= 12, "{ids:?}");
    let mut args = Vec::new();
    for id in &ids {
        args.extend(["--only", id.as_str()]);
    }
    let art = dir.path().join("art");
    args.extend(["--keep-all", "--artifacts", art.to_str().unwrap()]);
    let (_, report, out) = table(&common::repo().join("scenarios.yaml"), &profile, &args);
    for id in &ids {
        let s = common::scenario(&report, id);
        let verdict = s["verdict"].as_str().unwrap_or_default();
        if id == "mcp_tool_schema_changes" {
            assert_eq!(verdict, "not_applicable", "{s}");
            assert!(s.to_string().contains("chaosrun's own probe tool"), "{s}");
            continue;
        }
        if id == "mcp_server_restarts_between_turns" {
            assert_eq!(verdict, "not_applicable", "{s}");
            assert!(
                s.to_string().contains("restarts chaosrun's own server"),
                "{s}"
            );
            continue;
        }
        assert_eq!(verdict, "pass", "{id}: {s}\n{out}");
        // The real server answered (relayed), except where the row's fault
        // stops every call before an answer could be relayed.
        let obs = common::read_json(&art.join(id).join("observation.json"));
        assert!(
            obs["mcp"]["upstream"]
                .as_str()
                .unwrap_or_default()
                .contains("mcp_fake_upstream.py"),
            "{id}"
        );
        // Refused at initialize, or never told where to post: nothing to relay.
        if !["mcp_http_unauthorized", "mcp_sse_endpoint_never_sent"].contains(&id.as_str()) {
            assert!(
                obs["mcp"]["relayed"].as_u64().unwrap_or(0) > 0,
                "{id}: {}",
                obs["mcp"]
            );
        }
    }
    assert!(
        gone(&mark).is_empty(),
        "upstream left after the run: {:?}",
        alive(&mark)
    );
}

#[test]
fn a_rows_server_that_exits_at_once_is_an_error_and_bad_yaml_is_exit_2() {
    let mark = common::new_mark("mcp-row-exit");
    let dir = tempfile::tempdir().unwrap();
    let profile = proxied_profile(dir.path(), &format!("{{command: {}}}", fake(&mark, "")));
    let row = |mcp: &str| {
        format!(
            "scenarios:\n  - id: proxied\n    mcp:\n      {mcp}\n    responder:\n      - when: {{after_tool: false}}\n        reply: {{kind: tool_call, calls: [{{tool: mcp_probe, args: {{text: \"{{{{nonce}}}}\"}}}}]}}\n      - reply: {{kind: text, text: \"ok {{{{nonce}}}}\"}}\n    expect: {{answer: \"ok {{{{nonce}}}}\"}}\n"
        )
    };
    let t = dir.path().join("exit.yaml");
    std::fs::write(
        &t,
        row(&format!(
            "upstream: {{command: {}}}",
            fake(&mark, ", --exit-at-once")
        )),
    )
    .unwrap();
    let (code, report, out) = table(&t, &profile, &[]);
    let s = common::scenario(&report, "proxied");
    assert_eq!(s["verdict"], "error", "{s}\n{out}");
    let text = s.to_string();
    assert!(
        text.contains("mcp_fake_upstream.py") && text.contains("cannot open its config (boom)"),
        "{text}"
    );
    assert_ne!(code, Some(0), "{out}");
    for (bad, says) in [
        ("upstream: {}", "needs `command"),
        ("upstream: {command: python3}", "invalid type"),
        (
            "upstream: {command: [a], url: 'http://127.0.0.1:9/mcp'}",
            "not both",
        ),
    ] {
        std::fs::write(&t, row(bad)).unwrap();
        let (code, _, out) = table(&t, &profile, &[]);
        assert_eq!(code, Some(2), "{bad}: {out}");
        assert!(
            out.contains(says) && out.contains("exit.yaml:4:"),
            "{bad}: {out}"
        );
    }
    assert!(gone(&mark).is_empty(), "{:?}", alive(&mark));
}

/// The real server's environment (in a table run): the agent's allow-list,
/// none of the caller's secrets, a HOME of its own, the run marker.
#[test]
fn the_real_server_gets_no_secrets_and_its_own_home() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("env.jsonl");
    let profile = proxied_profile(
        dir.path(),
        &format!(
            "{{command: {}}}",
            fake("m", &format!(", '--env-to={}'", env_file.display()))
        ),
    );
    let out = Command::new(common::bin())
        .arg(common::repo().join("scenarios.yaml"))
        .arg("--agent")
        .arg(&profile)
        .args(["--only", "mcp_error_result", "--no-progress"])
        .env("CHAOSRUN_TEST_SECRET", "s3cret-must-not-leak")
        .env("OPENAI_API_KEY", "sk-must-not-leak")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 passed"), "{text}");
    let envs: Vec<Value> = std::fs::read_to_string(&env_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The preflight's server and the agent's connection's.
    assert!(envs.len() >= 2, "{envs:?}");
    let home = std::env::var("HOME").unwrap_or_default();
    for e in &envs {
        let all = e.to_string();
        assert!(
            !all.contains("must-not-leak"),
            "a secret reached the server: {all}"
        );
        assert!(e["PATH"].is_string() && e["CHAOS_RUN"].is_string(), "{all}");
        let h = e["HOME"].as_str().unwrap();
        assert!(h.ends_with("mcp-upstream/home") && h != home, "{h}");
    }
}

/// A Streamable HTTP upstream (chaosrun's own scripted server on loopback,
/// its answers marked by its rules): JSON and SSE answers relayed, its
/// notifications on an SSE stream reach the stdio client, the session kept.
#[test]
fn a_streamable_http_upstream_is_relayed() {
    let real = serve(
        "rules:\n\
         \x20 - {when: {call: 0}, reply: {kind: result, text: from-upstream}}\n\
         \x20 - {when: {call: 1}, reply: {kind: slow, seconds: 0.1}}\n\
         \x20 - {when: {call: 2}, reply: {kind: list_changed_storm, count: 2, interval: 0}}\n",
    )
    .unwrap();
    assert!(real.url.starts_with("http://127.0.0.1:"), "{}", real.url);
    let proxy = serve(&format!("upstream: {{url: '{}'}}\n", real.url)).unwrap();
    let mut c = client(&proxy.socket);
    let init = c.init();
    assert_eq!(
        init["result"]["serverInfo"]["name"], "chaosrun-mcp",
        "{init}"
    );
    let a = c.call(json!("x1"), "probe", json!({"text": "a"}));
    assert_eq!(
        (a["id"].clone(), text(&a)),
        (json!("x1"), "from-upstream".into()),
        "{a}"
    );
    // An SSE answer (slow), then notifications before the answer (storm).
    assert_eq!(
        text(&c.call(json!(2), "probe", json!({"text": "b"}))),
        "probe:b"
    );
    c.send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "probe", "arguments": {"text": "c"}}}));
    let got: Vec<Value> = (0..3).map(|_| c.recv()).collect();
    assert!(
        got[..2]
            .iter()
            .all(|n| n["method"] == "notifications/tools/list_changed"),
        "{got:?}"
    );
    assert_eq!(
        (got[2]["id"].clone(), text(&got[2])),
        (json!(3), "probe:c".into())
    );
    c.close();
    proxy.stop();
    // The real server saw two sessions, each ended by a DELETE: the
    // preflight's (initialize, tools/list) and the client's.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(real.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = real.child.wait_with_output().unwrap();
    let rec = String::from_utf8_lossy(&out.stdout);
    let rec: Value = serde_json::from_str(rec.lines().last().unwrap()).unwrap();
    assert_eq!(rec["http_sessions"], 2, "{rec}");
    let methods: Vec<&str> = rec["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "<delete>",
            "initialize",
            "notifications/initialized",
            "tools/call",
            "tools/call",
            "tools/call",
            "<delete>"
        ],
        "{rec}"
    );
}
