//! The YAML schema of a scenario table and the resolved form of one scenario
//! (defaults merged in).

use serde::{Deserialize, Serialize};

use crate::provider::Rule;
use crate::units;

/// The agent's liveness knobs, rendered into its config by the adapter profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Knobs {
    pub model: String,
    #[serde(deserialize_with = "units::seconds")]
    pub stale_timeout: f64,
    #[serde(deserialize_with = "units::seconds")]
    pub request_timeout: f64,
    pub api_max_retries: u32,
    /// Seconds an agent whose retries are bounded by time, not a count, may
    /// spend retrying one model call; unset: [`RETRY_SECONDS_PER_RETRY`] per
    /// `api_max_retries` ([`Knobs::retry_budget`]).
    #[serde(
        default,
        deserialize_with = "units::opt_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub api_retry_budget: Option<f64>,
    pub max_turns: u32,
    #[serde(deserialize_with = "units::seconds")]
    pub tool_timeout: f64,
}

/// Seconds of retry budget each allowed retry is worth when a row sets no
/// `api_retry_budget`: `api_max_retries: 2` is a 10 s budget.
pub const RETRY_SECONDS_PER_RETRY: f64 = 5.0;

impl Knobs {
    /// The retry budget in seconds (`{{api_retry_budget}}`): the row's own,
    /// else [`RETRY_SECONDS_PER_RETRY`] × `api_max_retries`.
    pub fn retry_budget(&self) -> f64 {
        self.api_retry_budget
            .unwrap_or(RETRY_SECONDS_PER_RETRY * f64::from(self.api_max_retries))
    }
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            model: "fake-model".into(),
            stale_timeout: 3.0,
            request_timeout: 5.0,
            api_max_retries: 2,
            api_retry_budget: None,
            max_turns: 8,
            tool_timeout: 3.0,
        }
    }
}

/// Per-scenario knob overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnobOverrides {
    pub model: Option<String>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub stale_timeout: Option<f64>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub request_timeout: Option<f64>,
    pub api_max_retries: Option<u32>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub api_retry_budget: Option<f64>,
    pub max_turns: Option<u32>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub tool_timeout: Option<f64>,
}

/// How long each phase may take, in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deadlines {
    #[serde(deserialize_with = "units::seconds")]
    pub boot: f64,
    #[serde(deserialize_with = "units::seconds")]
    pub turn: f64,
    #[serde(deserialize_with = "units::seconds")]
    pub interrupt: f64,
    #[serde(deserialize_with = "units::seconds")]
    pub probe: f64,
    #[serde(deserialize_with = "units::seconds")]
    pub exit: f64,
    #[serde(deserialize_with = "units::seconds")]
    pub reap: f64,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            boot: 120.0,
            turn: 90.0,
            interrupt: 15.0,
            probe: 60.0,
            exit: 30.0,
            reap: 15.0,
        }
    }
}

impl Deadlines {
    /// Every deadline multiplied by `f` (for slow machines), or the first
    /// one that would leave the bounds of [`units::Seconds`], named.
    pub fn scaled(&self, f: f64) -> Result<Deadlines, String> {
        let one = |name: &str, v: f64| {
            units::Seconds::new(v * f)
                .map(units::Seconds::get)
                .map_err(|e| {
                    let f = units::short(f);
                    format!("deadline `{name}` ({v} s) scaled by {f}: {e}")
                })
        };
        Ok(Deadlines {
            boot: one("boot", self.boot)?,
            turn: one("turn", self.turn)?,
            interrupt: one("interrupt", self.interrupt)?,
            probe: one("probe", self.probe)?,
            exit: one("exit", self.exit)?,
            reap: one("reap", self.reap)?,
        })
    }
}

/// Per-scenario deadline overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadlineOverrides {
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub boot: Option<f64>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub turn: Option<f64>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub interrupt: Option<f64>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub probe: Option<f64>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub exit: Option<f64>,
    #[serde(default, deserialize_with = "units::opt_seconds")]
    pub reap: Option<f64>,
}

/// What the faulted turn must end with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// A surfaced error: not completed (or flagged failed), non-empty `final`.
    Error,
    /// A completed answer whose `final` contains this text (`{{nonce}}` allowed).
    Answer(String),
    /// Any bounded end with a non-empty `final` (error, answer or budget stop).
    Ended,
    /// Flagged interrupted, within the interrupt deadline after `interrupt`.
    Interrupted,
    /// The faulted turn is cut by a `process_fault` kill; the restarted agent
    /// must resume the session and answer the probe.
    Killed,
    /// A `chaos` run: every turn finishes despite the seeded kills and stops.
    Survives,
}

