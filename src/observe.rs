//! The observation record of one scenario run: everything chaosrun saw for
//! itself (agent events with times, the provider's recording, process
//! snapshots, the durable store, the exit). The oracle is pure over this record,
//! so every invariant can be tested without processes.

use serde::{Deserialize, Serialize};

use crate::proc_hygiene::ProcInfo;
use crate::provider::Recording;
pub use crate::store::{is_placeholder_id, StoreObservation, TranscriptRead};
pub use disk::{DiskSample, DiskUse, DISK_LARGEST_KEEP};
pub use turn::{ClockStart, TurnModel};

mod disk;
mod turn;

/// What every chaos turn's user message starts with, before its number.
const CHAOS_TURN: &str = "Chaos turn ";

/// The user message of chaos turn `k` (1 ≤ k < the probe turn; turn 0 is
/// the scenario's fault message).
pub fn chaos_turn_message(k: u64) -> String {
    format!("{CHAOS_TURN}{k}: carry on with the task.")
}

/// The turn whose user message `text` is: 0 for `fault_message`, k for
/// [`chaos_turn_message`]`(k)` (a prefix is enough: recorded contents may be cut).
pub fn turn_of_message(text: &str, fault_message: &str) -> Option<u64> {
    let text = text.trim_end_matches('…');
    if !text.is_empty() && fault_message.starts_with(text) {
        return Some(0);
    }
    text.strip_prefix(CHAOS_TURN)?
        .split(':')
        .next()?
        .parse()
        .ok()
}

/// A phase of a scenario run, each with its own deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Boot,
    /// Exec mode: a turn's process from its spawn to its first request to
    /// the provider (bounded by the boot deadline).
    StartUp,
    FaultedTurn,
    Interrupt,
    Probe,
    Exit,
    Reap,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Boot => "booting",
            Phase::StartUp => "start-up",
            Phase::FaultedTurn => "faulted turn",
            Phase::Interrupt => "interrupt",
            Phase::Probe => "probe",
            Phase::Exit => "closing",
            Phase::Reap => "reaping",
        }
    }
}

/// What a `turn_end` event reported.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    pub i: u64,
    #[serde(default)]
    pub failed: bool,
    #[serde(default)]
    pub interrupted: bool,
    #[serde(default)]
    pub completed: bool,
    #[serde(default, rename = "final")]
    pub final_text: String,
    #[serde(default)]
    pub exit_reason: String,
    /// Exec mode: the last characters (at most 2,000) of what the turn's
    /// process printed on stderr, as chaosrun read it; `None` where nothing
    /// was recorded (a driver-protocol agent, an older observation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
}

/// ACP drive: a turn's `exit_reason` when its `session/prompt` was answered
/// with a JSON-RPC error (a refusal).
pub const ACP_PROMPT_ERROR: &str = "error";

/// The outcome of an [`Event::ClientCall`] a client fault (`never`) left
/// unanswered, recorded when the request came.
pub const CLIENT_HELD: &str = "held: never answered";
/// The outcome of a held `session/request_permission` chaosrun answered
/// `cancelled` at the turn's cancel.
pub const CLIENT_SETTLED_AT_CANCEL: &str = "cancelled (pending at the cancel)";

