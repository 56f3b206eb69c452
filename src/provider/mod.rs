//! The fault-injecting model provider: a model API server on loopback that
//! fails on purpose, exactly and repeatably, on the wire the agent speaks
//! (OpenAI Chat Completions, OpenAI Responses, Anthropic Messages, Gemini).
//!
//! Owns the responder rules that pick a reply per request, one small type per
//! reply kind (see [`replies`]: what happens and when, as abstract events), one
//! encoder per wire (see [`wire`]: the bytes, routes, error shapes and request
//! normalisation), and the recording of every request the agent sent.
//!
//! Public contract used by the runner:
//! * [`Provider::start`] binds `127.0.0.1:0` (or a given port) and serves until
//!   [`Provider::shutdown`], which never waits for a long fault to finish.
//! * [`Provider::main_calls`] is a watch on the number of faulted-turn main calls
//!   so far (the runner awaits it to trigger an interrupt).
//! * [`Provider::recording`] snapshots what was recorded.

pub mod cassette;
pub mod context_window;
pub mod credential;
pub mod endpoints;
pub mod ledger;
pub mod recording;
pub mod replies;
pub mod rules;
pub mod serve;
mod server;
pub mod spool;
pub mod upstream;
pub mod wire;

pub use context_window::ContextWindow;
pub use endpoints::EndpointFault;
pub use recording::{CallKind, RecordLimits, Recording, ReplyError, RequestRecord};
pub use replies::{Reply, ToolCallSpec};
pub use rules::{CallMatch, Rule, WaitFor, When};
pub use wire::Wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// How a logical tool of the scenario table (e.g. `shell`) is named on the wire
/// for one agent, and how its argument names map.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolMapping {
    /// The agent's own tool name (e.g. Hermes' `terminal`).
    pub name: String,
    /// Logical argument name → the agent's argument name, or
    /// `{name: NAME, map: ms}` to transform the value too.
    #[serde(default)]
    pub args: BTreeMap<String, ArgMap>,
    /// Arguments the agent's tool requires that no row sets (e.g. Claude
    /// Code's `Agent` takes a `description` beside its `prompt`): sent as
    /// given on every call of this tool; a row's own argument of the same
    /// name wins.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fixed: BTreeMap<String, serde_json::Value>,
}

/// Logical tool arguments a call may lose without changing what a row tests
/// (the agent's own default applies): a mapping with an `args` map that does
/// not name one drops it from the call (the run warns; see
/// `profile::needs`). Any other unmapped argument makes the row N/A.
pub const OPTIONAL_ARGS: &[&str] = &["timeout"];

/// One argument's mapping: a new name, or a new name and a value transform.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "ArgMapDoc")]
pub enum ArgMap {
    Rename(String),
    Map {
        name: String,
        map: ValueMap,
    },
    /// Values looked up by their JSON text (`{name: mode, values: {"true":
    /// async, "false": sync}}` turns `background: true` into `mode: "async"`);
    /// a value not listed is passed unchanged.
    Values {
        name: String,
        values: std::collections::BTreeMap<String, serde_json::Value>,
    },
}

/// A transform of an argument's value (numbers only; anything else is kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ValueMap {
    /// Seconds to whole milliseconds (`timeout: 3` → `3000`).
    Ms,
    /// Rounded up to a whole number.
    Int,
    /// The number as a string (`"3"`).
    String,
}

/// An argument mapping as written (the value map checked by name, so an
/// unknown one is named in the error).
#[derive(Deserialize)]
#[serde(untagged)]
enum ArgMapDoc {
    Rename(String),
    Map {
        name: String,
        map: String,
    },
    Values {
        name: String,
        values: std::collections::BTreeMap<String, serde_json::Value>,
    },
    #[allow(dead_code)] // held only so any other shape is named, not refused by serde
    Other(serde_yaml::Value),
}

impl TryFrom<ArgMapDoc> for ArgMap {
    type Error = String;
    fn try_from(d: ArgMapDoc) -> Result<ArgMap, String> {
        let known = "known: ms (seconds to milliseconds), int, string";
        match d {
            ArgMapDoc::Rename(n) => Ok(ArgMap::Rename(n)),
            ArgMapDoc::Map { name, map } => {
                let map = match map.as_str() {
                    "ms" => ValueMap::Ms,
                    "int" => ValueMap::Int,
                    "string" => ValueMap::String,
                    other => return Err(format!("unknown value map `{other}`; {known}")),
                };
                Ok(ArgMap::Map { name, map })
            }
            ArgMapDoc::Values { name, values } => Ok(ArgMap::Values { name, values }),
            ArgMapDoc::Other(_) => Err(format!(
                "a tool argument maps to a name (`timeout: timeout_ms`), to \
                 `{{name: NAME, map: MAP}}` ({known}) or to \
                 `{{name: NAME, values: {{\"true\": VALUE, ...}}}}`"
            )),
        }
    }
}

