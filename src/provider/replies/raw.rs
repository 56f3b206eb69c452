//! `raw`: any status, content type and body, sent verbatim (garbage JSON, an
//! HTML error page).

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

impl Raw {
    pub(crate) fn respond(&self, ctx: &super::ReplyCtx<'_>) -> axum::response::Response {
        use axum::http::{header, HeaderValue, StatusCode};
        let body = super::render(&self.body, ctx.nonce, None);
        let mut resp = axum::response::Response::new(axum::body::Body::from(body));
        *resp.status_mut() = StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK);
        if let Ok(v) = HeaderValue::from_str(&self.content_type) {
            resp.headers_mut().insert(header::CONTENT_TYPE, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::test_ctx;

    #[tokio::test]
    async fn body_is_verbatim() {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = test_ctx(true, &cancel, &tools);
        let r: Raw = serde_yaml::from_str(
            "{status: 502, content_type: text/html, body: '<html>{not json {{nonce}}'}",
        )
        .unwrap();
        let resp = r.respond(&ctx);
        assert_eq!(resp.status(), 502);
        assert_eq!(resp.headers()["content-type"], "text/html");
        let (body, cut) = collect(resp.into_body()).await;
        assert!(!cut);
        assert_eq!(body, b"<html>{not json NONCE");
    }
}
