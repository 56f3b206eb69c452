//! `hang`: accept the request and never answer it (until the server shuts
//! down). The connection stays open; other requests are still served.

use serde::{Deserialize, Serialize};

use super::Ctx;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hang {}

impl Hang {
    pub(crate) async fn play(&self, ctx: &Ctx) -> bool {
        ctx.cancel.cancelled().await;
        false
    }
}

impl crate::kinds::Kind for Hang {
    const NAME: &'static str = "hang";
}

impl super::McpReply for Hang {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, _tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(self.play(ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect};
    use super::super::Reply;

    #[tokio::test]
    async fn sends_nothing_and_never_finishes() {
        let r: Reply = serde_yaml::from_str("{kind: hang}").unwrap();
        let (outs, done) = collect(&r, &call("x"), 300).await;
        assert!(outs.is_empty());
        assert_eq!(done, None, "still pending");
        let c = call("x");
        c.cancel.cancel();
        assert_eq!(collect(&r, &c, 1000).await.1, Some(false));
    }
}
