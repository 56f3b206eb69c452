//! `tool_call`: one assistant message carrying one or more tool calls (a
//! parallel batch). Arguments are a JSON object serialised as the OpenAI
//! `arguments` string, or, when given as a YAML string, sent verbatim (so
//! malformed JSON reaches the agent as is). Ids are unique per server. Logical
//! tool names are mapped to the agent's names through the provider's tool map.
//! Value faults: a call's literal `id` (a stale replay that reuses an earlier
//! call's id) and `finish_reason: length` (the last call's arguments cut in
//! half mid-JSON, finished for length).
//! Planned as the start, each call's start, its arguments in pieces and its
//! end, then the finish (`tool_calls`, or `length`); each wire encodes the calls its way
//! (Chat `tool_calls` deltas, Responses `function_call` items, Anthropic
//! `tool_use` blocks, Gemini `functionCall` parts).

use serde::{Deserialize, Serialize};

/// The logical subagent tool (the profile's `tools.subagent`).
pub const SUBAGENT: &str = "subagent";

/// One call in the batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// Logical tool name (`shell`) or a literal one (`no_such_tool`).
    pub tool: String,
    /// An object (logical argument names), or a string sent verbatim.
    /// `{{nonce}}`, `{{i}}` (the call's position in the batch) and `{{call}}`
    /// (the main-call index, unique per call) are substituted.
    #[serde(default = "empty_object")]
    pub args: serde_json::Value,
    /// A literal call id (`{{nonce}}` substituted) instead of one unique
    /// per server: given on two replies, the second replays the first's
    /// call (a stale cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    pub calls: Vec<ToolCallSpec>,
    /// When set, the batch is `calls` repeated this many times (`{{i}}` counts).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::units::repeat"
    )]
    pub repeat: Option<usize>,
    /// `tool_calls` (the default), or `length`: the batch's last call has
    /// its arguments cut in half (by characters) and the reply finishes for
    /// length (the wire's max-tokens finish).
    #[serde(default = "default_finish", skip_serializing_if = "is_default_finish")]
    pub finish_reason: String,
    /// Every arguments delta sent twice in a row (duplicated stream frames:
    /// joined as they come, the arguments are doubled, broken JSON; an agent
    /// that drops a repeated frame gets them whole). The oracle keeps the
    /// arguments as planned: running them once is no fault, twice is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate_frames: bool,
}

fn default_finish() -> String {
    "tool_calls".into()
}

fn is_default_finish(s: &str) -> bool {
    s == "tool_calls"
}

/// How many argument chars go in each streamed `arguments` delta.
const ARG_PIECE_CHARS: usize = 24;

/// One call as it goes on the wire.
struct WireCall {
    id: String,
    name: String,
    arguments: String,
}

impl ToolCall {
    /// The batch after `repeat`, in order.
    pub fn batch(&self) -> Vec<&ToolCallSpec> {
        let times = self.repeat.unwrap_or(1);
        (0..times).flat_map(|_| self.calls.iter()).collect()
    }

