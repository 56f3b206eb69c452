//! `silent_after_headers`: 200 with SSE headers, then not one body byte for
//! `seconds` (or until shutdown).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SilentAfterHeaders {
    #[serde(
        default = "super::fault_seconds",
        deserialize_with = "crate::units::seconds"
    )]
    pub seconds: f64,
}

impl SilentAfterHeaders {
    pub(crate) fn respond(&self, ctx: &super::ReplyCtx<'_>) -> axum::response::Response {
        use super::{script_body, secs, Step};
        let steps = vec![Step::Wait(secs(self.seconds)), Step::Cut];
        crate::provider::sse::sse_response(script_body(steps, ctx.cancel.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::test_ctx;

    #[tokio::test]
    async fn no_byte_then_cut_at_shutdown() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = test_ctx(true, &cancel, &tools);
        let resp = SilentAfterHeaders { seconds: 3600.0 }.respond(&ctx);
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let canceller = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            canceller.cancel();
        });
        let (data, cut) = collect(resp.into_body()).await;
        assert!(data.is_empty() && cut);
    }
}
