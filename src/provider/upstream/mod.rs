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
//! not forwarded. A failed upstream (unreachable, a certificate problem, 5xx,
//! 401/403/404, no response head within `first_byte_timeout`, silent for
//! `idle_timeout` inside a reply, a reply longer than `reply_timeout`, a relay
//! loop) when the rule does not replace the reply with an error is recorded in
//! [`RelayLog::errors`]: the scenario is an ERROR (chaosrun could not run it),
//! not a FAIL of the agent.
//!
//! `https://` upstreams go through rustls with the Mozilla roots built in
//! (see [`client`]); `ca` adds a private CA. At most [`RELAYS_IN_FLIGHT`]
//! relayed calls are open at once per provider (the rest wait), and every
//! relayed request carries this proxy's token in `x-chaosrun-relay`, so a
//! request that comes back to the proxy that sent it is refused (508) instead
//! of multiplying.

mod body;
pub mod client;
pub mod faults;
mod mutated;
mod relay;
pub mod setup;
pub(crate) mod sse;
mod trust;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use super::wire::Wire;
pub use relay::RelayRecord;
pub(crate) use relay::{relay, Call, RelayLog};

/// Relayed calls open at once per provider; more wait for a slot.
pub const RELAYS_IN_FLIGHT: usize = 64;
/// The header that carries the tokens of the proxies a request went through.
pub(crate) const LOOP_HEADER: &str = "x-chaosrun-relay";
/// Proxies a request may pass through before it is taken for a loop.
const MAX_HOPS: usize = 8;

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
    /// A PEM file of extra CA certificates trusted for an `https://` upstream
    /// (a private CA), on top of the built-in Mozilla roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// Seconds from sending a call to the upstream's response head (default
    /// [`client::FIRST_BYTE_TIMEOUT`]).
    #[serde(
        default,
        deserialize_with = "crate::units::opt_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub first_byte_timeout: Option<f64>,
    /// Longest silence inside a relayed reply, in seconds (default
    /// [`client::IDLE_TIMEOUT`]).
    #[serde(
        default,
        deserialize_with = "crate::units::opt_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_timeout: Option<f64>,
    /// Longest relayed reply, head to end, in seconds (default
    /// [`client::REPLY_TIMEOUT`]): an endless stream is the upstream's fault.
    #[serde(
        default,
        deserialize_with = "crate::units::opt_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub reply_timeout: Option<f64>,
    /// Record relayed main calls as cassette entries (`--record`): the file
    /// (`serve`) or directory (a table run, one file per scenario). Never
    /// from a profile.
    #[serde(skip)]
    pub record: Option<PathBuf>,
}

/// A resolved upstream: where, with which key, within which bounds.
pub struct Upstream {
    base: String,
    key: Option<String>,
    model: Option<String>,
    client: reqwest::Client,
    bounds: client::Bounds,
    /// This proxy's token in [`LOOP_HEADER`].
    token: String,
    /// Relay slots ([`RELAYS_IN_FLIGHT`]).
    slots: Arc<Semaphore>,
    /// Relayed main calls are recorded as cassette entries.
    pub(crate) tape: bool,
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
        // First: every later message names the URL.
        if let Some(at) = spec.url.find(['?', '#']) {
            return Err(format!(
                "upstream `{}…` has a query or fragment (`{}…`): a key there would be \
                 printed, recorded and sent with every path; give the base URL alone and \
                 the key with --upstream-key-env NAME --pass-env NAME (the profile's \
                 `upstream.key_env`)",
                &spec.url[..at],
                &spec.url[at..at + 1]
            ));
        }
        let url = spec.url.trim_end_matches('/');
        let rest = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"))
            .ok_or_else(|| {
                format!(
                    "upstream `{url}` is not an http:// or https:// URL \
                     (e.g. https://api.openai.com/v1)"
                )
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
        let secs = |v: Option<f64>, default: f64| Duration::from_secs_f64(v.unwrap_or(default));
        let bounds = client::Bounds {
            first_byte: secs(spec.first_byte_timeout, client::FIRST_BYTE_TIMEOUT),
            idle: secs(spec.idle_timeout, client::IDLE_TIMEOUT),
            reply: secs(spec.reply_timeout, client::REPLY_TIMEOUT),
        };
        if bounds.first_byte.is_zero() || bounds.idle.is_zero() || bounds.reply.is_zero() {
            return Err(format!(
                "upstream `{url}`: first_byte_timeout, idle_timeout and reply_timeout must be > 0"
            ));
        }
        Ok(Upstream {
            base: url.to_string(),
            key,
            model: spec.model.clone(),
            client: client::build(spec.ca.as_deref())?,
            bounds,
            token: format!("{:016x}", rand::random::<u64>()),
            slots: Arc::new(Semaphore::new(RELAYS_IN_FLIGHT)),
            tape: spec.record.is_some(),
        })
    }

    /// Whether this upstream's host and port resolve to `own`, the address
    /// the proxy itself listens on (it would relay every call to itself).
    pub(crate) async fn points_at(&self, own: SocketAddr) -> bool {
        let Ok(parsed) = reqwest::Url::parse(&self.base) else {
            return false;
        };
        let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
            return false;
        };
        if port != own.port() {
            return false;
        }
        let target = format!("{host}:{port}");
        drop(parsed);
        match tokio::net::lookup_host(target).await {
            Ok(mut addrs) => addrs.any(|a| a.ip() == own.ip() || a.ip().is_unspecified()),
            Err(_) => false,
        }
    }

