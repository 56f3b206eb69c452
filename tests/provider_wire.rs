//! The fault provider on the wire: a real HTTP client against a provider
//! started in-process, one test (at least) per reply kind, plus classification,
//! rule selection, `wait_for`, routing and recording bounds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chaosrun::message::CONTENT_KEEP_CHARS;
use chaosrun::provider::{CallKind, Provider, ProviderConfig, Rule, ToolMapping};
use futures_util::StreamExt;
use serde_json::{json, Value};

const NONCE: &str = "N0NCE";

fn rules(yaml: &str) -> Vec<Rule> {
    serde_yaml::from_str(yaml).expect("test rules parse")
}

async fn start(yaml: &str) -> Provider {
    start_with(ProviderConfig {
        rules: rules(yaml),
        nonce: NONCE.into(),
        ..ProviderConfig::default()
    })
    .await
}

async fn start_with(config: ProviderConfig) -> Provider {
    Provider::start(config).await.expect("provider starts")
}

/// A chat body: `tools` makes it a main call, `last_tool` ends it with a tool result.
fn chat(tools: bool, stream: bool, user: &str, last_tool: bool) -> Value {
    let mut messages = vec![json!({"role": "user", "content": user})];
    if last_tool {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": "c0", "content": "done"}));
    }
    let mut body = json!({"model": "test-model", "stream": stream, "messages": messages});
    if tools {
        body["tools"] =
            json!([{"type": "function", "function": {"name": "terminal", "parameters": {}}}]);
    }
    body
}

async fn post(p: &Provider, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", p.base_url()))
        .json(body)
        .send()
        .await
        .expect("request sent")
}

/// The `data:` payloads of an SSE body, in order.
fn data_lines(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not an SSE data event: {e:?}"))
                .to_string()
        })
        .collect()
}

/// Parse the chunks (everything before `[DONE]`), asserting `[DONE]` is last.
fn chunks(body: &str) -> Vec<Value> {
    let lines = data_lines(body);
    assert_eq!(lines.last().map(String::as_str), Some("[DONE]"), "{body}");
    lines[..lines.len() - 1]
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("chunk is JSON");
            assert_eq!(v["object"], "chat.completion.chunk");
            assert!(v["id"].is_string() && v["created"].is_u64() && v["model"].is_string());
            assert_eq!(v["choices"][0]["index"], 0);
            v
        })
        .collect()
}

fn text_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

