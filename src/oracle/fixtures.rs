//! Recorded observations for the oracle's unit tests: a healthy run to start
//! from, and small builders to break it.

use crate::message::{Message, ToolCall};
use crate::observe::*;
use crate::provider::recording::{CallKind, RequestRecord};
use crate::provider::Recording;
use crate::scenarios::Scenario;

pub const NONCE: &str = "N0NCE";

/// One scenario built from YAML lines added to a hang responder.
pub fn scenario(extra: &str) -> Scenario {
    let mut yaml = String::from("scenarios:\n  - id: s\n    responder: [{reply: {kind: hang}}]\n");
    for line in extra.lines() {
        yaml.push_str("    ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    crate::scenarios::load_str(&yaml, "fixture.yaml")
        .unwrap()
        .scenarios
        .remove(0)
}

/// One scenario whose every faulted-turn call gets `reply` (a YAML reply,
/// `{kind: text, text: ''}`) and that expects the turn to end.
pub fn row(reply: &str) -> Scenario {
    let yaml =
        format!("scenarios:\n  - id: s\n    expect: ended\n    responder: [{{reply: {reply}}}]\n");
    crate::scenarios::load_str(&yaml, "fixture.yaml")
        .unwrap()
        .scenarios
        .remove(0)
}

/// A sample of two processes holding `mb` MB of resident memory at `at` s.
pub fn sample(at: f64, mb: u64) -> ProcSample {
    ProcSample {
        at,
        count: 2,
        cpu: 0.0,
        rss: mb << 20,
        ..ProcSample::default()
    }
}

pub fn at(at: f64, event: Event) -> Timed {
    Timed {
        at,
        worker: None,
        event,
    }
}

pub fn end(i: u64, completed: bool, failed: bool, final_text: &str) -> TurnEnd {
    TurnEnd {
        i,
        failed,
        interrupted: false,
        completed,
        final_text: final_text.into(),
        exit_reason: String::new(),
        stderr: None,
    }
}

pub fn end_interrupted(i: u64) -> TurnEnd {
    TurnEnd {
        interrupted: true,
        ..end(i, false, false, "interrupted by user")
    }
}

pub fn msg(role: &str, content: &str) -> Message {
    Message::new(role, content)
}

pub fn assistant_calls(ids: &[&str]) -> Message {
    Message::assistant_calls(
        ids.iter()
            .map(|id| ToolCall::new(*id, "shell", "{}"))
            .collect(),
    )
}

pub fn tool(id: &str, content: &str) -> Message {
    Message::tool_result(id, content)
}

pub fn request(seq: u64, kind: CallKind, messages: Vec<Message>) -> RequestRecord {
    RequestRecord {
        seq,
        at: seq as f64,
        kind,
        main_index: (kind == CallKind::Main).then_some(seq),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        headers: vec![],
        size: 1000,
        body_sha256: String::new(),
        stream: true,
        model: Some("fake-model".into()),
        tools: vec![],
        messages,
        messages_dropped: 0,
        truncated: false,
        reply: "text".into(),
        rule: (kind == CallKind::Main).then_some(0),
        previous_response_id: None,
        error: None,
        credential: None,
        ended: None,
    }
}

pub fn stored(role: &str, content: &str, call_id: Option<&str>, call_ids: &[&str]) -> Message {
    Message {
        tool_call_id: call_id.map(String::from),
        tool_calls: call_ids.iter().map(|id| ToolCall::id_only(*id)).collect(),
        ..Message::new(role, content)
    }
}

/// A run in which everything went right, with `turn0` as the faulted turn's end.
pub fn healthy(s: &Scenario, turn0: TurnEnd) -> Observation {
    let fault = format!("Chaos scenario {}: task {NONCE}", s.id);
    let probe = format!("Reply with [[probe:{NONCE}]]");
    let mut probe_req = request(
        1,
        CallKind::Probe,
        vec![
            msg("user", &fault),
            msg("assistant", &turn0.final_text),
            msg("user", &probe),
        ],
    );
    probe_req.main_index = None;
    Observation {
        scenario: s.id.clone(),
        tag: "tag".into(),
        nonce: NONCE.into(),
        session_id: "sess".into(),
        fault_message: fault.clone(),
        probe_message: probe.clone(),
        rule_seed: 0,
        events: vec![
            at(0.0, Event::Spawned { pid: 42 }),
            at(0.2, Event::Ready),
            at(0.3, Event::TurnStart { i: 0 }),
            at(3.0, Event::TurnEnd(turn0.clone())),
            at(3.1, Event::TurnStart { i: 1 }),
            at(
                3.4,
                Event::TurnEnd(end(1, true, false, &format!("alive {NONCE}"))),
            ),
            at(3.5, Event::Closed),
            at(
                3.6,
                Event::Exited {
                    code: Some(0),
                    signal: None,
                    killed_by_chaosrun: false,
                },
            ),
        ],
        recording: Recording {
            requests: vec![
                request(0, CallKind::Main, vec![msg("user", &fault)]),
                probe_req,
            ],
            issued_tool_calls: vec![],
            waits: vec![],
            rule_hits: vec![],
            main_calls: 1,
            probe_calls: 1,
            aux_calls: 0,
            ..Recording::default()
        },
        snapshots: vec![Snapshot {
            at: 3.1,
            label: "probe_turn_start".into(),
            procs: vec![],
        }],
        proc_samples: vec![],
        memory_peak: None,
        turn_model: None,
        disk: None,
        store_at_kill: None,
        store_at_arm: None,
        store_damage: None,
        processes_seen: vec![],
        provider_offset: 0.0,
        store: StoreObservation::Read {
            path: "state.db".into(),
            integrity: "ok".into(),
            messages: Ok(vec![
                stored("user", &fault, None, &[]),
                stored("assistant", &turn0.final_text, None, &[]),
                stored("user", &probe, None, &[]),
                stored("assistant", &format!("alive {NONCE}"), None, &[]),
            ]),
        },
        containment: Default::default(),
        network: Default::default(),
        survivors: vec![],
        stderr_tail: String::new(),
        log_tails: vec![],
        logs_missing: vec![],
        stdout_other_lines: 0,
        setup_error: None,
        run_error: None,
        wall: 4.0,
        started_unix: 1_700_000_000.0,
        journal: vec![],
        files: vec![],
        probe_turn: 1,
        chaos: None,
        mcp: None,
        workers: 1,
        capped: Default::default(),
    }
}

/// Move turn `i`'s end to `t` seconds.
pub fn set_turn_end_time(obs: &mut Observation, i: u64, t: f64) {
    for e in &mut obs.events {
        if matches!(&e.event, Event::TurnEnd(x) if x.i == i) {
            e.at = t;
        }
    }
}

/// The healthy run of `s` as the ACP drive records it (turn model
/// [`TurnModel::ACP`]), with `extra` events put in time order.
pub fn acp(s: &Scenario, turn0: TurnEnd, extra: Vec<Timed>) -> Observation {
    let mut obs = healthy(s, turn0);
    obs.turn_model = Some(TurnModel::ACP);
    obs.events.extend(extra);
    obs.events.sort_by(|a, b| a.at.total_cmp(&b.at));
    obs
}

/// Turn 0 answered `stopReason: cancelled` after `session/cancel`.
pub fn acp_cancelled() -> TurnEnd {
    TurnEnd {
        exit_reason: "cancelled".into(),
        ..end_interrupted(0)
    }
}

/// Turn 0 answered `stopReason: end_turn`.
pub fn acp_end_turn(final_text: &str) -> TurnEnd {
    TurnEnd {
        exit_reason: "end_turn".into(),
        ..end(0, true, false, final_text)
    }
}

/// The agent reported tool call `id` of `turn` with `status` at `t` s.
pub fn tool_status(t: f64, turn: u64, id: &str, status: &str) -> Timed {
    at(
        t,
        Event::ToolStatus {
            turn,
            id: id.into(),
            status: status.into(),
        },
    )
}

/// A `session/update` of `kind` after turn `turn`'s answer, at `t` s.
pub fn update_after(t: f64, turn: u64, kind: &str) -> Timed {
    at(
        t,
        Event::UpdateAfterTurn {
            turn,
            kind: kind.into(),
        },
    )
}
