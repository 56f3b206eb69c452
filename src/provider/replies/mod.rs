//! One small type per reply kind, each implementing [`ReplyKind`] (plan its
//! events) in its own file, registered once in [`Reply`]. Each kind's
//! file says its wire behaviour in its doc comment and carries its own tests.
//!
//! The YAML form is internally tagged: `{kind: hang, seconds: 3600}`. The
//! kinds are registered once, in the [`registry!`](crate::kinds)
//! list below; an unknown kind is rejected with the list of known kinds.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::recording::IssuedToolCall;
pub use super::recording::ReplyError;
use super::wire::{ErrorInfo, Event, Wire};
use super::ToolMapping;

pub use tool_call::ToolCallSpec;

crate::kinds::registry! {
    /// A reply to one main call: `{kind: NAME, ...fields}`.
    "reply", Reply: dyn ReplyKind {
        Text(text::Text),
        ToolCall(tool_call::ToolCall),
        Error(error::ErrorReply),
        Hang(hang::Hang),
        StallMidStream(stall_mid_stream::StallMidStream),
        DropMidStream(drop_mid_stream::DropMidStream),
        SilentAfterHeaders(silent_after_headers::SilentAfterHeaders),
        Raw(raw::Raw),
        Relay(relay::Relay),
        QuotaExhausted(quota_exhausted::QuotaExhausted),
        UsageLimit(usage_limit::UsageLimit),
        AuthExpired(auth_expired::AuthExpired),
        KeepaliveForever(keepalive_forever::KeepaliveForever),
        EndlessText(endless_text::EndlessText),
        Cassette(cassette::CassetteReply),
    }
}

/// Every reply kind's name, in registry order (the docs' list of kinds).
pub fn kind_names() -> &'static [&'static str] {
    Reply::KINDS
}

/// What a reply kind does, whatever the wire: plan its events; and what the
/// rest of the code asks of a kind (where its answer comes from, whether it
/// is a fault a retrying agent rides through, the tool calls it issues, its
/// error as a wire delivers it), so no other file names a kind.
pub(crate) trait ReplyKind {
    /// What happens and when.
    fn plan(&self, ctx: &ReplyCtx<'_>) -> Plan;

    /// The plan and the tool calls it issues (none but for `tool_call`).
    fn planned(&self, ctx: &ReplyCtx<'_>) -> Planned {
        Planned {
            plan: self.plan(ctx),
            issued: Vec::new(),
        }
    }

    /// What an error reply tells the client about retrying, recorded with
    /// the request for the backoff check; `None` for a reply that is no error.
    fn error_hint(&self) -> Option<ReplyError> {
        None
    }

    /// The error hint as `wire` delivers it to a request (`stream`): a wire
    /// may give a classed error its own status, or drop a retry-after its
    /// mid-stream error event cannot carry.
    fn error_hint_on(&self, _wire: Wire, _stream: bool) -> Option<ReplyError> {
        self.error_hint()
    }

    /// Where the answer comes from: chaosrun itself, the upstream, a cassette.
    fn source(&self) -> Source<'_> {
        Source::Local
    }

    /// A fault a retrying agent should ride through (a retryable status, a
    /// hang, a broken stream).
    fn retryable(&self) -> bool {
        false
    }

    /// A fault at all: anything but an immediate plain answer.
    fn is_fault(&self) -> bool {
        true
    }

    /// A value fault: a 200 whose answer is wrong without being an error
    /// (empty, cut for length, refused, a tool-calls finish with no calls).
    fn value_fault(&self) -> bool {
        false
    }

    /// The partial answer a reply cut for length sends to main call
    /// `call` (`None` for a reply that is not one).
    fn cut_text(&self, _nonce: &str, _call: u64) -> Option<String> {
        None
    }

    /// An empty 200: no content and no tool calls, not cut (an agent that
    /// asks again is retrying, and owes the backoff it owes an error).
    fn empty_answer(&self) -> bool {
        false
    }