/// The provider-call bound of the faulted turn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CallBound {
    /// 1 ≤ calls ≤ N.
    Max(u64),
    /// calls == N.
    Exactly(u64),
}

impl CallBound {
    pub fn limit(&self) -> u64 {
        match *self {
            CallBound::Max(n) | CallBound::Exactly(n) => n,
        }
    }
}

/// When chaosrun sends `interrupt` during the faulted turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Trigger {
    /// Once the provider has received this many faulted-turn main calls.
    AfterCalls(u64),
    /// Once the reply to the N-th faulted-turn main call is over: sent
    /// whole (an error's too), or given up by the agent. A call left
    /// hanging never fires it. An interrupt timed so lands while the agent
    /// reads that reply or backs off after it, however loaded the machine
    /// (`after_calls` fires as the call arrives, racing its reply).
    AfterReply(u64),
    /// Once a tagged process whose command line contains this text exists.
    WhenProcess(String),
    /// This many seconds into the faulted turn.
    AfterSeconds(#[serde(deserialize_with = "units::seconds")] f64),
    /// Once the scenario's MCP server has received this many `tools/call`
    /// requests (rows with an `mcp:` section).
    WhenMcpCall(u64),
    /// Once the provider has received this many subagent calls (requests
    /// carrying the row's `[[subagent:NONCE]]` marker).
    WhenSubagentCall(u64),
    /// At the first write to the agent's store (a SQLite database, its
    /// `-wal` or `-journal`, or a JSONL transcript the profile's glob
    /// matches; watched by inotify from the turn's start)
    /// reported once the provider has received this many faulted-turn main
    /// calls: a kill aimed at a persistence point.
    StoreWriteAfterCalls(u64),
    /// Just after the faulted turn's answer (`at: after_answer`): as soon
    /// as its turn end is seen (process faults only; the agent lives on
    /// between turns, so not in exec mode, whose turn process has exited).
    AfterAnswer,
}

pub use super::actions::FaultAction;

/// Which processes a process fault hits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultTarget {
    /// The agent process only (its tools are orphaned, as in a crash).
    #[default]
    Agent,
    /// Every process carrying the scenario's tag.
    Tree,
}

/// A fault on the agent's own processes during the faulted turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessFault {
    /// Which fault (one file per action: `scenarios/actions/`).
    pub action: FaultAction,
    #[serde(default)]
    pub target: FaultTarget,
    #[serde(with = "serde_yaml::with::singleton_map")]
    pub at: Trigger,
    /// Seconds to wait after the trigger fires (e.g. a call arrived; one
    /// second later its stream is midway).
    #[serde(default, deserialize_with = "units::seconds")]
    pub delay: f64,
    /// Seconds between SIGSTOP and SIGCONT.
    #[serde(default = "default_stop_for", deserialize_with = "units::seconds")]
    pub stop_for: f64,
    /// `action: oom`: MB the agent may use beyond what its processes use
    /// when the trigger fires (1 to 65536).
    #[serde(default = "default_headroom_mb")]
    pub headroom_mb: u64,
}

impl ProcessFault {
    /// Whether the fault kills the agent (SIGKILL or the kernel's OOM
    /// kill), which is then restarted.
    pub fn kills(&self) -> bool {
        self.action.restarts()
    }
}

fn default_headroom_mb() -> u64 {
    64
}

fn default_stop_for() -> f64 {
    5.0
}

/// The most faults one chaos run schedules (the table refuses a `duration`
/// and `interval` that would allow more).
pub const MAX_FAULTS: usize = 10_000;

/// A seeded chaos run: a conversation of `turns` turns (each asks for tools
/// with side effects, per the responder) while a schedule drawn from the seed
/// kills the agent (then resumes it) or stops its whole tree, at random
/// intervals, for `duration` seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaosSpec {
    /// Conversation turns before the probe.
    pub turns: u64,
    /// Faults are scheduled over this many seconds from the first `ready`.
    #[serde(deserialize_with = "units::seconds")]
    pub duration: f64,
    /// Seconds between faults, drawn uniformly from [min, max].
    #[serde(default = "default_interval", deserialize_with = "units::seconds_pair")]
    pub interval: [f64; 2],
    /// Share of faults that are kills (the rest are stops).
    #[serde(default = "default_kill_share")]
    pub kill_share: f64,
    /// Seconds a stop lasts, drawn uniformly from [min, max].
    #[serde(
        default = "default_stop_range",
        deserialize_with = "units::seconds_pair"
    )]
    pub stop_for: [f64; 2],
    /// Fewer faults landing than this makes the run meaningless (a failure).
    pub min_faults: usize,
}

fn default_interval() -> [f64; 2] {
    [0.5, 1.5]
}

