//! `error`: an HTTP status with the wire's error body and, when given,
//! `retry_after` seconds in the wire's convention. With `mid_stream: true` a
//! streaming request gets 200, the start of an answer, then the wire's error
//! event (`data: {"error"}`, `response.failed`, Anthropic's `error` event,
//! Gemini's error frame) and the end of the body. With `status_ok: true`
//! the wire's error body comes under HTTP 200, not a stream (a gateway that
//! wraps an upstream's failure in a success).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    pub status: u16,
    #[serde(default = "default_message")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Fail inside a 200 stream instead of before headers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mid_stream: bool,
    /// The wire's error body under HTTP 200 (streaming or not).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub status_ok: bool,
}

fn default_message() -> String {
    "chaosrun injected error".into()
}

impl crate::kinds::Kind for ErrorReply {
    const NAME: &'static str = "error";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        explore: &[
            crate::kinds::Explored {
                key: "error_500",
                short: "500",
                fields: "{status: 500, message: internal server error}",
                per_mille: 140,
                persist_per_mille: 300,
                rank: 0,
                mid_stream: false,
            },
            crate::kinds::Explored {
                key: "error_429",
                short: "429",
                fields: "{status: 429, message: rate limit exceeded, retry_after: 1}",
                per_mille: 140,
                persist_per_mille: 300,
                rank: 1,
                mid_stream: false,
            },
        ],
        ..crate::kinds::Facts::coloured("#d32f2f")
    };
}

impl super::ReplyKind for ErrorReply {
    /// A status providers mean as "try again later".
    fn retryable(&self) -> bool {
        super::retryable_status(self.status)
    }

    /// No retry-after where the wire's mid-stream error event, or its error
    /// body under a 200, cannot carry one (only Gemini's has `RetryInfo`).
    fn error_hint_on(&self, wire: crate::provider::wire::Wire, stream: bool) -> Option<super::ReplyError> {
        let mut hint = self.error_hint()?;
        let in_body = self.status_ok || (self.mid_stream && stream);
        if in_body && !wire.format().mid_stream_retry_after() {
            // No header under a 200; only Gemini's body carries `RetryInfo`.
            hint.retry_after = None;
        }
        Some(hint)
    }

    /// A 200 whose body is an error.
    fn value_fault(&self) -> bool {
        self.status_ok
    }

    /// `retry_after` within the seconds bound; one of `mid_stream` and
    /// `status_ok`.
    fn check(&self) -> Result<(), String> {
        use crate::units::MAX_SECONDS;
        if self.mid_stream && self.status_ok {
            return Err("an `error` reply takes `mid_stream` or `status_ok`, not both".into());
        }
        match self.retry_after {
            Some(r) if r as f64 > MAX_SECONDS => Err(format!(
                "`retry_after` is {r} s; the ceiling is {MAX_SECONDS} s (one week)"
            )),
            _ => Ok(()),
        }
    }

    fn plan(&self, ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use super::{Beat, Plan};
        use crate::provider::wire::{ErrorInfo, Event};
        let info = ErrorInfo {
            status: self.status,
            message: super::render(&self.message, ctx.nonce, None),
            retry_after: self.retry_after,
            code: None,
            class: Default::default(),
        };
        if self.status_ok {
            Plan::ErrorIn200(info)
        } else if self.mid_stream {
            Plan::Beats(vec![
                Beat::Emit(Event::Start),
                Beat::Emit(Event::Error(info)),
            ])
        } else {
            Plan::Error(info)
        }
    }

    fn error_hint(&self) -> Option<super::ReplyError> {
        Some(super::ReplyError {
            status: self.status,
            retry_after: self.retry_after,
            retryable: super::retryable_status(self.status),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::{on_chat, test_ctx};

    #[tokio::test]
    async fn status_body_and_retry_after() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = test_ctx(&tools);
        let e: ErrorReply =
            serde_yaml::from_str("{status: 429, retry_after: 1, message: 'slow {{nonce}}'}")
                .unwrap();
        let resp = on_chat(e.plan(&ctx), true, &cancel).await;
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()["retry-after"], "1");
        let (body, _) = collect(resp.into_body()).await;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["message"], "slow NONCE");
        assert_eq!(v["error"]["type"], "rate_limit_error");

        let plain: ErrorReply = serde_yaml::from_str("{status: 500}").unwrap();
        let resp = on_chat(plain.plan(&ctx), true, &cancel).await;
        assert!(resp.headers().get("retry-after").is_none());
    }

    #[tokio::test]
    async fn mid_stream_is_a_200_with_an_error_event() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let e: ErrorReply = serde_yaml::from_str("{status: 500, mid_stream: true}").unwrap();
        let resp = on_chat(e.plan(&test_ctx(&tools)), true, &cancel).await;
        assert_eq!(resp.status(), 200);
        let (body, cut) = collect(resp.into_body()).await;
        let body = String::from_utf8(body).unwrap();
        assert!(!cut && body.contains("data: {\"error\":") && !body.contains("[DONE]"));
        // Not streaming: the plain error response.
        let resp = on_chat(e.plan(&test_ctx(&tools)), false, &cancel).await;
        assert_eq!(resp.status(), 500);
    }

    #[tokio::test]
    async fn status_ok_is_the_wires_error_body_under_a_200() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let e: ErrorReply =
            serde_yaml::from_str("{status: 500, status_ok: true, retry_after: 3}").unwrap();
        for stream in [true, false] {
            let resp = on_chat(e.plan(&test_ctx(&tools)), stream, &cancel).await;
            assert_eq!(resp.status(), 200);
            assert!(resp.headers().get("retry-after").is_none());
            let (body, _) = collect(resp.into_body()).await;
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["error"]["message"], "chaosrun injected error");
        }
        let both: ErrorReply = serde_yaml::from_str("{status: 500, status_ok: true, mid_stream: true}").unwrap();
        assert!(both.check().unwrap_err().contains("not both"));
        use crate::provider::wire::Wire;
        assert!(e.value_fault());
        let after = |w| e.error_hint_on(w, false).unwrap().retry_after;
        assert_eq!((after(Wire::OpenaiChat), after(Wire::Gemini)), (None, Some(3)));
    }
}
