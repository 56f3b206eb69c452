//! Every reply kind on every wire: a real HTTP client against a provider
//! started in-process on each wire, with a small client-side decoder per wire
//! written from the wire's published protocol (not from our encoders), plus
//! routing, bad bodies, request normalisation and wire neutrality.

use std::time::Duration;

use chaosrun::provider::{CallKind, Provider, ProviderConfig, Rule, ToolMapping, Wire};
use futures_util::StreamExt;
use serde_json::{json, Value};

const NONCE: &str = "N0NCE";

async fn start(wire: Wire, yaml: &str) -> Provider {
    let rules: Vec<Rule> = serde_yaml::from_str(yaml).expect("test rules parse");
    let mut tools = std::collections::BTreeMap::new();
    tools.insert(
        "shell".to_string(),
        ToolMapping {
            name: "terminal".into(),
            args: [("cmd".to_string(), "command".into())].into(),
            fixed: Default::default(),
        },
    );
    Provider::start(ProviderConfig {
        wire,
        rules,
        nonce: NONCE.into(),
        tools,
        ..ProviderConfig::default()
    })
    .await
    .expect("provider starts")
}

/// A call in the neutral conversation: (id, name, arguments JSON text).
type Call = (String, String, String);

/// A conversation turn, written once and encoded per wire by [`body`].
#[derive(Clone)]
enum Turn {
    System(String),
    User(String),
    Assistant(String, Vec<Call>),
    Results(Vec<(String, String, String)>), // (id, name, output)
    /// Results, then a note in the same wire message where the wire has one
    /// (an Anthropic text block after the `tool_result` blocks, a Gemini
    /// text part after the `functionResponse` parts); a user message after
    /// them on the OpenAI wires, which put results in messages of their own.
    ResultsThen(Vec<(String, String, String)>, String),
}

/// The request body for `turns` on `wire`.
fn body(wire: Wire, turns: &[Turn], tools: bool, stream: bool) -> Value {
    match wire {
        Wire::OpenaiChat => {
            let mut msgs = Vec::new();
            for t in turns {
                match t {
                    Turn::System(s) => msgs.push(json!({"role": "system", "content": s})),
                    Turn::User(s) => msgs.push(json!({"role": "user", "content": s})),
                    Turn::Assistant(text, calls) => {
                        let calls: Vec<Value> = calls.iter().map(|(id, n, a)| json!({"id": id, "type": "function", "function": {"name": n, "arguments": a}})).collect();
                        let mut m = json!({"role": "assistant", "content": text});
                        if !calls.is_empty() {
                            m["tool_calls"] = calls.into();
                        }
                        msgs.push(m);
                    }
                    Turn::Results(rs) => {
                        for (id, _, out) in rs {
                            msgs.push(json!({"role": "tool", "tool_call_id": id, "content": out}));
                        }
                    }
                    Turn::ResultsThen(rs, note) => {
                        for (id, _, out) in rs {
                            msgs.push(json!({"role": "tool", "tool_call_id": id, "content": out}));
                        }
                        msgs.push(json!({"role": "user", "content": note}));
                    }
                }
            }
            let mut b = json!({"model": "m", "stream": stream, "messages": msgs});
            if tools {
                b["tools"] = json!([{"type": "function", "function": {"name": "terminal", "parameters": {}}}]);
            }
            b
        }
        Wire::OpenaiResponses => {
            let mut input = Vec::new();
            let mut instructions = Value::Null;
            for t in turns {
                match t {
                    Turn::System(s) => instructions = s.clone().into(),
                    Turn::User(s) => input.push(
                        json!({"role": "user", "content": [{"type": "input_text", "text": s}]}),
                    ),
                    Turn::Assistant(text, calls) => {
                        if !text.is_empty() {
                            input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}));
                        }
                        for (id, n, a) in calls {
                            input.push(json!({"type": "function_call", "call_id": id, "name": n, "arguments": a}));
                        }
                    }
                    Turn::Results(rs) => {
                        for (id, _, out) in rs {
                            input.push(json!({"type": "function_call_output", "call_id": id, "output": out}));
                        }
                    }
                    Turn::ResultsThen(rs, note) => {
                        for (id, _, out) in rs {
                            input.push(json!({"type": "function_call_output", "call_id": id, "output": out}));
                        }
                        input.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": note}]}));
                    }
                }
            }
            let mut b = json!({"model": "m", "stream": stream, "input": input, "instructions": instructions});
            if tools {
                b["tools"] = json!([{"type": "function", "name": "terminal", "parameters": {}}]);
            }
            b
        }
        Wire::Anthropic => {
            let mut msgs = Vec::new();
            let mut system = Value::Null;
            for t in turns {
                match t {
                    Turn::System(s) => system = s.clone().into(),
                    Turn::User(s) => msgs.push(json!({"role": "user", "content": s})),
                    Turn::Assistant(text, calls) => {
                        let mut blocks = Vec::new();
                        if !text.is_empty() {
                            blocks.push(json!({"type": "text", "text": text}));
                        }
                        for (id, n, a) in calls {
                            let input: Value = serde_json::from_str(a).unwrap_or(json!({}));
                            blocks.push(
                                json!({"type": "tool_use", "id": id, "name": n, "input": input}),
                            );
                        }
                        msgs.push(json!({"role": "assistant", "content": blocks}));
                    }
                    Turn::Results(rs) => {
                        let blocks: Vec<Value> = rs.iter().map(|(id, _, out)| json!({"type": "tool_result", "tool_use_id": id, "content": out})).collect();
                        msgs.push(json!({"role": "user", "content": blocks}));
                    }
                    Turn::ResultsThen(rs, note) => {
                        let mut blocks: Vec<Value> = rs.iter().map(|(id, _, out)| json!({"type": "tool_result", "tool_use_id": id, "content": out})).collect();
                        blocks.push(json!({"type": "text", "text": note}));
                        msgs.push(json!({"role": "user", "content": blocks}));
                    }
                }
            }
            let mut b =
                json!({"model": "m", "max_tokens": 1024, "stream": stream, "messages": msgs});
            if !system.is_null() {
                b["system"] = system;
            }
            if tools {
                b["tools"] = json!([{"name": "terminal", "input_schema": {"type": "object"}}]);
            }
            b
        }
        Wire::Gemini => {
            let mut contents = Vec::new();
            let mut system = Value::Null;
            for t in turns {
                match t {
                    Turn::System(s) => system = json!({"parts": [{"text": s}]}),
                    Turn::User(s) => contents.push(json!({"role": "user", "parts": [{"text": s}]})),
                    Turn::Assistant(text, calls) => {
                        let mut parts = Vec::new();
                        if !text.is_empty() {
                            parts.push(json!({"text": text}));
                        }
                        for (id, n, a) in calls {
                            let args: Value = serde_json::from_str(a).unwrap_or(json!({}));
                            parts
                                .push(json!({"functionCall": {"id": id, "name": n, "args": args}}));
                        }
                        contents.push(json!({"role": "model", "parts": parts}));
                    }
                    Turn::Results(rs) => {
                        let parts: Vec<Value> = rs.iter().map(|(id, n, out)| json!({"functionResponse": {"id": id, "name": n, "response": {"output": out}}})).collect();
                        contents.push(json!({"role": "user", "parts": parts}));
                    }
                    Turn::ResultsThen(rs, note) => {
                        let mut parts: Vec<Value> = rs.iter().map(|(id, n, out)| json!({"functionResponse": {"id": id, "name": n, "response": {"output": out}}})).collect();
                        parts.push(json!({"text": note}));
                        contents.push(json!({"role": "user", "parts": parts}));
                    }
                }
            }
            let mut b = json!({"contents": contents});
            if !system.is_null() {
                b["systemInstruction"] = system;
            }
            if tools {
                b["tools"] = json!([{"functionDeclarations": [{"name": "terminal", "parameters": {"type": "object"}}]}]);
            }
            b
        }
    }
}

