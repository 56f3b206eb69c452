//! Proxy mode, end to end with real processes: `chaosrun serve` on loopback is
//! the upstream (never the internet), and either a second `chaosrun serve
//! --upstream` or a scenario run with `--upstream` is the proxy.
//!
//! * every wire: a healthy relayed call returns the upstream's exact bytes,
//!   and each relay fault does what its doc says (raw HTTP client);
//! * the upstream's key reaches it in that wire's auth header only, the
//!   agent's own key does not, and the key is in no report or artifact;
//! * an unreachable upstream makes the scenario an ERROR, not a FAIL;
//! * the seed table through a proxy gives the same verdict per row as the
//!   direct run.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `chaosrun serve` child, stopped (SIGTERM) and reaped on drop.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Serve {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .args(args)
            .current_dir(repo())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("chaosrun serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        Serve { child, url }
    }

    /// Stop it and return its summary line (`requests: N (main M, ...)`).
    fn stop(mut self) -> String {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child.wait().unwrap();
        out.trim().to_string()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One wire's request (a main call: it carries a tool) and a canned upstream
/// stream whose third event is the one that finishes the answer.
struct WireCase {
    wire: &'static str,
    path: &'static str,
    body: &'static str,
    events: [&'static str; 4],
    /// Events before the finishing one.
    before_terminal: usize,
}

const CASES: [WireCase; 4] = [
    WireCase {
        wire: "openai-chat",
        path: "/chat/completions",
        body: r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t","parameters":{}}}]}"#,
        events: [
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"},\"finish_reason\":null,\"index\":0}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}]}\n\n",
            "data: [DONE]\n\n",
        ],
        before_terminal: 2,
    },
    WireCase {
        wire: "openai-responses",
        path: "/responses",
        body: r#"{"model":"m","stream":true,"input":"hi","tools":[{"type":"function","name":"t","parameters":{}}]}"#,
        events: [
            "event: response.created\ndata: {\"type\":\"response.created\"}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hello\"}\n\n",
            "event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\"}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\"}\n\n",
        ],
        before_terminal: 3,
    },
    WireCase {
        wire: "anthropic",
        path: "/v1/messages",
        body: r#"{"model":"m","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"t","input_schema":{}}]}"#,
        events: [
            "event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ],
        before_terminal: 2,
    },
    WireCase {
        wire: "gemini",
        path: "/v1beta/models/m:streamGenerateContent?alt=sse",
        body: r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"tools":[{"functionDeclarations":[{"name":"t","parameters":{}}]}]}"#,
        events: [
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"he\"}],\"role\":\"model\"}}]}\n\n",
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"ll\"}],\"role\":\"model\"}}]}\n\n",
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"o\"}],\"role\":\"model\"}}]}\n\n",
            "data: {\"candidates\":[{\"content\":{\"parts\":[]},\"finishReason\":\"STOP\"}]}\n\n",
        ],
        before_terminal: 3,
    },
];

/// The proxy's rules, by main-call index (call 0 matches none: plain relay).
const PROXY_SCRIPT: &str = r#"
- when: {call: 1}
  reply: {kind: relay, fault: {kind: stall_after_events, events: 2, seconds: 60}}
- when: {call: 2}
  reply: {kind: relay, fault: {kind: cut_before_terminal}}
- when: {call: 3}
  reply: {kind: relay, fault: {kind: error, status: 503, retry_after: 7}}
- when: {call: 4}
  reply: {kind: relay, fault: {kind: answer_then_hang, seconds: 60}}
- when: {call: 5}
  reply: {kind: relay, fault: {kind: delay_first_byte, seconds: 0.6}}
- when: {call: 6}
  reply: {kind: text, text: "served locally"}
"#;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// What a response body did: its bytes, whether it ended cleanly, and whether
/// it was still open (no end, no error) when `quiet` passed without a byte.
struct Got {
    status: u16,
    retry_after: Option<String>,
    data: Vec<u8>,
    ended: Option<bool>,
}

async fn call(client: &reqwest::Client, url: &str, body: &str, quiet: Duration) -> Got {
    use futures_util::StreamExt;
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .header("authorization", "Bearer agent-own-key")
        .body(body.to_string())
        .send()
        .await
        .expect("the proxy answers");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let mut stream = resp.bytes_stream();
    let mut data = Vec::new();
    let ended = loop {
        match tokio::time::timeout(quiet, stream.next()).await {
            Err(_) => break None,
            Ok(None) => break Some(true),
            Ok(Some(Err(_))) => break Some(false),
            Ok(Some(Ok(b))) => data.extend_from_slice(&b),
        }
    };
    Got {
        status,
        retry_after,
        data,
        ended,
    }
}

#[test]
fn relayed_replies_and_each_relay_fault_on_every_wire() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let proxy_script = write(dir.path(), "proxy.yaml", PROXY_SCRIPT);
    for case in &CASES {
        let w = case.wire;
        let whole: String = case.events.concat();
        let upstream_script = serde_json::json!([{"reply": {
            "kind": "raw", "content_type": "text/event-stream", "body": whole,
        }}]);
        let up_script = write(
            dir.path(),
            &format!("{w}.json"),
            &upstream_script.to_string(),
        );
        let up = Serve::start(&["--quiet", "--wire", w, "--script", &up_script], &[]);
        let proxy = Serve::start(
            &[
                "--quiet",
                "--wire",
                w,
                "--script",
                &proxy_script,
                "--upstream",
                &up.url,
            ],
            &[],
        );
        let url = format!("{}{}", proxy.url, case.path);
        let quiet = Duration::from_millis(400);
        rt.block_on(async {
            // 0: relayed as is, byte for byte, ended cleanly.
            let r = call(&client, &url, case.body, Duration::from_secs(20)).await;
            assert_eq!(r.status, 200, "{w}");
            assert_eq!(String::from_utf8_lossy(&r.data), whole, "{w}");
            assert_eq!(r.ended, Some(true), "{w}");
            // 1: two events, then silence with the socket open.
            let r = call(&client, &url, case.body, quiet).await;
            assert_eq!(
                String::from_utf8_lossy(&r.data),
                case.events[..2].concat(),
                "{w}"
            );
            assert_eq!(r.ended, None, "{w}: the stalled stream must stay open");
            // 2: every event before the finishing one, then a cut.
            let r = call(&client, &url, case.body, Duration::from_secs(20)).await;
            assert_eq!(
                String::from_utf8_lossy(&r.data),
                case.events[..case.before_terminal].concat(),
                "{w}"
            );
            assert_eq!(r.ended, Some(false), "{w}: the body must be cut");
            // 3: the upstream's reply replaced by the wire's error.
            let r = call(&client, &url, case.body, Duration::from_secs(20)).await;
            assert_eq!(r.status, 503, "{w}");
            let text = String::from_utf8_lossy(&r.data);
            // Gemini says it in the body (RetryInfo), the others in a header.
            assert!(
                r.retry_after.as_deref() == Some("7") || text.contains("\"7s\""),
                "{w}: {text}"
            );
            assert!(text.contains("chaosrun injected error"), "{w}: {text}");
            // 4: the whole answer, then no end.
            let r = call(&client, &url, case.body, quiet).await;
            assert_eq!(String::from_utf8_lossy(&r.data), whole, "{w}");
            assert_eq!(r.ended, None, "{w}: answer_then_hang must not end");
            // 5: the same bytes, late.
            let t = Instant::now();
            let r = call(&client, &url, case.body, Duration::from_secs(20)).await;
            assert!(t.elapsed() >= Duration::from_millis(600), "{w}");
            assert_eq!(String::from_utf8_lossy(&r.data), whole, "{w}");
            // 6: a scripted rule is answered locally.
            let r = call(&client, &url, case.body, Duration::from_secs(20)).await;
            let text = String::from_utf8_lossy(&r.data);
            assert!(text.contains("served locally"), "{w}: {text}");
        });
        drop(proxy);
        // Calls 0-5 reached the upstream as main calls; call 6 did not.
        let summary = up.stop();
        assert!(
            summary.contains("requests: 6 (main 6,"),
            "{w}: upstream saw {summary}"
        );
    }
}

/// The proxy's value-fault rules, by main-call index: each changes the real
/// answer itself (its text, tool calls, finish).
const VALUE_SCRIPT: &str = r#"
- when: {call: 0}
  reply: {kind: relay, fault: {kind: cut_for_length}}
- when: {call: 1}
  reply: {kind: relay, fault: {kind: empty_answer}}
- when: {call: 2}
  reply: {kind: relay, fault: {kind: refused_answer}}
- when: {call: 3}
  reply: {kind: relay, fault: {kind: drop_tool_calls}}
- when: {call: 4}
  reply: {kind: relay, fault: {kind: break_tool_args, how: wrong_key}}
- when: {call: 5}
  reply: {kind: relay, fault: {kind: reuse_call_id, id: stale_id_x}}
- when: {call: 7}
  reply: {kind: relay, fault: {kind: duplicate_frames}}
"#;

/// The upstream: a text answer, and a tool call on its calls 3 to 6.
const VALUE_UPSTREAM: &str = r#"
- when: {call: {from: 3, to: 6}}
  reply: {kind: tool_call, calls: [{tool: probe_tool_x, args: {q: 1}}]}
- reply: {kind: text, text: "abcdefghijklmnopqrstuvwxyz0123456789", chunk_chars: 6}
"#;

/// `(length finish, content-filter finish)` as each wire's stream spells them.
fn finishes(wire: &str) -> (&'static str, &'static str) {
    match wire {
        "openai-chat" => (
            r#""finish_reason":"length""#,
            r#""finish_reason":"content_filter""#,
        ),
        "openai-responses" => (
            r#""reason":"max_output_tokens""#,
            r#""reason":"content_filter""#,
        ),
        "anthropic" => (
            r#""stop_reason":"max_tokens""#,
            r#""stop_reason":"refusal""#,
        ),
        _ => (
            r#""finishReason":"MAX_TOKENS""#,
            r#""finishReason":"SAFETY""#,
        ),
    }
}

/// Value faults on a relayed answer: cut for length (the first half of its
/// text, the wire's max-tokens finish), emptied, replaced by a refusal (the
/// content-filter finish), its tool calls dropped, its arguments under a
/// wrong key, its call ids a stale one, its frames sent twice; on every
/// wire.
#[test]
fn value_faults_change_a_relayed_answer_on_every_wire() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let proxy_script = write(dir.path(), "proxy.yaml", VALUE_SCRIPT);
    let up_script = write(dir.path(), "up.yaml", VALUE_UPSTREAM);
    for case in &CASES {
        let w = case.wire;
        let up = Serve::start(&["--quiet", "--wire", w, "--script", &up_script], &[]);
        let proxy = Serve::start(
            &[
                "--quiet",
                "--wire",
                w,
                "--script",
                &proxy_script,
                "--upstream",
                &up.url,
            ],
            &[],
        );
        let url = format!("{}{}", proxy.url, case.path);
        let (length, refused) = finishes(w);
        let body = |r: &Got| String::from_utf8_lossy(&r.data).replace(": ", ":");
        rt.block_on(async {
            let t = Duration::from_secs(20);
            let cut = body(&call(&client, &url, case.body, t).await);
            assert!(
                cut.contains("abcdef") && cut.contains("mnopqr"),
                "{w}: {cut}"
            );
            assert!(
                !cut.contains("stuvwx") && !cut.contains("yz0123"),
                "{w}: {cut}"
            );
            assert!(cut.contains(length), "{w}: {cut}");
            let empty = body(&call(&client, &url, case.body, t).await);
            assert!(!empty.contains("abcdef"), "{w}: {empty}");
            let refusal = body(&call(&client, &url, case.body, t).await);
            assert!(
                refusal.contains("I can't help with that request."),
                "{w}: {refusal}"
            );
            assert!(
                !refusal.contains("abcdef") && refusal.contains(refused),
                "{w}: {refusal}"
            );
            let dropped = body(&call(&client, &url, case.body, t).await);
            assert!(!dropped.contains("probe_tool_x"), "{w}: {dropped}");
            let wrong = body(&call(&client, &url, case.body, t).await);
            assert!(wrong.contains("probe_tool_x"), "{w}: {wrong}");
            assert!(wrong.contains("wrong_q"), "{w}: {wrong}");
            let stale = body(&call(&client, &url, case.body, t).await);
            assert!(stale.contains("stale_id_x"), "{w}: {stale}");
            // No rule: the same upstream answer relayed, its tool call in it.
            let kept = body(&call(&client, &url, case.body, t).await);
            assert!(kept.contains("probe_tool_x"), "{w}: {kept}");
            assert!(!kept.contains("wrong_q") && !kept.contains("stale_id_x"));
            // Each text frame twice: more copies of a chunk than the same
            // text answer relayed as it is (call 8).
            let twice = body(&call(&client, &url, case.body, t).await);
            let once = body(&call(&client, &url, case.body, t).await);
            let n = |b: &str| b.matches("ghijkl").count();
            assert!(
                n(&once) >= 1 && n(&twice) > n(&once),
                "{w}: {twice} / {once}"
            );
        });
        drop(proxy);
        let summary = up.stop();
        assert!(
            summary.contains("requests: 9 (main 9,"),
            "{w}: upstream saw {summary}"
        );
    }
}

