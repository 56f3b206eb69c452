//! `stall_mid_stream`: 200, the start of an answer carrying `chars`, then
//! silence with the socket open for `seconds` (or until shutdown), then a cut.
//! Without `stream`, a JSON body is started and never finished.

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

impl crate::kinds::Kind for StallMidStream {
    const NAME: &'static str = "stall_mid_stream";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        waits: true,
        explore: &[crate::kinds::Explored {
            key: "stall_mid_stream",
            short: "stall",
            fields: "{}",
            per_mille: 35,
            persist_per_mille: 100,
            rank: 3,
            mid_stream: true,
        }],
        ..crate::kinds::Facts::coloured("#ef6c00")
    };
}

impl super::ReplyKind for StallMidStream {
    fn retryable(&self) -> bool {
        true
    }

    fn plan(&self, ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use super::{render, secs, Beat};
        use crate::provider::wire::Event;
        super::Plan::Beats(vec![
            Beat::Emit(Event::Start),
            Beat::Emit(Event::TextDelta(render(&self.chars, ctx.nonce, None))),
            Beat::Wait(secs(self.seconds)),
            Beat::Cut,
        ])
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::{on_chat, test_ctx};
    use futures_util::StreamExt;
    use std::time::Duration;

    #[tokio::test]
    async fn sends_chars_then_holds_until_shutdown() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let s: StallMidStream = serde_yaml::from_str("{chars: 'abc {{nonce}}'}").unwrap();
        let resp = on_chat(s.plan(&test_ctx(&tools)), true, &cancel).await;
        let mut body = resp.into_body().into_data_stream();
        // The role and content events leave together, before the wait.
        let first = body.next().await.unwrap().unwrap();
        let first = std::str::from_utf8(&first).unwrap();
        assert!(
            first.contains("assistant") && first.contains("abc NONCE"),
            "{first}"
        );
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
        let s: StallMidStream = serde_yaml::from_str("{seconds: 0.05}").unwrap();
        let resp = on_chat(s.plan(&test_ctx(&tools)), false, &cancel).await;
        let mut body = resp.into_body().into_data_stream();
        let first = body.next().await.unwrap().unwrap();
        let text = std::str::from_utf8(&first).unwrap();
        assert!(text.ends_with("\"content\":\"Thinking"), "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(text).is_err());
        assert!(body.next().await.unwrap().is_err());
    }
}
