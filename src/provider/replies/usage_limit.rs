//! `usage_limit`: a subscription's usage limit is reached and resets in
//! `resets_in_seconds` (default an hour), in each wire's shape: OpenAI's
//! wires answer the ChatGPT backend's 429 `type: usage_limit_reached` with
//! `plan_type`, `resets_in_seconds` and `resets_at` in the body and no
//! retry-after header (what Codex parses into its usage-limit error);
//! Anthropic a 429 `rate_limit_error` with the reset as `retry-after`;
//! Gemini a 429 `RESOURCE_EXHAUSTED` with the reset as `RetryInfo`. Not
//! retryable before the reset: a good agent surfaces it at once with when
//! it resets, and neither sleeps until then nor retries it (codex #23722:
//! a retried usage-limit error wrote a 67 GB log).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageLimit {
    #[serde(default = "default_resets")]
    pub resets_in_seconds: u64,
}

fn default_resets() -> u64 {
    3600
}

impl Default for UsageLimit {
    fn default() -> Self {
        UsageLimit {
            resets_in_seconds: default_resets(),
        }
    }
}

impl crate::kinds::Kind for UsageLimit {
    const NAME: &'static str = "usage_limit";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts::coloured("#880e4f");
}

impl UsageLimit {
    fn info(&self) -> crate::provider::wire::ErrorInfo {
        use crate::provider::wire::{ErrorClass, ErrorInfo};
        ErrorInfo::of_class(ErrorClass::UsageLimit {
            resets_in_seconds: self.resets_in_seconds,
        })
    }
}

impl super::ReplyKind for UsageLimit {
    /// The status and retry-after this wire gives it (OpenAI's wires say
    /// the reset only in the body).
    fn error_hint_on(&self, wire: crate::provider::wire::Wire, _stream: bool) -> Option<super::ReplyError> {
        let shaped = wire.shape_error(&self.info());
        Some(super::ReplyError {
            status: shaped.status,
            retry_after: shaped.retry_after,
            retryable: false,
        })
    }

    /// 1 s to a week.
    fn check(&self) -> Result<(), String> {
        let max = crate::units::MAX_SECONDS;
        if self.resets_in_seconds == 0 || self.resets_in_seconds as f64 > max {
            return Err(format!(
                "`resets_in_seconds` is {}; it takes 1 to {max} (one week)",
                self.resets_in_seconds
            ));
        }
        Ok(())
    }

    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        super::Plan::Error(self.info())
    }

    fn error_hint(&self) -> Option<super::ReplyError> {
        Some(super::ReplyError {
            status: 429,
            retry_after: Some(self.resets_in_seconds),
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

    async fn answer(wire: Wire) -> (u16, Value, Option<String>) {
        let cancel = tokio_util::sync::CancellationToken::new();
        let r = UsageLimit { resets_in_seconds: 7200 };
        let tools = Default::default();
        let ctx = crate::provider::replies::test_ctx(&tools);
        let resp = on_wire(r.plan(&ctx), wire, true, &cancel).await;
        let status = resp.status().as_u16();
        let retry = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let (body, _) = collect(resp.into_body()).await;
        (status, serde_json::from_slice(&body).unwrap(), retry)
    }

    #[tokio::test]
    async fn each_wire_answers_its_usage_limit() {
        for wire in [Wire::OpenaiChat, Wire::OpenaiResponses] {
            let (status, v, retry) = answer(wire).await;
            assert_eq!(status, 429, "{wire}");
            assert_eq!(v["error"]["type"], "usage_limit_reached", "{wire}");
            assert_eq!(v["error"]["resets_in_seconds"], 7200, "{wire}");
            assert!(v["error"]["resets_at"].as_u64().unwrap() > 1_700_000_000);
            assert_eq!(v["error"]["plan_type"], "plus");
            assert_eq!(retry, None, "{wire}: the reset is in the body only");
        }
        let (status, v, retry) = answer(Wire::Anthropic).await;
        assert_eq!(status, 429);
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert!(v["error"]["message"].as_str().unwrap().contains("7200 seconds"));
        assert_eq!(retry.as_deref(), Some("7200"));
        let (status, v, _) = answer(Wire::Gemini).await;
        assert_eq!(status, 429);
        assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED");
        let details = v["error"]["details"].as_array().unwrap();
        assert!(details.iter().any(|d| d["retryDelay"] == "7200s"), "{v}");
    }

    #[test]
    fn bounds_and_hints() {
        let r: crate::provider::Reply = serde_yaml::from_str("{kind: usage_limit}").unwrap();
        let hint = r.error_hint().unwrap();
        assert!(!hint.retryable);
        assert_eq!(hint.retry_after, Some(3600));
        let on_chat = r.error_hint_on(Wire::OpenaiChat, true).unwrap();
        assert_eq!((on_chat.status, on_chat.retry_after), (429, None));
        let on_anthropic = r.error_hint_on(Wire::Anthropic, true).unwrap();
        assert_eq!(on_anthropic.retry_after, Some(3600));
        for bad in ["{resets_in_seconds: 0}", "{resets_in_seconds: 99999999}"] {
            let u: UsageLimit = serde_yaml::from_str(bad).unwrap();
            assert!(u.check().is_err(), "{bad}");
        }
    }
}
