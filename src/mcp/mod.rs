//! The scripted MCP tool server of a scenario: a row's `mcp:` section
//! ([`McpSpec`]: transport, linger, [`rules`]), the reply kinds
//! ([`replies`]), the healthy server ([`jsonrpc`]), the transport-neutral
//! dispatcher and its bounded recording ([`engine`], [`record`]), the two
//! transports ([`stdio`]: a private Unix socket the `chaosrun mcp-stdio`
//! relay ([`shim`]) connects back to; [`http`]: Streamable HTTP on loopback;
//! [`sse`]: the legacy HTTP+SSE transport on the same listener),
//! and [`server`], which runs both for one scenario; [`upstream`] puts a
//! real MCP server behind it (proxy mode: requests relayed, rules applied to
//! the real traffic). Frames are raw
//! newline-delimited JSON-RPC written here, not through an SDK: faults need
//! byte-level control (a malformed frame, a crash mid-call, a 30 MB result
//! streamed), and the healthy path is a few fixed answers.

pub mod engine;
pub mod http;
pub mod jsonrpc;
pub mod record;
pub mod replies;
pub mod rules;
pub mod serve;
pub mod server;
pub mod shim;
pub mod sse;
pub mod stdio;
pub mod upstream;

use serde::{Deserialize, Serialize};

pub use record::{McpExchange, McpRecording};
pub use replies::Reply;
pub use rules::{Rule, When};
pub use server::{McpConfig, McpServer};

/// How the agent reaches the MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// The agent spawns `chaosrun mcp-stdio --socket PATH` from its config.
    Stdio,
    /// Streamable HTTP at `http://127.0.0.1:PORT/mcp`.
    Http,
    /// The legacy HTTP+SSE transport (protocol 2024-11-05) at
    /// `http://127.0.0.1:PORT/sse` (see [`sse`]).
    Sse,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
            Transport::Sse => "sse",
        }
    }
}

/// What the probe turn's MCP call asks on a row whose server restarts
/// (`mcp.restart`): its `text` is this and the nonce; its healthy result
/// `probe:` and that text.
pub const AGAIN: &str = "again-";

/// When the scripted server restarts (`mcp.restart`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restart {
    /// As the faulted turn ends (the driver's `turn_end`, or an ACP turn's
    /// answer), before the probe turn.
    TurnEnd,
}

/// A scenario row's `mcp:` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSpec {
    /// Pin a transport; default: the profile's first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    /// stdio only: the server ignores stdin EOF and keeps running until it
    /// is signalled (or the scenario ends).
    #[serde(default)]
    pub linger: bool,
    /// The probe tool must reach the model (offered in a main call of the
    /// faulted turn), or the agent must surface that the server is missing:
    /// never a silent drop (the `mcp_tool_offered` check).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub offered: bool,
    /// `turn_end`: the server restarts when the faulted turn ends (every
    /// stdio server exits, every HTTP session is forgotten), healthy again
    /// at once; the probe turn (`probe: mcp`) calls its tool again
    /// (the `mcp_reconnected` check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Restart>,
    /// Legacy SSE (`transport: sse`) only: the stream opens but never sends
    /// its `endpoint` event, so the client never learns where to post.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withhold_endpoint: bool,
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Proxy mode: the real MCP server behind chaosrun's (see [`upstream`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<upstream::UpstreamSpec>,
}

impl McpSpec {
    /// Every rule valid, and `linger` only where it means something. With an
    /// upstream, a rule's `tool` names one of the real server's tools
    /// (checked when the scenario starts, against its `tools/list`).
    pub fn check(&self) -> Result<(), String> {
        let proxied = self.upstream.is_some();
        for (n, r) in self.rules.iter().enumerate() {
            rules::check(r, proxied).map_err(|e| format!("mcp rule {}: {e}", n + 1))?;
        }
        if let (true, Some(e)) = (proxied, self.needs_own_server()) {
            return Err(e);
        }
        if self.withhold_endpoint && self.transport != Some(Transport::Sse) {
            return Err(
                "`mcp.withhold_endpoint` is for the legacy SSE transport: pin `mcp.transport: sse`"
                    .into(),
            );
        }
        if self.linger && self.transport == Some(Transport::Http) {
            return Err(
                "`mcp.linger` is for the stdio transport (an HTTP server has no stdin)".into(),
            );
        }
        Ok(())
    }