async fn text_answer(resp: reqwest::Response) -> String {
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Reassemble streamed tool calls: index → (id, name, arguments).
fn tool_calls_of(chunks: &[Value]) -> BTreeMap<u64, (String, String, String)> {
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for c in chunks {
        let Some(deltas) = c["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        for d in deltas {
            let index = d["index"].as_u64().unwrap();
            let entry = calls.entry(index).or_default();
            if let Some(id) = d["id"].as_str() {
                assert!(entry.0.is_empty(), "id sent twice for call {index}");
                assert_eq!(d["type"], "function");
                entry.0 = id.to_string();
                entry.1 = d["function"]["name"].as_str().unwrap().to_string();
            }
            entry.2 += d["function"]["arguments"].as_str().unwrap_or("");
        }
    }
    calls
}

#[tokio::test]
async fn text_streams_openai_chunks_with_usage_and_done_last() {
    let p = start("- reply: {kind: text, text: 'hello {{nonce}}, all is well', chunk_chars: 3, reasoning: 'let me think'}\n").await;
    let resp = post(&p, &chat(true, true, "hi", false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let body = resp.text().await.unwrap();
    let chunks = chunks(&body);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(text_of(&chunks), format!("hello {NONCE}, all is well"));
    // 23 chars in 3-char pieces: 8 content chunks (plus the role chunk's "").
    let pieces = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        })
        .count();
    assert_eq!(pieces, 8);
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "let me think");
    let finish = chunks.last().unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert!(finish["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));
    p.shutdown().await;
}

#[tokio::test]
async fn text_without_stream_is_one_completion() {
    let p = start("- reply: {kind: text, text: 'answer {{nonce}}'}\n").await;
    let resp = post(&p, &chat(true, false, "hi", false)).await;
    assert_eq!(resp.headers()["content-type"], "application/json");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        format!("answer {NONCE}")
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    p.shutdown().await;
}

#[tokio::test]
async fn tool_call_batch_of_8_reassembles_with_unique_ids() {
    let p = start(
        "- reply: {kind: tool_call, repeat: 8, calls: [{tool: terminal, args: {command: 'echo T{{i}}-{{nonce}}'}}]}\n",
    )
    .await;
    let body = post(&p, &chat(true, true, "go", false))
        .await
        .text()
        .await
        .unwrap();
    let chunks = chunks(&body);
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    assert!(chunks.last().unwrap()["usage"].is_object());
    let calls = tool_calls_of(&chunks);
    assert_eq!(calls.len(), 8);
    let ids: std::collections::BTreeSet<&String> = calls.values().map(|c| &c.0).collect();
    assert_eq!(ids.len(), 8, "ids unique: {ids:?}");
    for (i, (_, name, args)) in &calls {
        assert_eq!(name, "terminal");
        let args: Value = serde_json::from_str(args).expect("reassembled args are JSON");
        assert_eq!(args, json!({"command": format!("echo T{i}-{NONCE}")}));
    }
    // Arguments were split over several deltas, not sent whole.
    let arg_deltas = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"].is_null())
        .filter(|c| c["choices"][0]["delta"]["tool_calls"].is_array())
        .count();
    assert!(arg_deltas >= 8, "argument pieces: {arg_deltas}");

    // A second reply gets fresh ids.
    let body = post(&p, &chat(true, true, "go", false))
        .await
        .text()
        .await
        .unwrap();
    let again = tool_calls_of(&chunks_of(&body));
    assert!(again.values().all(|c| !ids.contains(&c.0)));
    let rec = p.shutdown().await;
    assert_eq!(rec.issued_tool_calls.len(), 16);
    assert_eq!(rec.issued_tool_calls[3].tool, "terminal");
    assert_eq!(
        rec.issued_tool_calls[3].args,
        json!({"command": format!("echo T3-{NONCE}")})
    );
    assert_eq!(rec.issued_tool_calls[8].main_index, 1);
}

fn chunks_of(body: &str) -> Vec<Value> {
    chunks(body)
}

#[tokio::test]
async fn tool_mapping_renames_name_and_argument_keys() {
    let mut tools = BTreeMap::new();
    tools.insert(
        "shell".to_string(),
        ToolMapping {
            name: "terminal".into(),
            args: [("cmd".to_string(), "command".into())].into(),
            fixed: Default::default(),
        },
    );
    let p = start_with(ProviderConfig {
        rules: rules(
            "- reply: {kind: tool_call, calls: [{tool: shell, args: {cmd: 'echo {{nonce}}', background: true}}, {tool: no_such_tool, args: {cmd: x}}]}\n",
        ),
        nonce: NONCE.into(),
        tools,
        ..ProviderConfig::default()
    })
    .await;
    let v: Value = post(&p, &chat(true, false, "go", false))
        .await
        .json()
        .await
        .unwrap();
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["function"]["name"], "terminal");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        json!({"command": format!("echo {NONCE}"), "background": true})
    );
    assert_eq!(calls[1]["function"]["name"], "no_such_tool");
    let args: Value =
        serde_json::from_str(calls[1]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"cmd": "x"}));
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let rec = p.shutdown().await;
    assert_eq!(rec.issued_tool_calls[0].tool, "shell");
    assert_eq!(
        rec.issued_tool_calls[0].args,
        json!({"cmd": format!("echo {NONCE}"), "background": true})
    );
    assert_eq!(
        rec.issued_tool_calls[0].id,
        calls[0]["id"].as_str().unwrap()
    );
}

#[tokio::test]
async fn raw_string_tool_args_are_sent_verbatim() {
    let p = start("- reply: {kind: tool_call, calls: [{tool: terminal, args: '{\"command\": \"echo {{nonce}}'}]}\n").await;
    let body = post(&p, &chat(true, true, "go", false))
        .await
        .text()
        .await
        .unwrap();
    let calls = tool_calls_of(&chunks(&body));
    assert_eq!(calls[&0].2, format!("{{\"command\": \"echo {NONCE}"));
    p.shutdown().await;
}

#[tokio::test]
async fn error_has_status_openai_body_and_retry_after() {
    let p = start(
        "- reply: {kind: error, status: 429, retry_after: 1, message: 'slow down {{nonce}}'}\n",
    )
    .await;
    let resp = post(&p, &chat(true, true, "hi", false)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["message"], format!("slow down {NONCE}"));
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["code"].is_string());

    let p2 = start("- reply: {kind: error, status: 500}\n").await;
    let resp = post(&p2, &chat(true, false, "hi", false)).await;
    assert_eq!(resp.status(), 500);
    assert!(resp.headers().get("retry-after").is_none());
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "server_error");
    p.shutdown().await;
    p2.shutdown().await;
}