/// One thing that happened, agent-side or chaosrun-side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The agent process started.
    Spawned {
        pid: i32,
    },
    Ready,
    TurnStart {
        i: u64,
    },
    TurnEnd(TurnEnd),
    Closed,
    /// chaosrun wrote `interrupt`; `main_calls` is how many faulted-turn main
    /// calls the provider had received at that moment.
    InterruptSent {
        main_calls: u64,
    },
    /// A `CHAOS ` line that was not a valid event.
    BadEvent {
        line: String,
    },
    /// A chaos run reached its bound (`seconds` after the agent booted)
    /// with its conversation unfinished: chaosrun cut it there.
    ChaosBoundReached {
        seconds: f64,
    },
    /// A phase's deadline passed before it completed.
    DeadlineMissed {
        phase: Phase,
        seconds: f64,
    },
    /// chaosrun sent a process fault: an action's (`kill`, `stop`,
    /// `suspend`; an `oom` as the kill it amounts to) or `cont`, to
    /// `signalled` processes, after `main_calls` faulted-turn calls.
    /// `start_up`: exec mode, it landed while the turn's process was still
    /// starting (before its first request to the provider): shown, but not
    /// counted as a landed fault.
    ProcessFault {
        action: crate::scenarios::Sent,
        signalled: usize,
        main_calls: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        start_up: bool,
    },
    /// `action: oom`: chaosrun set a memory limit of `limit_mb` (the agent's
    /// processes used `usage_mb` then, in the memory cgroup `via`), and the
    /// kernel OOM-killed `oom_kills` of them before the agent died (its
    /// `cgroup`'s own counter; 0: no OOM kill, the fault did not land).
    /// `error`: no limit could be set.
    OomKill {
        via: String,
        usage_mb: f64,
        limit_mb: f64,
        oom_kills: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A row that bounds memory growth (`memory_growth_mb`): the agent's
    /// footprint, the resident memory summed over its `processes`
    /// processes, measured as its first main call arrived (the reply held
    /// until it was read); `error`: it could not be read.
    MemoryBaseline {
        rss: u64,
        processes: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Exec mode: turn `turn`'s process reached the provider (its first
    /// request of any kind) `after_spawn` seconds after it was started. The
    /// turn's deadline runs from here; its start-up, from the spawn to here,
    /// is bounded by the boot deadline. `first_output`: seconds after the
    /// spawn of its first byte on stdout or stderr, when that came before
    /// this request (a sign of life: what came before it is the process's
    /// own boot).
    FirstCall {
        turn: u64,
        after_spawn: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_output: Option<f64>,
    },
    /// After a kill, the agent was started again on the same HOME and session,
    /// told to resume at `start_turn`.
    Restarted {
        pid: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_turn: Option<u64>,
    },
    /// The agent could not be started again.
    RestartFailed {
        error: String,
    },
    /// Exec mode: a value the profile captures (`exec.capture.NAME`) was
    /// read from the agent's output (first seen, or changed).
    Captured {
        name: String,
        value: String,
    },
    /// Exec mode: turn `turn` could not start because its argv needs
    /// `{{captured.NAME}}` and the agent's output never matched that capture.
    CaptureMissing {
        turn: u64,
        name: String,
    },
    /// ACP drive: a tool call's status as the agent reported it in a
    /// `session/update` (`tool_call` or `tool_call_update`) while turn
    /// `turn` ran: `pending`, `in_progress`, `completed`, `failed` or
    /// `cancelled` (an update without a status is not recorded).
    ToolStatus {
        turn: u64,
        id: String,
        status: String,
    },
    /// ACP drive: the agent sent a `session/update` of `kind` (its
    /// `sessionUpdate` value) for the session after turn `turn`'s prompt had
    /// been answered and before the next prompt went out: work that went on
    /// after the turn ended.
    UpdateAfterTurn {
        turn: u64,
        kind: String,
    },
    /// ACP drive: the agent asked the client side (chaosrun) `method`
    /// (a request a client fault holds is recorded at once with outcome
    /// [`CLIENT_HELD`], and again when chaosrun settles it at the cancel,
    /// [`CLIENT_SETTLED_AT_CANCEL`]);
    /// (`fs/read_text_file`, `terminal/create`,
    /// `session/request_permission`, ...) while turn `turn` ran (`None`:
    /// between turns), and chaosrun answered with `outcome` (`ok`, the
    /// option chosen, or the error sent).
    ClientCall {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<u64>,
        method: String,
        outcome: String,
    },
    /// ACP drive: a restart's `session/load` before turn `before_turn`
    /// replayed `turns` (per turn the normalised start of its user message
    /// and answer, at most 200 kept; `dropped` more), `tool_calls` tool calls,
    /// and was answered with `error` (`None`: answered ok).
    SessionLoaded {
        before_turn: u64,
        turns: Vec<ReplayedTurn>,
        #[serde(default)]
        dropped: u64,
        #[serde(default)]
        tool_calls: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// ACP drive (`queue_prompt`): turn `turn`'s `session/prompt` was sent
    /// while the turn before it still ran. A kill before turn `turn` ended
    /// took the request with the process: the restart's `session/load`
    /// ([`Event::SessionLoaded`]) shows whether the agent had kept it, and
    /// the restarted drive sends it again as turn `turn`'s prompt.
    PromptQueued {
        turn: u64,
    },
    /// The agent process exited (or was killed by chaosrun).
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        killed_by_chaosrun: bool,
    },
}

/// One conversation turn a `session/load` replayed: the normalised first
/// 200 characters of its user message and of its answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayedTurn {
    pub user: String,
    pub answer: String,
}

