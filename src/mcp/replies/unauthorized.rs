//! `unauthorized`: the server refuses the client's credentials. Over
//! Streamable HTTP the request gets `401 Unauthorized` with a
//! `WWW-Authenticate: Bearer` challenge and an OAuth-style JSON body, no
//! JSON-RPC frame and no session (what a server behind an auth proxy answers
//! a missing or expired token); on stdio, which has no HTTP status, a
//! JSON-RPC error `-32001` carrying `message`. An agent must surface it,
//! stay bounded, and not retry it for ever (`mcp_unauthorized_retries`).

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Ctx, Frame};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unauthorized {
    /// The error description (`{{nonce}}` rendered).
    #[serde(default = "default_message")]
    pub message: String,
}

fn default_message() -> String {
    "chaosrun: the access token is missing or expired".into()
}

/// The challenge header an HTTP 401 carries.
pub const CHALLENGE: &str =
    r#"Bearer realm="chaosrun", error="invalid_token", error_description="token expired""#;

impl Unauthorized {
    /// The HTTP 401 body.
    pub fn http_body(&self, ctx: &Ctx) -> String {
        json!({"error": "invalid_token", "error_description": ctx.render(&self.message)})
            .to_string()
    }

    /// The stdio answer: a JSON-RPC error.
    pub(crate) fn frame(&self, ctx: &Ctx) -> Frame {
        Frame::json(&json!({
            "jsonrpc": "2.0",
            "id": ctx.id,
            "error": {"code": -32001, "message": format!("Unauthorized: {}", ctx.render(&self.message))},
        }))
    }
}

impl crate::kinds::Kind for Unauthorized {
    const NAME: &'static str = "unauthorized";
}

impl super::McpReply for Unauthorized {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(async move { super::send(tx, super::Out::Frame(self.frame(ctx))).await })
    }

    fn single_frame(&self) -> bool {
        true
    }

    fn http_refusal(&self, ctx: &Ctx) -> Option<String> {
        Some(self.http_body(ctx))
    }

    fn refuses(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{collect, ctx, json};
    use super::super::Reply;

    #[tokio::test]
    async fn stdio_gets_a_jsonrpc_error_and_http_a_401_body() {
        let r: Reply =
            serde_yaml::from_str("{kind: unauthorized, message: 'gone {{nonce}}'}").unwrap();
        let c = ctx("initialize", serde_json::Value::Null);
        let (outs, done) = collect(&r, &c, 1000).await;
        assert_eq!(done, Some(true));
        let v = json(&outs[0]);
        assert_eq!(v["error"]["code"], -32001);
        assert_eq!(v["error"]["message"], "Unauthorized: gone N0NCE");
        let Reply::Unauthorized(u) = &r else { panic!() };
        let body: serde_json::Value = serde_json::from_str(&u.http_body(&c)).unwrap();
        assert_eq!(body["error"], "invalid_token");
        assert!(r.single_frame());
    }
}