/// A reply that is not a stream: relayed whole; cut = its last chunk halved
/// and the body cut; answer_then_hang = the whole body, then no end.
#[test]
fn a_non_streaming_reply_is_relayed_and_faulted() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let answer = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}"#;
    let up_script = serde_json::json!([{"reply": {"kind": "raw", "body": answer}}]);
    let up_script = write(dir.path(), "up.json", &up_script.to_string());
    let up = Serve::start(&["--quiet", "--script", &up_script], &[]);
    let script = write(
        dir.path(),
        "p.yaml",
        "- when: {call: 1}\n  reply: {kind: relay, fault: {kind: cut_before_terminal}}\n\
         - when: {call: 2}\n  reply: {kind: relay, fault: {kind: answer_then_hang}}\n",
    );
    let proxy = Serve::start(
        &["--quiet", "--script", &script, "--upstream", &up.url],
        &[],
    );
    let url = format!("{}/chat/completions", proxy.url);
    let body = CASES[0].body.replace("\"stream\":true", "\"stream\":false");
    rt.block_on(async {
        let long = Duration::from_secs(20);
        let r = call(&client, &url, &body, long).await;
        assert_eq!((r.status, r.ended), (200, Some(true)));
        assert_eq!(String::from_utf8_lossy(&r.data), answer);
        let r = call(&client, &url, &body, long).await;
        assert_eq!(r.ended, Some(false), "the body must be cut");
        assert!(!r.data.is_empty() && r.data.len() < answer.len());
        assert!(answer.as_bytes().starts_with(&r.data));
        let r = call(&client, &url, &body, Duration::from_millis(400)).await;
        assert_eq!(String::from_utf8_lossy(&r.data), answer);
        assert_eq!(r.ended, None, "answer_then_hang must not end");
    });
    drop(proxy);
    assert!(up.stop().contains("main 3,"));
}