/// Characters kept of each replayed user message and answer.
pub const REPLAY_KEEP_CHARS: usize = 200;

/// `s` with its whitespace runs made one space, trimmed, and clipped to
/// [`REPLAY_KEEP_CHARS`] characters: how a replayed text and a turn's
/// answer compare.
pub fn normalise_replayed(s: &str) -> String {
    let words: Vec<&str> = s.split_whitespace().collect();
    words.join(" ").chars().take(REPLAY_KEEP_CHARS).collect()
}

/// An event and when it was seen, in seconds since the run started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timed {
    pub at: f64,
    /// Which worker said it (worker mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<usize>,
    #[serde(flatten)]
    pub event: Event,
}

/// Tagged processes alive at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub at: f64,
    /// `probe_turn_start`, `after_exit`, ...
    pub label: String,
    pub procs: Vec<ProcInfo>,
}

/// How many of the scenario's processes (the agent included) were alive at
/// one moment, sampled about twice a second for the whole run, with their
/// summed CPU and resident memory (through `sysinfo`; 0 in observations
/// saved before they were sampled).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcSample {
    pub at: f64,
    pub count: usize,
    /// CPU since the previous sample, in percent of one core, summed over
    /// the processes (a process's first sample counts 0).
    #[serde(default)]
    pub cpu: f32,
    /// Resident memory, in bytes, summed over the processes.
    #[serde(default)]
    pub rss: u64,
    /// The turn whose end this sample was awaited at (none: a tick, a
    /// close sample or the close).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_end: Option<u64>,
    /// Whether it was the sample awaited as the agent is asked to close.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
    /// The zombie children of the scenario's processes at that moment (at
    /// most [`ZOMBIES_KEEP`]); `None` where they were not looked for (an
    /// observation saved before they were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zombies: Option<Vec<Zombie>>,
}

pub use crate::proc_hygiene::{Zombie, ZOMBIES_KEEP};

/// One fault of a chaos schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduledFault {
    /// Seconds after the first `ready`.
    pub at: f64,
    /// `kill` or `stop`.
    pub action: crate::scenarios::FaultAction,
    /// For a stop: seconds until SIGCONT.
    #[serde(default)]
    pub stop_for: f64,
    /// Which worker it hits (0 for a single agent).
    #[serde(default)]
    pub worker: usize,
}

/// A chaos run's seed and schedule (the same seed gives the same schedule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChaosRecord {
    pub seed: u64,
    pub schedule: Vec<ScheduledFault>,
    /// Seconds the run may take from the first agent's boot on, derived
    /// from the row's declaration (its duration, the last fault's landing,
    /// a turn in flight, the probe; exec-mode start-ups not counted): past
    /// it the run is cut ([`Event::ChaosBoundReached`]). 0 in observations
    /// saved before it.
    #[serde(default)]
    pub bound: f64,
}

/// What chaosrun dropped to stay within its caps (all zero for a well-behaved
/// agent): protocol events past the per-scenario cap, bytes of stdout and
/// stderr past the per-log cap, and the journal past its read cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capped {
    /// `CHAOS ` events received past the cap, neither recorded nor judged.
    pub events_dropped: u64,
    /// Bytes the agent wrote to stdout, and how many `stdout.log` kept.
    pub stdout_bytes: u64,
    pub stdout_kept: u64,
    /// Bytes the agent wrote to stderr, and how many `stderr.log` kept.
    pub stderr_bytes: u64,
    pub stderr_kept: u64,
    /// Bytes of the journal file, and how many were read.
    pub journal_bytes: u64,
    pub journal_read: u64,
}

