//! Request normalisation: every wire's request body, parsed by its own module
//! into [`Request`] (messages in the one message model, [`Message`]), then
//! bounded and classified here the same way for all
//! wires (probe marker in the latest user input, after a tool result
//! whatever follows it, "main call" = the request offers tools).

use serde_json::Value;

use super::Wire;
use crate::message::{Message, ToolCall, CONTENT_KEEP_CHARS};

/// A request in the one message model, before bounding.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Request {
    pub model: Option<String>,
    pub stream: bool,
    pub has_tools: bool,
    /// The tools the request offered, as [`offered_tools`] writes them.
    pub tools: Vec<String>,
    /// Unbounded: [`bound_request`] bounds them.
    pub messages: Vec<Message>,
    /// Responses: the stored response this request continues.
    pub previous_response_id: Option<String>,
}

/// What classification and recording need from a parsed body.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub model: Option<String>,
    pub stream: bool,
    pub has_tools: bool,
    pub tools: Vec<String>,
    pub messages: Vec<Message>,
    pub truncated: bool,
    /// The request follows a tool result, whatever follows the result
    /// ([`crate::message::after_tool`]).
    pub after_tool: bool,
    /// The nonce of a `[[probe:NONCE]]` marker in the latest user input
    /// ([`user_input`]).
    pub probe: Option<String>,
    /// A user message of the conversation's opening (before any assistant
    /// or tool message) carries `[[subagent:NONCE]]`.
    pub subagent: bool,
    pub previous_response_id: Option<String>,
}

/// Parse `body` as a request of `wire`. `stream` and `model` come from the
/// path when the wire puts them there (Gemini).
pub(crate) fn parse(
    wire: Wire,
    body: &[u8],
    stream: Option<bool>,
    model: Option<String>,
    nonce: &str,
) -> Result<Parsed, String> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err("request body must be a JSON object".into());
    }
    let mut req = wire.format().parse(body)?;
    if let Some(s) = stream {
        req.stream = s;
    }
    if model.is_some() {
        req.model = model;
    }
    Ok(bound_request(req, nonce))
}

