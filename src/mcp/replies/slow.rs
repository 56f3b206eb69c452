//! `slow`: the healthy answer, after `seconds` (default 10).

use serde::{Deserialize, Serialize};

use super::{send, wait, Ctx, Out, Tx};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slow {
    #[serde(
        default = "default_seconds",
        deserialize_with = "crate::units::seconds"
    )]
    pub seconds: f64,
}

fn default_seconds() -> f64 {
    10.0
}

impl Slow {
    pub(crate) async fn play(&self, ctx: &Ctx, tx: &Tx) -> bool {
        if !wait(self.seconds, &ctx.cancel).await {
            return false;
        }
        send(tx, Out::Frame(ctx.healthy())).await
    }
}

impl crate::kinds::Kind for Slow {
    const NAME: &'static str = "slow";
}

impl super::McpReply for Slow {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(self.play(ctx, tx))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect, json};
    use super::super::Reply;
    use std::time::{Duration, Instant};

    #[tokio::test]
    async fn answers_healthy_after_the_wait() {
        let r: Reply = serde_yaml::from_str("{kind: slow, seconds: 0.3}").unwrap();
        let t = Instant::now();
        let (outs, done) = collect(&r, &call("s"), 5000).await;
        assert!(t.elapsed() >= Duration::from_millis(300));
        assert_eq!(done, Some(true));
        assert_eq!(json(&outs[0])["result"]["content"][0]["text"], "probe:s");
    }
}
