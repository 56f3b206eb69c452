//! `list_hang`: an `initialize` or `tools/list` request that is never
//! answered, so the agent's boot (or its tool discovery) waits on it. Refused
//! at load on `tools/call` (use `hang`).

use serde::{Deserialize, Serialize};

use super::Ctx;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListHang {}

impl ListHang {
    pub(crate) async fn play(&self, ctx: &Ctx) -> bool {
        ctx.cancel.cancelled().await;
        false
    }
}

impl crate::kinds::Kind for ListHang {
    const NAME: &'static str = "list_hang";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        withholds_listing: true,
        ..crate::kinds::Facts::NONE
    };
}

impl super::McpReply for ListHang {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, _tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(self.play(ctx))
    }

    fn check(&self, method: &str) -> Result<(), String> {
        if method == "tools/call" {
            return Err(
                "`list_hang` answers `initialize` or `tools/list`; for `tools/call` use `hang`"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{collect, ctx};
    use super::super::Reply;

    #[tokio::test]
    async fn never_answers_and_is_refused_on_tools_call() {
        let r: Reply = serde_yaml::from_str("{kind: list_hang}").unwrap();
        let (outs, done) = collect(&r, &ctx("tools/list", serde_json::Value::Null), 300).await;
        assert!(outs.is_empty() && done.is_none());
        assert!(r.check("tools/list").is_ok());
        assert!(r.check("tools/call").unwrap_err().contains("use `hang`"));
    }
}
