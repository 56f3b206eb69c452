//! `raw`: any status, content type and body, sent verbatim on any wire
//! (garbage JSON, an HTML error page).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Raw {
    #[serde(default = "default_status")]
    pub status: u16,
    #[serde(default = "default_content_type")]
    pub content_type: String,
    pub body: String,
}

fn default_status() -> u16 {
    200
}

fn default_content_type() -> String {
    "application/json".into()
}

impl crate::kinds::Kind for Raw {
    const NAME: &'static str = "raw";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts::coloured("#00897b");
}

impl super::ReplyKind for Raw {
    fn plan(&self, ctx: &super::ReplyCtx<'_>) -> super::Plan {
        super::Plan::Raw {
            status: self.status,
            content_type: self.content_type.clone(),
            body: super::render(&self.body, ctx.nonce, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::{on_chat, test_ctx};

    #[tokio::test]
    async fn body_is_verbatim() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let r: Raw = serde_yaml::from_str(
            "{status: 502, content_type: text/html, body: '<html>{not json {{nonce}}'}",
        )
        .unwrap();
        let resp = on_chat(r.plan(&test_ctx(&tools)), true, &cancel).await;
        assert_eq!(resp.status(), 502);
        assert_eq!(resp.headers()["content-type"], "text/html");
        let (body, cut) = collect(resp.into_body()).await;
        assert!(!cut);
        assert_eq!(body, b"<html>{not json NONCE");
    }
}