pub(crate) fn json(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// Bound every content and argument string, find the probe marker.
pub(crate) fn bound_request(req: Request, nonce: &str) -> Parsed {
    let mut truncated = false;
    let mut probe = None;
    // The subagent's own conversation opens with its prompt: the first user
    // message, or one after an agent's own context messages (Codex sends
    // `<environment_context>` as a user message first). The parent's carries
    // the marker only in a tool call's arguments and results, later.
    let subagent = req
        .messages
        .iter()
        .take_while(|m| m.role != "assistant" && m.role != "tool")
        .any(|m| m.role == "user" && subagent_marker(&m.content, nonce));
    let after_tool = crate::message::after_tool(&req.messages);
    let input = user_input(&req.messages);
    let mut messages = req.messages;
    for (pos, m) in messages.iter_mut().enumerate() {
        if input.contains(&pos) && probe.is_none() {
            probe = probe_marker(&m.content, nonce);
        }
        (m.content, m.content_chars) = bound(std::mem::take(&mut m.content), &mut truncated);
        (m.reasoning, m.reasoning_chars) = bound(std::mem::take(&mut m.reasoning), &mut truncated);
        for c in &mut m.tool_calls {
            c.arguments = bound(std::mem::take(&mut c.arguments), &mut truncated).0;
        }
    }
    Parsed {
        model: req.model,
        stream: req.stream,
        has_tools: req.has_tools,
        tools: req.tools,
        messages,
        truncated,
        after_tool,
        probe,
        subagent,
        previous_response_id: req.previous_response_id,
    }
}

/// The positions of the user's latest input: the latest user message, and
/// every user message since the model last spoke (an agent may append its
/// own notes after the prompt, as it does after a tool result).
fn user_input(messages: &[Message]) -> Vec<usize> {
    let spoke = messages.iter().rposition(|m| m.role == "assistant");
    let latest = messages.iter().rposition(|m| m.role == "user");
    (0..messages.len())
        .filter(|&i| messages[i].role == "user")
        .filter(|&i| Some(i) == latest || spoke.is_none_or(|a| i > a))
        .collect()
}

/// The marker chaosrun appends to a `subagent` tool call's prompt.
pub fn subagent_marker_text(nonce: &str) -> String {
    format!("[[subagent:{nonce}]]")
}

/// `text` carries the subagent marker (of `nonce`; any, when it is empty).
pub(crate) fn subagent_marker(text: &str, nonce: &str) -> bool {
    if nonce.is_empty() {
        return text.contains("[[subagent:");
    }
    text.contains(&subagent_marker_text(nonce))
}

/// A content value's text: a string, nothing for null, or the text parts
/// (strings, or objects' `text`) joined by newlines.
pub(crate) fn content_text(content: Option<&Value>) -> String {
    match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}

/// Arguments as a string: verbatim when a string, serialised otherwise.
pub(crate) fn args_string(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A string field of an object.
pub(crate) fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Whether a `tools` field offers at least one tool.
pub(crate) fn offers_tools(v: &Value) -> bool {
    v.get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
}

/// How many offered tools a request record keeps, and how many chars of each.
pub const OFFERED_KEEP: usize = 64;
pub const OFFERED_KEEP_CHARS: usize = 200;

/// The tools a request's `tools` array offers, each as `name(arg,arg)` (its
/// parameters' property names, sorted), on every wire's shape: Chat
/// `{function: {name, parameters}}`, Responses and Anthropic `{name,
/// parameters | input_schema}`, Gemini `{functionDeclarations: [...]}`, and a
/// Responses `namespace` tool's members as `NS/name`. Bounded to
/// [`OFFERED_KEEP`] entries of [`OFFERED_KEEP_CHARS`] chars.
pub(crate) fn offered_tools(tools: &[Value]) -> Vec<String> {
    fn one(t: &Value, ns: Option<&str>, out: &mut Vec<String>) {
        if let Some(decls) = t.get("functionDeclarations").and_then(Value::as_array) {
            decls.iter().for_each(|d| one(d, ns, out));
            return;
        }
        let f = t.get("function").unwrap_or(t);
        let Some(name) = f.get("name").and_then(Value::as_str) else {
            return;
        };
        if let Some(members) = t.get("tools").and_then(Value::as_array) {
            members.iter().for_each(|m| one(m, Some(name), out));
            return;
        }
        let schema = [
            "parameters",
            "input_schema",
            "inputSchema",
            "parametersJsonSchema",
        ]
        .iter()
        .find_map(|k| f.get(*k));
        let mut args: Vec<&str> = schema
            .and_then(|s| s.get("properties"))
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        args.sort_unstable();
        let full = match ns {
            Some(ns) => format!("{ns}/{name}({})", args.join(",")),
            None => format!("{name}({})", args.join(",")),
        };
        out.push(full.chars().take(OFFERED_KEEP_CHARS).collect());
    }
    let mut out = Vec::new();
    for t in tools {
        one(t, None, &mut out);
    }
    out.truncate(OFFERED_KEEP);
    out
}

/// `offered_tools` of a body's `tools` array (none when it has none).
pub(crate) fn offered_in(v: &Value) -> Vec<String> {
    v.get("tools")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |t| offered_tools(t))
}

/// Cut `s` to [`CONTENT_KEEP_CHARS`] chars; returns it and its full length.
pub(crate) fn bound(s: String, truncated: &mut bool) -> (String, usize) {
    if s.len() <= CONTENT_KEEP_CHARS {
        let n = s.chars().count();
        return (s, n);
    }
    let n = s.chars().count();
    match s.char_indices().nth(CONTENT_KEEP_CHARS) {
        Some((end, _)) => {
            *truncated = true;
            (s[..end].to_string(), n)
        }
        None => (s, n),
    }
}

/// `[[probe:X]]` in `text`: with a configured nonce only X = nonce counts;
/// with none, any X does.
pub(crate) fn probe_marker(text: &str, nonce: &str) -> Option<String> {
    if !nonce.is_empty() {
        return text
            .contains(&format!("[[probe:{nonce}]]"))
            .then(|| nonce.to_string());
    }
    let start = text.find("[[probe:")? + "[[probe:".len();
    let len = text[start..].find("]]")?;
    Some(text[start..start + len].to_string())
}

/// Append an assistant tool call, joining it to the assistant message right
/// before when there is one (consecutive call items form one turn).
pub(crate) fn push_call(messages: &mut Vec<Message>, call: ToolCall) {
    match messages.last_mut() {
        Some(m) if m.role == "assistant" => m.tool_calls.push(call),
        _ => messages.push(Message::assistant_calls(vec![call])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_needs_the_right_nonce_when_one_is_set() {
        assert_eq!(probe_marker("hi [[probe:A]]", "B"), None);
        assert_eq!(probe_marker("hi [[probe:A]]", ""), Some("A".into()));
        assert_eq!(probe_marker("hi [[probe:A]]", "A"), Some("A".into()));
    }

    #[test]
    fn offered_tools_are_named_with_their_arguments_on_every_shape() {
        let v: Value = serde_json::from_str(
            r#"{"tools": [
                {"type": "function", "function": {"name": "shell", "parameters": {"properties": {"command": {}, "background": {}}}}},
                {"name": "mcp_chaos_probe", "input_schema": {"properties": {"text": {}}}},
                {"functionDeclarations": [{"name": "g", "parametersJsonSchema": {"properties": {"query": {}}}}]},
                {"type": "namespace", "name": "mcp__chaos", "tools": [{"name": "probe", "parameters": {"properties": {"text": {}}}}]},
                {"type": "web_search"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(
            offered_in(&v),
            [
                "shell(background,command)",
                "mcp_chaos_probe(text)",
                "g(query)",
                "mcp__chaos/probe(text)"
            ]
        );
        let many: Vec<Value> = (0..100)
            .map(|i| serde_json::json!({"name": format!("t{i}")}))
            .collect();
        assert_eq!(offered_tools(&many).len(), OFFERED_KEEP);
        let long = [serde_json::json!({"name": "x".repeat(1000)})];
        assert_eq!(offered_tools(&long)[0].chars().count(), OFFERED_KEEP_CHARS);
    }

    #[test]
    fn a_subagents_request_is_known_by_its_opening_user_messages() {
        let sub = |msgs: Vec<Message>| {
            bound_request(
                Request {
                    messages: msgs,
                    ..Request::default()
                },
                "N",
            )
            .subagent
        };
        assert!(sub(vec![
            Message::new("system", "s"),
            Message::new("user", "look [[subagent:N]]")
        ]));
        // The parent's later requests carry the marker only in a tool call's arguments.
        assert!(!sub(vec![
            Message::new("user", "task"),
            Message::new("tool", "[[subagent:N]] done")
        ]));
        assert!(!sub(vec![Message::new("user", "look [[subagent:OTHER]]")]));
        // Codex: its context as a user message, then the subagent's prompt.
        assert!(sub(vec![
            Message::new("system", "s"),
            Message::new("user", "<environment_context>…</environment_context>"),
            Message::new("user", "list the files here [[subagent:N]]")
        ]));
        // A user message after the conversation opened is not an opening.
        assert!(!sub(vec![
            Message::new("user", "task"),
            Message::new("assistant", ""),
            Message::new("tool", "ok"),
            Message::new("user", "again [[subagent:N]]")
        ]));
    }

    #[test]
    fn a_note_after_the_probe_prompt_still_makes_a_probe() {
        let probe = |msgs: Vec<Message>| {
            let req = Request {
                messages: msgs,
                ..Request::default()
            };
            bound_request(req, "N").probe
        };
        let answered = || {
            vec![
                Message::new("user", "task"),
                Message::new("assistant", "done"),
            ]
        };
        let note = || Message::new("user", "<system-reminder>note</system-reminder>");
        let mut asked = answered();
        asked.extend([Message::new("user", "still there? [[probe:N]]"), note()]);
        assert_eq!(probe(asked), Some("N".into()));
        // A marker before the model's last answer is an earlier turn's.
        let mut old = vec![Message::new("user", "[[probe:N]]")];
        old.extend(answered());
        old.push(note());
        assert_eq!(probe(old), None);
    }

    #[test]
    fn reasoning_is_bounded_like_content() {
        let mut m = Message::new("assistant", "ok");
        m.reasoning = "r".repeat(CONTENT_KEEP_CHARS + 5);
        let p = bound_request(
            Request {
                messages: vec![m],
                ..Request::default()
            },
            "",
        );
        assert_eq!(p.messages[0].reasoning.len(), CONTENT_KEEP_CHARS);
        assert_eq!(p.messages[0].reasoning_chars, CONTENT_KEEP_CHARS + 5);
        assert!(p.truncated);
    }

    #[test]
    fn malformed_bodies_are_rejected_on_every_wire() {
        for w in Wire::ALL {
            assert!(parse(w, b"{not json", None, None, "").is_err(), "{w}");
            assert!(parse(w, b"[]", None, None, "").is_err(), "{w}");
            assert!(parse(w, b"{}", None, None, "").is_ok(), "{w}");
        }
        assert!(parse(Wire::OpenaiChat, b"{\"messages\": 3}", None, None, "").is_err());
        assert!(parse(Wire::Anthropic, b"{\"messages\": 3}", None, None, "").is_err());
        assert!(parse(Wire::Gemini, b"{\"contents\": 3}", None, None, "").is_err());
        assert!(parse(Wire::OpenaiResponses, b"{\"input\": 3}", None, None, "").is_err());
    }

    #[test]
    fn bounds_content_and_finds_probe() {
        let big = "x".repeat(CONTENT_KEEP_CHARS + 10);
        let req = Request {
            messages: vec![
                Message::new("user", "a [[probe:N]]"),
                Message::tool_result("c1", big),
            ],
            ..Request::default()
        };
        let p = bound_request(req, "N");
        assert!(p.truncated && p.after_tool);
        assert_eq!(p.probe.as_deref(), Some("N"));
        assert_eq!(p.messages[1].content.len(), CONTENT_KEEP_CHARS);
        assert_eq!(p.messages[1].content_chars, CONTENT_KEEP_CHARS + 10);
    }
}