/// The model-call URL of `wire` (Gemini puts streaming in the path).
fn url(p: &Provider, wire: Wire, stream: bool) -> String {
    let root = format!("http://{}", p.addr());
    match wire {
        Wire::OpenaiChat => format!("{root}/v1/chat/completions"),
        Wire::OpenaiResponses => format!("{root}/v1/responses"),
        Wire::Anthropic => format!("{root}/v1/messages?beta=true"),
        Wire::Gemini if stream => {
            format!("{root}/v1beta/models/gemini-test:streamGenerateContent?alt=sse")
        }
        Wire::Gemini => format!("{root}/v1beta/models/gemini-test:generateContent"),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn send(p: &Provider, wire: Wire, turns: &[Turn], stream: bool) -> reqwest::Response {
    client()
        .post(url(p, wire, stream))
        .header("anthropic-version", "2023-06-01")
        .json(&body(wire, turns, true, stream))
        .send()
        .await
        .expect("request sent")
}

fn hi() -> Vec<Turn> {
    vec![Turn::User("hi".into())]
}

/// What a client made of one reply.
#[derive(Debug, Default, Clone, PartialEq)]
struct Decoded {
    text: String,
    reasoning: String,
    /// In order: (id, name, arguments as sent: a string, or an object's JSON).
    calls: Vec<Call>,
    /// Text deltas received (streaming).
    text_events: usize,
    /// The wire's terminal event was seen (or the body was whole JSON).
    terminal: bool,
    /// An error event inside a 200 stream: its JSON.
    error: Option<Value>,
    /// The body ended with a transport error (cut).
    cut: bool,
}

/// Read a body to its end (or its cut).
async fn read_all(resp: reqwest::Response) -> (String, bool) {
    let mut stream = resp.bytes_stream();
    let mut out = Vec::new();
    let mut cut = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => out.extend_from_slice(&b),
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    (String::from_utf8(out).expect("utf-8 body"), cut)
}

/// SSE events of a body: (event name or "", data).
fn sse_events(body: &str) -> Vec<(String, String)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (name, data)
        })
        .collect()
}