    /// The batch's plan and the calls it issues (logical terms).
    pub(crate) fn plan_calls(
        &self,
        ctx: &super::ReplyCtx<'_>,
    ) -> (super::Plan, Vec<crate::provider::recording::IssuedToolCall>) {
        use super::{render, render_value, Beat};
        use crate::provider::recording::IssuedToolCall;
        use crate::provider::wire::{split_chars, Event, Usage};
        use serde_json::Value;

        let mut issued = Vec::new();
        let mut wire = Vec::new();
        let batch = self.batch();
        let last = batch.len().saturating_sub(1);
        for (i, spec) in batch.into_iter().enumerate() {
            let call = ctx.main_index.to_string();
            let id = match &spec.id {
                Some(id) => render(id, ctx.nonce, Some(i)).replace("{{call}}", &call),
                None => format!("{}_{i}", ctx.call_id_prefix),
            };
            let args = match &spec.args {
                // A string is sent verbatim (after templating): malformed JSON stays malformed.
                Value::String(s) => {
                    Value::String(render(s, ctx.nonce, Some(i)).replace("{{call}}", &call))
                }
                other => with_call(&render_value(other, ctx.nonce, Some(i)), &call),
            };
            let args = with_subagent_marker(&spec.tool, args, ctx.nonce);
            let (name, wire_args) = match ctx.tools.get(&spec.tool) {
                Some(mapping) => (
                    mapping.name.clone(),
                    with_fixed(map_arg_names(&args, &mapping.args), &mapping.fixed),
                ),
                None => (spec.tool.clone(), args.clone()),
            };
            let mut arguments = match &wire_args {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut args = args;
            if i == last && self.finish_reason == "length" {
                // Cut mid-JSON: what the agent got is the cut text, so the
                // oracle sees that too.
                arguments = cut_in_half(&arguments);
                args = Value::String(arguments.clone());
            }
            issued.push(IssuedToolCall {
                id: id.clone(),
                tool: spec.tool.clone(),
                args,
                main_index: ctx.main_index,
            });
            wire.push(WireCall {
                id,
                name,
                arguments,
            });
        }

        let answer_chars: usize = wire.iter().map(|c| c.arguments.chars().count()).sum();
        let usage = Usage::estimate(ctx.request_bytes, answer_chars);
        let mut beats = vec![Beat::Emit(Event::Start)];
        for (index, call) in wire.into_iter().enumerate() {
            beats.push(Beat::Emit(Event::ToolCallStart {
                index,
                id: call.id,
                name: call.name,
            }));
            for piece in split_chars(&call.arguments, ARG_PIECE_CHARS) {
                beats.push(Beat::Emit(Event::ToolArgsDelta {
                    index,
                    text: piece.to_string(),
                }));
            }
            beats.push(Beat::Emit(Event::ToolCallEnd { index }));
        }
        beats.push(Beat::Emit(Event::Finish {
            reason: self.finish_reason.clone(),
            usage,
        }));
        if self.duplicate_frames {
            beats = super::duplicated(beats);
        }
        (super::Plan::Beats(beats), issued)
    }
}

/// The first half of `s`, by characters.
fn cut_in_half(s: &str) -> String {
    let n = s.chars().count() / 2;
    s.chars().take(n).collect()
}

impl crate::kinds::Kind for ToolCall {
    const NAME: &'static str = "tool_call";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts::coloured("#1565c0");
}

impl super::ReplyKind for ToolCall {
    fn tool_calls(&self) -> &[ToolCallSpec] {
        &self.calls
    }

    fn tool_calls_mut(&mut self) -> Option<&mut Vec<ToolCallSpec>> {
        Some(&mut self.calls)
    }

    /// A value fault: arguments cut for length, a literal id (a replay),
    /// or duplicated frames.
    fn value_fault(&self) -> bool {
        self.finish_reason != "tool_calls"
            || self.duplicate_frames
            || self.calls.iter().any(|c| c.id.is_some())
    }

    /// At least one call, `calls × repeat` within the count bound, a
    /// prompt for every `subagent` call, and a known finish.
    fn check(&self) -> Result<(), String> {
        use crate::units::{count, MAX_COUNT};
        if self.calls.is_empty() {
            return Err("a `tool_call` reply needs at least one call".into());
        }
        if !matches!(self.finish_reason.as_str(), "tool_calls" | "length") {
            return Err(format!(
                "a `tool_call` reply's `finish_reason` is `tool_calls` or `length`, not `{}`",
                self.finish_reason
            ));
        }
        let repeat = self.repeat.unwrap_or(1) as u64;
        let n = (self.calls.len() as u64).saturating_mul(repeat);
        count("calls × repeat", n, MAX_COUNT)?;
        let prompted = |c: &ToolCallSpec| {
            c.args
                .get("prompt")
                .and_then(|p| p.as_str())
                .is_some_and(|p| !p.trim().is_empty())
        };
        if self.calls.iter().any(|c| c.tool == SUBAGENT && !prompted(c)) {
            return Err(
                "a `subagent` call needs `args: {prompt: TEXT}` (the task the parent hands its \
                 subagent; chaosrun appends the marker that tells the subagent's calls apart)"
                    .into(),
            );
        }
        Ok(())
    }