    /// Why this row cannot run against a real server, if it cannot: a rule
    /// that changes chaosrun's own probe tool, or a restart of its server.
    pub fn needs_own_server(&self) -> Option<String> {
        if self.restart.is_some() {
            return Some(
                "`mcp.restart` restarts chaosrun's own server; it cannot apply to a real server behind `mcp.upstream`"
                    .to_string(),
            );
        }
        self.rules
            .iter()
            .find(|r| r.reply.changes_probe_tool())
            .map(|_| {
                "`schema_swap` changes chaosrun's own probe tool; it cannot apply to a real server behind `mcp.upstream`"
                    .to_string()
            })
    }

    /// The transport this row runs on, given what the profile registers.
    pub fn transport_for(&self, registered: &[Transport]) -> Option<Transport> {
        match self.transport {
            Some(t) => registered.contains(&t).then_some(t),
            None => registered.first().copied(),
        }
    }
}

/// What an adapter profile declares about MCP.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub enum McpSupport {
    /// No `mcp` key: MCP rows are N/A, with a hint to declare it.
    #[default]
    Undeclared,
    /// `mcp: false`: the agent has no MCP client; MCP rows are N/A.
    None,
    /// `mcp: {transports: [...]}`: what the agent's config registers.
    Transports(Vec<Transport>),
}

/// A profile's `mcp:` key: what the agent registers, and (proxy mode) the
/// real server every MCP row relays to unless the row names its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct McpDoc {
    pub support: McpSupport,
    pub upstream: Option<upstream::UpstreamSpec>,
}

impl<'de> Deserialize<'de> for McpSupport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        McpDoc::deserialize(d).map(|m| m.support)
    }
}