    /// The tool calls the reply asks the agent for.
    fn tool_calls(&self) -> &[ToolCallSpec] {
        &[]
    }

    /// The same, to change (a profile adapts a row's calls); `None` for a
    /// kind that asks for none.
    fn tool_calls_mut(&mut self) -> Option<&mut Vec<ToolCallSpec>> {
        None
    }

    /// What is wrong with the kind's fields beyond its schema (checked at
    /// load), if anything.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Where a reply's answer comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source<'a> {
    /// chaosrun plans it.
    Local,
    /// The upstream's real answer, with this fault applied (proxy mode).
    Upstream {
        fault: Option<&'a crate::provider::upstream::faults::Fault>,
    },
    /// A recorded answer from this cassette, with this fault applied.
    Replayed {
        file: &'a std::path::Path,
        fault: Option<&'a crate::provider::upstream::faults::Fault>,
    },
}

/// Default length of every long fault: an hour, so a turn still running at its
/// deadline is waiting on the fault, not merely slow.
pub const FAULT_SECONDS: f64 = 3600.0;

pub(crate) fn fault_seconds() -> f64 {
    FAULT_SECONDS
}

impl Reply {
    /// What an error reply tells the client about retrying, recorded with the
    /// request for the backoff check; `None` for a reply that is no error.
    /// Wire-neutral: the server records the status the wire gives a classed
    /// error and drops a retry-after its mid-stream event cannot carry.
    pub fn error_hint(&self) -> Option<ReplyError> {
        self.as_dyn().error_hint()
    }

    /// The error hint as `wire` delivers it (see [`ReplyKind::error_hint_on`]).
    pub fn error_hint_on(&self, wire: Wire, stream: bool) -> Option<ReplyError> {
        self.as_dyn().error_hint_on(wire, stream)
    }

    /// Plan the reply.
    pub(crate) fn plan(&self, ctx: &ReplyCtx<'_>) -> Planned {
        self.as_dyn().planned(ctx)
    }

    /// Where the answer comes from.
    pub fn source(&self) -> Source<'_> {
        self.as_dyn().source()
    }

    /// A fault a retrying agent should ride through.
    pub fn retryable(&self) -> bool {
        self.as_dyn().retryable()
    }

    /// A fault at all: anything but an immediate plain answer.
    pub fn is_fault(&self) -> bool {
        self.as_dyn().is_fault()
    }

    /// A 200 whose answer is wrong without being an error.
    pub fn value_fault(&self) -> bool {
        self.as_dyn().value_fault()
    }

    /// The partial answer a reply cut for length sends to main call `call`.
    pub fn cut_text(&self, nonce: &str, call: u64) -> Option<String> {
        self.as_dyn().cut_text(nonce, call)
    }

    /// An empty 200 (no content, no tool calls).
    pub fn empty_answer(&self) -> bool {
        self.as_dyn().empty_answer()
    }

    /// The tool calls the reply asks the agent for.
    pub fn tool_calls(&self) -> &[ToolCallSpec] {
        self.as_dyn().tool_calls()
    }

    /// The tool calls, to change; `None` for a kind that asks for none.
    pub fn tool_calls_mut(&mut self) -> Option<&mut Vec<ToolCallSpec>> {
        self.as_dyn_mut().tool_calls_mut()
    }

    /// What is wrong with the kind's fields beyond its schema, if anything.
    pub fn check(&self) -> Result<(), String> {
        self.as_dyn().check()
    }

    /// The colour of the kind recorded as `name` on the HTML timeline (a
    /// reply kind's own; `None` for a name that is no reply kind).
    pub fn colour_of(name: &str) -> Option<&'static str> {
        Self::facts_of(name).and_then(|f| f.colour)
    }

    /// Whether the kind recorded as `name` leaves its request waiting.
    pub fn waits(name: &str) -> bool {
        Self::facts_of(name).is_some_and(|f| f.waits)
    }

    /// Whether the kind recorded as `name` refused the request's credential.
    pub fn refuses_credential(name: &str) -> bool {
        Self::facts_of(name).is_some_and(|f| f.refuses_credential)
    }

    /// A plain text answer.
    pub fn plain(text: impl Into<String>) -> Reply {
        Text::plain(text).into()
    }

    /// The reply served to a request whose credential has expired.
    pub fn credential_refusal() -> Reply {
        AuthExpired::reply()
    }

    /// The name recorded for a call relayed to the upstream as it is.
    pub const RELAYED: &'static str = <Relay as crate::kinds::Kind>::NAME;

    /// The kind that answers with text (`{kind: PLAIN, text: ...}`).
    pub const PLAIN: &'static str = <Text as crate::kinds::Kind>::NAME;

    /// The kind that asks for tool calls (`{kind: TOOL_CALLS, calls: [...]}`).
    pub const TOOL_CALLS: &'static str = <ToolCall as crate::kinds::Kind>::NAME;

    /// The kind that leaves the call waiting, with no field needed.
    pub const WAITING: &'static str = <Hang as crate::kinds::Kind>::NAME;

    /// A replay of the cassette `file`, with `fault` applied.
    pub fn replayed(
        file: std::path::PathBuf,
        fault: Option<crate::provider::upstream::faults::Fault>,
    ) -> Reply {
        CassetteReply { file, fault }.into()
    }
}