/// `1.0 GiB`, `16 MiB`, `512 B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if v < 9.95 {
        format!("{v:.1} {}", UNITS[unit])
    } else {
        format!("{v:.0} {}", UNITS[unit])
    }
}

impl Capped {
    /// `stderr: 1.0 GiB, 16 MiB kept; 990000 events dropped`, or None when
    /// nothing was dropped.
    pub fn note(&self) -> Option<String> {
        let mut parts = Vec::new();
        for (name, seen, kept) in [
            ("stdout", self.stdout_bytes, self.stdout_kept),
            ("stderr", self.stderr_bytes, self.stderr_kept),
            ("journal", self.journal_bytes, self.journal_read),
        ] {
            if seen > kept {
                parts.push(format!(
                    "{name}: {}, {} kept",
                    human_bytes(seen),
                    human_bytes(kept)
                ));
            }
        }
        if self.events_dropped > 0 {
            parts.push(format!("{} events dropped", self.events_dropped));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// What the adapter profile lets chaosrun check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The agent refuses a probe after repeated stale streams.
    pub breaker: bool,
    /// What in a tool result shows a background job started (the profile's
    /// `background:`), taken as evidence the job existed.
    #[serde(default)]
    pub background: Option<crate::profile::BackgroundSpec>,
    /// The name the agent gives the MCP server's probe tool (the profile's
    /// `tools.mcp_probe`), looked for in the tools each request offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tool: Option<String>,
    /// The profile renders `api_max_retries` and no `api_retry_budget`, so
    /// the agent's retry count is the row's (the `request_loop` check's
    /// bound; without it that check is `not checked`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub renders_retries: bool,
}

/// Everything observed in one scenario run (`Default`: nothing was seen,
/// for a run chaosrun could not carry out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub scenario: String,
    pub tag: String,
    pub nonce: String,
    pub session_id: String,
    pub fault_message: String,
    pub probe_message: String,
    pub events: Vec<Timed>,
    pub recording: Recording,
    pub snapshots: Vec<Snapshot>,
    /// Tagged processes alive over time.
    #[serde(default)]
    pub proc_samples: Vec<ProcSample>,
    /// The scenario cgroup's peak memory in bytes (`memory.peak`), where the
    /// kernel keeps one; else the `memory` check reads the samples' RSS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak: Option<u64>,
    /// Distinct command lines of the tagged processes seen while it ran
    /// (bounded): evidence that a tool really ran.
    #[serde(default)]
    pub processes_seen: Vec<String>,
    /// Seconds from the run's start to the provider's start: add it to a
    /// request's `at` to put it on the run's clock.
    #[serde(default)]
    pub provider_offset: f64,
    /// The scenario's seed, from which the responder's `p` rules drew
    /// (`provider::rules::draw`): the oracle predicts a rule's next pick
    /// with it.
    #[serde(default)]
    pub rule_seed: u64,
    pub store: StoreObservation,
    /// The store as a kill aimed at a store write left it (read from the
    /// copy taken before the restart), for such a row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_at_kill: Option<StoreObservation>,
    /// The store when that kill's trigger armed, before the write it was
    /// aimed at (read from the copy taken then): the messages the kill must
    /// not lose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_at_arm: Option<StoreObservation>,
    /// What the row's `store_damage` did to the agent's transcript before
    /// the restart, what it left intact and what followed the damaged tail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_damage: Option<crate::store::damaged::DamageRecord>,
    /// The scenario's processes (its cgroup's members, or what the tag
    /// fallback found) still alive after the reap deadline.
    pub survivors: Vec<ProcInfo>,
    /// How the scenario's processes were contained (cgroup or tag fallback).
    #[serde(default)]
    pub containment: crate::proc_hygiene::Containment,
    /// Whether the agent ran in a network namespace of its own (loopback
    /// only), or why not.
    #[serde(default)]
    pub network: crate::listen::Network,
    /// Last lines of the agent's stderr.
    pub stderr_tail: String,
    /// Last lines of each log file the profile names: (path, tail).
    #[serde(default)]
    pub log_tails: Vec<(String, String)>,
    /// The profile's `logs:` entries (relative to HOME) that matched no file by
    /// the end of the run.
    #[serde(default)]
    pub logs_missing: Vec<String>,
    /// Lines on stdout that were not `CHAOS ` events (kept as an artifact).
    pub stdout_other_lines: u64,
    /// Why the run could not be driven (spawn failure, setup error), if so:
    /// the agent never ran.
    pub setup_error: Option<String>,
    /// What chaosrun could not do after the agent ran (a drive past its
    /// bound, a cassette it could not write, a capture the store query
    /// needed, a failed MCP upstream), if anything: the run is an ERROR, its
    /// checks are still made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_error: Option<String>,
    /// Wall seconds of the whole run.
    pub wall: f64,
    /// Unix time (seconds) when the run started: event times are relative to it.
    #[serde(default)]
    pub started_unix: f64,
    /// Lines of the side-effect journal (`$CHAOS_JOURNAL`), bounded.
    #[serde(default)]
    pub journal: Vec<String>,
    /// The files the row's `write_file` calls name, as the run left them in
    /// the work dir (read back after the run, bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileLeft>,
    /// Index of the probe turn: 1, or the last turn of a chaos run.
    #[serde(default = "one")]
    pub probe_turn: u64,
    /// A chaos run's schedule.
    #[serde(default)]
    pub chaos: Option<ChaosRecord>,
    /// Agent processes run at once (an adapter's `workers`; 1 otherwise).
    #[serde(default = "one_worker")]
    pub workers: usize,
    /// What was dropped past chaosrun's caps.
    #[serde(default)]
    pub capped: Capped,
    /// What the scenario's MCP server saw (rows with an `mcp:` section).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<crate::mcp::McpRecording>,
    /// How the agent's turns ran, as its drive decided; read through
    /// [`Observation::turn_model`] (an older observation has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_model: Option<TurnModel>,
    /// What a row that bounds the disk (`disk_mb`) saw of the bytes the
    /// agent's run added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskUse>,
}

/// One file a row's `write_file` call names, read back from the work dir
/// after the run (never through a symlink): its content (the first
/// [`FILE_KEEP_BYTES`]), or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileLeft {
    /// As the row names it, relative to the work dir.
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The most of one [`FileLeft`] read back.
pub const FILE_KEEP_BYTES: u64 = 64 << 10;

fn one_worker() -> usize {
    1
}

fn one() -> u64 {
    1
}

impl Observation {
    /// What a scenario's result keeps once it is judged and its artifacts
    /// are written: the reports read its events, samples, tails and the
    /// requests' times, kinds and replies, never the requests' messages and
    /// headers or the journal, which are dropped (so the results of a long
    /// table do not hold every row's traffic to the end of the run).
    pub fn slim(&mut self) {
        self.recording.slim();
        self.journal = Vec::new();
    }