#[tokio::test]
async fn hang_sends_nothing_and_shutdown_does_not_wait_for_it() {
    let p = start("- reply: {kind: hang, seconds: 3600}\n").await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", p.base_url());
    let body = chat(true, true, "hi", false);
    // No status line within 500 ms: `send` resolves only once headers arrive.
    let first = tokio::time::timeout(
        Duration::from_millis(500),
        client.post(&url).json(&body).send(),
    )
    .await;
    assert!(first.is_err(), "hang answered: {first:?}");

    // A second hung request, pending while we shut down.
    let mut calls = p.main_calls();
    let pending = tokio::spawn({
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        async move { client.post(&url).json(&body).send().await }
    });
    tokio::time::timeout(Duration::from_secs(5), calls.wait_for(|n| *n >= 2))
        .await
        .expect("second hang arrives")
        .unwrap();
    assert!(!pending.is_finished());

    let t = Instant::now();
    let rec = p.shutdown().await;
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        t.elapsed()
    );
    // The hung request ends with the connection dropped, never a response.
    let outcome = tokio::time::timeout(Duration::from_secs(2), pending)
        .await
        .expect("hung client released")
        .unwrap();
    assert!(outcome.is_err(), "hang produced a response: {outcome:?}");
    assert_eq!(rec.main_calls, 2);
    assert!(rec.requests.iter().all(|r| r.reply == "hang"));
}

#[tokio::test]
async fn hang_drops_the_socket_after_its_seconds() {
    let p = start("- reply: {kind: hang, seconds: 0.2}\n").await;
    let client = reqwest::Client::new();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        client
            .post(format!("{}/chat/completions", p.base_url()))
            .json(&chat(true, false, "hi", false))
            .send(),
    )
    .await
    .expect("socket dropped well before 5 s");
    assert!(r.is_err(), "expected a dropped connection, got {r:?}");
    p.shutdown().await;
}

#[tokio::test]
async fn stall_sends_a_first_chunk_then_silence() {
    let p = start("- reply: {kind: stall_mid_stream, chars: 'Thinking {{nonce}}'}\n").await;
    let resp = post(&p, &chat(true, true, "hi", false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut stream = resp.bytes_stream();
    let mut got = String::new();
    while !got.contains(&format!("Thinking {NONCE}")) {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("first chunks arrive")
            .expect("stream open")
            .expect("no error");
        got.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(got.contains("\"role\":\"assistant\""));
    let more = tokio::time::timeout(Duration::from_millis(700), stream.next()).await;
    assert!(more.is_err(), "stall sent more: {more:?}");
    assert!(!got.contains("[DONE]") && !got.contains("finish_reason\":\""));

    // Shutdown releases the stalled stream promptly.
    let t = Instant::now();
    p.shutdown().await;
    assert!(t.elapsed() < Duration::from_secs(2));
    let end = tokio::time::timeout(Duration::from_secs(2), stream.next())
        .await
        .expect("stream ends after shutdown");
    assert!(!matches!(end, Some(Ok(_))), "data after shutdown: {end:?}");
}

#[tokio::test]
async fn drop_mid_stream_cuts_the_body_without_finish_or_done() {
    let p = start("- reply: {kind: drop_mid_stream, chars: 'Partial {{nonce}}'}\n").await;
    let resp = post(&p, &chat(true, true, "hi", false)).await;
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut got = String::new();
    let mut errored = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("drop ends the body promptly")
        {
            Some(Ok(b)) => got.push_str(std::str::from_utf8(&b).unwrap()),
            Some(Err(_)) => {
                errored = true;
                break;
            }
            None => break,
        }
    }
    assert!(got.contains(&format!("Partial {NONCE}")), "{got}");
    assert!(!got.contains("[DONE]"), "{got}");
    assert!(!got.contains("finish_reason\":\""), "{got}");
    assert!(errored, "the chunked body must be cut, not terminated");
    p.shutdown().await;
}

#[tokio::test]
async fn silent_after_headers_sends_headers_and_no_byte() {
    let p = start("- reply: {kind: silent_after_headers}\n").await;
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        post(&p, &chat(true, true, "hi", false)),
    )
    .await
    .expect("headers arrive");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut stream = resp.bytes_stream();
    let first = tokio::time::timeout(Duration::from_millis(700), stream.next()).await;
    assert!(first.is_err(), "body bytes arrived: {first:?}");
    let t = Instant::now();
    p.shutdown().await;
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn raw_sends_the_body_verbatim() {
    let p = start("- reply: {kind: raw, status: 200, body: '{not json at all {{nonce}}'}\n").await;
    let resp = post(&p, &chat(true, true, "hi", false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(
        resp.text().await.unwrap(),
        format!("{{not json at all {NONCE}")
    );

    let p2 = start("- reply: {kind: raw, status: 502, content_type: text/html, body: '<html><body>Bad gateway</body></html>'}\n").await;
    let resp = post(&p2, &chat(true, false, "hi", false)).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(resp.headers()["content-type"], "text/html");
    assert_eq!(
        resp.text().await.unwrap(),
        "<html><body>Bad gateway</body></html>"
    );
    p.shutdown().await;
    p2.shutdown().await;
}

#[tokio::test]
async fn probe_is_answered_alive_and_not_counted_as_main() {
    let p = start("- reply: {kind: error, status: 500}\n").await;
    let probe = format!("are you there? [[probe:{NONCE}]]");
    assert_eq!(
        text_answer(post(&p, &chat(true, false, &probe, false)).await).await,
        format!("alive {NONCE}")
    );
    let body = post(&p, &chat(true, true, &probe, true))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&chunks(&body)), format!("alive {NONCE}"));
    assert_eq!(*p.main_calls().borrow(), 0);
    // The marker must be in the latest user message, with this provider's nonce.
    let wrong = post(&p, &chat(true, false, "[[probe:OTHER]]", false)).await;
    assert_eq!(wrong.status(), 500);
    assert_eq!(*p.main_calls().borrow(), 1);
    let rec = p.shutdown().await;
    assert_eq!((rec.probe_calls, rec.main_calls, rec.aux_calls), (2, 1, 0));
    assert_eq!(rec.requests[0].kind, CallKind::Probe);
    assert_eq!(rec.requests[0].main_index, None);
    assert_eq!(rec.requests[2].kind, CallKind::Main);
}

#[tokio::test]
async fn aux_gets_ok_and_does_not_consume_rules() {
    let p = start("- {when: {call: 0}, reply: {kind: text, text: first}}\n- reply: {kind: text, text: later}\n").await;
    assert_eq!(
        text_answer(post(&p, &chat(false, false, "title this", false)).await).await,
        "ok"
    );
    let body = post(&p, &chat(false, true, "summarise", false))
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(text_of(&chunks(&body)), "ok");
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "hi", false)).await).await,
        "first"
    );
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "hi", false)).await).await,
        "later"
    );
    let rec = p.shutdown().await;
    assert_eq!((rec.aux_calls, rec.main_calls), (2, 2));
    assert_eq!(rec.requests[1].kind, CallKind::Aux);
    assert!(rec.requests[1].stream);
}