fn args_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn decode_stream(wire: Wire, body: &str) -> Decoded {
    let mut d = Decoded::default();
    // Responses item id / Anthropic block index → call position.
    let mut by_key: std::collections::HashMap<String, usize> = Default::default();
    for (name, data) in sse_events(body) {
        if wire == Wire::OpenaiChat && data == "[DONE]" {
            d.terminal = true;
            continue;
        }
        let v: Value = serde_json::from_str(&data)
            .unwrap_or_else(|e| panic!("{wire}: event is not JSON ({e}): {data}"));
        match wire {
            Wire::OpenaiChat => {
                if v.get("error").is_some() {
                    d.error = Some(v);
                    continue;
                }
                let delta = &v["choices"][0]["delta"];
                if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                    d.text += t;
                    d.text_events += 1;
                }
                if let Some(t) = delta["reasoning_content"].as_str() {
                    d.reasoning += t;
                }
                for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                    let i = tc["index"].as_u64().unwrap() as usize;
                    if d.calls.len() <= i {
                        d.calls.resize(i + 1, Default::default());
                    }
                    if let Some(id) = tc["id"].as_str() {
                        d.calls[i].0 = id.into();
                        d.calls[i].1 = tc["function"]["name"].as_str().unwrap().into();
                    }
                    d.calls[i].2 += tc["function"]["arguments"].as_str().unwrap_or("");
                }
            }
            Wire::OpenaiResponses => {
                assert_eq!(v["type"], name.as_str(), "event name and type agree");
                match name.as_str() {
                    "response.output_text.delta" => {
                        d.text += v["delta"].as_str().unwrap();
                        d.text_events += 1;
                    }
                    "response.reasoning_summary_text.delta" => {
                        d.reasoning += v["delta"].as_str().unwrap()
                    }
                    "response.output_item.added" if v["item"]["type"] == "function_call" => {
                        by_key.insert(v["item"]["id"].as_str().unwrap().into(), d.calls.len());
                        d.calls.push((
                            v["item"]["call_id"].as_str().unwrap().into(),
                            v["item"]["name"].as_str().unwrap().into(),
                            String::new(),
                        ));
                    }
                    "response.function_call_arguments.delta" => {
                        let i = by_key[v["item_id"].as_str().unwrap()];
                        d.calls[i].2 += v["delta"].as_str().unwrap();
                    }
                    "response.completed" | "response.incomplete" => d.terminal = true,
                    "response.failed" | "error" => d.error = Some(v),
                    _ => {}
                }
            }
            Wire::Anthropic => {
                if name != "error" {
                    assert_eq!(v["type"], name.as_str(), "event name and type agree");
                }
                match name.as_str() {
                    "content_block_start" if v["content_block"]["type"] == "tool_use" => {
                        by_key.insert(v["index"].to_string(), d.calls.len());
                        let b = &v["content_block"];
                        d.calls.push((
                            b["id"].as_str().unwrap().into(),
                            b["name"].as_str().unwrap().into(),
                            String::new(),
                        ));
                    }
                    "content_block_delta" => match v["delta"]["type"].as_str().unwrap() {
                        "text_delta" => {
                            d.text += v["delta"]["text"].as_str().unwrap();
                            d.text_events += 1;
                        }
                        "thinking_delta" => d.reasoning += v["delta"]["thinking"].as_str().unwrap(),
                        "input_json_delta" => {
                            let i = by_key[&v["index"].to_string()];
                            d.calls[i].2 += v["delta"]["partial_json"].as_str().unwrap();
                        }
                        _ => {}
                    },
                    "message_stop" => d.terminal = true,
                    "error" => d.error = Some(v),
                    _ => {}
                }
            }
            Wire::Gemini => {
                if v.get("error").is_some() {
                    d.error = Some(v);
                    continue;
                }
                let cand = &v["candidates"][0];
                for part in cand["content"]["parts"].as_array().into_iter().flatten() {
                    if let Some(t) = part["text"].as_str() {
                        if part["thought"] == true {
                            d.reasoning += t;
                        } else if !t.is_empty() {
                            d.text += t;
                            d.text_events += 1;
                        }
                    }
                    if let Some(fc) = part.get("functionCall") {
                        d.calls.push((
                            fc["id"].as_str().unwrap_or("").into(),
                            fc["name"].as_str().unwrap().into(),
                            args_text(&fc["args"]),
                        ));
                    }
                }
                if cand.get("finishReason").is_some() {
                    d.terminal = true;
                }
            }
        }
    }
    d
}

fn decode_whole(wire: Wire, v: &Value) -> Decoded {
    let mut d = Decoded {
        terminal: true,
        ..Decoded::default()
    };
    match wire {
        Wire::OpenaiChat => {
            let m = &v["choices"][0]["message"];
            d.text = m["content"].as_str().unwrap_or("").into();
            d.reasoning = m["reasoning_content"].as_str().unwrap_or("").into();
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                d.calls.push((
                    c["id"].as_str().unwrap().into(),
                    c["function"]["name"].as_str().unwrap().into(),
                    c["function"]["arguments"].as_str().unwrap().into(),
                ));
            }
        }
        Wire::OpenaiResponses => {
            assert_eq!(v["object"], "response");
            for item in v["output"].as_array().unwrap() {
                match item["type"].as_str().unwrap() {
                    "message" => {
                        for c in item["content"].as_array().unwrap() {
                            d.text += c["text"].as_str().unwrap();
                        }
                    }
                    "reasoning" => {
                        for s in item["summary"].as_array().unwrap() {
                            d.reasoning += s["text"].as_str().unwrap();
                        }
                    }
                    "function_call" => d.calls.push((
                        item["call_id"].as_str().unwrap().into(),
                        item["name"].as_str().unwrap().into(),
                        item["arguments"].as_str().unwrap().into(),
                    )),
                    other => panic!("unexpected item {other}"),
                }
            }
        }
        Wire::Anthropic => {
            assert_eq!(v["type"], "message");
            for b in v["content"].as_array().unwrap() {
                match b["type"].as_str().unwrap() {
                    "text" => d.text += b["text"].as_str().unwrap(),
                    "thinking" => d.reasoning += b["thinking"].as_str().unwrap(),
                    "tool_use" => d.calls.push((
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        args_text(&b["input"]),
                    )),
                    other => panic!("unexpected block {other}"),
                }
            }
        }
        Wire::Gemini => {
            for part in v["candidates"][0]["content"]["parts"].as_array().unwrap() {
                if let Some(t) = part["text"].as_str() {
                    if part["thought"] == true {
                        d.reasoning += t;
                    } else {
                        d.text += t;
                    }
                }
                if let Some(fc) = part.get("functionCall") {
                    d.calls.push((
                        fc["id"].as_str().unwrap_or("").into(),
                        fc["name"].as_str().unwrap().into(),
                        args_text(&fc["args"]),
                    ));
                }
            }
        }
    }
    d
}

