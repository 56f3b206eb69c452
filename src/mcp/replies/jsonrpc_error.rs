//! `jsonrpc_error`: a JSON-RPC error response (`code`, default -32603;
//! `message`, `{{nonce}}` rendered) instead of a result.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Ctx, Frame};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonrpcError {
    #[serde(default = "default_code")]
    pub code: i64,
    #[serde(default = "default_message")]
    pub message: String,
}

fn default_code() -> i64 {
    -32603
}

fn default_message() -> String {
    "chaosrun: scripted internal error".into()
}

impl JsonrpcError {
    pub(crate) fn frame(&self, ctx: &Ctx) -> Frame {
        Frame::json(&json!({
            "jsonrpc": "2.0",
            "id": ctx.id,
            "error": {"code": self.code, "message": ctx.render(&self.message)},
        }))
    }
}

impl crate::kinds::Kind for JsonrpcError {
    const NAME: &'static str = "jsonrpc_error";
}

impl super::McpReply for JsonrpcError {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(async move { super::send(tx, super::Out::Frame(self.frame(ctx))).await })
    }

    fn single_frame(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect, json};
    use super::super::Reply;

    #[tokio::test]
    async fn an_error_object_with_the_request_id() {
        let r: Reply =
            serde_yaml::from_str("{kind: jsonrpc_error, code: -32000, message: 'no {{nonce}}'}")
                .unwrap();
        let (outs, done) = collect(&r, &call("x"), 1000).await;
        assert_eq!(done, Some(true));
        let v = json(&outs[0]);
        assert_eq!(
            (v["id"].clone(), v["error"]["code"].clone()),
            (serde_json::json!(7), serde_json::json!(-32000))
        );
        assert_eq!(v["error"]["message"], "no N0NCE");
        assert!(v.get("result").is_none());
    }
}
