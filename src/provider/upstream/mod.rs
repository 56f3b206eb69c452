//! Proxy mode: the provider forwards main calls to a real model server on the
//! agent's own wire and relays its reply, chunk by chunk, with a fault applied
//! when the rule asks for one (see [`faults`]).
//!
//! What goes upstream: every model call no rule matches (probe and auxiliary
//! calls too), and every call whose rule is `{kind: relay, ...}`. A rule that
//! scripts a reply (text, tool_call, error, hang, ...) is still answered
//! locally.
//!
//! The upstream's credential comes from the environment variable named by
//! `key_env` (the user must pass it with `--pass-env`), is sent only in the
//! wire's auth header (`Authorization: Bearer`, `x-api-key`,
//! `x-goog-api-key`), and is never recorded. The agent's own auth headers are
//! not forwarded. A failed upstream (unreachable, 5xx, 401/403/404) when the
//! rule does not replace the reply with an error is recorded in
//! [`RelayLog::errors`]: the scenario is an ERROR (chaosrun could not run it),
//! not a FAIL of the agent.

mod body;
pub mod faults;
mod relay;
pub mod setup;
pub(crate) mod sse;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::wire::Wire;
pub use relay::RelayRecord;
pub(crate) use relay::{relay, Call, RelayLog};

/// How long the upstream may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A profile's `upstream:` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// The base URL a client of the wire would take (`http://HOST/v1` for the
    /// OpenAI wires, `http://HOST` for Anthropic and Gemini).
    pub url: String,
    /// The environment variable holding the upstream's API key (passed with
    /// `--pass-env`); none sends no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Rewrite the request's model name to this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A resolved upstream: where, with which key.
pub struct Upstream {
    base: String,
    key: Option<String>,
    model: Option<String>,
    client: reqwest::Client,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Upstream")
            .field("base", &self.base)
            .finish()
    }
}

impl Upstream {
    /// Check `spec` and read its key from `env`; the message says what to fix.
    pub fn resolve(
        spec: &UpstreamSpec,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Upstream, String> {
        let url = spec.url.trim_end_matches('/');
        if url.starts_with("https://") {
            return Err(format!(
                "upstream {url}: this build speaks plain http to its upstream; put a local \
                 TLS-terminating forwarder (or gateway) in front of an https server"
            ));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("upstream `{url}` is not an http:// URL (e.g. http://127.0.0.1:8080/v1)")
        })?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(format!("upstream `{url}` has no host"));
        }
        let key = match &spec.key_env {
            Some(name) => Some(env(name).ok_or_else(|| {
                format!("upstream key_env {name}: {name} is not set in chaosrun's environment")
            })?),
            None => None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the upstream client: {e}"))?;
        Ok(Upstream {
            base: url.to_string(),
            key,
            model: spec.model.clone(),
            client,
        })
    }

    /// The upstream URL for a request the agent sent to `path`: the wire's
    /// own version prefix (`/v1` on the OpenAI wires) is the base URL's.
    fn target(&self, wire: Wire, path: &str, query: Option<&str>) -> String {
        let path = match wire {
            Wire::OpenaiChat | Wire::OpenaiResponses => path.strip_prefix("/v1").unwrap_or(path),
            Wire::Anthropic | Wire::Gemini => path,
        };
        let path = match (&self.model, wire) {
            (Some(m), Wire::Gemini) => gemini_model(path, m),
            _ => path.to_string(),
        };
        // The agent's `?key=` (Gemini) is its own credential: never forwarded.
        let query: Vec<&str> = query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("key="))
            .collect();
        if query.is_empty() {
            format!("{}{path}", self.base)
        } else {
            format!("{}{path}?{}", self.base, query.join("&"))
        }
    }

    /// The request body, with the model rewritten when configured.
    fn body(&self, wire: Wire, body: Vec<u8>) -> Vec<u8> {
        let Some(model) = self.model.as_deref().filter(|_| wire != Wire::Gemini) else {
            return body;
        };
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(mut v) if v.get("model").is_some() => {
                v["model"] = serde_json::Value::String(model.to_string());
                serde_json::to_vec(&v).unwrap_or(body)
            }
            _ => body,
        }
    }

    async fn send(
        &self,
        wire: Wire,
        call: &Call<'_>,
        body: Vec<u8>,
    ) -> Result<reqwest::Response, String> {
        let url = self.target(wire, call.path, call.query);
        let mut req = self.client.post(&url).body(self.body(wire, body));
        for (name, value) in call.headers {
            if forwarded(name.as_str()) {
                req = req.header(name.as_str(), value.as_bytes());
            }
        }
        if let Some(key) = &self.key {
            req = match wire {
                Wire::OpenaiChat | Wire::OpenaiResponses => req.bearer_auth(key),
                Wire::Anthropic => req.header("x-api-key", key),
                Wire::Gemini => req.header("x-goog-api-key", key),
            };
        }
        req.send()
            .await
            .map_err(|e| format!("upstream {} unreachable: {}", self.base, error_chain(&e)))
    }
}

