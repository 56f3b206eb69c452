//! `context_window: {max_request_bytes: N}` or `{headroom_bytes: H}`: a
//! scenario-level model context window, absolute, or relative to the agent's
//! own first main call (its size plus H: an agent whose system prompt and
//! tools alone are large still has H bytes to grow, so a row about a tool
//! output pushing the conversation over means the same for every agent).
//! Any faulted-turn main call whose request body is over the window is
//! answered with the wire's own context-length error instead of its rule
//! (OpenAI Chat and Responses: 400 `context_length_exceeded`; Anthropic: 400
//! `invalid_request_error` "prompt is too long: T tokens > M maximum";
//! Gemini: 400 `INVALID_ARGUMENT` "The input token count (T) exceeds the
//! maximum number of tokens allowed (M)."), with tokens estimated as
//! bytes / 4. The probe turn and auxiliary calls are exempt, so reusability
//! can still be judged. Such a call is recorded as `context_length_exceeded`
//! and does not consume a responder rule.
//!
//! Bounds: N and H are whole numbers of bytes from [`MIN_BYTES`] to
//! [`MAX_BYTES`] (the provider's body limit), and exactly one is given;
//! anything else is refused at load with the table's `file:line:col`.

use serde::{Deserialize, Deserializer, Serialize};

/// What the record names as served to a call over the window (no reply
/// kind's name: the window answers it, not a rule).
pub const RECORDED: &str = "context_length_exceeded";

/// The smallest window accepted, in bytes.
pub const MIN_BYTES: u64 = 1;
/// The largest window accepted: the provider's request body limit.
pub const MAX_BYTES: u64 = 64 * 1024 * 1024;

/// A context window, absolute or relative to the first main call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextWindow {
    /// Requests over this many bytes overflow.
    MaxRequestBytes(usize),
    /// Requests over the first main call's size plus this many bytes overflow.
    HeadroomBytes(usize),
}

impl ContextWindow {
    /// The window in bytes, given the size of the turn's first main call.
    pub fn limit(self, first_main_bytes: usize) -> usize {
        match self {
            ContextWindow::MaxRequestBytes(n) => n,
            ContextWindow::HeadroomBytes(h) => first_main_bytes.saturating_add(h),
        }
    }
}

impl std::fmt::Display for ContextWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContextWindow::MaxRequestBytes(n) => write!(f, "{n}-byte"),
            ContextWindow::HeadroomBytes(h) => write!(f, "first call + {h}-byte"),
        }
    }
}

/// The window as written: exactly one of the two fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowDoc {
    #[serde(default, deserialize_with = "bounded_bytes")]
    max_request_bytes: Option<usize>,
    #[serde(default, deserialize_with = "bounded_bytes")]
    headroom_bytes: Option<usize>,
}

/// Read through a map visitor, so a mistake is placed at the window's own
/// `line:col`, not at its scenario.
impl<'de> Deserialize<'de> for ContextWindow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ContextWindow, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = ContextWindow;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`{max_request_bytes: N}` or `{headroom_bytes: H}`")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<ContextWindow, A::Error> {
                use serde::de::Error;
                let doc =
                    WindowDoc::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                ContextWindow::try_from(doc).map_err(A::Error::custom)
            }
        }
        d.deserialize_map(V)
    }
}

impl TryFrom<WindowDoc> for ContextWindow {
    type Error = String;
    fn try_from(d: WindowDoc) -> Result<ContextWindow, String> {
        match (d.max_request_bytes, d.headroom_bytes) {
            (Some(n), None) => Ok(ContextWindow::MaxRequestBytes(n)),
            (None, Some(h)) => Ok(ContextWindow::HeadroomBytes(h)),
            _ => Err("a context window is `{max_request_bytes: N}` or `{headroom_bytes: H}` (exactly one)".into()),
        }
    }
}

fn bounded_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
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
        Some(n) if (i128::from(MIN_BYTES)..=i128::from(MAX_BYTES)).contains(&n) => {
            Ok(Some(n as usize))
        }
        _ => Err(D::Error::custom(format!(
            "a context window's size must be a whole number of bytes from {MIN_BYTES} to {MAX_BYTES} (64 MiB, the provider's body limit); got {}",
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
        assert_eq!(ok.limit(100_000), 4096);
        let rel: ContextWindow = serde_yaml::from_str("{headroom_bytes: 8000}").unwrap();
        assert_eq!(rel.limit(30_000), 38_000);
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
        for both in ["{}", "{max_request_bytes: 5, headroom_bytes: 5}"] {
            let e = serde_yaml::from_str::<ContextWindow>(both)
                .unwrap_err()
                .to_string();
            assert!(e.contains("exactly one"), "{both}: {e}");
        }
    }
}