/// Whether providers mean `status` as "try again later": 408, 409, 429 and
/// every 5xx (Anthropic's 529 included).
pub fn retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// What a reply needs to know about the request it answers and the server.
/// Nothing here is about a wire: a reply decides what happens and when.
pub(crate) struct ReplyCtx<'a> {
    /// Substituted for `{{nonce}}`.
    pub nonce: &'a str,
    /// Request body size, for the usage estimate.
    pub request_bytes: usize,
    /// Main-call index (0 for probe and auxiliary answers).
    pub main_index: u64,
    /// Logical tool name → agent mapping.
    pub tools: &'a BTreeMap<String, ToolMapping>,
    /// Prefix unique per reply on this server; tool call `i` gets `{prefix}_{i}`.
    pub call_id_prefix: &'a str,
}

/// `beats` with every content delta (text, reasoning, a tool call's
/// arguments) sent twice in a row: the duplicated stream frames a faulty
/// proxy or a client-side retry of a stream leaves.
pub(crate) fn duplicated(beats: Vec<Beat>) -> Vec<Beat> {
    let mut out = Vec::with_capacity(beats.len() * 2);
    for b in beats {
        let twice = matches!(
            b,
            Beat::Emit(
                Event::TextDelta(_) | Event::ReasoningDelta(_) | Event::ToolArgsDelta { .. }
            )
        );
        if twice {
            out.push(b.clone());
        }
        out.push(b);
    }
    out
}

/// One step of a reply's plan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Beat {
    /// Send this event (the wire decides its bytes).
    Emit(Event),
    /// Wait; shutdown cuts the body instead.
    Wait(Duration),
    /// Let what was sent so far reach the socket.
    Flush,
    /// Close the connection before the body's end.
    Cut,
    /// Play these beats again and again until shutdown or the client goes
    /// (nothing after it is played). The wire encodes each round as it is
    /// sent, so memory stays the size of one round.
    Forever(Vec<Beat>),
}

/// What a reply does, independent of the wire.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// An error status and body before any stream.
    Error(ErrorInfo),
    /// The wire's error body for this error, under HTTP 200 (no
    /// retry-after header).
    ErrorIn200(ErrorInfo),
    /// Accept, send nothing (not even headers), drop the socket after this.
    Hang(Duration),
    /// A verbatim response.
    Raw {
        status: u16,
        content_type: String,
        body: String,
    },
    /// 200, then these beats (SSE when the request streams).
    Beats(Vec<Beat>),
}

