//! The axum server behind [`super::Provider`]: its shared state, start-up on
//! loopback, the counters and recording it hands out, and a shutdown that
//! cuts every long wait at once. A request goes [`intake`] (read, routed,
//! parsed) → [`classify`] (kind, rule, record) → [`wait`] (`wait_for`) →
//! [`answer`] (played, [`replay`]ed from a cassette, or relayed upstream);
//! [`conversations`] keeps the Responses conversations.

mod answer;
mod answering;
mod asleep;
mod classify;
mod conversations;
mod intake;
mod replay;
mod wait;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::serve::ListenerExt;
use axum::Router;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::recording::{IssuedToolCall, Recorder, Recording, WaitOutcome};
use super::rules::Rule;
use super::wire::Wire;
use super::{ProcessCounter, ProviderConfig, ToolMapping};
use crate::message::Message;

use super::RequestObserver as Observer;

/// Largest request body held and parsed (an agent may send a 30 MB tool
/// output); a longer one is drained, counted and hashed as it arrives, never
/// held, and refused with 413.
pub(crate) const BODY_LIMIT: usize = 64 * 1024 * 1024;
/// How long `shutdown` lets connections close by themselves before aborting.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// A serving provider.
pub(crate) struct Running {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    wire: Wire,
    rules: Vec<Rule>,
    nonce: String,
    /// The scenario's seed, for `p` rules.
    seed: u64,
    tools: BTreeMap<String, ToolMapping>,
    process_counter: Option<ProcessCounter>,
    observer: Option<Observer>,
    started: Instant,
    /// Random-ish per server, so ids differ between providers.
    prefix: String,
    seq: AtomicU64,
    /// A watch on `seq`: requests received so far, every route.
    seq_tx: watch::Sender<u64>,
    reply_seq: AtomicU64,
    main: AtomicU64,
    probe: AtomicU64,
    aux: AtomicU64,
    main_tx: watch::Sender<u64>,
    /// The indices of the main calls whose answer is over (see
    /// [`answering`]).
    main_answered: watch::Sender<std::collections::BTreeSet<u64>>,
    /// Subagent calls (see [`CallKind::Subagent`]), and a watch on them.
    subagent: AtomicU64,
    subagent_tx: watch::Sender<u64>,
    /// Subagent calls whose answer is not over yet (see [`answering`]).
    open_subagent: watch::Sender<u64>,
    /// How many times the provider was put to sleep (see [`asleep`]).
    sleeps: watch::Sender<u64>,
    /// Answers a sleep silenced (see [`asleep`]).
    silenced: Arc<AtomicU64>,
    /// `Some(k)`: replies to main calls from index `k` on are held until it
    /// is `None` again (an `oom` row's limit is set meanwhile).
    held: watch::Sender<Option<u64>>,
    /// Probe calls are held while true (a row's `at: after_answer` process
    /// fault lands before the next turn gets its answer).
    probes_held: watch::Sender<bool>,
    records: Mutex<Recorder>,
    issued: Mutex<Vec<IssuedToolCall>>,
    waits: Mutex<Vec<WaitOutcome>>,
    /// Main calls answered by each responder rule (exact, like the counters).
    rule_hits: Vec<AtomicU64>,
    /// Responses: response id → the conversation up to and with its answer.
    conversations: Mutex<VecDeque<(String, Vec<Message>)>>,
    /// Proxy mode: where unmatched calls and `relay` rules go, and what the
    /// relays left.
    upstream: Option<Arc<super::upstream::Upstream>>,
    relays: Arc<super::upstream::RelayLog>,
    /// Per responder rule: the cassette a `cassette` rule replays.
    players: Vec<Option<Arc<super::cassette::Player>>>,
    cancel: CancellationToken,
    /// Main calls over this many bytes get the context-length error.
    context_window: Option<super::ContextWindow>,
    /// Requests besides model calls are faulted (see [`super::endpoints`]).
    endpoint_fault: Option<super::EndpointFault>,
    /// The size of the first main call (a relative window counts from it).
    first_main_bytes: std::sync::OnceLock<usize>,
    /// When the first main call arrived (`within` rules count from it).
    first_main: std::sync::OnceLock<Instant>,
    /// A row's credential that expires mid-run.
    credential: Option<Arc<super::credential::Credential>>,
    /// A call without tools is a main call too (`tool_calls: false`).
    main_without_tools: bool,
    /// A call whose latest user message holds one of these is auxiliary.
    aux_markers: Vec<String>,
    /// The probe turn's first call with tools gets this (see
    /// [`super::ProviderConfig::probe_first`]); set once it was served.
    probe_first: Option<super::Reply>,
    probe_first_sent: std::sync::atomic::AtomicBool,
    /// Run once when the faulted turn is over (see [`Running::turn_over`]),
    /// and done once it ran.
    turn_over: Mutex<Option<super::TurnOverHook>>,
    turn_over_done: tokio::sync::OnceCell<()>,
}

