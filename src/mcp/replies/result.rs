//! `result`: the request's answer. For `tools/call`: a `content` text block
//! (`text`, default `probe:<the text argument>`, with `{{nonce}}` and
//! `{{text}}` rendered), optional `structuredContent` (`structured`), and
//! `isError` (`is_error: true` for a tool-level failure the agent must pass
//! to the model). For any other method: its healthy answer.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Ctx, Frame};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultReply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    #[serde(default)]
    pub is_error: bool,
}

impl ResultReply {
    pub(crate) fn frame(&self, ctx: &Ctx) -> Frame {
        if ctx.method != "tools/call" {
            return ctx.healthy();
        }
        let text = match &self.text {
            Some(t) => ctx.render(t),
            None => format!("probe:{}", ctx.text()),
        };
        let mut result = json!({
            "content": [{"type": "text", "text": text}],
            "isError": self.is_error,
        });
        if let Some(s) = &self.structured {
            result["structuredContent"] = s.clone();
        }
        ctx.answer(result)
    }
}

impl crate::kinds::Kind for ResultReply {
    const NAME: &'static str = "result";
}

impl super::McpReply for ResultReply {
    fn answer<'a>(&'a self, ctx: &'a super::Ctx, tx: &'a super::Tx) -> super::Answering<'a> {
        Box::pin(async move { super::send(tx, super::Out::Frame(self.frame(ctx))).await })
    }

    fn single_frame(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{call, collect, ctx, json};
    use super::super::Reply;

    #[tokio::test]
    async fn healthy_text_error_flag_and_structured() {
        let r: Reply = serde_yaml::from_str("{kind: result}").unwrap();
        let (outs, done) = collect(&r, &call("hi"), 1000).await;
        assert_eq!(done, Some(true));
        let v = json(&outs[0]);
        assert_eq!(v["id"], 7);
        assert_eq!(v["result"]["content"][0]["text"], "probe:hi");
        assert_eq!(v["result"]["isError"], false);

        let r: Reply = serde_yaml::from_str(
            "{kind: result, text: 'failed {{nonce}}', is_error: true, structured: {a: 1}}",
        )
        .unwrap();
        let v = json(&collect(&r, &call("hi"), 1000).await.0[0]);
        assert_eq!(v["result"]["content"][0]["text"], "failed N0NCE");
        assert_eq!(v["result"]["isError"], true);
        assert_eq!(v["result"]["structuredContent"]["a"], 1);

        // Another method gets its healthy answer.
        let v = json(
            &collect(&r, &ctx("tools/list", serde_json::Value::Null), 1000)
                .await
                .0[0],
        );
        assert_eq!(v["result"]["tools"][0]["name"], "probe");
    }
}
