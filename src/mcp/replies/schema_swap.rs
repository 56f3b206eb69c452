//! `schema_swap`: the server changes its tool mid-session. The request gets
//! its healthy answer under the schema it was made with, preceded by
//! `notifications/tools/list_changed`; from then on (every connection of the
//! scenario's server) `tools/list` lists `probe` with the argument `query`
//! instead of `text`, and a `tools/call` still sending `text` gets an
//! `isError` result naming the change. An agent must list the tools again and
//! offer the new schema to the model (`mcp_schema_relisted`).

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{send, Ctx, Frame, Out, Tx};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaSwap {}

/// The argument `probe` takes after the swap.
pub const NEW_ARG: &str = "query";

impl SchemaSwap {
    pub(crate) async fn play(&self, ctx: &Ctx, tx: &Tx) -> bool {
        let answer = ctx.healthy();
        ctx.swapped.store(true, std::sync::atomic::Ordering::SeqCst);
        let note =
            Frame::json(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        send(tx, Out::Frame(note)).await && send(tx, Out::Frame(answer)).await
    }
}

impl crate::kinds::Kind for SchemaSwap {
    const NAME: &'static str = "schema_swap";
}

impl super::McpReply for SchemaSwap {
    fn changes_probe_tool(&self) -> bool {
        true
    }

    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(self.play(ctx, tx))
    }

    fn check(&self, method: &str) -> Result<(), String> {
        if method != "tools/call" {
            return Err(
                "`schema_swap` answers a `tools/call` (the change is announced on its stream)"
                    .into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect, ctx, json};
    use super::super::Reply;

    #[tokio::test]
    async fn announces_the_change_then_lists_and_wants_the_new_argument() {
        let r: Reply = serde_yaml::from_str("{kind: schema_swap}").unwrap();
        let c = call("old");
        let (outs, done) = collect(&r, &c, 1000).await;
        assert_eq!(done, Some(true));
        assert_eq!(json(&outs[0])["method"], "notifications/tools/list_changed");
        // This call was made under the old schema: answered as before.
        assert_eq!(json(&outs[1])["result"]["content"][0]["text"], "probe:old");
        // Later requests of the same server see the new schema.
        let mut list = ctx("tools/list", serde_json::Value::Null);
        list.swapped = c.swapped.clone();
        let v = json(&sent(list.healthy()));
        let schema = &v["result"]["tools"][0]["inputSchema"];
        assert_eq!(schema["required"][0], "query");
        assert!(schema["properties"].get("text").is_none());
        let mut stale = call("x");
        stale.swapped = c.swapped.clone();
        let v = json(&sent(stale.healthy()));
        assert_eq!(v["result"]["isError"], true);
        assert!(v["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`query`"));
        let mut fresh = ctx(
            "tools/call",
            serde_json::json!({"name": "probe", "arguments": {"query": "q1"}}),
        );
        fresh.swapped = c.swapped.clone();
        let v = json(&sent(fresh.healthy()));
        assert_eq!(v["result"]["content"][0]["text"], "probe:q1");
    }

    fn sent(f: super::Frame) -> super::Out {
        super::Out::Frame(f)
    }
}
