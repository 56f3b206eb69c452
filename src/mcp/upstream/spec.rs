//! The YAML of an MCP upstream: `mcp: {upstream: {command: [...], env?,
//! cwd?}}` (a stdio server chaosrun starts) or `{url: http://…/mcp}` (a
//! Streamable HTTP server), with `init_timeout` (seconds the server has to
//! answer `initialize`) and `probe` (the upstream tool a rule's `tool:
//! probe` stands for). Exactly one of `command` and `url`; a mistake is a
//! YAML error at the key's line and column.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Default seconds an upstream has to answer `initialize`.
pub const INIT_TIMEOUT: f64 = 20.0;
/// Largest `init_timeout` accepted.
pub const MAX_INIT_TIMEOUT: f64 = 600.0;

/// Where the real MCP server is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// A stdio server chaosrun starts per connection: argv, extra env, cwd.
    Command {
        argv: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint (`http://` only).
    Url(String),
}

/// A row's or profile's `mcp.upstream`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Raw")]
pub struct UpstreamSpec {
    pub target: Target,
    /// Seconds the server has to answer `initialize` (default 20).
    pub init_timeout: f64,
    /// The upstream tool a rule's `tool: probe` names.
    pub probe: Option<String>,
}

impl UpstreamSpec {
    /// How the upstream is named in messages: the command line or the URL.
    pub fn describe(&self) -> String {
        match &self.target {
            Target::Command { argv, .. } => format!("`{}`", argv.join(" ")),
            Target::Url(u) => u.clone(),
        }
    }
}

/// The YAML as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default, deserialize_with = "crate::units::opt_seconds")]
    init_timeout: Option<f64>,
    #[serde(default)]
    probe: Option<String>,
}

impl TryFrom<Raw> for UpstreamSpec {
    type Error = String;

    fn try_from(r: Raw) -> Result<Self, String> {
        let local = !r.env.is_empty() || r.cwd.is_some();
        let target = match (r.command, r.url) {
            (Some(_), Some(_)) => {
                return Err("`mcp.upstream` takes `command` (a stdio server) or `url` \
                            (Streamable HTTP), not both"
                    .into())
            }
            (None, None) => {
                return Err(
                    "`mcp.upstream` needs `command: [PROGRAM, ARGS...]` (a stdio \
                            server) or `url: http://HOST:PORT/mcp` (Streamable HTTP)"
                        .into(),
                )
            }
            (Some(argv), None) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err("`mcp.upstream.command` is empty; write [PROGRAM, ARGS...]".into());
                }
                if let Some(k) = r.env.keys().find(|k| k.is_empty() || k.contains('=')) {
                    return Err(format!("`mcp.upstream.env` has a bad name `{k}`"));
                }
                Target::Command {
                    argv,
                    env: r.env,
                    cwd: r.cwd,
                }
            }
            (None, Some(url)) => {
                if local {
                    return Err("`env` and `cwd` are for `command`; a `url` upstream is a \
                                server already running"
                        .into());
                }
                if !url.starts_with("http://") {
                    return Err(format!(
                        "`mcp.upstream.url` `{url}` must start with http:// (a Streamable HTTP \
                         endpoint such as http://127.0.0.1:3001/mcp)"
                    ));
                }
                Target::Url(url)
            }
        };
        let init_timeout = r.init_timeout.unwrap_or(INIT_TIMEOUT);
        if !(init_timeout > 0.0 && init_timeout <= MAX_INIT_TIMEOUT) {
            return Err(format!(
                "`mcp.upstream.init_timeout` must be in (0, {MAX_INIT_TIMEOUT}] seconds"
            ));
        }
        Ok(UpstreamSpec {
            target,
            init_timeout,
            probe: r.probe,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parsed as a value in a map (as in a table), so errors carry a location.
    fn parse(y: &str) -> Result<UpstreamSpec, String> {
        #[derive(Deserialize)]
        struct In {
            upstream: UpstreamSpec,
        }
        serde_yaml::from_str::<In>(&format!("upstream: {y}"))
            .map(|i| i.upstream)
            .map_err(|e| {
                let at = e.location().map(|l| (l.line(), l.column()));
                format!("{e} @{at:?}")
            })
    }

    #[test]
    fn command_or_url_exactly_one_with_a_location() {
        let s = parse("{command: [node, srv.js], env: {A: b}, probe: echo}").unwrap();
        assert!(matches!(&s.target, Target::Command { argv, .. } if argv[1] == "srv.js"));
        assert_eq!((s.init_timeout, s.probe.as_deref()), (20.0, Some("echo")));
        let s = parse("{url: 'http://127.0.0.1:9/mcp', init_timeout: 2}").unwrap();
        assert_eq!(s.target, Target::Url("http://127.0.0.1:9/mcp".into()));
        for (y, says) in [
            ("{}", "needs `command"),
            ("{command: [a], url: 'http://x'}", "not both"),
            ("{command: node}", "invalid type"),
            ("{command: []}", "is empty"),
            ("{url: 'https://x'}", "http://"),
            ("{url: 'http://x', cwd: /}", "are for `command`"),
            ("{command: [a], init_timeout: 0}", "init_timeout"),
            ("{command: [a], nope: 1}", "unknown field"),
        ] {
            let e = parse(y).unwrap_err();
            assert!(e.contains(says), "{y}: {e}");
            assert!(e.contains("@Some((1, "), "{y}: no location in {e}");
        }
    }
}