    fn plan(&self, ctx: &super::ReplyCtx<'_>) -> super::Plan {
        self.plan_calls(ctx).0
    }

    fn planned(&self, ctx: &super::ReplyCtx<'_>) -> super::Planned {
        let (plan, issued) = self.plan_calls(ctx);
        super::Planned { plan, issued }
    }
}

/// Rename an object's keys through `names` (keys not in it pass unchanged,
/// except an optional argument a non-empty map leaves out, which is dropped:
/// see [`crate::provider::OPTIONAL_ARGS`]); anything but an object is
/// returned as is.
fn map_arg_names(
    args: &serde_json::Value,
    names: &std::collections::BTreeMap<String, crate::provider::ArgMap>,
) -> serde_json::Value {
    let dropped = |k: &String| {
        !names.is_empty()
            && !names.contains_key(k)
            && crate::provider::OPTIONAL_ARGS.contains(&k.as_str())
    };
    match args {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .filter(|(k, _)| !dropped(k))
                .map(|(k, v)| match names.get(k) {
                    Some(m) => (m.name().to_string(), m.apply(v)),
                    None => (k.clone(), v.clone()),
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The mapping's `fixed` arguments added to an object's keys (a key the
/// call already has is kept); anything but an object is returned as is.
fn with_fixed(
    mut args: serde_json::Value,
    fixed: &std::collections::BTreeMap<String, serde_json::Value>,
) -> serde_json::Value {
    if let serde_json::Value::Object(map) = &mut args {
        for (k, v) in fixed {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    args
}

/// A call of the logical `subagent` tool: its `prompt` ends with the row's
/// `[[subagent:NONCE]]` marker, so the requests of the subagent it starts
/// (a user message of their opening) are told apart from the parent's.
fn with_subagent_marker(tool: &str, mut args: serde_json::Value, nonce: &str) -> serde_json::Value {
    if tool != SUBAGENT {
        return args;
    }
    if let Some(serde_json::Value::String(p)) = args.get_mut("prompt") {
        let marker = crate::provider::wire::request::subagent_marker_text(nonce);
        if !p.contains(&marker) {
            p.push_str(&format!(" {marker}"));
        }
    }
    args
}

/// `{{call}}` (the main-call index, unique per call on this server) in every
/// string of `v`.
fn with_call(v: &serde_json::Value, call: &str) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(s.replace("{{call}}", call)),
        Value::Array(items) => Value::Array(items.iter().map(|x| with_call(x, call)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, x)| (k.clone(), with_call(x, call)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::{on_chat, test_ctx};
    use crate::provider::ToolMapping;
    use serde_json::json;

    fn spec(yaml: &str) -> ToolCall {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[tokio::test]
    async fn maps_names_and_keeps_logical_record() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let mut tools = std::collections::BTreeMap::new();
        tools.insert(
            "shell".to_string(),
            ToolMapping {
                name: "terminal".into(),
                args: [
                    ("cmd".to_string(), "command".into()),
                    (
                        "timeout".to_string(),
                        crate::provider::ArgMap::Map {
                            name: "timeout_ms".into(),
                            map: crate::provider::ValueMap::Ms,
                        },
                    ),
                ]
                .into(),
                fixed: Default::default(),
            },
        );
        let ctx = test_ctx(&tools);
        let t = spec(
            "{calls: [{tool: shell, args: {cmd: 'echo {{nonce}} {{i}}', bg: true, timeout: 2.5}}], repeat: 2}",
        );
        let (plan, issued) = t.plan_calls(&ctx);
        let resp = on_chat(plan, false, &cancel).await;
        let (body, _) = collect(resp.into_body()).await;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1]["function"]["name"], "terminal");
        let args: serde_json::Value =
            serde_json::from_str(calls[1]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            args,
            json!({"command": "echo NONCE 1", "bg": true, "timeout_ms": 2500})
        );
        assert_eq!(issued[1].tool, "shell");
        assert_eq!(
            issued[1].args,
            json!({"cmd": "echo NONCE 1", "bg": true, "timeout": 2.5})
        );
        assert_ne!(issued[0].id, issued[1].id);
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    }

    #[tokio::test]
    async fn fixed_arguments_go_on_the_wire_and_a_rows_own_argument_wins() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools: std::collections::BTreeMap<String, ToolMapping> = serde_yaml::from_str(
            "subagent: {name: Agent, args: {prompt: prompt}, fixed: {description: chaosrun subagent, run_in_background: false}}",
        )
        .unwrap();
        let ctx = test_ctx(&tools);
        let t = spec("{calls: [{tool: subagent, args: {prompt: look, run_in_background: true}}]}");
        let (plan, issued) = t.plan_calls(&ctx);
        let resp = on_chat(plan, false, &cancel).await;
        let (body, _) = collect(resp.into_body()).await;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "Agent");
        let args: serde_json::Value =
            serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            args,
            json!({"prompt": "look [[subagent:NONCE]]", "description": "chaosrun subagent",
                   "run_in_background": true})
        );
        // The logical record keeps only the row's own arguments.
        assert_eq!(
            issued[0].args,
            json!({"prompt": "look [[subagent:NONCE]]", "run_in_background": true})
        );
    }

    #[test]
    fn a_subagent_prompt_carries_the_marker_once() {
        let args = with_subagent_marker("subagent", json!({"prompt": "look"}), "N");
        assert_eq!(args, json!({"prompt": "look [[subagent:N]]"}));
        assert_eq!(with_subagent_marker("subagent", args.clone(), "N"), args);
        assert_eq!(
            with_subagent_marker("shell", json!({"prompt": "x"}), "N"),
            json!({"prompt": "x"})
        );
    }

    #[test]
    fn an_optional_argument_the_map_leaves_out_is_dropped_not_sent() {
        let names: std::collections::BTreeMap<String, crate::provider::ArgMap> =
            [("command".to_string(), "cmd".into())].into();
        let args = json!({"command": "x", "timeout": 3, "other": 1});
        assert_eq!(
            map_arg_names(&args, &names),
            json!({"cmd": "x", "other": 1})
        );
        // An empty map is the identity: nothing dropped.
        assert_eq!(map_arg_names(&args, &Default::default()), args);
    }

    #[tokio::test]
    async fn call_index_is_substituted_for_unique_tokens() {
        let tools = Default::default();
        let mut ctx = test_ctx(&tools);
        ctx.main_index = 7;
        let t = spec("{calls: [{tool: x, args: {cmd: 'echo SE-{{call}}-{{nonce}}'}}]}");
        let (_, issued) = t.plan_calls(&ctx);
        assert_eq!(issued[0].args, json!({"cmd": "echo SE-7-NONCE"}));
        let raw = spec("{calls: [{tool: x, args: 'c={{call}}'}]}");
        assert_eq!(raw.plan_calls(&ctx).1[0].args, json!("c=7"));
    }

    #[tokio::test]
    async fn raw_string_args_are_verbatim_in_the_stream() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let t = spec("{calls: [{tool: x, args: '{\"a\": \"{{nonce}}'}]}");
        let (plan, _) = t.plan_calls(&test_ctx(&tools));
        let resp = on_chat(plan, true, &cancel).await;
        let (body, cut) = collect(resp.into_body()).await;
        assert!(!cut);
        let body = String::from_utf8(body).unwrap();
        let mut args = String::new();
        for ev in body.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
            if ev == "[DONE]" {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(ev).unwrap();
            if let Some(calls) = v["choices"][0]["delta"]["tool_calls"].as_array() {
                args.push_str(calls[0]["function"]["arguments"].as_str().unwrap());
            }
        }
        assert_eq!(args, "{\"a\": \"NONCE");
        assert!(body.ends_with("data: [DONE]\n\n"));
    }
}
