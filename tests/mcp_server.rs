//! The scripted MCP server through the real binary: `chaosrun serve --mcp
//! RULES` with `chaosrun mcp-stdio` relays driven by a raw newline-delimited
//! JSON-RPC client, and the Streamable HTTP endpoint driven by raw HTTP. Each
//! reply kind, the recording, a crash (exit 1), linger, and a relay that exits
//! when the socket closes. Leftover relays are found by their argv (the
//! socket path, unique per test) scanned in /proc.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A running `chaosrun serve --mcp`.
struct Server {
    child: Child,
    socket: PathBuf,
    url: String,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(rules: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rules.yaml");
        std::fs::write(&file, rules).unwrap();
        let mut child = Command::new(common::bin())
            .args(["serve", "--mcp"])
            .arg(&file)
            .args(["--nonce", "N0NCE"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&words[..3], ["chaosrun", "MCP", "server:"], "{line}");
        Server {
            socket: PathBuf::from(words[4]),
            url: words[6].to_string(),
            child,
            _dir: dir,
        }
    }

    /// SIGTERM; the recording it prints.
    fn stop(mut self) -> Value {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap())
            .wait_with_output()
            .unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        let text = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(text.lines().last().unwrap()).unwrap()
    }

    fn relay(&self) -> Relay {
        let mut child = Command::new(common::bin())
            .args(["mcp-stdio", "--socket"])
            .arg(&self.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Relay {
            stdin: child.stdin.take(),
            child,
            lines: rx,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `chaosrun mcp-stdio` process with a raw client on its pipes.
struct Relay {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Vec<u8>>,
}

impl Relay {
    fn send(&mut self, v: Value) {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        self.stdin.as_mut().unwrap().write_all(&line).unwrap();
    }

    fn line(&self, secs: f64) -> Option<Vec<u8>> {
        self.lines.recv_timeout(Duration::from_secs_f64(secs)).ok()
    }

    fn json(&self) -> Value {
        let l = self.line(10.0).expect("a frame within 10 s");
        serde_json::from_slice(&l)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&l)))
    }

    fn handshake(&mut self) {
        self.send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}));
        assert_eq!(self.json()["result"]["protocolVersion"], "2025-06-18");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn call(&mut self, id: u64, text: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "probe", "arguments": {"text": text}, "_meta": {"progressToken": format!("p{id}")}}}));
    }

    fn close_stdin(&mut self) {
        self.stdin.take();
    }

    fn wait_exit(&mut self, secs: u64) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Live processes whose command line holds `needle` (zombies excluded).
fn alive_with(needle: &Path) -> Vec<i32> {
    let needle = needle.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            == Some("Z");
        if !zombie
            && String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .contains(&needle)
        {
            out.push(pid);
        }
    }
    out
}

const KINDS: &str = "rules:
  - {when: {call: 0}, reply: {kind: result, text: 'bad {{nonce}}', is_error: true, structured: {n: 1}}}
  - {when: {call: 1}, reply: {kind: jsonrpc_error, code: -32001, message: nope}}
  - {when: {call: 2}, reply: {kind: slow, seconds: 0.3}}
  - {when: {call: 3}, reply: {kind: list_changed_storm, count: 3, interval: 0.01}}
  - {when: {call: 4}, reply: {kind: huge, bytes: 3000000}}
  - {when: {call: 5}, reply: {kind: malformed}}
  - {when: {call: 6}, reply: {kind: progress_forever, interval: 0.05}}
  - {when: {call: 7}, reply: {kind: hang}}
  - {when: {call: 8}, reply: {kind: crash, after: 0.1}}
";