/// `models/NAME:method` with NAME replaced.
fn gemini_model(path: &str, model: &str) -> String {
    let Some(start) = path.find("/models/").map(|i| i + "/models/".len()) else {
        return path.to_string();
    };
    let end = path[start..].find(':').map_or(path.len(), |i| start + i);
    format!("{}{model}{}", &path[..start], &path[end..])
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// Whether the agent's header goes upstream: not its credentials, not the
/// hop-by-hop ones, not `accept-encoding` (the relay reads the events).
fn forwarded(name: &str) -> bool {
    !matches!(
        name,
        "authorization"
            | "x-api-key"
            | "x-goog-api-key"
            | "api-key"
            | "cookie"
            | "host"
            | "content-length"
            | "connection"
            | "keep-alive"
            | "transfer-encoding"
            | "te"
            | "upgrade"
            | "accept-encoding"
            | "proxy-authorization"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(url: &str, model: Option<&str>) -> Upstream {
        Upstream::resolve(
            &UpstreamSpec {
                url: url.into(),
                key_env: None,
                model: model.map(String::from),
            },
            |_| None,
        )
        .unwrap()
    }

    #[test]
    fn resolve_checks_url_and_key() {
        let spec = |url: &str, key: Option<&str>| UpstreamSpec {
            url: url.into(),
            key_env: key.map(String::from),
            model: None,
        };
        let e = Upstream::resolve(&spec("https://api.x/v1", None), |_| None).unwrap_err();
        assert!(e.contains("plain http"), "{e}");
        let e = Upstream::resolve(&spec("ftp://x", None), |_| None).unwrap_err();
        assert!(e.contains("not an http://"), "{e}");
        let e = Upstream::resolve(&spec("http://x", Some("K")), |_| None).unwrap_err();
        assert!(e.contains("K is not set"), "{e}");
        let u = Upstream::resolve(&spec("http://x/", Some("K")), |_| Some("s3".into())).unwrap();
        assert_eq!(u.key.as_deref(), Some("s3"));
        assert!(!format!("{u:?}").contains("s3"));
    }

    #[test]
    fn target_joins_paths_per_wire_and_drops_the_agents_key() {
        let u = up("http://h:1/v1", None);
        assert_eq!(
            u.target(Wire::OpenaiChat, "/v1/chat/completions", None),
            "http://h:1/v1/chat/completions"
        );
        let u = up("http://h:1", Some("m2"));
        assert_eq!(
            u.target(
                Wire::Gemini,
                "/v1beta/models/m1:streamGenerateContent",
                Some("alt=sse&key=SECRET")
            ),
            "http://h:1/v1beta/models/m2:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            u.target(Wire::Anthropic, "/v1/messages", None),
            "http://h:1/v1/messages"
        );
    }

    #[test]
    fn model_is_rewritten_in_json_bodies() {
        let u = up("http://h", Some("real"));
        let b = u.body(Wire::OpenaiChat, br#"{"model":"fake","x":1}"#.to_vec());
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            (v["model"].as_str(), v["x"].as_i64()),
            (Some("real"), Some(1))
        );
        let u = up("http://h", None);
        assert_eq!(u.body(Wire::OpenaiChat, b"{}".to_vec()), b"{}");
    }

    #[test]
    fn credentials_and_hop_headers_are_not_forwarded() {
        for h in [
            "authorization",
            "x-api-key",
            "x-goog-api-key",
            "host",
            "accept-encoding",
        ] {
            assert!(!forwarded(h), "{h}");
        }
        assert!(forwarded("anthropic-version") && forwarded("content-type"));
    }
}