async fn decode(wire: Wire, resp: reqwest::Response, stream: bool) -> Decoded {
    assert_eq!(resp.status(), 200, "{wire}");
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let (body, cut) = read_all(resp).await;
    let mut d = if stream {
        assert_eq!(ct, "text/event-stream", "{wire}");
        decode_stream(wire, &body)
    } else {
        assert_eq!(ct, "application/json", "{wire}");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{wire}: {e}: {body}"));
        decode_whole(wire, &v)
    };
    d.cut = cut;
    d
}

#[tokio::test]
async fn text_streams_in_pieces_with_reasoning_on_every_wire() {
    for wire in Wire::ALL {
        let p = start(
            wire,
            "- reply: {kind: text, text: 'hello {{nonce}} there', reasoning: 'let me see', chunk_chars: 5}\n",
        )
        .await;
        for stream in [true, false] {
            let d = decode(wire, send(&p, wire, &hi(), stream).await, stream).await;
            assert_eq!(d.text, "hello N0NCE there", "{wire} stream={stream}");
            assert_eq!(d.reasoning, "let me see", "{wire} stream={stream}");
            assert!(d.terminal && !d.cut && d.error.is_none(), "{wire}: {d:?}");
            assert!(d.calls.is_empty());
            if stream {
                // 17 chars in 5-char pieces.
                assert_eq!(d.text_events, 4, "{wire}");
            }
        }
        let rec = p.shutdown().await;
        assert_eq!(rec.main_calls, 2, "{wire}");
    }
}

#[tokio::test]
async fn tool_calls_parallel_repeated_and_truncated_args_on_every_wire() {
    let yaml = "- reply:\n    kind: tool_call\n    repeat: 2\n    calls:\n      - {tool: shell, args: {cmd: 'echo {{nonce}}-{{i}}'}}\n      - {tool: shell, args: '{\"command\": \"echo tr'}\n";
    for wire in Wire::ALL {
        let p = start(wire, yaml).await;
        for stream in [true, false] {
            let d = decode(wire, send(&p, wire, &hi(), stream).await, stream).await;
            assert!(d.terminal && !d.cut, "{wire}: {d:?}");
            assert_eq!(d.calls.len(), 4, "{wire} stream={stream}: {d:?}");
            let ids: std::collections::BTreeSet<&str> =
                d.calls.iter().map(|c| c.0.as_str()).collect();
            assert_eq!(ids.len(), 4, "{wire}: ids unique and present: {d:?}");
            assert!(!ids.contains(""), "{wire}");
            for (i, (_, name, args)) in d.calls.iter().enumerate() {
                assert_eq!(name, "terminal", "{wire}");
                if i % 2 == 0 {
                    let v: Value = serde_json::from_str(args).unwrap();
                    assert_eq!(v, json!({"command": format!("echo N0NCE-{i}")}), "{wire}");
                } else {
                    assert_eq!(args, "{\"command\": \"echo tr", "{wire} stream={stream}");
                }
            }
        }
        let rec = p.shutdown().await;
        assert_eq!(rec.issued_tool_calls.len(), 8, "{wire}");
    }
}

/// The wire's max-tokens finish, as its terminal JSON spells it.
fn length_finish(wire: Wire) -> &'static str {
    match wire {
        Wire::OpenaiChat => "\"finish_reason\":\"length\"",
        Wire::OpenaiResponses => "\"reason\":\"max_output_tokens\"",
        Wire::Anthropic => "\"stop_reason\":\"max_tokens\"",
        Wire::Gemini => "\"finishReason\":\"MAX_TOKENS\"",
    }
}

#[tokio::test]
async fn tool_args_cut_for_length_and_a_literal_id_on_every_wire() {
    let yaml = "- reply:\n    kind: tool_call\n    finish_reason: length\n    calls:\n      - {tool: shell, id: 'call_fixed_{{nonce}}', args: {cmd: 'echo CUT-{{nonce}} and the rest of the command'}}\n";
    let full = json!({"command": "echo CUT-N0NCE and the rest of the command"}).to_string();
    let half: String = full.chars().take(full.chars().count() / 2).collect();
    for wire in Wire::ALL {
        let p = start(wire, yaml).await;
        for stream in [true, false] {
            let d = decode(wire, send(&p, wire, &hi(), stream).await, stream).await;
            assert!(d.terminal && !d.cut, "{wire}: {d:?}");
            assert_eq!(d.calls.len(), 1, "{wire} stream={stream}: {d:?}");
            let (id, name, args) = &d.calls[0];
            assert_eq!(
                id, "call_fixed_N0NCE",
                "{wire} stream={stream}: the same id every time"
            );
            assert_eq!(name, "terminal", "{wire}");
            assert_eq!(args, &half, "{wire} stream={stream}: cut in half mid-JSON");
            let (body, _) = read_all(send(&p, wire, &hi(), stream).await).await;
            let body = body.replace(": ", ":");
            assert!(
                body.contains(length_finish(wire)),
                "{wire} stream={stream}: {body}"
            );
        }
        let rec = p.shutdown().await;
        assert!(
            rec.issued_tool_calls.iter().all(|c| c.args == json!(half)),
            "{wire}: the oracle sees the cut text"
        );
    }
}