impl<'de> Deserialize<'de> for McpDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = McpDoc;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "`false` (no MCP client) or `{transports: [stdio, http], upstream?: {...}}` \
                     (one or both, what the agent's config registers)",
                )
            }
            fn visit_bool<E: Error>(self, v: bool) -> Result<McpDoc, E> {
                if v {
                    return Err(E::custom(
                        "`mcp: true` does not say how the agent reaches the server; write \
                         `mcp: {transports: [stdio]}` (stdio, http or both)",
                    ));
                }
                Ok(McpDoc {
                    support: McpSupport::None,
                    upstream: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<McpDoc, A::Error> {
                let mut transports: Option<Vec<Transport>> = None;
                let mut upstream = None;
                while let Some(k) = m.next_key::<String>()? {
                    match k.as_str() {
                        "transports" => transports = Some(m.next_value()?),
                        "upstream" => upstream = Some(m.next_value()?),
                        _ => return Err(A::Error::unknown_field(&k, &["transports", "upstream"])),
                    }
                }
                match transports {
                    Some(t) if !t.is_empty() => Ok(McpDoc {
                        support: McpSupport::Transports(t),
                        upstream,
                    }),
                    _ => Err(A::Error::custom(
                        "`mcp.transports` needs at least one transport (stdio, http)",
                    )),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The template variables a scenario provides about its MCP server. Rows
/// without `mcp:` (and the transport a row does not use) render empty: `""`,
/// `[]`, so an agent registers no server then.
pub fn vars(
    transport: Option<Transport>,
    socket: Option<&std::path::Path>,
    urls: Option<(&str, &str)>,
) -> Vec<(String, String)> {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let stdio = transport == Some(Transport::Stdio);
    let url = |t: Transport| match urls {
        Some((http, sse)) if transport == Some(t) => {
            if t == Transport::Sse { sse } else { http }.to_string()
        }
        _ => String::new(),
    };
    let args = match (stdio, socket) {
        (true, Some(s)) => serde_json::json!(["mcp-stdio", "--socket", s.display().to_string()]),
        _ => serde_json::json!([]),
    };
    [
        ("mcp_command", if stdio { exe } else { String::new() }),
        ("mcp_args_json", args.to_string()),
        ("mcp_url", url(Transport::Http)),
        ("mcp_sse_url", url(Transport::Sse)),
        (
            "mcp_transport",
            transport.map_or("", Transport::name).to_string(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Whether a count is zero (serde's `skip_serializing_if`).
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Template variable names provided by [`vars`].
pub const VAR_NAMES: &[&str] = &[
    "mcp_command",
    "mcp_args_json",
    "mcp_url",
    "mcp_sse_url",
    "mcp_transport",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn support_parses_false_or_transports_and_refuses_the_rest() {
        let p = |y: &str| serde_yaml::from_str::<McpSupport>(y);
        assert_eq!(p("false").unwrap(), McpSupport::None);
        assert_eq!(
            p("{transports: [stdio, http]}").unwrap(),
            McpSupport::Transports(vec![Transport::Stdio, Transport::Http])
        );
        assert!(p("true").unwrap_err().to_string().contains("does not say"));
        assert!(p("{transports: []}")
            .unwrap_err()
            .to_string()
            .contains("at least one"));
        assert!(p("{transports: [grpc]}")
            .unwrap_err()
            .to_string()
            .contains("transports"));
    }

    #[test]
    fn the_row_runs_on_its_pin_or_the_profiles_first() {
        let s = McpSpec::default();
        assert_eq!(
            s.transport_for(&[Transport::Http, Transport::Stdio]),
            Some(Transport::Http)
        );
        let pinned = McpSpec {
            transport: Some(Transport::Stdio),
            ..Default::default()
        };
        assert_eq!(pinned.transport_for(&[Transport::Http]), None);
    }

    #[test]
    fn a_withheld_endpoint_needs_the_legacy_sse_transport() {
        let spec = |t: Option<Transport>| McpSpec {
            transport: t,
            withhold_endpoint: true,
            ..Default::default()
        };
        assert!(spec(Some(Transport::Sse)).check().is_ok());
        for t in [None, Some(Transport::Http), Some(Transport::Stdio)] {
            let e = spec(t).check().unwrap_err();
            assert!(e.contains("pin `mcp.transport: sse`"), "{e}");
        }
    }

    #[test]
    fn vars_render_the_unused_transport_empty() {
        let v = vars(
            Some(Transport::Stdio),
            Some(std::path::Path::new("/t/mcp.sock")),
            Some(("http://x/mcp", "http://x/sse")),
        );
        let get = |k: &str| v.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(
            get("mcp_args_json"),
            r#"["mcp-stdio","--socket","/t/mcp.sock"]"#
        );
        assert_eq!(
            (get("mcp_url"), get("mcp_sse_url")),
            (String::new(), String::new())
        );
        assert!(!get("mcp_command").is_empty());
        // Each HTTP transport renders its own URL only.
        for (t, url, sse) in [
            (Transport::Http, "http://x/mcp", ""),
            (Transport::Sse, "", "http://x/sse"),
        ] {
            let v = vars(Some(t), None, Some(("http://x/mcp", "http://x/sse")));
            let get = |k: &str| v.iter().find(|(n, _)| n == k).unwrap().1.clone();
            assert_eq!(
                (get("mcp_url").as_str(), get("mcp_sse_url").as_str()),
                (url, sse)
            );
            assert_eq!(get("mcp_command"), "");
        }
        let none = vars(None, None, None);
        assert!(none
            .iter()
            .all(|(k, v)| v.is_empty() || (k == "mcp_args_json" && v == "[]")));
    }
}