#[test]
fn every_reply_kind_over_stdio_is_recorded_and_a_crash_exits_1() {
    let server = Server::start(KINDS);
    let mut r = server.relay();
    r.handshake();
    r.send(json!({"jsonrpc": "2.0", "id": 100, "method": "tools/list"}));
    assert_eq!(r.json()["result"]["tools"][0]["name"], "probe");

    r.call(1, "a");
    let v = r.json();
    assert_eq!(
        (v["id"].clone(), v["result"]["isError"].clone()),
        (json!(1), json!(true))
    );
    assert_eq!(v["result"]["content"][0]["text"], "bad N0NCE");
    assert_eq!(v["result"]["structuredContent"]["n"], 1);

    r.call(2, "b");
    assert_eq!(r.json()["error"]["code"], -32001);

    let t = Instant::now();
    r.call(3, "c");
    assert_eq!(r.json()["result"]["content"][0]["text"], "probe:c");
    assert!(t.elapsed() >= Duration::from_millis(300));

    r.call(4, "d");
    for _ in 0..3 {
        assert_eq!(r.json()["method"], "notifications/tools/list_changed");
    }
    assert_eq!(r.json()["id"], 4);

    r.call(5, "e");
    let huge = r.line(30.0).unwrap();
    assert!(huge.len() > 3_000_000, "{}", huge.len());
    let v: Value = serde_json::from_slice(&huge).unwrap();
    assert!(v["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("probe:e:xxx"));

    r.call(6, "f");
    let bad = r.line(10.0).unwrap();
    assert!(serde_json::from_slice::<Value>(&bad).is_err());

    r.call(7, "g");
    for n in 1..=3 {
        let v = r.json();
        assert_eq!(
            (v["method"].as_str(), v["params"]["progressToken"].as_str()),
            (Some("notifications/progress"), Some("p7"))
        );
        assert_eq!(v["params"]["progress"], n);
    }

    // A hang: a ping on the same connection is still answered meanwhile.
    r.call(8, "h");
    r.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 8, "reason": "user"}}));
    r.send(json!({"jsonrpc": "2.0", "id": 101, "method": "ping"}));
    let mut got_ping = false;
    while let Some(l) = r.line(5.0) {
        let v: Value = serde_json::from_slice(&l).unwrap();
        assert_ne!(v["id"], 8, "the hung call was answered: {v}");
        if v["id"] == 101 {
            got_ping = true;
            break;
        }
    }
    assert!(got_ping);

    r.call(9, "i");
    let status = r.wait_exit(10).expect("the relay exits on crash");
    assert_eq!(status.code(), Some(1));

    let rec = server.stop();
    let ex = rec["exchanges"].as_array().unwrap();
    let kinds: Vec<&str> = ex
        .iter()
        .filter(|e| e["method"] == "tools/call")
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "result",
            "jsonrpc_error",
            "slow",
            "list_changed_storm",
            "huge",
            "malformed",
            "progress_forever",
            "hang",
            "crash"
        ]
    );
    assert_eq!(rec["tool_calls"], 9);
    assert!(ex
        .iter()
        .any(|e| e["method"] == "notifications/initialized"));
    let cancel = ex
        .iter()
        .find(|e| e["method"] == "notifications/cancelled")
        .unwrap();
    assert_eq!(cancel["cancels"], 8);
    let hung = ex.iter().find(|e| e["id"] == 8).unwrap();
    assert!(hung.get("answered").is_none(), "{hung}");
    assert!(ex.iter().find(|e| e["id"] == 1).unwrap()["answered"].is_number());
    assert_eq!(rec["rule_hits"], json!([1, 1, 1, 1, 1, 1, 1, 1, 1]));
}

#[test]
fn list_hang_leaves_tools_list_unanswered() {
    let server = Server::start("rules: [{when: {method: tools/list}, reply: {kind: list_hang}}]\n");
    let mut r = server.relay();
    r.handshake();
    r.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    assert!(r.line(1.0).is_none(), "tools/list was answered");
    r.call(2, "x");
    assert_eq!(r.json()["id"], 2, "a call is still served");
    let rec = server.stop();
    assert_eq!(rec["exchanges"][2]["kind"], "list_hang");
}

#[test]
fn a_relay_exits_on_stdin_eof_unless_it_lingers_and_always_when_the_socket_closes() {
    // No linger: stdin EOF ends the relay with 0, and nothing is left.
    let server = Server::start("rules: []\n");
    let mut r = server.relay();
    r.handshake();
    r.close_stdin();
    assert_eq!(r.wait_exit(10).and_then(|s| s.code()), Some(0));
    let rec = server.stop();
    assert!(rec["exchanges"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["method"] == "<stdin closed>"));

    // Linger: stdin EOF is ignored; the relay runs until the socket closes.
    let server = Server::start("linger: true\n");
    let socket = server.socket.clone();
    let mut r = server.relay();
    r.handshake();
    r.close_stdin();
    assert!(
        r.wait_exit(1).is_none(),
        "a lingering relay exited on stdin EOF"
    );
    assert_eq!(
        alive_with(&socket).len(),
        1,
        "the relay is found by its argv"
    );
    server.stop();
    assert_eq!(r.wait_exit(10).and_then(|s| s.code()), Some(0));
    assert!(alive_with(&socket).is_empty(), "relay survived the server");
}

