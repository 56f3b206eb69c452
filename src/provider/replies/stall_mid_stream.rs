//! `stall_mid_stream`: 200 with SSE headers, a role chunk and a content chunk
//! carrying `chars`, then silence with the socket open for `seconds` (or until
//! shutdown). Without `stream`, a JSON body is started and never finished.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StallMidStream {
    #[serde(default = "default_chars")]
    pub chars: String,
    #[serde(
        default = "super::fault_seconds",
        deserialize_with = "crate::units::seconds"
    )]
    pub seconds: f64,
}

fn default_chars() -> String {
    "Thinking".into()
}

impl StallMidStream {
    pub(crate) fn respond(&self, ctx: &super::ReplyCtx<'_>) -> axum::response::Response {
        use super::{render, script_body, secs, Step};
        use crate::provider::sse::sse_response;

        let chars = render(&self.chars, ctx.nonce, None);
        let meta = &ctx.meta;
        let hold = [Step::Wait(secs(self.seconds)), Step::Cut];
        if ctx.stream {
            let mut steps = vec![Step::Data(meta.role()), Step::Data(meta.content(&chars))];
            steps.extend(hold);
            return sse_response(script_body(steps, ctx.cancel.clone()));
        }
        // A completion body that starts and never finishes.
        let quoted = serde_json::Value::String(chars).to_string();
        let partial = format!(
            "{{\"id\":\"{}\",\"object\":\"chat.completion\",\"created\":{},\"model\":{},\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":{}",
            meta.id,
            meta.created,
            serde_json::Value::String(meta.model.clone()),
            &quoted[..quoted.len() - 1],
        );
        let mut steps = vec![Step::Data(partial.into())];
        steps.extend(hold);
        let mut resp = axum::response::Response::new(script_body(steps, ctx.cancel.clone()));
        resp.headers_mut().insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::replies::test_ctx;
    use futures_util::StreamExt;
    use std::time::Duration;

    #[tokio::test]
    async fn sends_chars_then_holds_until_shutdown() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = test_ctx(true, &cancel, &tools);
        let s: StallMidStream = serde_yaml::from_str("{chars: 'abc {{nonce}}'}").unwrap();
        let mut body = s.respond(&ctx).into_body().into_data_stream();
        let role = body.next().await.unwrap().unwrap();
        assert!(std::str::from_utf8(&role).unwrap().contains("assistant"));
        let content = body.next().await.unwrap().unwrap();
        assert!(std::str::from_utf8(&content).unwrap().contains("abc NONCE"));
        assert!(
            tokio::time::timeout(Duration::from_millis(100), body.next())
                .await
                .is_err()
        );
        cancel.cancel();
        assert!(body.next().await.unwrap().is_err());
    }

    #[tokio::test]
    async fn non_streaming_starts_json_and_never_closes_it() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = test_ctx(false, &cancel, &tools);
        let s: StallMidStream = serde_yaml::from_str("{seconds: 0.05}").unwrap();
        let mut body = s.respond(&ctx).into_body().into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        let text = std::str::from_utf8(&first).unwrap();
        assert!(text.ends_with("\"content\":\"Thinking"), "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(text).is_err());
        assert!(body.next().await.unwrap().is_err());
    }
}