#[tokio::test]
async fn duplicated_frames_send_each_delta_twice_on_every_wire() {
    let yaml = "- when: {call: 0}\n  reply: {kind: text, text: abcdef, chunk_chars: 2, duplicate_frames: true}\n- reply: {kind: tool_call, duplicate_frames: true, calls: [{tool: shell, args: '{\"a\": 1}'}]}\n";
    for wire in Wire::ALL {
        let p = start(wire, yaml).await;
        let d = decode(wire, send(&p, wire, &hi(), true).await, true).await;
        assert!(d.terminal && !d.cut, "{wire}: {d:?}");
        assert_eq!(d.text, "ababcdcdefef", "{wire}: each piece twice");
        let d = decode(wire, send(&p, wire, &hi(), true).await, true).await;
        assert_eq!(d.calls.len(), 1, "{wire}: {d:?}");
        assert_eq!(
            d.calls[0].2, "{\"a\": 1}{\"a\": 1}",
            "{wire}: joined as they came"
        );
        p.shutdown().await;
    }
}

#[tokio::test]
async fn a_p_rule_fires_on_the_calls_its_seed_draws_and_replays_them() {
    let yaml =
        "- {when: {p: 0.3}, reply: {kind: text, text: ''}}\n- reply: {kind: text, text: full}\n";
    async fn fired(seed: u64, yaml: &str) -> Vec<usize> {
        let rules: Vec<Rule> = serde_yaml::from_str(yaml).unwrap();
        let p = Provider::start(ProviderConfig {
            wire: Wire::OpenaiChat,
            rules,
            nonce: NONCE.into(),
            seed,
            ..ProviderConfig::default()
        })
        .await
        .unwrap();
        let mut out = Vec::new();
        for i in 0..40 {
            let d = decode(
                Wire::OpenaiChat,
                send(&p, Wire::OpenaiChat, &hi(), false).await,
                false,
            )
            .await;
            if d.text.is_empty() {
                out.push(i);
            }
        }
        let rec = p.shutdown().await;
        let ruled: Vec<usize> = rec
            .requests
            .iter()
            .enumerate()
            .filter(|(_, r)| r.rule == Some(0))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(ruled, out, "the record names the rule each call got");
        out
    }
    let a = fired(7, yaml).await;
    assert_eq!(
        a,
        fired(7, yaml).await,
        "the same seed fires on the same calls"
    );
    assert_ne!(a, fired(8, yaml).await, "another seed on others");
    assert!((4..=20).contains(&a.len()), "about 12 of 40: {a:?}");
}

#[tokio::test]
async fn errors_use_each_wires_shape_and_retry_after_convention() {
    let yaml = "- {when: {call: 0}, reply: {kind: error, status: 429, message: 'slow {{nonce}}', retry_after: 2}}\n\
                - {when: {call: 1}, reply: {kind: error, status: 529, message: busy}}\n\
                - {when: {call: 2}, reply: {kind: error, status: 503, message: down}}\n\
                - {when: {call: 3}, reply: {kind: error, status: 400, message: bad}}\n";
    for wire in Wire::ALL {
        let p = start(wire, yaml).await;
        let mut got = Vec::new();
        for _ in 0..4 {
            let resp = send(&p, wire, &hi(), true).await;
            let status = resp.status().as_u16();
            let retry = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            assert_eq!(resp.headers()["content-type"], "application/json");
            let v: Value = resp.json().await.unwrap();
            got.push((status, retry, v));
        }
        for (status, _, _) in &got {
            assert!([429, 529, 503, 400].contains(status));
        }
        let (_, retry, v) = &got[0];
        match wire {
            Wire::OpenaiChat | Wire::OpenaiResponses => {
                assert_eq!(retry.as_deref(), Some("2"), "{wire}");
                assert_eq!(v["error"]["message"], "slow N0NCE");
                assert_eq!(v["error"]["type"], "rate_limit_error");
                assert_eq!(got[1].2["error"]["type"], "server_error");
                assert_eq!(got[3].2["error"]["type"], "invalid_request_error");
            }
            Wire::Anthropic => {
                assert_eq!(retry.as_deref(), Some("2"));
                assert_eq!(v["type"], "error");
                assert_eq!(v["error"]["type"], "rate_limit_error");
                assert_eq!(v["error"]["message"], "slow N0NCE");
                assert_eq!(got[1].2["error"]["type"], "overloaded_error");
                assert_eq!(got[3].2["error"]["type"], "invalid_request_error");
            }
            Wire::Gemini => {
                assert_eq!(
                    retry.as_deref(),
                    None,
                    "Gemini carries retry-after in the body"
                );
                assert_eq!(v["error"]["code"], 429);
                assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
                assert_eq!(v["error"]["message"], "slow N0NCE");
                assert_eq!(
                    v["error"]["details"][0]["@type"],
                    "type.googleapis.com/google.rpc.RetryInfo"
                );
                assert_eq!(v["error"]["details"][0]["retryDelay"], "2s");
                assert_eq!(got[2].2["error"]["status"], "UNAVAILABLE");
                assert_eq!(got[3].2["error"]["status"], "INVALID_ARGUMENT");
            }
        }
        p.shutdown().await;
    }
}

