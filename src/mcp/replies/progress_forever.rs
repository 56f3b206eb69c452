//! `progress_forever`: `notifications/progress` every `interval` seconds
//! (default 0.5) using the request's `_meta.progressToken`, counting up, and
//! never a result. A request without a progress token gets nothing at all
//! (the spec allows progress only for a token), i.e. a hang.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{send, wait, Ctx, Frame, Out, Tx};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressForever {
    #[serde(
        default = "default_interval",
        deserialize_with = "crate::units::seconds"
    )]
    pub interval: f64,
}

fn default_interval() -> f64 {
    0.5
}

impl ProgressForever {
    pub(crate) async fn play(&self, ctx: &Ctx, tx: &Tx) -> bool {
        let Some(token) = ctx.progress_token() else {
            ctx.cancel.cancelled().await;
            return false;
        };
        let mut n: u64 = 0;
        loop {
            n += 1;
            let note = json!({
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": n, "message": format!("still working ({n})")},
            });
            if !send(tx, Out::Frame(Frame::json(&note))).await {
                return false;
            }
            if !wait(self.interval.max(0.01), &ctx.cancel).await {
                return false;
            }
        }
    }
}

impl crate::kinds::Kind for ProgressForever {
    const NAME: &'static str = "progress_forever";
}

impl super::McpReply for ProgressForever {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(self.play(ctx, tx))
    }

    fn check(&self, _method: &str) -> Result<(), String> {
        if self.interval.is_nan() || self.interval < 0.01 {
            return Err("`progress_forever.interval` is at least 0.01 s".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect, ctx, json};
    use super::super::Reply;

    #[tokio::test]
    async fn progress_with_the_token_and_no_result() {
        let r: Reply = serde_yaml::from_str("{kind: progress_forever, interval: 0.05}").unwrap();
        let (outs, done) = collect(&r, &call("x"), 400).await;
        assert_eq!(done, None);
        assert!(outs.len() >= 3, "{outs:?}");
        for (i, o) in outs.iter().enumerate() {
            let v = json(o);
            assert_eq!(v["method"], "notifications/progress");
            assert_eq!(v["params"]["progressToken"], "tok");
            assert_eq!(v["params"]["progress"], i as u64 + 1);
            assert!(v.get("id").is_none() && v.get("result").is_none());
        }
        let no_token = ctx("tools/call", serde_json::json!({"name": "probe"}));
        assert!(collect(&r, &no_token, 200).await.0.is_empty());
    }
}