/// A one-connection-at-a-time HTTP upstream that keeps each request head.
fn capture_upstream() -> (String, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = Vec::new();
            let mut byte = [0u8; 1];
            while !buf.ends_with(b"\r\n\r\n") && buf.len() < 65536 {
                if conn.read(&mut byte).unwrap_or(0) == 0 {
                    break;
                }
                buf.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&buf).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            let _ = conn.read_exact(&mut body);
            let reply = "{}";
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
            if tx.send(String::from_utf8_lossy(&buf).to_string()).is_err() {
                return;
            }
        }
    });
    (format!("http://{addr}"), rx)
}

#[test]
fn the_upstream_key_goes_only_in_the_wires_auth_header() {
    const SECRET: &str = "sk-upstream-5ecret-proxy-test";
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    for (case, header) in CASES.iter().zip([
        format!("authorization: Bearer {SECRET}"),
        format!("authorization: Bearer {SECRET}"),
        format!("x-api-key: {SECRET}"),
        format!("x-goog-api-key: {SECRET}"),
    ]) {
        let (base, heads) = capture_upstream();
        let base = match case.wire {
            "openai-chat" | "openai-responses" => format!("{base}/v1"),
            _ => base,
        };
        let proxy = Serve::start(
            &[
                "--quiet",
                "--wire",
                case.wire,
                "--upstream",
                &base,
                "--upstream-key-env",
                "CHAOS_PROXY_TEST_KEY",
            ],
            &[("CHAOS_PROXY_TEST_KEY", SECRET)],
        );
        let url = format!("{}{}", proxy.url, case.path);
        // The agent sends its own key in every header a wire knows.
        rt.block_on(async {
            let r = client
                .post(&url)
                .header("content-type", "application/json")
                .header("authorization", "Bearer agent-own-key")
                .header("x-api-key", "agent-own-key")
                .header("x-goog-api-key", "agent-own-key")
                .body(case.body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.text().await.unwrap(), "{}");
        });
        let head = heads.recv_timeout(Duration::from_secs(20)).unwrap();
        let lower = head.to_lowercase();
        assert!(
            head.lines().any(|l| l.eq_ignore_ascii_case(&header)),
            "{}: {head}",
            case.wire
        );
        assert_eq!(head.matches(SECRET).count(), 1, "{}: {head}", case.wire);
        assert!(!lower.contains("agent-own-key"), "{}: {head}", case.wire);
        let path = case.path.split('?').next().unwrap();
        assert!(head.starts_with("POST /"), "{head}");
        assert!(head.lines().next().unwrap().contains(path), "{head}");
    }
}