/// `main_without_tools` (a profile's `tool_calls: false`, aider): a call
/// that offers no tools is a main call and meets the rules; a probe is
/// still a probe.
#[tokio::test]
async fn without_tools_every_call_is_main_when_told() {
    let p = start_with(ProviderConfig {
        rules: rules("- {when: {call: 0}, reply: {kind: text, text: first}}\n- reply: {kind: text, text: later}\n"),
        nonce: NONCE.into(),
        main_without_tools: true,
        ..ProviderConfig::default()
    })
    .await;
    assert_eq!(
        text_answer(post(&p, &chat(false, false, "hi", false)).await).await,
        "first"
    );
    assert_eq!(
        text_answer(post(&p, &chat(false, false, "[[probe:N0NCE]]", false)).await).await,
        "alive N0NCE"
    );
    assert_eq!(
        text_answer(post(&p, &chat(false, false, "again", false)).await).await,
        "later"
    );
    let rec = p.shutdown().await;
    assert_eq!((rec.aux_calls, rec.main_calls), (0, 2));
    assert_eq!(rec.requests[0].kind, CallKind::Main);
    assert_eq!(rec.requests[1].kind, CallKind::Probe);
}

/// `aux_markers` (a profile's `aux_calls`, Qwen Code's follow-up
/// suggestion): a call that offers tools but whose latest user message holds
/// a marker is auxiliary, answered `ok` outside the rules; one whose earlier
/// message holds it is still a main call.
#[tokio::test]
async fn a_marked_call_with_tools_is_auxiliary() {
    let p = start_with(ProviderConfig {
        rules: rules("- reply: {kind: text, text: scripted}\n"),
        nonce: NONCE.into(),
        aux_markers: vec!["[SUGGESTION MODE".into()],
        ..ProviderConfig::default()
    })
    .await;
    let marked = "[SUGGESTION MODE: Suggest what the user might naturally type next.]";
    assert_eq!(
        text_answer(post(&p, &chat(true, false, marked, false)).await).await,
        "ok"
    );
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "do the task", false)).await).await,
        "scripted"
    );
    let rec = p.shutdown().await;
    assert_eq!((rec.aux_calls, rec.main_calls), (1, 1));
    assert_eq!(rec.requests[0].kind, CallKind::Aux);
    assert_eq!(rec.requests[1].kind, CallKind::Main);
}

