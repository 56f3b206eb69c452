//! `context_window: {max_request_bytes: N}`: a scenario-level model context
//! window. Any faulted-turn main call whose request body is over N bytes is
//! answered with the wire's own context-length error instead of its rule
//! (OpenAI Chat and Responses: 400 `context_length_exceeded`; Anthropic: 400
//! `invalid_request_error` "prompt is too long: T tokens > M maximum";
//! Gemini: 400 `INVALID_ARGUMENT` "The input token count (T) exceeds the
//! maximum number of tokens allowed (M)."), with tokens estimated as
//! bytes / 4. The probe turn and auxiliary calls are exempt, so reusability
//! can still be judged. Such a call is recorded as `context_length_exceeded`
//! and does not consume a responder rule.
//!
//! Bounds: N is a whole number of bytes from [`MIN_BYTES`] to [`MAX_BYTES`]
//! (the provider's body limit); anything else is refused at load with the
//! table's `file:line:col`.

use serde::{Deserialize, Deserializer, Serialize};

/// The smallest window accepted, in bytes.
pub const MIN_BYTES: u64 = 1;
/// The largest window accepted: the provider's request body limit.
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextWindow {
    /// Requests over this many bytes overflow.
    #[serde(deserialize_with = "bounded_bytes")]
    pub max_request_bytes: usize,
}

fn bounded_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    use serde::de::Error;
    let v = serde_yaml::Value::deserialize(d)?;
    let n = match &v {
        serde_yaml::Value::Number(n) => n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from)),
        _ => None,
    };
    match n {
        Some(n) if (i128::from(MIN_BYTES)..=i128::from(MAX_BYTES)).contains(&n) => Ok(n as usize),
        _ => Err(D::Error::custom(format!(
            "`max_request_bytes` must be a whole number of bytes from {MIN_BYTES} to {MAX_BYTES} (64 MiB, the provider's body limit); got {}",
            serde_yaml::to_string(&v).unwrap_or_default().trim()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced_with_a_clear_message() {
        let ok: ContextWindow = serde_yaml::from_str("{max_request_bytes: 4096}").unwrap();
        assert_eq!(ok.max_request_bytes, 4096);
        for bad in ["-1", "0", "1.5", "'big'", "67108865", "1e300"] {
            let e = serde_yaml::from_str::<ContextWindow>(&format!("{{max_request_bytes: {bad}}}"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("whole number of bytes from 1 to 67108864"),
                "{bad}: {e}"
            );
        }
        assert!(serde_yaml::from_str::<ContextWindow>("{max_bytes: 5}").is_err());
    }
}