/// Every file under `dir`, read as text.
fn all_text(dir: &std::path::Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            all_text(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push_str(&String::from_utf8_lossy(&b));
        }
    }
}

#[test]
fn a_proxied_scenario_keeps_the_key_out_of_its_report_and_artifacts() {
    const SECRET: &str = "sk-upstream-5ecret-in-a-run";
    let up = Serve::start(&["--quiet"], &[]);
    let mark = new_mark("proxy-key");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let art = dir.path().join("art");
    let out = command(
        &mark,
        &[
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--upstream",
            &up.url,
            "--upstream-key-env",
            "CHAOS_PROXY_TEST_KEY",
            "--pass-env",
            "CHAOS_PROXY_TEST_KEY",
            "--json",
            json.to_str().unwrap(),
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
        ],
    )
    .env("CHAOS_PROXY_TEST_KEY", SECRET)
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let summary = up.stop();
    // The turn's plain answer and the probe came from the upstream.
    assert!(summary.contains("probe 1"), "{summary}");
    let mut text = String::new();
    all_text(dir.path(), &mut text);
    assert!(
        text.contains("\"relays\""),
        "the observation records the relays"
    );
    assert!(!text.contains(SECRET), "the upstream key was recorded");
    assert!(!stdout.contains(SECRET) && !String::from_utf8_lossy(&out.stderr).contains(SECRET));
    kill_marked(&mark);
}