#[tokio::test]
async fn mid_stream_errors_are_each_wires_error_event() {
    for wire in Wire::ALL {
        let p = start(
            wire,
            "- reply: {kind: error, status: 529, message: 'overloaded {{nonce}}', mid_stream: true}\n",
        )
        .await;
        let d = decode(wire, send(&p, wire, &hi(), true).await, true).await;
        assert!(!d.terminal && !d.cut, "{wire}: {d:?}");
        let e = d.error.unwrap_or_else(|| panic!("{wire}: no error event"));
        match wire {
            Wire::OpenaiChat => assert_eq!(e["error"]["message"], "overloaded N0NCE"),
            Wire::OpenaiResponses => {
                assert_eq!(e["type"], "response.failed");
                assert_eq!(e["response"]["status"], "failed");
                assert_eq!(e["response"]["error"]["message"], "overloaded N0NCE");
            }
            Wire::Anthropic => {
                assert_eq!(e["type"], "error");
                assert_eq!(e["error"]["type"], "overloaded_error");
            }
            Wire::Gemini => {
                assert_eq!(e["error"]["code"], 529);
                assert_eq!(e["error"]["message"], "overloaded N0NCE");
            }
        }
        p.shutdown().await;
    }
}

#[tokio::test]
async fn hang_sends_nothing_on_every_wire() {
    for wire in Wire::ALL {
        let p = start(wire, "- reply: {kind: hang}\n").await;
        let r = client()
            .post(url(&p, wire, true))
            .json(&body(wire, &hi(), true, true))
            .timeout(Duration::from_millis(300))
            .send()
            .await;
        let e = r.expect_err("a hang never answers");
        assert!(e.is_timeout(), "{wire}: {e}");
        let rec = p.shutdown().await;
        assert_eq!(rec.requests[0].reply, "hang");
    }
}

/// Headers, then the first body bytes, then nothing for a while.
async fn first_bytes_then_silence(resp: reqwest::Response) -> String {
    let mut stream = resp.bytes_stream();
    let mut got = String::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
            Ok(Some(Ok(b))) => got.push_str(std::str::from_utf8(&b).unwrap()),
            Ok(other) => panic!("the body ended: {other:?} after {got:?}"),
            Err(_) => return got,
        }
    }
}

#[tokio::test]
async fn stall_and_silence_on_every_wire() {
    for wire in Wire::ALL {
        let p = start(
            wire,
            "- {when: {call: 0}, reply: {kind: stall_mid_stream, chars: 'Thinking {{nonce}}'}}\n\
             - {when: {call: 1}, reply: {kind: silent_after_headers}}\n",
        )
        .await;
        let resp = send(&p, wire, &hi(), true).await;
        assert_eq!(resp.status(), 200);
        let got = first_bytes_then_silence(resp).await;
        let d = decode_stream(wire, &got);
        assert_eq!(d.text, "Thinking N0NCE", "{wire}: {got}");
        assert!(!d.terminal, "{wire}");

        let resp = send(&p, wire, &hi(), true).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(first_bytes_then_silence(resp).await, "", "{wire}");
        let started = std::time::Instant::now();
        p.shutdown().await;
        assert!(started.elapsed() < Duration::from_secs(3), "{wire}");
    }
}

#[tokio::test]
async fn drop_mid_stream_cuts_before_each_wires_terminal_event() {
    for wire in Wire::ALL {
        let p = start(
            wire,
            "- reply: {kind: drop_mid_stream, chars: 'Partial {{nonce}}'}\n",
        )
        .await;
        for stream in [true, false] {
            let resp = send(&p, wire, &hi(), stream).await;
            assert_eq!(resp.status(), 200);
            let (body, cut) = read_all(resp).await;
            assert!(cut, "{wire} stream={stream}: the body is cut, not ended");
            if stream {
                let d = decode_stream(wire, &body);
                assert_eq!(d.text, "Partial N0NCE", "{wire}");
                assert!(!d.terminal, "{wire}: {body}");
            } else {
                assert!(body.ends_with("Partial N0NCE"), "{wire}: {body}");
                assert!(serde_json::from_str::<Value>(&body).is_err());
            }
        }
        p.shutdown().await;
    }
}

#[tokio::test]
async fn raw_is_verbatim_on_every_wire() {
    for wire in Wire::ALL {
        let p = start(
            wire,
            "- reply: {kind: raw, status: 502, content_type: text/html, body: '<html>{{nonce}}'}\n",
        )
        .await;
        let resp = send(&p, wire, &hi(), true).await;
        assert_eq!(resp.status(), 502);
        assert_eq!(resp.headers()["content-type"], "text/html");
        assert_eq!(resp.text().await.unwrap(), "<html>N0NCE");
        p.shutdown().await;
    }
}

