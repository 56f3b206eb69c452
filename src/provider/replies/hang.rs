//! `hang`: accept the request, never answer (not even headers); drop the socket
//! after `seconds`, or at once when the provider shuts down. The same on every
//! wire.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hang {
    #[serde(
        default = "super::fault_seconds",
        deserialize_with = "crate::units::seconds"
    )]
    pub seconds: f64,
}

impl crate::kinds::Kind for Hang {
    const NAME: &'static str = "hang";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        waits: true,
        explore: &[crate::kinds::Explored {
            key: "hang",
            short: "hang",
            fields: "{}",
            per_mille: 35,
            persist_per_mille: 150,
            rank: 4,
            mid_stream: false,
        }],
        ..crate::kinds::Facts::coloured("#7b1fa2")
    };
}

impl super::ReplyKind for Hang {
    fn retryable(&self) -> bool {
        true
    }

    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        super::Plan::Hang(super::secs(self.seconds))
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::on_chat;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn holds_until_shutdown_then_aborts() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let hang = Hang { seconds: 3600.0 };
        let fut = on_chat(hang.plan(&crate::provider::replies::test_ctx(&Default::default())), true, &cancel);
        tokio::pin!(fut);
        // Still pending after a while.
        assert!(tokio::time::timeout(Duration::from_millis(100), &mut fut)
            .await
            .is_err());
        let start = Instant::now();
        cancel.cancel();
        let resp = fut.await;
        assert!(start.elapsed() < Duration::from_secs(1));
        let (data, cut) = collect(resp.into_body()).await;
        assert!(data.is_empty() && cut);
    }
}