impl Running {
    pub(crate) async fn start(config: ProviderConfig) -> anyhow::Result<Running> {
        Running::start_observed(config, None).await
    }

    pub(crate) async fn start_observed(
        config: ProviderConfig,
        observer: Option<Observer>,
    ) -> anyhow::Result<Running> {
        let listener = crate::listen::loopback(config.bind.as_ref(), config.port)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot bind 127.0.0.1:{}: {e} (pick another --port, or 0 for any free one)",
                    config.port
                )
            })?;
        let addr = listener.local_addr()?;
        // A listener bound in a scenario's own network namespace shares no
        // port with the upstream (reached from chaosrun's namespace): the
        // same number there is not this proxy (a relayed loop is still
        // refused per request, by its header).
        let own_namespace = config.bind.is_none();
        if let Some(up) = config.upstream.as_ref().filter(|_| own_namespace) {
            if up.points_at(addr).await {
                anyhow::bail!(
                    "upstream {} is this proxy's own address {addr}: every call would be \
                     relayed to itself; give the real server's URL",
                    up.base()
                );
            }
        }
        let (main_tx, _) = watch::channel(0u64);
        let players = replay::load_players(&config.rules).map_err(anyhow::Error::msg)?;
        let rule_hits = config.rules.iter().map(|_| AtomicU64::new(0)).collect();
        let credential = config
            .credential
            .map(|c| Arc::new(super::credential::Credential::new(c, &config.nonce)));
        let shared = Arc::new(Shared {
            wire: config.wire,
            rules: config.rules,
            nonce: config.nonce,
            seed: config.seed,
            tools: config.tools,
            process_counter: config.process_counter,
            observer,
            started: Instant::now(),
            prefix: format!("{:06x}", rand::random::<u32>() & 0xff_ffff),
            seq: AtomicU64::new(0),
            seq_tx: watch::channel(0u64).0,
            reply_seq: AtomicU64::new(0),
            main: AtomicU64::new(0),
            probe: AtomicU64::new(0),
            aux: AtomicU64::new(0),
            main_tx,
            main_answered: watch::channel(Default::default()).0,
            subagent: AtomicU64::new(0),
            subagent_tx: watch::channel(0u64).0,
            open_subagent: watch::channel(0u64).0,
            sleeps: watch::channel(0u64).0,
            held: watch::channel(None).0,
            probes_held: watch::channel(false).0,
            silenced: Arc::new(AtomicU64::new(0)),
            records: Mutex::new(Recorder::new(config.record)),
            waits: Mutex::new(Vec::new()),
            rule_hits,
            issued: Mutex::new(Vec::new()),
            conversations: Mutex::new(VecDeque::new()),
            upstream: config.upstream,
            relays: Default::default(),
            players,
            cancel: CancellationToken::new(),
            context_window: config.context_window,
            endpoint_fault: config.endpoint_fault,
            first_main_bytes: std::sync::OnceLock::new(),
            first_main: std::sync::OnceLock::new(),
            credential,
            main_without_tools: config.main_without_tools,
            aux_markers: config.aux_markers,
            probe_first: config.probe_first,
            probe_first_sent: Default::default(),
            turn_over: Mutex::new(None),
            turn_over_done: tokio::sync::OnceCell::new(),
        });
        let app = router(shared.clone());
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let cancel = shared.cancel.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { cancel.cancelled().await })
                .await;
        });
        Ok(Running {
            addr,
            shared,
            task: Some(task),
        })
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// When the server's clock started: every request's `at` counts from it.
    pub(crate) fn started(&self) -> Instant {
        self.shared.started
    }

    pub(crate) fn wire(&self) -> Wire {
        self.shared.wire
    }

    pub(crate) fn main_calls(&self) -> watch::Receiver<u64> {
        self.shared.main_tx.subscribe()
    }

    /// A watch on the indices of the main calls whose answer is over.
    pub(crate) fn main_answered(&self) -> watch::Receiver<std::collections::BTreeSet<u64>> {
        self.shared.main_answered.subscribe()
    }

    /// The machine sleeps: every answer in flight goes silent for good.
    pub(crate) fn sleep(&self) {
        self.shared.sleeps.send_modify(|n| *n += 1);
    }

    /// Hold the replies to main calls from index `k` on (`None`: release
    /// them).
    pub(crate) fn hold_from(&self, k: Option<u64>) {
        self.shared.held.send_replace(k);
    }

    pub(crate) fn hold_probes(&self, held: bool) {
        self.shared.probes_held.send_replace(held);
    }

    pub(crate) fn subagent_calls(&self) -> watch::Receiver<u64> {
        self.shared.subagent_tx.subscribe()
    }

    pub(crate) fn requests(&self) -> watch::Receiver<u64> {
        self.shared.seq_tx.subscribe()
    }

    pub(crate) fn on_credential_refresh(&self, hook: super::credential::RefreshHook) {
        if let Some(c) = &self.shared.credential {
            c.set_hook(hook);
        }
    }

    pub(crate) fn on_turn_over(&self, hook: super::TurnOverHook) {
        *self.shared.turn_over.lock().unwrap() = Some(hook);
    }

    pub(crate) async fn turn_over(&self) {
        self.shared.turn_over().await;
    }

    pub(crate) fn credential(&self) -> Option<Arc<super::credential::Credential>> {
        self.shared.credential.clone()
    }

    pub(crate) fn refresh_credential(&self) {
        if let Some(c) = &self.shared.credential {
            c.refresh();
        }
    }

    pub(crate) fn recording(&self) -> Recording {
        let (requests, requests_dropped) = self.shared.records.lock().unwrap().snapshot();
        self.recording_with(requests, requests_dropped, Default::default())
    }

    fn recording_with(
        &self,
        requests: Vec<crate::provider::recording::RequestRecord>,
        requests_dropped: u64,
        lease: crate::provider::ledger::Lease,
    ) -> Recording {
        Recording {
            lease,
            requests,
            requests_dropped,
            issued_tool_calls: self.shared.issued.lock().unwrap().clone(),
            waits: self.shared.waits.lock().unwrap().clone(),
            rule_hits: self
                .shared
                .rule_hits
                .iter()
                .map(|n| n.load(Ordering::SeqCst))
                .collect(),
            main_calls: self.shared.main.load(Ordering::SeqCst),
            probe_calls: self.shared.probe.load(Ordering::SeqCst),
            aux_calls: self.shared.aux.load(Ordering::SeqCst),
            subagent_calls: self.shared.subagent.load(Ordering::SeqCst),
            silenced: self.shared.silenced.load(Ordering::SeqCst),
            relays: self.shared.relays.relays.lock().unwrap().clone(),
            upstream_errors: self.shared.relays.errors.lock().unwrap().clone(),
        }
    }

    /// What the relays left (cassette entries recorded with `--record`).
    pub(crate) fn relay_log(&self) -> Arc<super::upstream::RelayLog> {
        self.shared.relays.clone()
    }

    /// Total requests received (every route).
    pub(crate) fn request_count(&self) -> u64 {
        self.shared.seq.load(Ordering::SeqCst)
    }

    pub(crate) async fn shutdown(mut self) -> Recording {
        self.shared.cancel.cancel();
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
                abort.abort();
            }
        }
        // The records move into the recording, whole once the run-wide
        // budget has room: the scenario's observation is their one copy.
        let taken = {
            let mut records = self.shared.records.lock().unwrap();
            records.end_all(self.shared.started.elapsed().as_secs_f64());
            records.take()
        };
        let (requests, dropped, lease) = taken.whole().await;
        self.recording_with(requests, dropped, lease)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(intake::dispatch).with_state(shared)
}