#[test]
fn a_relay_without_a_server_says_so_and_exits_1() {
    let out = Command::new(common::bin())
        .args(["mcp-stdio", "--socket", "/nonexistent/mcp.sock"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the scenario's MCP server"));
}

async fn post(c: &reqwest::Client, url: &str, sid: Option<&str>, body: Value) -> reqwest::Response {
    let mut req = c
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(s) = sid {
        req = req.header("mcp-session-id", s);
    }
    req.send().await.unwrap()
}

/// SSE `message` events' data, read until `n` arrived or the stream ended.
async fn events(resp: reqwest::Response, n: usize) -> (Vec<String>, bool) {
    use futures_util::StreamExt;
    let mut s = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.next()).await {
            Ok(Some(Ok(b))) => buf.extend_from_slice(&b),
            Ok(Some(Err(_))) => return (out, true),
            Ok(None) => return (out, false),
            Err(_) => panic!("no SSE data within 10 s"),
        }
        while let Some(i) = buf.windows(2).position(|w| w == b"\n\n") {
            let ev: Vec<u8> = buf.drain(..i + 2).collect();
            let text = String::from_utf8_lossy(&ev).to_string();
            if let Some(d) = text.lines().find_map(|l| l.strip_prefix("data: ")) {
                out.push(d.to_string());
            }
        }
        if out.len() >= n {
            return (out, false);
        }
    }
}

#[tokio::test]
async fn the_http_endpoint_serves_sessions_json_and_sse() {
    let server = Server::start(KINDS);
    let url = server.url.clone();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let c = reqwest::Client::new();
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "probe", "arguments": {"text": format!("t{id}")}, "_meta": {"progressToken": id}}})
    };

    // No session yet: 400.
    assert_eq!(post(&c, &url, None, call(1)).await.status(), 400);
    let init = post(&c, &url, None, json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}})).await;
    let sid = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    let v: Value = init.json().await.unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-03-26");
    assert_eq!(post(&c, &url, Some("nope"), call(1)).await.status(), 404);
    let s = Some(sid.as_str());
    let note = post(
        &c,
        &url,
        s,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(note.status(), 202);

    // result (JSON), jsonrpc_error (JSON), slow (SSE).
    let r = post(&c, &url, s, call(1)).await;
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.json::<Value>().await.unwrap()["result"]["isError"], true);
    let r = post(&c, &url, s, call(2)).await;
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], -32001);
    let r = post(&c, &url, s, call(3)).await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let (ev, _) = events(r, 1).await;
    assert!(ev[0].contains("probe:t3"), "{ev:?}");
    // list_changed_storm: three notifications, then the answer, on the stream.
    let (ev, _) = events(post(&c, &url, s, call(4)).await, 4).await;
    assert!(
        ev[..3]
            .iter()
            .all(|e| e.contains("notifications/tools/list_changed"))
            && ev[3].contains("\"id\":4")
    );
    // huge: one event of 3 MB.
    let (ev, _) = events(post(&c, &url, s, call(5)).await, 1).await;
    assert!(ev[0].len() > 3_000_000);
    // malformed: a JSON body that is not JSON.
    let r = post(&c, &url, s, call(6)).await;
    assert!(serde_json::from_slice::<Value>(&r.bytes().await.unwrap()).is_err());
    // progress_forever: progress events with the token.
    let (ev, _) = events(post(&c, &url, s, call(7)).await, 2).await;
    assert!(ev
        .iter()
        .all(|e| e.contains("notifications/progress") && e.contains("\"progressToken\":7")));
    // hang: headers, then nothing.
    let r = post(&c, &url, s, call(8)).await;
    use futures_util::StreamExt;
    let mut body = r.bytes_stream();
    assert!(
        tokio::time::timeout(Duration::from_millis(500), body.next())
            .await
            .is_err()
    );
    // crash: the stream's connection is cut.
    let (ev, cut) = events(post(&c, &url, s, call(9)).await, 1).await;
    assert!(ev.is_empty() && cut, "{ev:?}");
    // GET has no stream here; DELETE ends the session.
    assert_eq!(c.get(&url).send().await.unwrap().status(), 405);
    let del = c
        .delete(&url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 200);
    assert_eq!(post(&c, &url, s, call(10)).await.status(), 404);
    drop(body);

    let rec = tokio::task::spawn_blocking(move || server.stop())
        .await
        .unwrap();
    assert_eq!(rec["http_sessions"], 1);
    let ex = rec["exchanges"].as_array().unwrap();
    assert!(ex
        .iter()
        .all(|e| e["conn"] == format!("http:{sid}") || e["method"] == "<delete>"));
    assert!(ex.iter().any(|e| e["method"] == "<delete>"));
    assert_eq!(rec["tool_calls"], 9);
}
