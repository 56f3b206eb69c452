//! One scenario's MCP server: the [`super::engine::Engine`] behind both
//! transports at once (the stdio socket and Streamable HTTP on loopback); the
//! row's transport decides which one the agent is told about. `shutdown`
//! cuts every wait, closes the socket (every relay then exits) and the HTTP
//! listener, and hands back the recording.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::engine::Engine;
use super::{McpRecording, Rule, Transport};

/// What one MCP server needs.
pub struct McpConfig {
    pub rules: Vec<Rule>,
    pub nonce: String,
    pub linger: bool,
    /// Legacy SSE: the stream never sends its `endpoint` event.
    pub withhold_endpoint: bool,
    pub transport: Transport,
    /// Directory for the socket (the scenario's own, 0700).
    pub dir: PathBuf,
    /// The run's clock: exchange times are seconds since this.
    pub start: Instant,
    /// Where the HTTP transport binds (a scenario's network namespace);
    /// None: the host.
    pub bind: Option<crate::listen::Binder>,
    /// Proxy mode: the real server every request is relayed to.
    pub upstream: Option<super::upstream::UpstreamSpec>,
    /// What the upstream's processes get from the runner (environment,
    /// child registry); None: [`super::upstream::Host::default`].
    pub host: Option<super::upstream::Host>,
}

/// A running MCP server.
pub struct McpServer {
    engine: Arc<Engine>,
    socket: PathBuf,
    /// A short directory for the socket when `dir` is too deep for one.
    _short: Option<tempfile::TempDir>,
    url: String,
    /// The legacy HTTP+SSE transport's stream (`/sse`).
    sse_url: String,
    transport: Transport,
    tasks: Vec<JoinHandle<()>>,
}

/// The longest socket path (sun_path holds 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 100;

impl McpServer {
    pub async fn start(mut c: McpConfig) -> anyhow::Result<McpServer> {
        let mut engine = Engine::new(Vec::new(), c.nonce.clone(), c.start, c.linger);
        if let Some(spec) = c.upstream.take() {
            let up = super::upstream::Upstream::new(
                spec,
                c.dir.join("mcp-upstream"),
                c.host.take().unwrap_or_default(),
            );
            let tools = up.preflight().await.map_err(|e| anyhow::anyhow!("{e}"))?;
            c.rules = proxied_rules(c.rules, &up.spec, &tools)?;
            engine = engine.with_upstream(up);
        }
        let mut engine = engine.with_rules(c.rules);
        engine.withhold_endpoint = c.withhold_endpoint;
        let engine = Arc::new(engine);
        let mut socket = c.dir.join("mcp.sock");
        let mut short = None;
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            let d = tempfile::Builder::new()
                .prefix("chaosrun-mcp-")
                .tempdir_in("/tmp")?;
            socket = d.path().join("mcp.sock");
            short = Some(d);
        }
        let listener = super::stdio::bind(&socket)?;
        let mut tasks = vec![tokio::spawn(super::stdio::serve(listener, engine.clone()))];
        let (addr, task) = super::http::start(engine.clone(), c.bind.as_ref()).await?;
        tasks.push(task);
        Ok(McpServer {
            engine,
            socket,
            _short: short,
            url: format!("http://{addr}/mcp"),
            sse_url: format!("http://{addr}{}", super::sse::PATH),
            transport: c.transport,
            tasks,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The legacy HTTP+SSE transport's stream URL.
    pub fn sse_url(&self) -> &str {
        &self.sse_url
    }

    /// The template variables telling the agent how to reach this server.
    pub fn vars(&self) -> Vec<(String, String)> {
        let urls = (self.url.as_str(), self.sse_url.as_str());
        super::vars(Some(self.transport), Some(&self.socket), Some(urls))
    }

    /// What restarts the server when called (`mcp.restart`; see
    /// [`Engine::restart`]): handed to the provider's turn-over hook.
    pub fn restarter(&self) -> crate::provider::TurnOverHook {
        let engine = self.engine.clone();
        Box::new(move || Box::pin(async move { engine.restart().await }))
    }

    /// Watches the count of `tools/call` requests.
    pub fn calls_watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.engine.calls_watch()
    }

    /// `tools/call` requests so far.
    pub fn tool_calls(&self) -> u64 {
        self.engine.tool_calls()
    }

    /// What was recorded so far.
    pub fn recording(&self) -> McpRecording {
        let mut r = self.engine.recording();
        r.transport = self.transport.name().into();
        r
    }

    /// Stop both transports (and, in proxy mode, kill and reap every
    /// upstream child) and return the recording.
    pub async fn shutdown(mut self) -> McpRecording {
        self.engine.cancel.cancel();
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        self.engine.close_upstream().await;
        let _ = std::fs::remove_file(&self.socket);
        self.recording()
    }
}

/// The row's rules against a real server: `tool: probe` stands for the
/// upstream's `probe` tool when it names one, and every named tool must be
/// one the server lists.
fn proxied_rules(
    mut rules: Vec<Rule>,
    spec: &super::upstream::UpstreamSpec,
    tools: &[String],
) -> anyhow::Result<Vec<Rule>> {
    for (n, r) in rules.iter_mut().enumerate() {
        let Some(t) = r.when.tool.as_mut() else {
            continue;
        };
        if let (true, Some(alias)) = (t == super::jsonrpc::PROBE_TOOL, &spec.probe) {
            *t = alias.clone();
        }
        if !tools.contains(t) {
            anyhow::bail!(
                "mcp rule {}: tool `{t}` is not a tool upstream MCP server {} lists (it lists: {}){}",
                n + 1,
                spec.describe(),
                tools.join(", "),
                if spec.probe.is_none() && t == super::jsonrpc::PROBE_TOOL {
                    "; set `mcp.upstream.probe: TOOL` to the tool that stands for `probe`"
                } else {
                    ""
                }
            );
        }
    }
    Ok(rules)
}
