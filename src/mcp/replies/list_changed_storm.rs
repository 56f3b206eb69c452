//! `list_changed_storm`: `count` `notifications/tools/list_changed`
//! notifications (default 100), `interval` seconds apart (default 0.05), then
//! the request's healthy answer. Over HTTP they go on the request's SSE
//! stream, before the answer.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{send, wait, Ctx, Frame, Out, Tx};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListChangedStorm {
    #[serde(default = "default_count")]
    pub count: u64,
    #[serde(
        default = "default_interval",
        deserialize_with = "crate::units::seconds"
    )]
    pub interval: f64,
}

fn default_count() -> u64 {
    100
}

fn default_interval() -> f64 {
    0.05
}

impl ListChangedStorm {
    fn check_bounds(&self) -> Result<(), String> {
        crate::units::count(
            "list_changed_storm.count",
            self.count,
            crate::units::MAX_COUNT,
        )
    }

    pub(crate) async fn play(&self, ctx: &Ctx, tx: &Tx) -> bool {
        let note =
            Frame::json(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        for i in 0..self.count {
            if !send(tx, Out::Frame(note.clone())).await {
                return false;
            }
            if i + 1 < self.count && !wait(self.interval, &ctx.cancel).await {
                return false;
            }
        }
        send(tx, Out::Frame(ctx.healthy())).await
    }
}

impl crate::kinds::Kind for ListChangedStorm {
    const NAME: &'static str = "list_changed_storm";
}

impl super::McpReply for ListChangedStorm {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(self.play(ctx, tx))
    }

    fn check(&self, _method: &str) -> Result<(), String> {
        self.check_bounds()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect, json};
    use super::super::Reply;

    #[tokio::test]
    async fn notifications_then_the_answer() {
        let r: Reply =
            serde_yaml::from_str("{kind: list_changed_storm, count: 5, interval: 0.01}").unwrap();
        let (outs, done) = collect(&r, &call("x"), 2000).await;
        assert_eq!(done, Some(true));
        assert_eq!(outs.len(), 6);
        for o in &outs[..5] {
            assert_eq!(json(o)["method"], "notifications/tools/list_changed");
        }
        assert_eq!(json(&outs[5])["result"]["content"][0]["text"], "probe:x");
        let big: Reply =
            serde_yaml::from_str("{kind: list_changed_storm, count: 99999999}").unwrap();
        assert!(big.check("tools/call").is_err());
    }
}
