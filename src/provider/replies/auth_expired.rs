//! `auth_expired`: the request's credential is not valid (an OAuth token or
//! short-lived key that expired), a 401 in each wire's documented shape:
//! OpenAI Chat and Responses answer `invalid_request_error` with code
//! `invalid_api_key` "Incorrect API key provided…"; Anthropic answers
//! `authentication_error` "invalid x-api-key"; Gemini answers
//! `UNAUTHENTICATED` "API key not valid…". No retry-after: retrying with the
//! same key cannot help. A row's `credential:` makes the provider answer
//! this to every request whose key is not the current one (see
//! [`crate::provider::credential`]); as a rule's reply it refuses whatever
//! key the request carries.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthExpired {}

impl crate::kinds::Kind for AuthExpired {
    const NAME: &'static str = "auth_expired";
    const FACTS: crate::kinds::Facts = crate::kinds::Facts {
        refuses_credential: true,
        ..crate::kinds::Facts::coloured("#4e342e")
    };
}

impl AuthExpired {
    /// The reply the provider serves to a request whose key has expired.
    pub(crate) fn reply() -> super::Reply {
        AuthExpired {}.into()
    }
}

impl super::ReplyKind for AuthExpired {
    fn plan(&self, _ctx: &super::ReplyCtx<'_>) -> super::Plan {
        use crate::provider::wire::{ErrorClass, ErrorInfo};
        super::Plan::Error(ErrorInfo::of_class(ErrorClass::Auth))
    }

    fn error_hint(&self) -> Option<super::ReplyError> {
        Some(super::ReplyError {
            status: 401,
            retry_after: None,
            retryable: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::replies::http_body_util_free::collect;
    use crate::provider::replies::on_wire;
    use crate::provider::replies::ReplyKind;
    use crate::provider::wire::Wire;
    use serde_json::Value;

    async fn answer(wire: Wire) -> (u16, Value, bool) {
        let cancel = tokio_util::sync::CancellationToken::new();
        let tools = Default::default();
        let ctx = crate::provider::replies::test_ctx(&tools);
        let resp = on_wire(AuthExpired {}.plan(&ctx), wire, true, &cancel).await;
        let status = resp.status().as_u16();
        let retry_header = resp.headers().contains_key("retry-after");
        let (body, _) = collect(resp.into_body()).await;
        (status, serde_json::from_slice(&body).unwrap(), retry_header)
    }

    #[tokio::test]
    async fn each_wire_answers_its_own_documented_401() {
        for wire in [Wire::OpenaiChat, Wire::OpenaiResponses] {
            let (status, v, retry) = answer(wire).await;
            assert_eq!(status, 401, "{wire}");
            assert_eq!(v["error"]["code"], "invalid_api_key", "{wire}");
            assert_eq!(v["error"]["type"], "invalid_request_error", "{wire}");
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.starts_with("Incorrect API key provided"), "{message}");
            assert!(!retry);
        }
        let (status, v, retry) = answer(Wire::Anthropic).await;
        assert_eq!(status, 401);
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "authentication_error");
        assert_eq!(v["error"]["message"], "invalid x-api-key");
        assert!(!retry);
        let (status, v, retry) = answer(Wire::Gemini).await;
        assert_eq!(status, 401);
        assert_eq!(v["error"]["code"], 401);
        assert_eq!(v["error"]["status"], "UNAUTHENTICATED");
        assert!(v["error"].get("details").is_none());
        assert!(!retry);
    }

    #[test]
    fn takes_no_fields_and_says_it_is_final() {
        let r: crate::provider::Reply = serde_yaml::from_str("{kind: auth_expired}").unwrap();
        let hint = r.error_hint().unwrap();
        assert_eq!(hint.status, 401);
        assert!(!hint.retryable && hint.retry_after.is_none());
        assert!(!r.retryable());
        assert!(serde_yaml::from_str::<crate::provider::Reply>("{kind: auth_expired, x: 1}").is_err());
    }
}