#[tokio::test]
async fn main_index_and_rule_selection() {
    let p = start(
        "- {when: {call: 0}, reply: {kind: text, text: zero}}\n\
         - {when: {after_tool: true}, reply: {kind: text, text: 'after tool'}}\n\
         - {when: {call: {from: 2, to: 3}}, reply: {kind: text, text: two-three}}\n\
         - {reply: {kind: error, status: 503}}\n",
    )
    .await;
    let mut calls = p.main_calls();
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "a", true)).await).await,
        "zero"
    );
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "a", true)).await).await,
        "after tool"
    );
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "a", false)).await).await,
        "two-three"
    );
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "a", false)).await).await,
        "two-three"
    );
    assert_eq!(post(&p, &chat(true, false, "a", false)).await.status(), 503);
    assert_eq!(*calls.borrow_and_update(), 5);
    let rec = p.shutdown().await;
    let indices: Vec<Option<u64>> = rec.requests.iter().map(|r| r.main_index).collect();
    assert_eq!(indices, [Some(0), Some(1), Some(2), Some(3), Some(4)]);
    let replies: Vec<&str> = rec.requests.iter().map(|r| r.reply.as_str()).collect();
    assert_eq!(replies, ["text", "text", "text", "text", "error"]);
    assert_eq!(rec.requests[0].model.as_deref(), Some("test-model"));
}

#[tokio::test]
async fn wait_for_holds_the_reply_until_the_counter_reports_enough() {
    let procs = Arc::new(AtomicUsize::new(0));
    let needles = Arc::new(Mutex::new(Vec::<String>::new()));
    let (polled_tx, mut polled_rx) = tokio::sync::watch::channel(0usize);
    let counter = {
        let (procs, needles) = (procs.clone(), needles.clone());
        Arc::new(move |needle: &str| {
            needles.lock().unwrap().push(needle.to_string());
            polled_tx.send_modify(|n| *n += 1);
            procs.load(Ordering::SeqCst)
        })
    };
    let p = start_with(ProviderConfig {
        rules: rules("- {wait_for: {count: 2, cmdline: 'sleep 3600', timeout: 60}, reply: {kind: text, text: 'go {{nonce}}'}}\n"),
        nonce: NONCE.into(),
        process_counter: Some(counter),
        ..ProviderConfig::default()
    })
    .await;
    let url = format!("{}/chat/completions", p.base_url());
    let reply = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .json(&chat(true, false, "go", false))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    });
    // Two polls that saw too few processes: the reply must still be held.
    tokio::time::timeout(Duration::from_secs(5), polled_rx.wait_for(|n| *n >= 2))
        .await
        .expect("counter polled")
        .unwrap();
    procs.store(1, Ordering::SeqCst);
    let seen = *polled_rx.borrow_and_update();
    tokio::time::timeout(
        Duration::from_secs(5),
        polled_rx.wait_for(|n| *n >= seen + 2),
    )
    .await
    .expect("counter polled again")
    .unwrap();
    assert!(!reply.is_finished(), "replied before the counter reached 2");
    procs.store(2, Ordering::SeqCst);
    let v = tokio::time::timeout(Duration::from_secs(5), reply)
        .await
        .expect("reply released once the count is reached")
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], format!("go {NONCE}"));
    assert!(needles.lock().unwrap().iter().all(|n| n == "sleep 3600"));
    p.shutdown().await;
}

#[tokio::test]
async fn wait_for_ends_at_shutdown() {
    let p = start(
        "- {wait_for: {count: 1, cmdline: x, timeout: 3600}, reply: {kind: text, text: late}}\n",
    )
    .await;
    let mut calls = p.main_calls();
    let url = format!("{}/chat/completions", p.base_url());
    let pending = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .json(&chat(true, false, "go", false))
            .send()
            .await
    });
    calls.wait_for(|n| *n >= 1).await.unwrap();
    let t = Instant::now();
    p.shutdown().await;
    assert!(t.elapsed() < Duration::from_secs(2));
    tokio::time::timeout(Duration::from_secs(2), pending)
        .await
        .expect("held request released")
        .unwrap()
        .ok();
}