impl From<&str> for ArgMap {
    fn from(name: &str) -> ArgMap {
        ArgMap::Rename(name.to_string())
    }
}

impl ArgMap {
    /// The agent's argument name.
    pub fn name(&self) -> &str {
        match self {
            ArgMap::Rename(n) | ArgMap::Map { name: n, .. } | ArgMap::Values { name: n, .. } => n,
        }
    }

    /// The value as the agent takes it.
    pub fn apply(&self, v: &serde_json::Value) -> serde_json::Value {
        if let ArgMap::Values { values, .. } = self {
            let key = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            return values.get(&key).cloned().unwrap_or_else(|| v.clone());
        }
        let (ArgMap::Map { map, .. }, Some(x)) = (self, v.as_f64()) else {
            return v.clone();
        };
        match map {
            ValueMap::Ms => serde_json::json!((x * 1000.0).round() as i64),
            ValueMap::Int => serde_json::json!(x.ceil() as i64),
            ValueMap::String => serde_json::Value::String(match v.as_i64() {
                Some(i) => i.to_string(),
                None => x.to_string(),
            }),
        }
    }
}

/// Counts tagged processes whose command line contains a needle. Supplied by the
/// runner (backed by `proc_hygiene`); `None` in a provider with no tag, where a
/// rule's `wait_for` then waits out its own deadline.
pub type ProcessCounter = Arc<dyn Fn(&str) -> usize + Send + Sync>;

/// Called once per request as it is recorded, before its reply is produced
/// (used by `chaosrun serve` to log requests).
pub type RequestObserver = Arc<dyn Fn(&RequestRecord) + Send + Sync>;

/// Everything one provider instance needs.
#[derive(Clone, Default)]
pub struct ProviderConfig {
    /// Port to bind on 127.0.0.1; 0 picks an ephemeral one.
    pub port: u16,
    /// The wire served; paths of other wires are answered 404.
    pub wire: Wire,
    /// Responder rules for faulted-turn main calls, first match wins. A main call
    /// that matches no rule gets a plain text answer `ok`.
    pub rules: Vec<Rule>,
    /// Substituted for `{{nonce}}` in reply text and tool arguments.
    pub nonce: String,
    /// The scenario's seed: a rule's `p` draws from it, so a printed
    /// `--seed` fires the same rules on the same calls.
    pub seed: u64,
    /// Logical tool name → agent tool mapping, applied to `tool_call` replies.
    pub tools: BTreeMap<String, ToolMapping>,
    /// Used by `wait_for` rules.
    pub process_counter: Option<ProcessCounter>,
    /// How much of the requests is remembered (a scenario run's bounds by
    /// default; `serve` keeps a ring).
    pub record: RecordLimits,
    /// Proxy mode: unmatched calls and `relay` rules go to this server.
    pub upstream: Option<Arc<upstream::Upstream>>,
    /// A context window: a faulted-turn main call whose body is over it
    /// gets the wire's context-length error instead of its rule.
    /// A row's fault of the agent's other endpoints (see [`endpoints`]).
    pub endpoint_fault: Option<EndpointFault>,
    pub context_window: Option<ContextWindow>,
    /// Where to bind (a scenario's network namespace); None: the host.
    pub bind: Option<crate::listen::Binder>,
    /// A row's credential that expires mid-run (see [`credential`]).
    pub credential: Option<credential::CredentialSpec>,
    /// A model call that offers no tools is a main call too, not an
    /// auxiliary one (the profile's `tool_calls: false`: an agent that
    /// never offers tools).
    pub main_without_tools: bool,
    /// A model call whose latest user message holds one of these texts is
    /// auxiliary whatever tools it offers (the profile's `aux_calls`: an
    /// agent's side calls that carry its tool list, Qwen Code's follow-up
    /// suggestion).
    pub aux_markers: Vec<String>,
    /// The reply to the probe turn's first call that offers tools, instead
    /// of `alive NONCE` (a row whose MCP server restarts between turns: the
    /// probe turn calls the MCP tool first). Later probe calls get `alive`.
    pub probe_first: Option<Reply>,
}

/// What runs once the faulted turn is over ([`Provider::on_turn_over`]).
pub type TurnOverHook = Box<dyn FnOnce() -> futures_util::future::BoxFuture<'static, ()> + Send>;

/// A running provider. Dropping it without `shutdown` also stops the server.
pub struct Provider {
    inner: server::Running,
}

impl Provider {
    /// Bind 127.0.0.1 and start serving in the current tokio runtime.
    pub async fn start(config: ProviderConfig) -> anyhow::Result<Provider> {
        Ok(Provider {
            inner: server::Running::start(config).await?,
        })
    }