/// A planned reply: what to play, and the tool calls it issues (logical terms).
pub(crate) struct Planned {
    pub plan: Plan,
    pub issued: Vec<IssuedToolCall>,
}

/// Substitute `{{nonce}}`, and `{{i}}` when `i` is given.
pub(crate) fn render(s: &str, nonce: &str, i: Option<usize>) -> String {
    let mut out = s.replace("{{nonce}}", nonce);
    if let Some(i) = i {
        out = out.replace("{{i}}", &i.to_string());
    }
    out
}

/// [`render`] over every string (and object key) inside a JSON value.
pub(crate) fn render_value(
    v: &serde_json::Value,
    nonce: &str,
    i: Option<usize>,
) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(render(s, nonce, i)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|x| render_value(x, nonce, i)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, x)| (render(k, nonce, i), render_value(x, nonce, i)))
                .collect(),
        ),
        other => other.clone(),
    }
}

pub(crate) use crate::units::secs;

/// Wait `d`, or less when `cancel` fires. True when the full time passed.
pub(crate) async fn wait_or_cancel(d: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = cancel.cancelled() => false,
    }
}

/// One step of a scripted response body (bytes, after a wire encoded them).
pub(crate) enum Step {
    /// Send these bytes.
    Data(Bytes),
    /// Wait; shutdown cuts the body instead.
    Wait(Duration),
    /// Give hyper one chance to flush what was sent so far.
    Flush,
    /// End the body abnormally: hyper aborts the chunked encoding and closes
    /// the connection (no terminating chunk reaches the client).
    Cut,
    /// Steps made one round at a time, forever (a round must wait, or the
    /// body would spin): see [`Beat::Forever`].
    Forever(Box<dyn FnMut() -> Vec<Step> + Send>),
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Data(b) => f.debug_tuple("Data").field(b).finish(),
            Step::Wait(d) => f.debug_tuple("Wait").field(d).finish(),
            Step::Flush => f.write_str("Flush"),
            Step::Cut => f.write_str("Cut"),
            Step::Forever(_) => f.write_str("Forever(..)"),
        }
    }
}

fn cut_error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "chaosrun: body cut on purpose",
    )
}

/// A streaming body playing `steps`; ends cleanly after the last one unless a
/// [`Step::Cut`] (or shutdown during a wait) cuts it.
pub(crate) fn script_body(steps: Vec<Step>, cancel: CancellationToken) -> Body {
    let steps: VecDeque<Step> = steps.into();
    let stream = futures_util::stream::unfold(Some((steps, cancel)), |state| async move {
        let (mut steps, cancel) = state?;
        loop {
            match steps.pop_front()? {
                Step::Data(b) => return Some((Ok(b), Some((steps, cancel)))),
                Step::Wait(d) => {
                    if !d.is_zero() && !wait_or_cancel(d, &cancel).await {
                        return Some((Err(cut_error()), None));
                    }
                }
                Step::Flush => tokio::task::yield_now().await,
                Step::Cut => return Some((Err(cut_error()), None)),
                Step::Forever(mut round) => {
                    let next = round();
                    if next.is_empty() {
                        return None;
                    }
                    steps.push_front(Step::Forever(round));
                    for step in next.into_iter().rev() {
                        steps.push_front(step);
                    }
                }
            }
        }
    });
    Body::from_stream(stream)
}