fn default_kill_share() -> f64 {
    0.5
}

fn default_stop_range() -> [f64; 2] {
    [0.2, 1.0]
}

/// What the probe turn must show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeMode {
    /// The probe is answered `alive NONCE` and carries the faulted user turn.
    #[default]
    Answer,
    /// Where the adapter declares a breaker: the probe is refused at once,
    /// surfaced, and never reaches the provider. Agents without a breaker
    /// answer it as usual.
    Breaker,
}

/// Table-wide defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(default)]
    pub knobs: KnobOverrides,
    #[serde(default)]
    pub deadlines: DeadlineOverrides,
    #[serde(default = "default_max_calls")]
    pub max_calls: u64,
    /// Main calls allowed after `interrupt` was sent.
    #[serde(default = "default_after_interrupt")]
    pub max_calls_after_interrupt: u64,
    /// The agent's processes' peak memory bound, in MB (the `memory` check).
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            knobs: KnobOverrides::default(),
            deadlines: DeadlineOverrides::default(),
            max_calls: default_max_calls(),
            max_calls_after_interrupt: default_after_interrupt(),
            memory_mb: default_memory_mb(),
        }
    }
}

/// The default memory bound: 4 GB, the heap a Node.js CLI is given by default
/// on a 64-bit machine (an agent that reaches it is OOM-killed by its runtime).
pub fn default_memory_mb() -> u64 {
    4096
}

/// A long session's first turns whose footprint `memory_per_turn` leaves
/// out (imports, caches and the first model client are not growth).
pub const PER_TURN_WARMUP: usize = 5;

/// The fewest turns after the warm-up with a sample that make a slope.
pub const PER_TURN_MIN_TURNS: usize = 10;

/// The largest memory bound a row may set, in MB (1 TB).
pub const MAX_MEMORY_MB: u64 = 1 << 20;

fn default_max_calls() -> u64 {
    16
}

fn default_after_interrupt() -> u64 {
    2
}

/// One scenario as written in YAML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioDoc {
    pub id: String,
    #[serde(default)]
    pub about: String,
    #[serde(default)]
    pub knobs: KnobOverrides,
    #[serde(default)]
    pub deadlines: DeadlineOverrides,
    pub responder: Vec<Rule>,
    #[serde(with = "serde_yaml::with::singleton_map")]
    pub expect: Expect,
    #[serde(default, with = "serde_yaml::with::singleton_map")]
    pub calls: Option<CallBound>,
    #[serde(default, with = "serde_yaml::with::singleton_map")]
    pub interrupt: Option<Trigger>,
    #[serde(default)]
    pub probe: ProbeMode,
    /// Tool results on the wire must carry, per call id, the token their own
    /// `echo TOKEN` command printed.
    #[serde(default)]
    pub check_echo_tokens: bool,
    /// A tool whose command line contains this text must be gone before the
    /// probe turn starts.
    #[serde(default)]
    pub tool_gone: Option<String>,
    /// Some tool result sent to the model must contain this text (`{{nonce}}`).
    #[serde(default)]
    pub tool_result_contains: Option<String>,
    /// Kill or freeze the agent mid-turn.
    #[serde(default)]
    pub process_fault: Option<ProcessFault>,
    /// A seeded chaos run instead of one faulted turn.
    #[serde(default)]
    pub chaos: Option<ChaosSpec>,
    /// The scenario's MCP server and its rules (see `crate::mcp`).
    #[serde(default)]
    pub mcp: Option<crate::mcp::McpSpec>,
    /// A model context window (see `crate::provider::context_window`).
    #[serde(default)]
    pub context_window: Option<crate::provider::ContextWindow>,
    /// The agent's processes' peak memory bound for this row, in MB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// How much the agent's processes may grow over their own footprint,
    /// measured as the row's first model call arrives, in MB (see
    /// the oracle's `memory_growth` check).
    #[serde(default)]
    pub memory_growth_mb: Option<u64>,
    /// How many MB per turn the agent's resident memory may grow over a
    /// long session (a `chaos` conversation; see the oracle's
    /// `memory_per_turn` check).
    #[serde(default)]
    pub memory_per_turn_mb: Option<f64>,
    /// How many MB the agent's run may add to the disk: its HOME, its work
    /// dir and its private `/tmp`, `/var/tmp`, `/dev/shm` and `/run` (see
    /// the oracle's `disk_written` check).
    #[serde(default)]
    pub disk_mb: Option<u64>,
    /// What the provider does with every request besides model calls (see
    /// `crate::provider::endpoints`).
    #[serde(default)]
    pub endpoint_fault: Option<crate::provider::EndpointFault>,
    /// A credential that expires mid-run and is refreshed (see
    /// `crate::provider::credential`).
    #[serde(default)]
    pub credential: Option<crate::provider::credential::CredentialSpec>,
    /// The agent turns on its own sandbox for its tools (see
    /// [`super::agent_sandbox`]).
    #[serde(default)]
    pub agent_sandbox: Option<super::agent_sandbox::AgentSandbox>,
    /// Faults of the ACP client side chaosrun serves (see
    /// [`super::client`]); the row needs the ACP drive.
    #[serde(default)]
    pub client: Vec<super::client::ClientRule>,
    /// ACP drive: the probe turn's `session/prompt` is sent while the
    /// faulted turn still runs (a queued message); the row needs the ACP
    /// drive.
    #[serde(default)]
    pub queue_prompt: Option<QueuePrompt>,
    /// Damage the agent's transcript once the agent the `process_fault`
    /// killed is gone, before its restart (see [`super::damage`]).
    #[serde(default)]
    pub store_damage: Option<super::damage::StoreDamage>,
}

