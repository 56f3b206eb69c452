//! One small type per reply kind, each implementing [`ReplyKind`] (plan its
//! events) in its own file, registered once in [`Reply`]. Each kind's
//! file says its wire behaviour in its doc comment and carries its own tests.
//!
//! The YAML form is internally tagged: `{kind: hang, seconds: 3600}`. The
//! kinds are registered once, in the [`registry!`](crate::provider::registry)
//! list below; an unknown kind is rejected with the list of known kinds.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::recording::IssuedToolCall;
pub use super::recording::ReplyError;
use super::wire::{ErrorInfo, Event};
use super::ToolMapping;

pub use tool_call::ToolCallSpec;

crate::provider::registry::registry! {
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
        KeepaliveForever(keepalive_forever::KeepaliveForever),
        EndlessText(endless_text::EndlessText),
        Cassette(cassette::CassetteReply),
    }
}

/// Every reply kind's name, in registry order (the docs' list of kinds).
pub fn kind_names() -> &'static [&'static str] {
    Reply::KINDS
}

/// What a reply kind does, whatever the wire: plan its events.
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

    /// Plan the reply.
    pub(crate) fn plan(&self, ctx: &ReplyCtx<'_>) -> Planned {
        self.as_dyn().planned(ctx)
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