    /// The first event matching `f`, with its time.
    pub fn find<T>(&self, mut f: impl FnMut(&Event) -> Option<T>) -> Option<(f64, T)> {
        self.events
            .iter()
            .find_map(|t| f(&t.event).map(|v| (t.at, v)))
    }

    /// How the agent's turns ran: as recorded, else as the saved events
    /// say ([`TurnModel::of_saved`]).
    pub fn turn_model(&self) -> TurnModel {
        self.turn_model
            .unwrap_or_else(|| TurnModel::of_saved(&self.events))
    }

    /// Where turn `i`'s own deadline starts ([`TurnModel::clock_start`]).
    pub fn clock_start(&self, i: u64) -> Option<f64> {
        self.turn_model().clock_start(self, i)
    }

    pub fn turn_start(&self, i: u64) -> Option<f64> {
        self.find(|e| matches!(e, Event::TurnStart { i: j } if *j == i).then_some(()))
            .map(|(at, _)| at)
    }

    /// Exec mode: when turn `i`'s process first reached the provider (the
    /// last time, after a restart), and how long after its spawn.
    pub fn first_call(&self, i: u64) -> Option<(f64, f64)> {
        self.events.iter().rev().find_map(|t| match t.event {
            Event::FirstCall {
                turn, after_spawn, ..
            } if turn == i => Some((t.at, after_spawn)),
            _ => None,
        })
    }

