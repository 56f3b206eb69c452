//! The MCP proxy: a row's or profile's `mcp.upstream` ([`spec`]) puts a
//! real MCP server behind chaosrun's own. Each agent connection gets its own
//! relay session ([`link`]): a child started for it ([`child`], stdio) or a
//! session on the server's endpoint ([`http`]). The engine relays every
//! request up and uses the server's answer where its own healthy answer
//! would go, so the row's rules apply to real traffic. [`Upstream::preflight`]
//! runs once per scenario before the agent starts: the server must start and
//! answer `initialize` and `tools/list` within `init_timeout`, or the row is
//! an ERROR naming the server and the tail of its stderr. A failure later
//! (the server exits, an answer never comes to `initialize`) is kept in
//! [`Upstream::failure`] and makes the row an ERROR too.

pub mod child;
pub mod http;
pub mod link;
pub mod spec;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub use child::Host;
pub use link::Link;
pub use spec::{Target, UpstreamSpec};

use crate::mcp::replies::Tx;

/// One scenario's upstream: how to reach it, and its first failure.
pub struct Upstream {
    pub spec: UpstreamSpec,
    /// Working directory of the children (their HOME and TMPDIR inside).
    dir: PathBuf,
    host: child::Host,
    client: reqwest::Client,
    failure: Arc<Mutex<Option<String>>>,
    links: Mutex<Vec<Arc<Link>>>,
    /// Set by [`Upstream::close`]: no server is started after it.
    closed: std::sync::atomic::AtomicBool,
}

impl Upstream {
    pub fn new(spec: UpstreamSpec, dir: PathBuf, host: child::Host) -> Arc<Upstream> {
        Arc::new(Upstream {
            spec,
            dir,
            host,
            // Loopback servers: never through a proxy.
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_default(),
            failure: Arc::default(),
            links: Mutex::default(),
            closed: Default::default(),
        })
    }

    /// The first failure of the server this scenario, if any.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap().clone()
    }

    fn reporter(&self) -> Arc<dyn Fn(String) + Send + Sync> {
        let slot = self.failure.clone();
        Arc::new(move |why| {
            slot.lock().unwrap().get_or_insert(why);
        })
    }

    /// A new relay session; `sink` takes what the server sends on its own.
    /// A server that cannot be started gives a dead link (its requests are
    /// answered with the reason) and a failure.
    pub fn connect(&self, sink: Option<Tx>) -> Arc<Link> {
        let what = self.spec.describe();
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            let noop: Arc<dyn Fn(String) + Send + Sync> = Arc::new(|_| {});
            return Link::dead(what, "the scenario ended".into(), noop);
        }
        let link = match &self.spec.target {
            Target::Url(url) => Link::new(
                what,
                link::Carrier::Http {
                    client: self.client.clone(),
                    url: url.clone(),
                    session: Mutex::default(),
                    turn: Mutex::default(),
                },
                sink,
                self.reporter(),
            ),
            Target::Command { argv, env, cwd } => {
                let env = child::environment(&self.dir, &self.host, env);
                match child::spawn(argv, &env, &self.dir, cwd.as_deref()) {
                    Err(e) => Link::dead(
                        what.clone(),
                        format!("upstream MCP server {what}: {e}"),
                        self.reporter(),
                    ),
                    Ok((c, stdin, stdout)) => {
                        let (q, rx) = tokio::sync::mpsc::channel(link::QUEUE);
                        let carrier = link::Carrier::Stdio {
                            queue: q,
                            tail: c.tail.clone(),
                            child: Mutex::new(Some(c)),
                        };
                        let l = Link::new(what, carrier, sink, self.reporter());
                        l.start_stdio(stdin, stdout, rx);
                        l
                    }
                }
            }
        };
        self.links.lock().unwrap().push(link.clone());
        link
    }

    /// The `init_timeout` bound.
    pub fn init_bound(&self) -> Duration {
        Duration::from_secs_f64(self.spec.init_timeout)
    }

    /// Start the server once, `initialize` it and list its tools (each within
    /// `init_timeout`), then stop it. The tool names, or why it failed (with
    /// the tail of its stderr for a command).
    pub async fn preflight(&self) -> Result<Vec<String>, String> {
        let link = self.connect(None);
        let out = self.handshake(&link).await;
        let tail = link.stderr_tail();
        link.close().await;
        self.links
            .lock()
            .unwrap()
            .retain(|l| !Arc::ptr_eq(l, &link));
        // The preflight's own failure is the answer here, not the row's.
        self.failure.lock().unwrap().take();
        out.map_err(|e| match tail {
            Some(t) if !e.contains("its stderr ends") => format!("{e}; its stderr ends: {t}"),
            _ => e,
        })
    }

    async fn handshake(&self, link: &Arc<Link>) -> Result<Vec<String>, String> {
        let never = CancellationToken::new();
        let bound = Some(self.init_bound());
        let init = link.request(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": crate::mcp::jsonrpc::VERSIONS[0], "capabilities": {},
                "clientInfo": {"name": "chaosrun-preflight", "version": env!("CARGO_PKG_VERSION")}}}));
        let answer = init
            .wait(bound, &never)
            .await
            .map_err(|e| format!("{e} (before answering initialize)"))?;
        if let Some(err) = answer.get("error") {
            return Err(format!(
                "upstream MCP server {} refused initialize: {err}",
                link.what
            ));
        }
        link.forward(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let list = link.request(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
        let tools = list.wait(bound, &never).await?;
        Ok(tools
            .pointer("/result/tools")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Record a failure of the server (the first one is kept).
    pub fn fail(&self, why: String) {
        self.failure.lock().unwrap().get_or_insert(why);
    }

    /// Close one relay session (its child killed and reaped).
    pub async fn disconnect(&self, link: &Arc<Link>) {
        self.links.lock().unwrap().retain(|l| !Arc::ptr_eq(l, link));
        link.close().await;
    }

    /// Close every relay session (children killed and reaped).
    pub async fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let links = std::mem::take(&mut *self.links.lock().unwrap());
        for l in links {
            l.close().await;
        }
    }
}