#[tokio::test]
async fn unknown_path_is_an_openai_404_and_bad_json_a_400() {
    let p = start("").await;
    let client = reqwest::Client::new();
    let resp = client
        .get(format!("{}/nope", p.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let v: Value = resp.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("/v1/nope"));
    assert!(v["error"]["type"].is_string() && v["error"]["code"].is_string());

    let resp = client
        .post(format!("{}/chat/completions", p.base_url()))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let rec = p.shutdown().await;
    let replies: Vec<&str> = rec.requests.iter().map(|r| r.reply.as_str()).collect();
    assert_eq!(replies, ["not_found", "bad_request"]);
    assert_eq!(rec.main_calls, 0);
}

#[tokio::test]
async fn paths_with_and_without_v1_and_models() {
    let p = start("- reply: {kind: text, text: plain}\n").await;
    let client = reqwest::Client::new();
    let root = format!("http://{}", p.addr());
    for path in ["/chat/completions", "/v1/chat/completions"] {
        let v: Value = client
            .post(format!("{root}{path}"))
            .json(&chat(true, false, "hi", false))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "plain", "{path}");
    }
    for path in ["/models", "/v1/models"] {
        let resp = client.get(format!("{root}{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["object"], "list");
    }
    let rec = p.shutdown().await;
    assert_eq!(rec.main_calls, 2);
    assert_eq!(rec.requests[0].path, "/chat/completions");
    assert_eq!(rec.requests[1].path, "/v1/chat/completions");
}

#[tokio::test]
async fn recording_bounds_a_3mb_tool_message() {
    let p = start("").await;
    let huge = "y".repeat(3_000_000);
    let body = json!({
        "model": "m",
        "tools": [{"type": "function", "function": {"name": "terminal"}}],
        "messages": [
            {"role": "user", "content": "run it"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": huge}]},
        ],
    });
    assert_eq!(text_answer(post(&p, &body).await).await, "ok");
    let rec = p.shutdown().await;
    let r = &rec.requests[0];
    assert!(r.size > 3_000_000);
    assert!(r.truncated);
    let tool = &r.messages[2];
    assert_eq!(tool.role, "tool");
    assert_eq!(tool.tool_call_id.as_deref(), Some("c1"));
    assert_eq!(tool.content.chars().count(), CONTENT_KEEP_CHARS);
    assert_eq!(tool.content_chars, 3_000_000);
    assert_eq!(r.messages[1].tool_calls[0].id, "c1");
    assert!(r
        .headers
        .iter()
        .any(|h| h.starts_with("content-type: application/json")));
}

#[tokio::test]
async fn counts_stay_exact_under_concurrency() {
    let p = start("- reply: {kind: error, status: 500}\n").await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", p.base_url());
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                for _ in 0..50 {
                    let body = chat(t % 2 == 0, false, "hi", false);
                    let resp = client.post(&url).json(&body).send().await.unwrap();
                    resp.bytes().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let rec = p.shutdown().await;
    assert_eq!((rec.main_calls, rec.aux_calls), (400, 400));
    assert_eq!(rec.requests.len(), 800);
    let mut idx: Vec<u64> = rec.requests.iter().filter_map(|r| r.main_index).collect();
    idx.sort();
    assert_eq!(idx, (0..400).collect::<Vec<_>>());
}

// ---- provider failure classes: backoff hints, streams that look alive,
// ---- context overflow

#[tokio::test]
async fn error_records_what_it_said_about_retrying() {
    let p = start(
        "- {when: {call: 0}, reply: {kind: error, status: 429, retry_after: 2}}\n\
         - {when: {call: 1}, reply: {kind: quota_exhausted}}\n\
         - {reply: {kind: error, status: 400}}\n",
    )
    .await;
    let first = post(&p, &chat(true, false, "hi", false)).await;
    assert_eq!(first.headers()["retry-after"], "2");
    let quota = post(&p, &chat(true, false, "hi", false)).await;
    assert_eq!(quota.status(), 429);
    let v: Value = quota.json().await.unwrap();
    assert_eq!(v["error"]["code"], "insufficient_quota");
    post(&p, &chat(true, false, "hi", false)).await;
    post(&p, &chat(false, false, "title please", false)).await;
    let rec = p.shutdown().await;
    let hints: Vec<_> = rec
        .requests
        .iter()
        .map(|r| r.error.map(|e| (e.status, e.retry_after, e.retryable)))
        .collect();
    assert_eq!(
        hints,
        vec![
            Some((429, Some(2), true)),
            Some((429, None, false)),
            Some((400, None, false)),
            None
        ]
    );
}

#[tokio::test]
async fn within_rule_is_an_episode_that_clears() {
    let p = start(
        "- {when: {within: 0.3}, reply: {kind: error, status: 503}}\n\
         - {reply: {kind: text, text: healthy}}\n",
    )
    .await;
    let started = Instant::now();
    let mut statuses = Vec::new();
    loop {
        let s = post(&p, &chat(true, false, "hi", false)).await.status();
        statuses.push(s.as_u16());
        if s == 200 || started.elapsed() > Duration::from_secs(10) {
            break;
        }
        // The episode is a span of time: poll it, a little apart.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(statuses.last(), Some(&200), "{statuses:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(statuses.len() >= 2 && statuses[..statuses.len() - 1].iter().all(|s| *s == 503));
    let rec = p.shutdown().await;
    assert_eq!(rec.rule_hits[1], 1);
}

#[tokio::test]
async fn context_window_refuses_big_main_calls_in_the_wire_shape() {
    let p = start_with(ProviderConfig {
        rules: rules("- reply: {kind: text, text: fits}\n"),
        nonce: NONCE.into(),
        context_window: Some(chaosrun::provider::ContextWindow::MaxRequestBytes(2_000)),
        ..ProviderConfig::default()
    })
    .await;
    let big = "x".repeat(3_000);
    let over = post(&p, &chat(true, false, &big, false)).await;
    assert_eq!(over.status(), 400);
    let v: Value = over.json().await.unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maximum context length is 500 tokens"));
    assert_eq!(
        text_answer(post(&p, &chat(true, false, "small", false)).await).await,
        "fits"
    );
    // The probe turn is exempt, so reusability can still be judged.
    let probe = format!("{big} [[probe:{NONCE}]]");
    assert_eq!(
        text_answer(post(&p, &chat(true, false, &probe, false)).await).await,
        format!("alive {NONCE}")
    );
    let rec = p.shutdown().await;
    assert_eq!(rec.main_calls, 2);
    assert_eq!(rec.requests[0].reply, "context_length_exceeded");
    assert_eq!(rec.requests[0].rule, None);
    assert!(!rec.requests[0].error.unwrap().retryable);
    assert_eq!(rec.rule_hits, vec![1], "an overflow consumes no rule");
}

#[tokio::test]
async fn keepalive_forever_sends_only_comments_until_the_client_leaves() {
    let p = start("- reply: {kind: keepalive_forever, interval: 0.01}\n").await;
    let resp = post(&p, &chat(true, true, "hi", false)).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while text.matches(": keepalive\n\n").count() < 20 {
        let chunk = body.next().await.unwrap().unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(!text.contains("data:"), "{text}");
    drop(body);
    let rec = tokio::time::timeout(Duration::from_secs(5), p.shutdown())
        .await
        .expect("shutdown does not wait for an endless stream");
    assert_eq!(rec.requests[0].reply, "keepalive_forever");
}

#[tokio::test]
async fn endless_text_streams_megabytes_and_the_recording_stays_small() {
    let p = start("- reply: {kind: endless_text, interval: 0}\n").await;
    let resp = post(&p, &chat(true, true, "hi", false)).await;
    let mut body = resp.bytes_stream();
    let mut read = 0usize;
    let mut tail = String::new();
    while read < 2 << 20 {
        let chunk = body.next().await.unwrap().unwrap();
        read += chunk.len();
        tail = String::from_utf8_lossy(&chunk).into_owned();
    }
    assert!(tail.contains("All work and no play"), "{tail}");
    assert!(!tail.contains("[DONE]"));
    let recorded = serde_json::to_vec(&p.recording()).unwrap().len();
    assert!(
        recorded < 16 * 1024,
        "recording is {recorded} bytes after 2 MiB of reply"
    );
    drop(body);
    p.shutdown().await;
}

#[tokio::test]
async fn a_mid_stream_error_records_no_retry_after_where_the_event_cannot_carry_one() {
    let p = start("- reply: {kind: error, status: 429, retry_after: 3, mid_stream: true}\n").await;
    let streamed = post(&p, &chat(true, true, "hi", false)).await;
    assert_eq!(streamed.status(), 200);
    let body = streamed.text().await.unwrap();
    assert!(!body.contains("retry"), "{body}");
    // Not streaming, the error is the plain response with its header.
    let plain = post(&p, &chat(true, false, "hi", false)).await;
    assert_eq!(plain.headers()["retry-after"], "3");
    let rec = p.shutdown().await;
    let said: Vec<_> = rec
        .requests
        .iter()
        .map(|r| r.error.unwrap().retry_after)
        .collect();
    assert_eq!(said, vec![None, Some(3)]);
}

/// A row's credential: before its expiry any key is answered; from main
/// call 1 a request carrying a key that is not the current one gets the
/// wire's 401 (`auth_expired`), the probe too; an `at_refusal` refresh
/// runs the hook with the second key before the 401 is sent, and that key
/// is then answered. Each request records a fingerprint, never the key.
#[tokio::test]
async fn an_expired_credential_is_refused_until_the_refreshed_key_comes() {
    use chaosrun::provider::credential::{fingerprint, key, CredentialSpec, Refresh};
    let p = start_with(ProviderConfig {
        rules: rules("[{reply: {kind: text, text: hi}}]"),
        nonce: NONCE.into(),
        credential: Some(CredentialSpec {
            expires_at_call: 1,
            refresh: Refresh::AtRefusal,
        }),
        ..ProviderConfig::default()
    })
    .await;
    let written = Arc::new(Mutex::new(Vec::<String>::new()));
    let w = written.clone();
    p.on_credential_refresh(Box::new(move |k| w.lock().unwrap().push(k.to_string())));
    let (k1, k2) = (key(NONCE, 1), key(NONCE, 2));
    let send = |k: &str, body: Value| {
        reqwest::Client::new()
            .post(format!("{}/chat/completions", p.base_url()))
            .bearer_auth(k)
            .json(&body)
            .send()
    };
    let first = send(&k1, chat(true, false, "go", false)).await.unwrap();
    assert_eq!(
        text_answer(first).await,
        "hi",
        "call 0 is before the expiry"
    );
    let refused = send(&k1, chat(true, false, "go", true)).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(
        *written.lock().unwrap(),
        vec![k2.clone()],
        "written before the 401"
    );
    let v: Value = refused.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_api_key");
    let probe = chat(
        true,
        false,
        &format!("are you there? [[probe:{NONCE}]]"),
        false,
    );
    assert_eq!(
        send(&k1, probe).await.unwrap().status(),
        401,
        "the old key, on the probe"
    );
    let retried = send(&k2, chat(true, false, "go", true)).await.unwrap();
    assert_eq!(text_answer(retried).await, "hi");
    let rec = p.shutdown().await;
    let seen: Vec<(&str, Option<&str>)> = rec
        .requests
        .iter()
        .map(|r| (r.reply.as_str(), r.credential.as_deref()))
        .collect();
    let (f1, f2) = (fingerprint(&k1), fingerprint(&k2));
    assert_eq!(
        seen,
        vec![
            ("text", Some(f1.as_str())),
            ("auth_expired", Some(f1.as_str())),
            ("auth_expired", Some(f1.as_str())),
            ("text", Some(f2.as_str())),
        ]
    );
    assert_eq!(
        rec.requests[1].error.map(|e| (e.status, e.retryable)),
        Some((401, false))
    );
    let saved = serde_json::to_string(&rec).unwrap();
    assert!(
        !saved.contains(&k1) && !saved.contains(&k2),
        "no key is recorded"
    );
}

/// Issue 47.4: a subagent call given up by its client is recorded as over
/// when its connection closed, and the probe's answer waits for it (an
/// agent that left its subagent inside the call cannot exit at once).
#[tokio::test]
async fn a_probe_waits_for_the_open_subagent_call_whose_end_is_recorded() {
    let p = start("- when: {subagent: true}\n  reply: {kind: hang, seconds: 3600}\n").await;
    let sub = format!("list the files [[subagent:{NONCE}]]");
    let mut subagent_calls = p.subagent_calls();
    let hung = tokio::spawn({
        let (url, body) = (
            format!("{}/chat/completions", p.base_url()),
            chat(true, false, &sub, false),
        );
        async move { reqwest::Client::new().post(url).json(&body).send().await }
    });
    subagent_calls.wait_for(|n| *n >= 1).await.unwrap();
    let probe = format!("are you there? [[probe:{NONCE}]]");
    let mut probed = tokio::spawn({
        let (url, body) = (
            format!("{}/chat/completions", p.base_url()),
            chat(true, false, &probe, false),
        );
        async move { reqwest::Client::new().post(url).json(&body).send().await }
    });
    let mut requests = p.requests();
    requests.wait_for(|n| *n >= 2).await.unwrap();
    let early = tokio::time::timeout(Duration::from_millis(300), &mut probed).await;
    assert!(
        early.is_err(),
        "the probe was answered while the subagent's call was open: {early:?}"
    );
    // The subagent's client gives up: the connection closes, the probe goes on.
    hung.abort();
    let answer = tokio::time::timeout(Duration::from_secs(10), probed)
        .await
        .expect("the probe is answered once the subagent's call closed")
        .unwrap()
        .unwrap();
    assert_eq!(text_answer(answer).await, format!("alive {NONCE}"));
    let rec = p.shutdown().await;
    let ended = |k: CallKind| rec.requests.iter().find(|r| r.kind == k).unwrap().ended;
    let (sub_end, probe_end) = (ended(CallKind::Subagent), ended(CallKind::Probe));
    assert!(
        sub_end.is_some() && sub_end <= probe_end,
        "subagent call ended {sub_end:?}, the probe {probe_end:?}"
    );
}

/// A request `endpoint_fault: {kind: hang}` never answers is recorded open:
/// its end is when its client gave it up, never its arrival (which is what
/// the record said before: a hung model list looked answered at once).
#[tokio::test]
async fn a_hung_endpoint_request_ends_when_its_client_gives_it_up() {
    let p = start_with(ProviderConfig {
        nonce: NONCE.into(),
        endpoint_fault: Some(chaosrun::provider::EndpointFault::Hang {}),
        ..ProviderConfig::default()
    })
    .await;
    let gave_up = reqwest::Client::new()
        .get(format!("{}/models", p.base_url()))
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .expect_err("never answered");
    assert!(gave_up.is_timeout(), "{gave_up}");
    // The server sees the connection close and drops the request's handler.
    let started = Instant::now();
    let record = loop {
        let rec = p.recording();
        let r = rec
            .requests
            .into_iter()
            .find(|r| r.path.ends_with("/models"));
        match r {
            Some(r) if r.ended.is_some() => break r,
            _ if started.elapsed() > Duration::from_secs(10) => {
                panic!("the hung request was never ended: {r:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    assert_eq!(record.reply, "endpoint_hang");
    let open = record.ended.unwrap() - record.at;
    assert!(
        open >= 0.25,
        "ended {open:.3} s after it arrived: the client gave it up after 0.3 s"
    );
    p.shutdown().await;
}
