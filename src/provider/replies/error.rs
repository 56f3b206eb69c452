//! `error`: an HTTP status with an OpenAI-shaped error body
//! `{"error": {"message", "type", "code"}}` and, when given, a `Retry-After`
//! header (seconds).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    pub status: u16,
    #[serde(default = "default_message")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

fn default_message() -> String {
    "chaosrun injected error".into()
}

impl ErrorReply {
    pub(crate) fn respond(&self, ctx: &super::ReplyCtx<'_>) -> axum::response::Response {
        let message = super::render(&self.message, ctx.nonce, None);
        let mut resp = crate::provider::sse::error_response(self.status, &message);
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::test_ctx;

    #[tokio::test]
    async fn status_body_and_retry_after() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = test_ctx(true, &cancel, &tools);
        let e: ErrorReply =
            serde_yaml::from_str("{status: 429, retry_after: 1, message: 'slow {{nonce}}'}")
                .unwrap();
        let resp = e.respond(&ctx);
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()["retry-after"], "1");
        let (body, _) = collect(resp.into_body()).await;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["message"], "slow NONCE");
        assert_eq!(v["error"]["type"], "rate_limit_error");

        let plain: ErrorReply = serde_yaml::from_str("{status: 500}").unwrap();
        assert!(plain.respond(&ctx).headers().get("retry-after").is_none());
    }
}