#[tokio::test]
async fn routes_models_404s_and_bad_bodies_per_wire() {
    let models = [
        (Wire::OpenaiChat, "/v1/models"),
        (Wire::OpenaiResponses, "/v1/models"),
        (Wire::Anthropic, "/v1/models"),
        (Wire::Gemini, "/v1beta/models"),
    ];
    for (wire, listing) in models {
        let p = start(wire, "").await;
        let root = format!("http://{}", p.addr());
        let v: Value = client()
            .get(format!("{root}{listing}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let first = match wire {
            Wire::Gemini => &v["models"][0]["name"],
            _ => &v["data"][0]["id"],
        };
        assert!(first.as_str().unwrap().contains("chaosrun"), "{wire}: {v}");

        // Another wire's path is not served.
        let other = if wire == Wire::OpenaiChat {
            Wire::Anthropic
        } else {
            Wire::OpenaiChat
        };
        let resp = client()
            .post(url(&p, other, false))
            .json(&body(other, &hi(), true, false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{wire}");
        let v: Value = resp.json().await.unwrap();
        assert_error_shape(wire, &v, 404);

        let resp = client()
            .post(url(&p, wire, false))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{wire}");
        let v: Value = resp.json().await.unwrap();
        assert_error_shape(wire, &v, 400);

        let rec = p.shutdown().await;
        let replies: Vec<&str> = rec.requests.iter().map(|r| r.reply.as_str()).collect();
        assert_eq!(replies, ["models", "not_found", "bad_request"], "{wire}");
        assert!(rec.requests.iter().all(|r| r.kind == CallKind::Aux));
        assert_eq!(rec.main_calls, 0);
    }
}

fn assert_error_shape(wire: Wire, v: &Value, status: u16) {
    match wire {
        Wire::OpenaiChat | Wire::OpenaiResponses => {
            assert!(
                v["error"]["message"].is_string() && v["error"]["type"].is_string(),
                "{v}"
            )
        }
        Wire::Anthropic => {
            assert_eq!(v["type"], "error");
            let kind = if status == 404 {
                "not_found_error"
            } else {
                "invalid_request_error"
            };
            assert_eq!(v["error"]["type"], kind, "{v}");
        }
        Wire::Gemini => {
            assert_eq!(v["error"]["code"], status);
            assert!(v["error"]["status"].is_string(), "{v}");
        }
    }
}

/// The recorded messages of a request, with ids replaced by their order of
/// first appearance (ids differ between providers).
fn shape(msgs: &[chaosrun::message::Message]) -> Vec<Value> {
    let mut ids: Vec<String> = Vec::new();
    let mut id = |s: &str| {
        let pos = ids.iter().position(|x| x == s).unwrap_or_else(|| {
            ids.push(s.to_string());
            ids.len() - 1
        });
        format!("id{pos}")
    };
    msgs.iter()
        .map(|m| {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| {
                    json!([
                        id(&c.id),
                        c.name,
                        serde_json::from_str::<Value>(&c.arguments).unwrap_or(Value::Null)
                    ])
                })
                .collect();
            json!({
                "role": m.role,
                "content": m.content,
                "tool_call_id": m.tool_call_id.as_deref().map(&mut id),
                "tool_calls": calls,
            })
        })
        .collect()
}

/// One scenario, run by the same scripted client on every wire: the recorded
/// requests, normalised, have one shape.
#[tokio::test]
async fn the_same_scenario_records_the_same_shape_on_every_wire() {
    let yaml = "- {when: {call: 0}, reply: {kind: tool_call, calls: [{tool: shell, args: {cmd: 'echo a'}}, {tool: shell, args: {cmd: 'echo b'}}]}}\n\
                - {reply: {kind: text, text: 'done {{nonce}}'}}\n";
    let mut shapes = Vec::new();
    for wire in Wire::ALL {
        let p = start(wire, yaml).await;
        let mut turns = vec![Turn::System("be brief".into()), Turn::User("go".into())];
        let d = decode(wire, send(&p, wire, &turns, true).await, true).await;
        assert_eq!(d.calls.len(), 2, "{wire}");
        turns.push(Turn::Assistant(String::new(), d.calls.clone()));
        turns.push(Turn::Results(
            d.calls
                .iter()
                .map(|(id, n, _)| (id.clone(), n.clone(), format!("out of {id}")))
                .collect(),
        ));
        let d = decode(wire, send(&p, wire, &turns, true).await, true).await;
        assert_eq!(d.text, "done N0NCE", "{wire}");
        turns.push(Turn::Assistant(d.text, vec![]));
        turns.push(Turn::User(format!("[[probe:{NONCE}]]")));
        let d = decode(wire, send(&p, wire, &turns, false).await, false).await;
        assert_eq!(d.text, format!("alive {NONCE}"), "{wire}");
        let rec = p.shutdown().await;
        let kinds: Vec<CallKind> = rec.requests.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, [CallKind::Main, CallKind::Main, CallKind::Probe]);
        let last = &rec.requests[1].messages;
        // Tool output text is the id, so normalise it with the ids.
        let mut s: Vec<Vec<Value>> = rec.requests.iter().map(|r| shape(&r.messages)).collect();
        for (i, m) in last.iter().enumerate() {
            if let Some(id) = &m.tool_call_id {
                let pos = if Some(id) == last[2].tool_calls.first().map(|c| &c.id) {
                    0
                } else {
                    1
                };
                s[1][i]["content"] = format!("out of id{pos}").into();
                s[2][i]["content"] = format!("out of id{pos}").into();
            }
        }
        shapes.push((wire, s));
    }
    let (_, chat) = &shapes[0];
    assert_eq!(
        chat[1].len(),
        5,
        "system, user, assistant, tool, tool: {chat:?}"
    );
    assert_eq!(chat[1][2]["tool_calls"].as_array().unwrap().len(), 2);
    for (wire, s) in &shapes[1..] {
        assert_eq!(s, chat, "{wire} records a different shape than openai-chat");
    }
}

/// A tool result followed by more content (Claude Code appends a note after
/// each result: a text block in the same message, or a further user
/// message) is still "after the tool", on every wire; an answer after the
/// result ends the exchange, so a new user turn is not.
#[tokio::test]
async fn a_result_followed_by_a_note_is_after_the_tool_on_every_wire() {
    let yaml = "- {when: {after_tool: true}, reply: {kind: text, text: 'after tool'}}\n\
                - {reply: {kind: text, text: 'not after'}}\n";
    let call = || {
        (
            "c1".to_string(),
            "terminal".to_string(),
            r#"{"cmd":"ls"}"#.to_string(),
        )
    };
    let result = || {
        vec![(
            "c1".to_string(),
            "terminal".to_string(),
            "a.txt".to_string(),
        )]
    };
    let opening = || {
        vec![
            Turn::User("go".into()),
            Turn::Assistant(String::new(), vec![call()]),
        ]
    };
    let note = "<system-reminder>the result above is the tool's output</system-reminder>";
    let with = |tail: Vec<Turn>| opening().into_iter().chain(tail).collect::<Vec<_>>();
    let cases = [
        (
            "note in the same message",
            with(vec![Turn::ResultsThen(result(), note.into())]),
            "after tool",
        ),
        (
            "note as a further message",
            with(vec![Turn::Results(result()), Turn::User(note.into())]),
            "after tool",
        ),
        (
            "note in the same message and a further one",
            with(vec![
                Turn::ResultsThen(result(), note.into()),
                Turn::User(note.into()),
            ]),
            "after tool",
        ),
        (
            "result last",
            with(vec![Turn::Results(result())]),
            "after tool",
        ),
        ("no call yet", vec![Turn::User("go".into())], "not after"),
        (
            "a new turn after the answer",
            with(vec![
                Turn::Results(result()),
                Turn::Assistant("done".into(), vec![]),
                Turn::User("next".into()),
            ]),
            "not after",
        ),
    ];
    for wire in Wire::ALL {
        let p = start(wire, yaml).await;
        for (what, turns, want) in &cases {
            let d = decode(wire, send(&p, wire, turns, false).await, false).await;
            assert_eq!(d.text, *want, "{wire}: {what}");
        }
        p.shutdown().await;
    }
}

#[tokio::test]
async fn responses_previous_response_id_continues_or_is_a_400() {
    let p = start(
        Wire::OpenaiResponses,
        "- {when: {call: 0}, reply: {kind: tool_call, calls: [{tool: shell, args: {cmd: 'ls'}}]}}\n\
         - {reply: {kind: text, text: ok}}\n",
    )
    .await;
    let first: Value = send(&p, Wire::OpenaiResponses, &hi(), false)
        .await
        .json()
        .await
        .unwrap();
    let id = first["id"].as_str().unwrap();
    let call_id = first["output"][0]["call_id"].as_str().unwrap();
    let next = json!({
        "model": "m", "previous_response_id": id,
        "tools": [{"type": "function", "name": "terminal"}],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "files"}],
    });
    let resp = client()
        .post(url(&p, Wire::OpenaiResponses, false))
        .json(&next)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut unknown = next.clone();
    unknown["previous_response_id"] = "resp_nope".into();
    let resp = client()
        .post(url(&p, Wire::OpenaiResponses, false))
        .json(&unknown)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["code"], "previous_response_not_found");
    let rec = p.shutdown().await;
    let second = &rec.requests[1];
    assert_eq!(second.previous_response_id.as_deref(), Some(id));
    let roles: Vec<&str> = second.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "continued history");
    assert_eq!(second.messages[1].tool_calls[0].id, call_id);
    let refused = &rec.requests[2];
    assert_eq!(
        (refused.kind, refused.reply.as_str()),
        (CallKind::Aux, "bad_request")
    );
    assert_eq!(refused.previous_response_id.as_deref(), Some("resp_nope"));
    assert_eq!(rec.main_calls, 2);
}