#[test]
fn an_unreachable_upstream_is_an_error_of_the_scenario() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mark = new_mark("proxy-down");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--upstream",
            &format!("http://127.0.0.1:{port}/v1"),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = read_json(&json);
    let s = scenario(&report, "tool_args_garbage");
    assert_eq!(s["verdict"], "error", "{s}");
    assert!(stdout.contains("unreachable"), "{stdout}");

    // An upstream that answers 503 on its own to a relayed main call is an
    // ERROR too, with its status.
    let script = write(
        dir.path(),
        "503.yaml",
        "- reply: {kind: error, status: 503}\n",
    );
    let up = Serve::start(&["--quiet", "--script", &script], &[]);
    let json = dir.path().join("r2.json");
    let out = chaosrun(
        &mark,
        &[
            "tests/fixtures/proxy_relay_faults.yaml",
            "--only",
            "relay_healthy",
            "--upstream",
            &up.url,
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let report = read_json(&json);
    assert_eq!(scenario(&report, "relay_healthy")["verdict"], "error");
    assert!(stdout.contains("answered 503"), "{stdout}");
    kill_marked(&mark);
}

#[test]
fn relay_rules_without_an_upstream_and_an_unpassed_key_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let table = write(
        dir.path(),
        "t.yaml",
        "scenarios:\n  - id: r\n    responder: [{reply: {kind: relay}}]\n    expect: ended\n",
    );
    let mark = new_mark("proxy-usage");
    let out = chaosrun(&mark, &[&table]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs an upstream"), "{err}");
    let out = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--upstream-key-env",
            "PATH",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--pass-env PATH"), "{err}");
}

/// Each scenario's verdict, by id.
fn verdicts(report: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn table_run(mark: &str, json: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["scenarios.yaml", "--json", json.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = chaosrun(mark, &args);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    read_json(json)
}

#[test]
fn the_seed_table_through_a_proxy_gives_the_direct_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let mark = new_mark("proxy-table");
    // The whole table on a healthy agent, and a few rows on one with a bug
    // that only the (relayed) probe shows, so the verdicts compared include
    // a FAIL.
    let bug: &[&str] = &[
        "--agent-arg=--bug=wedged_after_interrupt",
        "--only",
        "interrupt_provider_hang",
        "--only",
        "tool_args_garbage",
    ];
    let table_rows = std::fs::read_to_string(repo().join("scenarios.yaml"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("  - id: "))
        .count();
    for (name, agent_args, rows) in [("healthy", &[][..], table_rows), ("wedged", bug, 2)] {
        let direct = table_run(
            &mark,
            &dir.path().join(format!("{name}-direct.json")),
            agent_args,
        );
        let up = Serve::start(&["--quiet"], &[]);
        let mut proxied_args = agent_args.to_vec();
        proxied_args.extend(["--upstream", up.url.as_str()]);
        let proxied = table_run(
            &mark,
            &dir.path().join(format!("{name}-proxied.json")),
            &proxied_args,
        );
        let summary = up.stop();
        let (d, mut p) = (verdicts(&direct), verdicts(&proxied));
        assert_eq!(d.len(), rows, "{name}");
        // A row whose verdicts differ is run once more both ways (a timing
        // row may flake on a loaded machine); they must then agree.
        let differ: Vec<String> = d
            .iter()
            .filter(|(id, v)| p.get(*id) != Some(v))
            .map(|(id, _)| id.clone())
            .collect();
        let mut d = d;
        if !differ.is_empty() {
            eprintln!("{name}: re-running {differ:?} (verdicts differed)");
            let mut only: Vec<&str> = agent_args
                .iter()
                .copied()
                .filter(|a| a.starts_with("--agent-arg"))
                .collect();
            for id in &differ {
                only.extend(["--only", id.as_str()]);
            }
            let again = table_run(
                &mark,
                &dir.path().join(format!("{name}-direct2.json")),
                &only,
            );
            let up2 = Serve::start(&["--quiet"], &[]);
            let mut proxied_only = only.clone();
            proxied_only.extend(["--upstream", up2.url.as_str()]);
            let again_p = table_run(
                &mark,
                &dir.path().join(format!("{name}-proxied2.json")),
                &proxied_only,
            );
            drop(up2);
            for (id, v) in verdicts(&again) {
                assert_eq!(
                    verdicts(&again_p).get(&id),
                    Some(&v),
                    "{name}: {id} differs twice: direct {:?}, proxied {:?}",
                    violations(&again, &id),
                    violations(&again_p, &id)
                );
                d.insert(id.clone(), v.clone());
                p.insert(id, v);
            }
        }
        assert_eq!(d, p, "{name}: direct vs proxied verdicts");
        if name == "healthy" {
            assert!(d.values().all(|v| v == "pass"), "{d:?}");
        } else {
            assert_eq!(d["interrupt_provider_hang"], "fail", "{name}: {d:?}");
            assert_eq!(d["tool_args_garbage"], "pass", "{name}: {d:?}");
        }
        // The relayed traffic is what was judged (see relayed_probes_agree).
        if let Err(e) = relayed_probes_agree(&proxied, &summary) {
            panic!("{name}: {e}");
        }
    }
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "left behind: {survivors:?}");
}

/// The relay faults as table rows (`tests/fixtures/proxy_relay_faults.yaml`):
/// the healthy reference agent passes them on every wire, and the bug
/// `no_stale_timeout` fails exactly the stalled real stream. The runs go at
/// once, each with its own `chaosrun serve` upstream.
#[test]
fn relay_fault_rows_pass_on_every_wire_and_catch_a_missing_stale_timeout() {
    let table = "tests/fixtures/proxy_relay_faults.yaml";
    let runs: Vec<(&str, Vec<&str>)> = vec![
        ("openai-chat", vec![]),
        ("openai-responses", vec![]),
        ("anthropic", vec![]),
        ("gemini", vec![]),
        (
            "openai-chat",
            vec![
                "--agent-arg=--bug=no_stale_timeout",
                "--only",
                "relay_stall_after_events_forever",
                "--only",
                "relay_healthy",
            ],
        ),
    ];
    let mark = new_mark("proxy-relay-rows");
    let dir = tempfile::tempdir().unwrap();
    let reports: Vec<serde_json::Value> = std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .enumerate()
            .map(|(i, (wire, extra))| {
                let (mark, dir) = (&mark, dir.path());
                s.spawn(move || {
                    let up = Serve::start(&["--quiet", "--wire", wire], &[]);
                    let json = dir.join(format!("{i}.json"));
                    let mut args = vec![table, "--wire", wire, "--upstream", up.url.as_str()];
                    args.extend(["--json", json.to_str().unwrap()]);
                    args.extend(extra.iter().copied());
                    let out = chaosrun(mark, &args);
                    assert!(
                        matches!(out.status.code(), Some(0 | 1)),
                        "{wire}: {:?} {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                    read_json(&json)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((wire, extra), report) in runs.iter().zip(&reports) {
        let v = verdicts(report);
        if extra.is_empty() {
            assert_eq!(v.len(), 6, "{wire}");
            for (id, verdict) in &v {
                assert_eq!(verdict, "pass", "{wire} {id}: {:?}", violations(report, id));
            }
        } else {
            assert_eq!(
                v["relay_healthy"],
                "pass",
                "{:?}",
                violations(report, "relay_healthy")
            );
            assert_eq!(v["relay_stall_after_events_forever"], "fail");
            assert!(
                failed_invariants(report, "relay_stall_after_events_forever")
                    .iter()
                    .any(|i| i == "termination"),
                "{:?}",
                violations(report, "relay_stall_after_events_forever")
            );
        }
    }
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "left behind: {survivors:?}");
}

/// `explore` in proxy mode: the trials' scripted calls are served locally, the
/// probe turns (which no trial scripts) go to the upstream, and a healthy
/// agent still yields nothing.
#[test]
fn explore_runs_in_proxy_mode() {
    let upstream = Serve::start(&[], &[]);
    let mark = new_mark("explore-proxy");
    let run = chaosrun(
        &mark,
        &[
            "explore",
            "--upstream",
            &upstream.url,
            "--seed",
            "1",
            "--trials",
            "3",
            "--budget",
            "3m",
            "--jobs",
            "1",
        ],
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains(" 0 failure(s)"), "{stderr}");
    let summary = upstream.stop();
    let probes = upstream_count(&summary, "probe")
        .unwrap_or_else(|| panic!("no probe count in {summary:?}"));
    assert!(probes >= 3, "each trial's probe went upstream: {summary}");
    assert!(
        summary.contains("main 0"),
        "trials' own calls stay local: {summary}"
    );
}