    /// Whether a request with these [`LOOP_HEADER`] values came back through
    /// this proxy (or went through too many).
    pub(crate) fn is_loop(&self, headers: &axum::http::HeaderMap) -> bool {
        let hops: Vec<&str> = headers
            .get_all(LOOP_HEADER)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        hops.len() >= MAX_HOPS || hops.contains(&self.token.as_str())
    }

    /// The base URL (for messages).
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The upstream URL for a request the agent sent to `path`: the wire's
    /// own version prefix (`/v1` on the OpenAI wires) is the base URL's.
    fn target(&self, wire: Wire, path: &str, query: Option<&str>) -> String {
        let format = wire.format();
        let path = path.strip_prefix(format.base_path()).unwrap_or(path);
        let path = format.upstream_path(path, self.model.as_deref());
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
        let Some(model) = self
            .model
            .as_deref()
            .filter(|_| wire.format().model_in_body())
        else {
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
            req = wire.format().auth(req, key);
        }
        req = req.header(LOOP_HEADER, self.hops(call.headers));
        match tokio::time::timeout(self.bounds.first_byte, req.send()).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(client::describe(&self.base, &e)),
            Err(_) => Err(format!(
                "upstream {} sent no response head within {} s (upstream.first_byte_timeout)",
                self.base,
                crate::units::short(self.bounds.first_byte.as_secs_f64())
            )),
        }
    }

    /// The incoming [`LOOP_HEADER`] tokens plus this proxy's own.
    fn hops(&self, headers: &axum::http::HeaderMap) -> String {
        let mut hops: Vec<&str> = headers
            .get_all(LOOP_HEADER)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        hops.truncate(MAX_HOPS);
        hops.push(&self.token);
        hops.join(",")
    }
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
            | LOOP_HEADER
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    fn up(url: &str, model: Option<&str>) -> Upstream {
        Upstream::resolve(
            &UpstreamSpec {
                url: url.into(),
                model: model.map(String::from),
                ..UpstreamSpec::default()
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
            ..UpstreamSpec::default()
        };
        assert!(Upstream::resolve(&spec("https://api.x/v1", None), |_| None).is_ok());
        let e = Upstream::resolve(&spec("ftp://x", None), |_| None).unwrap_err();
        assert!(e.contains("not an http:// or https://"), "{e}");
        let e = Upstream::resolve(&spec("https:///v1", None), |_| None).unwrap_err();
        assert!(e.contains("no host"), "{e}");
        let zero = UpstreamSpec {
            first_byte_timeout: Some(0.0),
            ..spec("http://x", None)
        };
        let e = Upstream::resolve(&zero, |_| None).unwrap_err();
        assert!(e.contains("must be > 0"), "{e}");
        for bad in ["http://127.0.0.1:9/v1?key=SECRET1", "ftp://h#SECRET1"] {
            let e = Upstream::resolve(&spec(bad, None), |_| None).unwrap_err();
            assert!(e.contains("query or fragment"), "{e}");
            assert!(
                e.contains("--upstream-key-env") && !e.contains("SECRET1"),
                "{e}"
            );
        }
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

    #[tokio::test]
    async fn an_upstream_at_the_proxys_own_address_is_seen() {
        let own: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        assert!(up("http://127.0.0.1:4321/v1", None).points_at(own).await);
        assert!(up("http://localhost:4321", None).points_at(own).await);
        assert!(up("http://0.0.0.0:4321", None).points_at(own).await);
        assert!(!up("http://127.0.0.1:4322", None).points_at(own).await);
        let own443: SocketAddr = "127.0.0.1:443".parse().unwrap();
        assert!(up("https://127.0.0.1", None).points_at(own443).await);
    }

    #[test]
    fn a_request_that_went_through_this_proxy_is_a_loop() {
        let a = up("http://h", None);
        let b = up("http://h", None);
        let mut h = axum::http::HeaderMap::new();
        assert!(!a.is_loop(&h));
        h.insert(LOOP_HEADER, a.hops(&HeaderMap::new()).parse().unwrap());
        assert!(a.is_loop(&h) && !b.is_loop(&h));
        // Through b and back to a.
        let via_b = b.hops(&h);
        let mut h2 = axum::http::HeaderMap::new();
        h2.insert(LOOP_HEADER, via_b.parse().unwrap());
        assert!(a.is_loop(&h2));
        let many = ["x"; MAX_HOPS].join(",");
        h2.insert(LOOP_HEADER, many.parse().unwrap());
        assert!(b.is_loop(&h2));
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
