//! `quota_exhausted`: the account's quota or credit is used up, a final
//! error that retrying cannot fix, in each wire's documented shape:
//! OpenAI Chat and Responses answer 429 with `type` and `code`
//! `insufficient_quota`; Anthropic answers 400 `invalid_request_error`
//! "Your credit balance is too low to access the Anthropic API…"; Gemini
//! answers 429 `RESOURCE_EXHAUSTED` with a `google.rpc.QuotaFailure` detail
//! naming a per-day quota. No retry-after on any wire. A good agent surfaces
//! it at once (one call, two at most).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaExhausted {}

impl crate::kinds::Kind for QuotaExhausted {
    const NAME: &'static str = "quota_exhausted";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts::coloured("#ad1457");
}

impl super::ReplyKind for QuotaExhausted {
    /// The status this wire gives a quota error (429, Anthropic's 400).
    fn error_hint_on(&self, wire: crate::provider::wire::Wire, _stream: bool) -> Option<super::ReplyError> {
        use crate::provider::wire::{ErrorClass, ErrorInfo};
        let mut hint = self.error_hint()?;
        hint.status = wire.shape_error(&ErrorInfo::of_class(ErrorClass::Quota)).status;
        Some(hint)
    }

    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use crate::provider::wire::{ErrorClass, ErrorInfo};
        super::Plan::Error(ErrorInfo::of_class(ErrorClass::Quota))
    }

    fn error_hint(&self) -> Option<super::ReplyError> {
        Some(super::ReplyError {
            status: 429,
            retry_after: None,
            retryable: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::provider::replies::ReplyKind;
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::on_wire;
    use crate::provider::wire::Wire;
    use serde_json::Value;

    async fn answer(wire: Wire) -> (u16, Value, bool) {
        let cancel = tokio_util::sync::CancellationToken::new();
        let resp = on_wire(QuotaExhausted {}.plan(&crate::provider::replies::test_ctx(&Default::default())), wire, true, &cancel).await;
        let status = resp.status().as_u16();
        let retry_header = resp.headers().contains_key("retry-after");
        let (body, _) = collect(resp.into_body()).await;
        (status, serde_json::from_slice(&body).unwrap(), retry_header)
    }

    #[tokio::test]
    async fn each_wire_answers_its_own_documented_quota_error() {
        for wire in [Wire::OpenaiChat, Wire::OpenaiResponses] {
            let (status, v, retry) = answer(wire).await;
            assert_eq!(status, 429, "{wire}");
            assert_eq!(v["error"]["code"], "insufficient_quota", "{wire}");
            assert_eq!(v["error"]["type"], "insufficient_quota", "{wire}");
            assert!(!retry);
        }
        let (status, v, retry) = answer(Wire::Anthropic).await;
        assert_eq!(status, 400);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("credit balance is too low"));
        assert!(!retry);
        let (status, v, _) = answer(Wire::Gemini).await;
        assert_eq!(status, 429);
        assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
        let details = v["error"]["details"].as_array().unwrap();
        let failure = details
            .iter()
            .find(|d| d["@type"] == "type.googleapis.com/google.rpc.QuotaFailure")
            .expect("a QuotaFailure detail");
        assert!(failure["violations"][0]["quotaId"]
            .as_str()
            .unwrap()
            .contains("PerDay"));
        assert!(!details
            .iter()
            .any(|d| d["@type"].as_str().unwrap().ends_with("RetryInfo")));
    }

    #[test]
    fn takes_no_fields_and_says_it_is_final() {
        let r: crate::provider::Reply = serde_yaml::from_str("{kind: quota_exhausted}").unwrap();
        let hint = r.error_hint().unwrap();
        assert!(!hint.retryable && hint.retry_after.is_none());
        assert!(
            serde_yaml::from_str::<crate::provider::Reply>("{kind: quota_exhausted, x: 1}")
                .is_err()
        );
    }
}