/// A body whose first poll fails: hyper drops the connection before the
/// buffered response head is flushed, so the client sees no byte at all.
pub(crate) fn abort_body() -> Body {
    Body::from_stream(futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(cut_error())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(y: &str) -> Reply {
        serde_yaml::from_str(y).unwrap()
    }

    /// Every kind has its own colour, and the legend's order is the registry's.
    #[test]
    fn every_kind_declares_a_distinct_colour() {
        let mut colours: Vec<&str> = Reply::KINDS
            .iter()
            .map(|k| Reply::colour_of(k).unwrap_or_else(|| panic!("{k} has no colour")))
            .collect();
        colours.sort();
        colours.dedup();
        assert_eq!(colours.len(), Reply::KINDS.len(), "{colours:?}");
        assert_eq!(Reply::colour_of("not_found"), None);
    }

    /// One rule of what is retryable: the error kind's own, matching the
    /// hint it records; the broken-answer kinds; never a quota or an answer.
    #[test]
    fn what_a_retrying_agent_should_ride_through() {
        for (y, want) in [
            ("{kind: error, status: 429}", true),
            ("{kind: error, status: 408}", true),
            ("{kind: error, status: 529}", true),
            ("{kind: error, status: 400}", false),
            ("{kind: hang}", true),
            ("{kind: stall_mid_stream}", true),
            ("{kind: drop_mid_stream}", true),
            ("{kind: silent_after_headers}", true),
            ("{kind: quota_exhausted}", false),
            ("{kind: text, text: hi}", false),
        ] {
            let r = reply(y);
            assert_eq!(r.retryable(), want, "{y}");
            if let Some(hint) = r.error_hint().filter(|_| r.kind_name() == "error") {
                assert_eq!(hint.retryable, want, "{y}: the recorded hint agrees");
            }
        }
        assert!(Reply::waits("hang") && Reply::waits("keepalive_forever"));
        assert!(!Reply::waits("text") && !Reply::waits("drop_mid_stream"));
    }

    /// Where an answer comes from, and the tool calls a kind asks for.
    #[test]
    fn sources_and_tool_calls() {
        assert_eq!(reply("{kind: hang}").source(), Source::Local);
        let r = reply("{kind: relay, fault: {kind: cut_before_terminal}}");
        assert!(matches!(r.source(), Source::Upstream { fault: Some(_) }));
        let r = reply("{kind: cassette, file: a.jsonl}");
        assert!(
            matches!(r.source(), Source::Replayed { file, fault: None } if file == std::path::Path::new("a.jsonl"))
        );
        let mut r = reply("{kind: tool_call, calls: [{tool: shell, args: {}}]}");
        assert_eq!(r.tool_calls().len(), 1);
        r.tool_calls_mut().unwrap().clear();
        assert!(r.check().unwrap_err().contains("at least one call"));
        assert!(reply("{kind: text, text: a}").tool_calls_mut().is_none());
        assert!(!reply("{kind: text, text: a}").is_fault());
        assert!(reply("{kind: text, text: a, delay_per_chunk: 1}").is_fault());
        assert!(reply("{kind: text, text: ''}").is_fault());
        assert!(reply("{kind: text, text: a, finish_reason: length}").is_fault());
        assert!(reply("{kind: text, text: a, finish_reason: content_filter}").is_fault());
        assert!(!reply("{kind: text, text: a, finish_reason: stop}").is_fault());
        assert!(reply("{kind: text, text: a, finish_reason: length}").value_fault());
        assert!(!reply("{kind: text, text: a, delay_per_chunk: 1}").value_fault());
        assert!(!reply("{kind: error, status: 500}").value_fault());
    }

    /// Each wire's status for a quota error, and a mid-stream retry-after
    /// dropped where the wire cannot carry it.
    #[test]
    fn error_hints_as_each_wire_delivers_them() {
        let q = reply("{kind: quota_exhausted}");
        assert_eq!(q.error_hint_on(Wire::Anthropic, false).unwrap().status, 400);
        assert_eq!(
            q.error_hint_on(Wire::OpenaiChat, false).unwrap().status,
            429
        );
        let e = reply("{kind: error, status: 503, retry_after: 2, mid_stream: true}");
        assert_eq!(
            e.error_hint_on(Wire::OpenaiChat, true).unwrap().retry_after,
            None
        );
        assert_eq!(
            e.error_hint_on(Wire::Gemini, true).unwrap().retry_after,
            Some(2)
        );
        assert_eq!(
            e.error_hint_on(Wire::OpenaiChat, false)
                .unwrap()
                .retry_after,
            Some(2)
        );
    }

    #[test]
    fn render_substitutes_nonce_and_index() {
        assert_eq!(render("a {{nonce}} {{i}}", "N1", Some(3)), "a N1 3");
        assert_eq!(render("a {{i}}", "N1", None), "a {{i}}");
        let v = render_value(
            &json!({"cmd": "echo {{nonce}}-{{i}}", "n": [1, "{{i}}"]}),
            "X",
            Some(2),
        );
        assert_eq!(v, json!({"cmd": "echo X-2", "n": [1, "2"]}));
    }

    #[test]
    fn secs_clamps() {
        assert_eq!(secs(-1.0), Duration::ZERO);
        assert_eq!(secs(f64::NAN), Duration::ZERO);
        assert_eq!(secs(1.5), Duration::from_millis(1500));
        assert!(secs(1e300) > Duration::from_secs(1_000_000));
    }

    #[tokio::test]
    async fn script_body_cuts_on_shutdown() {
        use http_body_util_free::collect;
        let cancel = CancellationToken::new();
        let body = script_body(
            vec![
                Step::Data(Bytes::from_static(b"x")),
                Step::Wait(Duration::from_secs(3600)),
            ],
            cancel.clone(),
        );
        cancel.cancel();
        let (data, err) = collect(body).await;
        assert_eq!(data, b"x");
        assert!(err);
    }

    #[tokio::test]
    async fn script_body_ends_cleanly() {
        use http_body_util_free::collect;
        let body = script_body(
            vec![
                Step::Data(Bytes::from_static(b"a")),
                Step::Flush,
                Step::Data(Bytes::from_static(b"b")),
            ],
            CancellationToken::new(),
        );
        let (data, err) = collect(body).await;
        assert_eq!(data, b"ab");
        assert!(!err);
    }

    #[tokio::test]
    async fn abort_body_fails_at_once() {
        use http_body_util_free::collect;
        let (data, err) = collect(abort_body()).await;
        assert!(data.is_empty() && err);
    }
}

/// Test helper: read a body to its end without extra crates.
#[cfg(test)]
pub(crate) mod http_body_util_free {
    use axum::body::Body;
    use futures_util::StreamExt;

    /// All data bytes, and whether the body ended with an error.
    pub async fn collect(body: Body) -> (Vec<u8>, bool) {
        let mut stream = body.into_data_stream();
        let mut out = Vec::new();
        while let Some(item) = stream.next().await {
            match item {
                Ok(b) => out.extend_from_slice(&b),
                Err(_) => return (out, true),
            }
        }
        (out, false)
    }
}

/// Test helper: a context with nonce `NONCE`.
#[cfg(test)]
pub(crate) fn test_ctx(tools: &BTreeMap<String, ToolMapping>) -> ReplyCtx<'_> {
    ReplyCtx {
        nonce: "NONCE",
        request_bytes: 100,
        main_index: 0,
        tools,
        call_id_prefix: "call_t_0",
    }
}

/// Test helper: play `plan` on `wire`.
#[cfg(test)]
pub(crate) async fn on_wire(
    plan: Plan,
    wire: super::wire::Wire,
    stream: bool,
    cancel: &CancellationToken,
) -> axum::response::Response {
    let meta = super::wire::Meta {
        id: "test".into(),
        created: 0,
        model: "m".into(),
        request_bytes: 100,
    };
    super::wire::render(plan, wire, stream, &meta, cancel).await
}

/// Test helper: play `plan` on the OpenAI chat wire.
#[cfg(test)]
pub(crate) async fn on_chat(
    plan: Plan,
    stream: bool,
    cancel: &CancellationToken,
) -> axum::response::Response {
    let meta = super::wire::Meta {
        id: "chatcmpl-test".into(),
        created: 0,
        model: "m".into(),
        request_bytes: 100,
    };
    super::wire::render(plan, super::wire::Wire::OpenaiChat, stream, &meta, cancel).await
}