    /// Like [`Provider::start`], calling `observer` for every request.
    pub async fn start_observed(
        config: ProviderConfig,
        observer: RequestObserver,
    ) -> anyhow::Result<Provider> {
        Ok(Provider {
            inner: server::Running::start_observed(config, Some(observer)).await?,
        })
    }

    /// Requests received so far over every route (model calls, models, 404s).
    pub fn request_count(&self) -> u64 {
        self.inner.request_count()
    }

    /// What a client of the wire takes as its base URL:
    /// `http://127.0.0.1:PORT/v1` for the OpenAI wires, `http://127.0.0.1:PORT`
    /// for Anthropic and Gemini (their SDKs add the version segment).
    pub fn base_url(&self) -> String {
        self.inner.wire().base_url(self.inner.addr())
    }

    /// The wire served.
    pub fn wire(&self) -> Wire {
        self.inner.wire()
    }

    /// When the provider's clock started: a recorded request's `at` is
    /// seconds since this instant.
    pub fn started(&self) -> std::time::Instant {
        self.inner.started()
    }

    /// The bound socket address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.inner.addr()
    }

    /// A watch on the number of faulted-turn main calls received so far
    /// (probe and auxiliary requests are not counted).
    pub fn main_calls(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.main_calls()
    }

    /// Once the answer to main call `index` (from 0) is over: sent whole, or
    /// given up by its client. Never, for a call left hanging.
    pub async fn main_answered(&self, index: u64) {
        let mut over = self.inner.main_answered();
        let _ = over.wait_for(|o| o.contains(&index)).await;
    }

    /// A watch on the number of requests received so far over every route
    /// (exec mode awaits a turn's first one: its process reached the provider).
    pub fn requests(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.requests()
    }

    /// The machine sleeps: every answer in flight goes silent for good (no
    /// byte, no end: a half-open socket); later answers are served as usual.
    pub fn sleep(&self) {
        self.inner.sleep()
    }

    /// Hold the replies to main calls from index `k` on until called again
    /// with `None` (or the provider shuts down): an `oom` row sets its
    /// memory limit while the call that leads to the tool is held.
    pub fn hold_from(&self, k: Option<u64>) {
        self.inner.hold_from(k)
    }

    /// Hold the answers to probe calls while `held` (until called with
    /// false, or the provider shuts down): a row's `at: after_answer`
    /// process fault lands after the faulted turn's answer and before the
    /// next turn is answered, however fast the agent goes on to it.
    pub fn hold_probes(&self, held: bool) {
        self.inner.hold_probes(held)
    }

    /// A watch on the number of subagent calls received so far.
    pub fn subagent_calls(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.subagent_calls()
    }

    /// The cassette entries of the relayed main calls, as they are recorded
    /// (proxy mode with `record` set); read it after [`Provider::shutdown`].
    pub fn tape(&self) -> cassette::TapeHandle {
        cassette::TapeHandle(self.inner.relay_log())
    }

    /// What rewrites the agent's copy of the key when the row's credential
    /// is refreshed (given the new key).
    pub fn on_credential_refresh(&self, hook: credential::RefreshHook) {
        self.inner.on_credential_refresh(hook)
    }

    /// The row's credential state, shared with an exec-mode agent (which
    /// renders the refreshed key into its next turn and refreshes it when a
    /// turn ends); None for a row without `credential:`.
    pub fn credential(&self) -> Option<Arc<credential::Credential>> {
        self.inner.credential()
    }

    /// What to do once the faulted turn is over, before the probe turn gets
    /// its first answer (a row's `mcp.restart: turn_end`): run by
    /// [`Provider::turn_over`], or at the latest as the first probe call
    /// arrives (its answer waits for it), once.
    pub fn on_turn_over(&self, hook: TurnOverHook) {
        self.inner.on_turn_over(hook)
    }

    /// The faulted turn is over: run the [`Provider::on_turn_over`] hook
    /// now, once, and return when it is done (at once when there is none;
    /// a second caller waits for the first's run).
    pub async fn turn_over(&self) {
        self.inner.turn_over().await
    }

    /// Refresh the row's expired credential now (`refresh: turn_end`): the
    /// new key becomes current and the hook runs. Nothing happens when the
    /// row has no credential, the key has not expired, or it was refreshed.
    pub fn refresh_credential(&self) {
        self.inner.refresh_credential()
    }

    /// A snapshot of everything recorded so far.
    pub fn recording(&self) -> Recording {
        self.inner.recording()
    }

    /// Stop serving: every pending long wait (hang, stall, wait_for) ends now and
    /// its socket is dropped. Returns the final recording.
    pub async fn shutdown(self) -> Recording {
        self.inner.shutdown().await
    }
}