/// `queue_prompt: {after_seconds: S}`: the ACP drive sends the next turn's
/// `session/prompt` S seconds after the faulted turn's first `tool_call`
/// update, if that turn still runs then.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuePrompt {
    pub after_seconds: f64,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableDoc {
    #[serde(default)]
    pub defaults: Defaults,
    pub scenarios: Vec<ScenarioDoc>,
}

/// One scenario with defaults merged in, ready to run. Saved with a run's
/// artifacts (`row.json`) and read back by `chaosrun judge`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub id: String,
    pub about: String,
    pub knobs: Knobs,
    pub deadlines: Deadlines,
    pub responder: Vec<Rule>,
    pub expect: Expect,
    pub calls: CallBound,
    pub max_calls_after_interrupt: u64,
    pub interrupt: Option<Trigger>,
    pub probe: ProbeMode,
    pub check_echo_tokens: bool,
    pub tool_gone: Option<String>,
    pub tool_result_contains: Option<String>,
    pub process_fault: Option<ProcessFault>,
    pub chaos: Option<ChaosSpec>,
    pub mcp: Option<crate::mcp::McpSpec>,
    pub context_window: Option<crate::provider::ContextWindow>,
    /// The agent's processes' peak memory bound, in MB (rows saved before it
    /// existed read the default).
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
    /// The agent's processes' growth bound over their footprint when the
    /// row's first model call arrived, in MB (None: growth is not judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_growth_mb: Option<u64>,
    /// The agent's processes' growth bound per turn over a long session, in
    /// MB (None: not judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_per_turn_mb: Option<f64>,
    /// The bytes the agent's run may add to its HOME, work dir and private
    /// temporary places, in MB (None: not judged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    /// Requests besides model calls faulted (None: served as usual).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_fault: Option<crate::provider::EndpointFault>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<crate::provider::credential::CredentialSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_sandbox: Option<super::agent_sandbox::AgentSandbox>,
    /// Faults of the ACP client side (the row needs the ACP drive).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client: Vec<super::client::ClientRule>,
    /// The probe's prompt sent while the faulted turn runs (ACP drive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_prompt: Option<QueuePrompt>,
    /// The transcript's damage before the restart (see [`super::damage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_damage: Option<super::damage::StoreDamage>,
    /// Calls of the responder's replies the profile could not make, dropped
    /// before the run (`profile::needs::adapt`): saved with the row, so the
    /// oracle can say what share of it ran. Empty for a row run as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_calls: Vec<DroppedCalls>,
}

/// Calls dropped from one responder rule's reply before the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedCalls {
    /// The rule's index in `responder`.
    pub rule: usize,
    /// How many of its reply's calls were dropped.
    pub count: usize,
    /// Why (the profile's gap, with the key to map).
    pub why: String,
}

/// A loaded, validated table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    pub scenarios: Vec<Scenario>,
}

macro_rules! merge {
    ($base:expr, $over:expr, $($f:ident),+) => {{
        let mut out = $base;
        $( if let Some(v) = $over.$f.clone() { out.$f = v; } )+
        out
    }};
}

impl KnobOverrides {
    pub fn apply(&self, base: Knobs) -> Knobs {
        let mut out = merge!(
            base,
            self,
            model,
            stale_timeout,
            request_timeout,
            api_max_retries,
            max_turns,
            tool_timeout
        );
        if self.api_retry_budget.is_some() {
            out.api_retry_budget = self.api_retry_budget;
        }
        out
    }
}

impl DeadlineOverrides {
    pub fn apply(&self, base: Deadlines) -> Deadlines {
        merge!(base, self, boot, turn, interrupt, probe, exit, reap)
    }
}