#[tokio::test]
async fn anthropic_accepts_a_system_role_message_and_aux_calls_without_tools() {
    let p = start(Wire::Anthropic, "- reply: {kind: hang}\n").await;
    let b = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "title please"}]},
    ]});
    let v: Value = client()
        .post(url(&p, Wire::Anthropic, false))
        .json(&b)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["content"][0]["text"], "ok");
    let rec = p.shutdown().await;
    assert_eq!(rec.requests[0].kind, CallKind::Aux);
    assert_eq!(rec.requests[0].messages[0].role, "system");
}

#[test]
fn serve_names_its_wire_and_refuses_an_unknown_one() {
    let bin = env!("CARGO_BIN_EXE_chaosrun");
    let out = std::process::Command::new(bin)
        .args(["serve", "--wire", "grpc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for w in Wire::ALL {
        assert!(err.contains(w.name()), "{err}");
    }

    let mut child = std::process::Command::new(bin)
        .args(["serve", "--wire", "gemini", "--quiet"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    // SIGTERM right after the line: the handler is already installed.
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let mut summary = String::new();
    std::io::Read::read_to_string(&mut out, &mut summary).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(summary, "requests: 0 (main 0, probe 0, aux 0)\n");
    assert!(
        line.starts_with("chaosrun provider listening on http://127.0.0.1:")
            && line.trim_end().ends_with(" (gemini)")
            && !line.contains("/v1"),
        "{line:?}"
    );
    assert!(status.success(), "{status:?}");
}

/// `chaosrun serve`'s log line names each request's method and path, so a
/// profile's base URL can be checked against the path the agent calls
/// (docs/profile-guide.md, step 2).
#[test]
fn serve_logs_each_request_with_its_method_and_path() {
    use std::io::{BufRead, Read, Write};
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_chaosrun"))
        .args(["serve", "--wire", "openai-chat"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .and_then(|w| w.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],
        "tools":[{"type":"function","function":{"name":"terminal","parameters":{}}}]}"#;
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert!(
        err.lines()
            .any(|l| l == "#0 POST /v1/chat/completions main 0 text"),
        "{err}"
    );
}