    /// Exec mode: seconds after turn `i`'s spawn of its first byte on
    /// stdout or stderr, when that came before its first request.
    pub fn first_output(&self, i: u64) -> Option<f64> {
        self.events.iter().rev().find_map(|t| match t.event {
            Event::FirstCall {
                turn, first_output, ..
            } if turn == i => Some(first_output),
            _ => None,
        })?
    }

    /// Exec mode: the turn whose start-up passed the boot deadline, with
    /// that deadline (the last turn started before the miss).
    pub fn start_up_missed(&self) -> Option<(u64, f64)> {
        let (n, seconds) = self
            .events
            .iter()
            .enumerate()
            .find_map(|(n, t)| match t.event {
                Event::DeadlineMissed {
                    phase: Phase::StartUp,
                    seconds,
                } => Some((n, seconds)),
                _ => None,
            })?;
        let turn = self.events[..n].iter().rev().find_map(|t| match t.event {
            Event::TurnStart { i } => Some(i),
            _ => None,
        });
        Some((turn.unwrap_or(0), seconds))
    }

    pub fn turn_end(&self, i: u64) -> Option<(f64, TurnEnd)> {
        self.find(|e| match e {
            Event::TurnEnd(t) if t.i == i => Some(t.clone()),
            _ => None,
        })
    }

    pub fn deadline_missed(&self, phase: Phase) -> Option<f64> {
        self.find(|e| match e {
            Event::DeadlineMissed { phase: p, seconds } if *p == phase => Some(*seconds),
            _ => None,
        })
        .map(|(_, s)| s)
    }

    pub fn interrupt_sent(&self) -> Option<(f64, u64)> {
        self.find(|e| match e {
            Event::InterruptSent { main_calls } => Some(*main_calls),
            _ => None,
        })
    }

    /// The last process exit (after a restart, the restarted agent's).
    pub fn exited(&self) -> Option<(f64, Event)> {
        self.events
            .iter()
            .rev()
            .find(|t| matches!(t.event, Event::Exited { .. }))
            .map(|t| (t.at, t.event.clone()))
    }

    /// Process faults that reached at least one process: (kills, stops).
    pub fn faults_landed(&self) -> (usize, usize) {
        self.faults_where(|_| true)
    }

    /// Process faults that reached at least one process in a turn's working
    /// time (not during an exec-mode turn's start-up): (kills, stops).
    pub fn faults_landed_working(&self) -> (usize, usize) {
        self.faults_where(|start_up| !start_up)
    }

    /// Landed kills and stops (pauses: a chaos schedule's stops) whose
    /// `start_up` flag passes `keep`.
    fn faults_where(&self, keep: impl Fn(bool) -> bool) -> (usize, usize) {
        let mut n = (0, 0);
        for t in &self.events {
            if let Event::ProcessFault {
                action,
                signalled,
                start_up,
                ..
            } = &t.event
            {
                if *signalled > 0 && keep(*start_up) {
                    n.0 += usize::from(action.kills());
                    n.1 += usize::from(action.pauses());
                }
            }
        }
        n
    }

    /// When the restarted agent said ready, if it was restarted and did.
    pub fn ready_after_restart(&self) -> Option<f64> {
        let restarted = self
            .find(|e| matches!(e, Event::Restarted { .. }).then_some(()))?
            .0;
        self.events
            .iter()
            .find(|t| t.at >= restarted && matches!(t.event, Event::Ready))
            .map(|t| t.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_note_names_what_was_dropped() {
        assert_eq!(Capped::default().note(), None);
        let c = Capped {
            stderr_bytes: 1 << 30,
            stderr_kept: 16 << 20,
            stdout_bytes: 10,
            stdout_kept: 10,
            events_dropped: 3,
            ..Capped::default()
        };
        assert_eq!(
            c.note().unwrap(),
            "stderr: 1.0 GiB, 16 MiB kept; 3 events dropped"
        );
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100), "100 B");
    }
}
