//! `drop_mid_stream`: 200 with SSE headers, a role chunk and a content chunk
//! carrying `chars`, then the connection closes with no finish chunk and no
//! `[DONE]` (the chunked body is cut, not terminated).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropMidStream {
    #[serde(default = "default_chars")]
    pub chars: String,
}

fn default_chars() -> String {
    "Partial ans".into()
}

impl DropMidStream {
    pub(crate) fn respond(&self, ctx: &super::ReplyCtx<'_>) -> axum::response::Response {
        use super::{render, script_body, Step};
        let chars = render(&self.chars, ctx.nonce, None);
        let steps = vec![
            Step::Data(ctx.meta.role()),
            Step::Data(ctx.meta.content(&chars)),
            // Let the chunks reach the socket before the cut.
            Step::Flush,
            Step::Cut,
        ];
        crate::provider::sse::sse_response(script_body(steps, ctx.cancel.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::test_ctx;

    #[tokio::test]
    async fn chars_then_cut_without_finish_or_done() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = test_ctx(true, &cancel, &tools);
        let d: DropMidStream = serde_yaml::from_str("{}").unwrap();
        let (body, cut) = collect(d.respond(&ctx).into_body()).await;
        let body = String::from_utf8(body).unwrap();
        assert!(cut);
        assert!(body.contains("Partial ans"));
        assert!(!body.contains("[DONE]") && !body.contains("finish_reason\":\""));
    }
}
