//! `silent_after_headers`: 200 with the wire's headers, then not one body byte
//! for `seconds` (or until shutdown), then the connection is cut.

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

impl crate::kinds::Kind for SilentAfterHeaders {
    const NAME: &'static str = "silent_after_headers";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        waits: true,
        ..crate::kinds::Facts::coloured("#e91e63")
    };
}

impl super::ReplyKind for SilentAfterHeaders {
    fn retryable(&self) -> bool {
        true
    }

    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use super::{secs, Beat};
        super::Plan::Beats(vec![Beat::Wait(secs(self.seconds)), Beat::Cut])
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::on_chat;

    #[tokio::test]
    async fn no_byte_then_cut_at_shutdown() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let resp = on_chat(SilentAfterHeaders { seconds: 3600.0 }.plan(&crate::provider::replies::test_ctx(&Default::default())), true, &cancel).await;
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
