//! One ACP agent process's conversation, driven by chaosrun as its client:
//! `initialize` → `session/new` (or `session/load` after a kill) → `ready` →
//! per turn `turn_start`, `session/prompt`, the turn's `session/update`s
//! (answer text kept up to [`FINAL_KEEP_CHARS`], tool statuses recorded), the
//! agent's requests answered by the client side (or as the row's client
//! faults say, [`super::faulted`]: late, held, an error; a held permission
//! request answered `cancelled` at the cancel), an interrupt sent as
//! `session/cancel`, and `turn_end` from the prompt's response (with
//! `queue_prompt`, the next turn's prompt sent while the first runs, its
//! response kept for its own turn; a kill before that turn's end takes the
//! request with the process, and the restarted drive, resuming at that
//! turn, sends its prompt again like any turn it resumes at) → after the
//! last turn `session/close` where advertised, `closed`, end of stdin. What
//! the agent sends wrong (an invalid frame, a response to an id never
//! asked, an update of the wrong shape) is a bad event; every event the
//! agent causes is counted against the run's budget.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::client::{Answer, Client};
use super::faulted::{Faults, Held, MAX_HELD};
use super::replay::Replay;
use super::rpc::{clip, Frame, Out, RpcError};
use crate::driver::home::AcpRun;
use crate::driver::process::{Line, Sink, Tagged, FINAL_KEEP_CHARS};
use crate::observe::{Event, TurnEnd};
use crate::profile::acp::Load;
use crate::scenarios::client::Plan;

/// How long `session/close` may take to be answered before `closed`.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// `terminal/*` requests served at once; more are refused.
const MAX_OPEN_TERMINAL_CALLS: usize = 64;

/// A request of the agent's answered off the drive (a terminal call may
/// wait on its command), and what to record.
struct Late {
    id: Value,
    method: String,
    turn: Option<u64>,
    answer: Answer,
}

/// The next turn's `session/prompt`, sent while the turn before it ran
/// (`queue_prompt`), and its response if it came before that turn ended.
struct Queued {
    turn: u64,
    id: Value,
    answer: Option<Result<Value, RpcError>>,
}

/// The drive of one agent process.
pub(super) struct Drive {
    run: AcpRun,
    sink: Sink,
    out: Out,
    frames: mpsc::Receiver<Frame>,
    late_tx: mpsc::UnboundedSender<Late>,
    late: mpsc::UnboundedReceiver<Late>,
    open_calls: Arc<AtomicUsize>,
    stderr_log: PathBuf,
    /// The ACP session id in use.
    session: String,
    /// `initialize`'s `agentCapabilities`.
    caps: Value,
    /// The turn running; its answer text (and its length in characters).
    turn: Option<u64>,
    text: String,
    text_chars: usize,
    /// The running turn was cancelled.
    cancelled: bool,
    /// The last turn whose prompt was answered (no prompt since).
    after: Option<u64>,
    /// `session/load` is replaying the conversation (what it replayed):
    /// not this run's updates.
    loading: Option<Replay>,
    /// The ids of chaosrun's requests the agent answered (one per request
    /// sent: a few per turn).
    answered: HashSet<u64>,
    /// The row's client faults, and requests held unanswered.
    faults: Faults,
    /// [`Drive::cancelled`] as the answers sent late read it.
    cancelled_now: Arc<AtomicBool>,
    /// The agent went past [`MAX_HELD`] held requests (said once).
    flooded: bool,
    /// When to send the next turn's prompt while this one runs.
    queue_at: Option<Instant>,
    /// The turn runs a row's `queue_prompt` whose clock has not started:
    /// it starts at the turn's first `tool_call` update.
    queue_armed: bool,
    /// That prompt, once sent.
    queued: Option<Queued>,
    /// How many turns the runner is done with (their end handled: the
    /// credential refreshed, the processes sampled): the next prompt waits
    /// for it, at most [`DONE_WAIT`].
    done: watch::Receiver<u64>,
}

/// The longest the next prompt (or the close) waits for the runner to be
/// done with the turn before it.
const DONE_WAIT: Duration = Duration::from_secs(2);

impl Drive {
    pub(super) fn new(
        run: AcpRun,
        sink: Sink,
        out: Out,
        frames: mpsc::Receiver<Frame>,
        stderr_log: PathBuf,
        done: watch::Receiver<u64>,
    ) -> Drive {
        let (late_tx, late) = mpsc::unbounded_channel();
        let faults = Faults::new(run.client.clone());
        Drive {
            run,
            sink,
            out,
            frames,
            late_tx,
            late,
            open_calls: Arc::new(AtomicUsize::new(0)),
            stderr_log,
            session: String::new(),
            caps: Value::Null,
            turn: None,
            text: String::new(),
            text_chars: 0,
            cancelled: false,
            after: None,
            loading: None,
            answered: HashSet::new(),
            faults,
            cancelled_now: Arc::new(AtomicBool::new(false)),
            flooded: false,
            queue_at: None,
            queue_armed: false,
            queued: None,
            done,
        }
    }

    fn send(&self, line: Line) {
        let _ = self.sink.tx.send(Tagged {
            at: Instant::now(),
            worker: self.sink.worker,
            incarnation: self.sink.incarnation,
            line,
        });
    }

    /// An event the agent caused: forwarded within the run's budget.
    fn agent_event(&self, ev: Event) {
        let len = serde_json::to_string(&ev).map_or(0, |s| s.len());
        if self.sink.budget.take_event(len) {
            self.send(Line::Event(ev));
        }
    }

    fn bad(&self, line: String) {
        self.agent_event(Event::BadEvent { line });
    }

    /// A line in the agent's stderr log (what the report quotes).
    fn note(&self, what: &str) {
        if let Ok(mut log) = crate::output::append_log(&self.stderr_log) {
            let _ = writeln!(log, "[chaosrun] {what}");
        }
    }

    /// The whole conversation; ends with end of output.
    pub(super) async fn run(
        mut self,
        client: Arc<Client>,
        mut ctl: mpsc::UnboundedReceiver<()>,
        resume: Option<u64>,
    ) {
        if self.boot(&client, &mut ctl, resume).await {
            self.send(Line::Event(Event::Ready));
            let mut finished = true;
            for i in resume.unwrap_or(0)..self.run.turns.len() as u64 {
                if !self.turn(i, &client, &mut ctl).await {
                    finished = false;
                    break;
                }
                // A queued prompt already runs on the agent's side: its
                // updates are the next turn's, so no pause between them.
                if self.queued.is_none() {
                    self.runner_done(i + 1, &client).await;
                }
            }
            if finished {
                self.close(&client, &mut ctl).await;
                self.send(Line::Event(Event::Closed));
            }
        }
        self.out.close();
        client.terminals.kill_all();
        // What it says after its stdin closed is recorded, never served.
        while let Some(f) = self.frames.recv().await {
            if !matches!(f, Frame::Request { .. }) {
                self.on_frame(f, &client).await;
            }
        }
        self.send(Line::Eof);
    }

    /// Wait until the runner is done with `turns` turns (at most
    /// [`DONE_WAIT`]), serving the agent meanwhile: an editor's user reads
    /// the answer before typing the next prompt, and the runner's work at a
    /// turn's end (a row's credential refreshed at `turn_end`, the awaited
    /// sample of the agent's processes) is then done before the next prompt
    /// reaches the agent, however fast this session goes on.
    async fn runner_done(&mut self, turns: u64, client: &Arc<Client>) {
        let until = Instant::now() + DONE_WAIT;
        let mut done = self.done.clone();
        while *done.borrow_and_update() < turns {
            tokio::select! {
                changed = done.changed() => if changed.is_err() { return },
                frame = self.frames.recv() => match frame {
                    Some(f) => self.on_frame(f, client).await,
                    None => return,
                },
                Some(late) = self.late.recv() => self.answer_late(late).await,
                () = tokio::time::sleep_until(until) => return,
            }
        }
    }

    /// `initialize`, then `session/load` (a restart, per `load`) or
    /// `session/new`: whether the session is ready.
    async fn boot(
        &mut self,
        client: &Arc<Client>,
        ctl: &mut mpsc::UnboundedReceiver<()>,
        resume: Option<u64>,
    ) -> bool {
        let init = json!({
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true},
            "clientInfo": {"name": "chaosrun", "version": env!("CARGO_PKG_VERSION")},
        });
        // The log's last line names the step the agent is stuck at.
        self.note("ACP: initialize sent, waiting for its answer");
        let Some(answer) = self.ask("initialize", init, client, ctl).await else {
            return false;
        };
        match answer {
            Ok(v) => self.caps = v.get("agentCapabilities").cloned().unwrap_or(Value::Null),
            Err(e) => {
                self.note(&format!(
                    "initialize was answered with error {}: {}",
                    e.code, e.message
                ));
                return false;
            }
        }
        let known = self
            .run
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let can_load = self.caps.get("loadSession") == Some(&Value::Bool(true));
        let (cwd, mcp) = (
            self.run.workdir.display().to_string(),
            self.run.mcp_servers.clone(),
        );
        if let (Some(id), Some(_), Load::Auto, true) = (known, resume, self.run.spec.load, can_load)
        {
            self.note(&format!("ACP: session/load of {id} (a restart)"));
            self.loading = Some(Replay::default());
            let params = json!({"sessionId": id, "cwd": cwd, "mcpServers": mcp});
            let answer = self.ask("session/load", params, client, ctl).await;
            let replay = self.loading.take().unwrap_or_default();
            let error = match &answer {
                Some(Err(e)) => Some(clip(&format!("{} {}", e.code, e.message), 300)),
                _ => None,
            };
            if answer.is_some() {
                let (turns, dropped, tool_calls) = replay.finish();
                self.agent_event(Event::SessionLoaded {
                    before_turn: resume.unwrap_or(0),
                    turns,
                    dropped,
                    tool_calls,
                    error: error.clone(),
                });
            }
            return match (answer, error) {
                (Some(Ok(_)), _) => {
                    self.session = id;
                    true
                }
                (Some(Err(_)), Some(e)) => {
                    self.note(&format!("session/load failed: {e}"));
                    false
                }
                _ => false,
            };
        }
        let params = json!({"cwd": cwd, "mcpServers": mcp});
        match self.ask("session/new", params, client, ctl).await {
            Some(Ok(v)) => match v.get("sessionId").and_then(Value::as_str) {
                Some(id) => {
                    self.session = clip(id, 1000);
                    let mut kept = self.run.session.lock().unwrap_or_else(|e| e.into_inner());
                    kept.get_or_insert_with(|| self.session.clone());
                    true
                }
                None => {
                    // Said where the boot check quotes it (never ready),
                    // not as a second failure of the same cause.
                    let v = clip(&v.to_string(), 200);
                    self.note(&format!("session/new answered without a sessionId: {v}"));
                    false
                }
            },
            Some(Err(e)) => {
                self.note(&format!("session/new failed: {} {}", e.code, e.message));
                false
            }
            None => false,
        }
    }

    /// Send request `method` and serve the agent until it is answered;
    /// `None`: the agent's output ended first (or its stdin is gone).
    async fn ask(
        &mut self,
        method: &str,
        params: Value,
        client: &Arc<Client>,
        ctl: &mut mpsc::UnboundedReceiver<()>,
    ) -> Option<Result<Value, RpcError>> {
        let id = match self.out.request(method, params).await {
            Ok(id) => json!(id),
            Err(e) => {
                self.note(&format!("cannot send {method}: {e}"));
                return None;
            }
        };
        self.wait(id, client, ctl).await
    }

    /// Serve the agent until request `id` is answered (as [`Drive::ask`]);
    /// meanwhile the queued prompt goes out at [`Drive::queue_at`].
    async fn wait(
        &mut self,
        id: Value,
        client: &Arc<Client>,
        ctl: &mut mpsc::UnboundedReceiver<()>,
    ) -> Option<Result<Value, RpcError>> {
        loop {
            let queue_at = self.queue_at;
            tokio::select! {
                f = self.frames.recv() => match f {
                    None => return None,
                    Some(Frame::Response { id: got, result }) if got == id => {
                        self.answered.extend(got.as_u64());
                        return Some(result);
                    }
                    Some(f) => self.on_frame(f, client).await,
                },
                Some(late) = self.late.recv() => self.answer_late(late).await,
                Some(()) = ctl.recv() => self.cancel().await,
                () = sleep_until_some(queue_at) => self.send_queued().await,
            }
        }
    }

    /// `queue_prompt`: the next turn's `session/prompt`, sent now while this
    /// turn runs.
    async fn send_queued(&mut self) {
        self.queue_at = None;
        let Some(turn) = self.turn.map(|t| t + 1) else {
            return;
        };
        let message = self
            .run
            .turns
            .get(turn as usize)
            .cloned()
            .unwrap_or_default();
        let params =
            json!({"sessionId": self.session, "prompt": [{"type": "text", "text": message}]});
        match self.out.request("session/prompt", params).await {
            Ok(id) => {
                let id = json!(id);
                self.queued = Some(Queued {
                    turn,
                    id,
                    answer: None,
                });
                self.send(Line::Event(Event::PromptQueued { turn }));
            }
            Err(e) => self.note(&format!("cannot send the queued session/prompt: {e}")),
        }
    }

    /// The response to the queued prompt, kept for its own turn: whether
    /// `id` was its id.
    fn keep_queued(&mut self, id: &Value, result: &Result<Value, RpcError>) -> bool {
        match self.queued.as_mut() {
            Some(q) if &q.id == id && q.answer.is_none() => {
                self.answered.extend(id.as_u64());
                q.answer = Some(result.clone());
                true
            }
            _ => false,
        }
    }

    /// The interrupt: `session/cancel` for the running turn.
    async fn cancel(&mut self) {
        if self.turn.is_none() || self.cancelled {
            return;
        }
        self.cancelled = true;
        self.cancelled_now.store(true, Ordering::SeqCst);
        let params = json!({"sessionId": self.session});
        if let Err(e) = self.out.notify("session/cancel", params).await {
            self.note(&format!("cannot send session/cancel: {e}"));
        }
        self.settle_held().await;
    }

    /// The protocol: the client answers a pending permission request
    /// `cancelled` once it cancelled the turn (one that comes after the
    /// cancel too, at once).
    async fn settle_held(&mut self) {
        for h in self.faults.settle_at_cancel() {
            let answer = Answer {
                result: Ok(json!({"outcome": {"outcome": "cancelled"}})),
                outcome: crate::observe::CLIENT_SETTLED_AT_CANCEL.into(),
            };
            let (id, method, turn) = (h.id, h.method, h.turn);
            self.answer_late(Late {
                id,
                method,
                turn,
                answer,
            })
            .await;
        }
    }

    /// Turn `i`: whether it ended with the prompt's response (false: the
    /// agent's output ended first, as when it was killed).
    async fn turn(
        &mut self,
        i: u64,
        client: &Arc<Client>,
        ctl: &mut mpsc::UnboundedReceiver<()>,
    ) -> bool {
        (self.turn, self.after, self.cancelled) = (Some(i), None, false);
        self.cancelled_now.store(false, Ordering::SeqCst);
        (self.text, self.text_chars) = (String::new(), 0);
        self.send(Line::Event(Event::TurnStart { i }));
        let answer = match self.queued.take_if(|q| q.turn == i) {
            // Sent while the turn before ran: its answer, or wait for it.
            Some(Queued {
                answer: Some(a), ..
            }) => Some(a),
            Some(q) => self.wait(q.id, client, ctl).await,
            None => {
                self.queue_armed = self.queues_next(i);
                let message = self.run.turns.get(i as usize).cloned().unwrap_or_default();
                let params = json!({"sessionId": self.session, "prompt": [{"type": "text", "text": message}]});
                self.ask("session/prompt", params, client, ctl).await
            }
        };
        (self.turn, self.queue_at, self.queue_armed) = (None, None, false);
        let Some(answer) = answer else { return false };
        let text = std::mem::take(&mut self.text);
        let end = turn_end(i, answer, text);
        self.send(Line::Event(Event::TurnEnd(end)));
        self.after = Some(i);
        // Updates already there came after the answer: work after the turn
        // (unless the next prompt is already out: then they may be its).
        while self.queued.is_none() {
            let Ok(f) = self.frames.try_recv() else { break };
            self.on_frame(f, client).await;
        }
        true
    }

    /// Turn `i` sends the next turn's prompt while it runs (`queue_prompt`):
    /// only the first turn, and only when a turn follows it.
    fn queues_next(&self, i: u64) -> bool {
        let next = (i as usize + 1) < self.run.turns.len();
        i == 0 && next && self.run.queue_after.is_some()
    }

    /// The turn's first `tool_call` update starts the `queue_prompt` clock:
    /// the prompt goes out its seconds later, while the work the agent
    /// reported runs (as a user types once they see a tool running), so an
    /// agent slow to start its turn is not sent it before any work began.
    fn start_queue_clock(&mut self) {
        if let (true, Some(after)) = (self.queue_armed, self.run.queue_after) {
            self.queue_armed = false;
            self.queue_at = Some(Instant::now() + crate::units::secs(after));
        }
    }

    /// After the last turn: `session/close` where the agent advertised it.
    async fn close(&mut self, client: &Arc<Client>, ctl: &mut mpsc::UnboundedReceiver<()>) {
        let close = self.caps.pointer("/sessionCapabilities/close");
        if close.is_none_or(Value::is_null) {
            return;
        }
        let params = json!({"sessionId": self.session});
        let asked =
            tokio::time::timeout(CLOSE_WAIT, self.ask("session/close", params, client, ctl));
        if asked.await.is_err() {
            self.note("session/close was not answered within 5 s");
        }
    }

    /// One frame that is not the awaited response.
    async fn on_frame(&mut self, f: Frame, client: &Arc<Client>) {
        match f {
            Frame::Request { id, method, params } => self.serve(id, method, params, client).await,
            Frame::Notification { method, params } if method == "session/update" => {
                self.on_update(&params)
            }
            Frame::Notification { .. } => {}
            Frame::Response { id, result } => {
                if !self.keep_queued(&id, &result) {
                    self.stray_response(&id)
                }
            }
            Frame::Bad(line) => self.bad(line),
        }
    }

    /// A response that is not the one awaited: late to a request chaosrun
    /// stopped waiting for (`session/close`) is fine; a second one to the
    /// same id, or one to an id never sent, is a bad event.
    fn stray_response(&mut self, id: &Value) {
        let late = id.as_u64().filter(|n| *n < self.out.sent());
        match late {
            Some(n) if self.answered.insert(n) => {}
            Some(n) => self.bad(format!("a second response to id {n}")),
            None => self.bad(clip(&format!("a response to id {id}, never asked"), 200)),
        }
    }

    /// Answer the agent's request (a terminal call off the drive).
    async fn serve(&mut self, id: Value, method: String, params: Value, client: &Arc<Client>) {
        let turn = self.turn;
        if let Some(plan) = self.faults.plan(&method) {
            return self.serve_faulted(plan, id, method, params, client).await;
        }
        if !method.starts_with("terminal/") {
            let answer = client.handle(&method, &params, self.cancelled).await;
            return self
                .answer_late(Late {
                    id,
                    method,
                    turn,
                    answer,
                })
                .await;
        }
        if self.open_calls.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN_TERMINAL_CALLS {
            self.open_calls.fetch_sub(1, Ordering::SeqCst);
            let e = RpcError::new(-32603, "too many terminal requests outstanding");
            let answer = Answer::from(Err(e));
            return self
                .answer_late(Late {
                    id,
                    method,
                    turn,
                    answer,
                })
                .await;
        }
        let (client, tx, open) = (
            client.clone(),
            self.late_tx.clone(),
            self.open_calls.clone(),
        );
        tokio::spawn(async move {
            let answer = client.handle(&method, &params, false).await;
            open.fetch_sub(1, Ordering::SeqCst);
            let _ = tx.send(Late {
                id,
                method,
                turn,
                answer,
            });
        });
    }

    /// Answer the agent's request the way the row's client fault says: an
    /// error at once, held unanswered, or served after a delay (off the
    /// drive, counted among the open calls).
    async fn serve_faulted(
        &mut self,
        plan: Plan,
        id: Value,
        method: String,
        params: Value,
        client: &Arc<Client>,
    ) {
        let turn = self.turn;
        let refuse = |code, message: &str| Answer::from(Err(RpcError::new(code, message)));
        let answer = match plan {
            Plan::Error { code, message } => refuse(code, &message),
            Plan::StdinOpen => client.terminals.create_stdin_open(&params).await.into(),
            Plan::Held => {
                let (m, t) = (method.clone(), turn);
                if self.faults.hold(Held {
                    id: id.clone(),
                    method: m,
                    turn: t,
                }) {
                    let outcome = crate::observe::CLIENT_HELD.to_string();
                    self.agent_event(Event::ClientCall {
                        turn,
                        method: clip(&method, 100),
                        outcome,
                    });
                    if self.cancelled {
                        self.settle_held().await;
                    }
                    return;
                }
                if !self.flooded {
                    self.flooded = true;
                    self.bad(format!(
                        "the agent left more than {MAX_HELD} client requests pending: the rest are refused"
                    ));
                }
                refuse(-32603, "too many requests left unanswered")
            }
            Plan::After(delay) => {
                if self.open_calls.fetch_add(1, Ordering::SeqCst) >= MAX_OPEN_TERMINAL_CALLS {
                    self.open_calls.fetch_sub(1, Ordering::SeqCst);
                    refuse(-32603, "too many requests outstanding")
                } else {
                    let (client, tx, open) = (
                        client.clone(),
                        self.late_tx.clone(),
                        self.open_calls.clone(),
                    );
                    let cancelled = self.cancelled_now.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let now = cancelled.load(Ordering::SeqCst);
                        let answer = client.handle(&method, &params, now).await;
                        open.fetch_sub(1, Ordering::SeqCst);
                        let _ = tx.send(Late {
                            id,
                            method,
                            turn,
                            answer,
                        });
                    });
                    return;
                }
            }
        };
        self.answer_late(Late {
            id,
            method,
            turn,
            answer,
        })
        .await;
    }

    async fn answer_late(&mut self, late: Late) {
        self.out.respond(late.id, &late.answer.result).await;
        self.agent_event(Event::ClientCall {
            turn: late.turn,
            method: clip(&late.method, 100),
            outcome: late.answer.outcome,
        });
    }

    /// A `session/update`: the running turn's text and tool statuses, or
    /// work after a turn ended.
    fn on_update(&mut self, params: &Value) {
        let update = params.get("update");
        let Some(kind) = update
            .and_then(|u| u.get("sessionUpdate"))
            .and_then(Value::as_str)
        else {
            let shown = clip(&params.to_string(), 150);
            return self.bad(format!(
                "a session/update without update.sessionUpdate: {shown}"
            ));
        };
        let update = update.expect("has a kind");
        if let Some(replay) = self.loading.as_mut() {
            return replay.update(kind, update);
        }
        let Some(turn) = self.turn else {
            if let Some(turn) = self.after {
                let kind = clip(kind, 100);
                self.agent_event(Event::UpdateAfterTurn { turn, kind });
            }
            return;
        };
        match kind {
            "agent_message_chunk" => {
                let chunk = update.pointer("/content/text").and_then(Value::as_str);
                self.keep_text(chunk.unwrap_or(""));
            }
            "tool_call" | "tool_call_update" => {
                self.start_queue_clock();
                // A `tool_call` without a status is `pending` (the ACP
                // schema's default; Hermes 0.19.0 sends its start so); a
                // `tool_call_update` without one changes no status.
                let default = (kind == "tool_call").then_some("pending");
                let status = update.get("status").and_then(Value::as_str).or(default);
                let id = update.get("toolCallId").and_then(Value::as_str);
                if let (Some(status), Some(id)) = (status, id) {
                    let (id, status) = (clip(id, 200), clip(status, 50));
                    self.agent_event(Event::ToolStatus { turn, id, status });
                }
            }
            _ => {}
        }
    }

    /// Append to the turn's answer, up to [`FINAL_KEEP_CHARS`] characters.
    fn keep_text(&mut self, chunk: &str) {
        let room = FINAL_KEEP_CHARS.saturating_sub(self.text_chars);
        if room == 0 {
            return;
        }
        let kept: String = chunk.chars().take(room).collect();
        self.text_chars += kept.chars().count();
        self.text.push_str(&kept);
    }
}

/// Resolves at `at`; never without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Turn `i`'s end from the prompt's response: `end_turn` completed,
/// `cancelled` interrupted, any other stop reason or an error failed.
fn turn_end(i: u64, answer: Result<Value, RpcError>, text: String) -> TurnEnd {
    let (reason, final_text) = match answer {
        Ok(v) => {
            let reason = v.get("stopReason").and_then(Value::as_str);
            (clip(reason.unwrap_or("no stopReason"), 200), text)
        }
        Err(e) => (
            crate::observe::ACP_PROMPT_ERROR.to_string(),
            clip(&e.message, FINAL_KEEP_CHARS),
        ),
    };
    let completed = reason == "end_turn";
    let interrupted = reason == "cancelled";
    TurnEnd {
        i,
        failed: !completed && !interrupted,
        interrupted,
        completed,
        final_text,
        exit_reason: reason,
        stderr: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drive whose agent is gone (no stdin), and what it sends.
    fn drive() -> (Drive, mpsc::UnboundedReceiver<Tagged>) {
        let run = AcpRun {
            spec: crate::profile::acp::AcpSpec {
                command: vec!["x".into()],
                load: Load::Auto,
                permission: Default::default(),
            },
            argv: vec!["x".into()],
            turns: vec![],
            workdir: PathBuf::from("/nonexistent"),
            mcp_servers: json!([]),
            session: Default::default(),
            client: vec![],
            queue_after: None,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let sink = Sink {
            tx,
            worker: 0,
            incarnation: 1,
            budget: crate::driver::output::Budget::new(1),
        };
        let (_, frames) = mpsc::channel(1);
        let log = std::env::temp_dir().join("chaosrun-acp-session-test.log");
        let done = watch::channel(0).1;
        (Drive::new(run, sink, Out::new(None), frames, log, done), rx)
    }

    #[tokio::test]
    async fn the_queued_prompts_response_is_kept_for_its_turn_once() {
        let (mut d, _) = drive();
        d.queued = Some(Queued {
            turn: 1,
            id: json!(3),
            answer: None,
        });
        let result = Ok(json!({"stopReason": "end_turn"}));
        assert!(!d.keep_queued(&json!(2), &result), "another id is not it");
        assert!(d.keep_queued(&json!(3), &result));
        let kept = d.queued.as_ref().and_then(|q| q.answer.clone());
        assert_eq!(kept, Some(result.clone()));
        assert!(d.answered.contains(&3));
        // A second response to the same id is a stray, not the answer.
        assert!(!d.keep_queued(&json!(3), &Ok(json!({}))));
        let kept = d.queued.as_ref().and_then(|q| q.answer.clone());
        assert_eq!(kept, Some(result));
    }

    #[test]
    fn only_the_first_turn_queues_and_only_with_a_turn_after_it() {
        let (mut d, _) = drive();
        d.run.turns = vec!["a".into(), "b".into()];
        assert!(!d.queues_next(0), "no queue_prompt");
        d.run.queue_after = Some(0.5);
        assert!(d.queues_next(0));
        assert!(!d.queues_next(1), "no turn after the last");
    }

    #[test]
    fn a_tool_call_without_a_status_is_pending_an_update_without_one_is_nothing() {
        let (mut d, mut rx) = drive();
        d.turn = Some(0);
        d.on_update(
            &json!({"update": {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "t"}}),
        );
        d.on_update(&json!({"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "content": []}}));
        d.on_update(&json!({"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}}));
        let mut statuses = Vec::new();
        while let Ok(tagged) = rx.try_recv() {
            if let Line::Event(Event::ToolStatus { status, .. }) = tagged.line {
                statuses.push(status);
            }
        }
        assert_eq!(statuses, ["pending", "completed"]);
    }

    #[test]
    fn the_queue_clock_starts_at_the_first_tool_call_update() {
        let (mut d, _) = drive();
        d.run.queue_after = Some(0.5);
        d.turn = Some(0);
        d.queue_armed = true;
        let text =
            json!({"update": {"sessionUpdate": "agent_message_chunk", "content": {"text": "x"}}});
        d.on_update(&text);
        assert!(d.queue_at.is_none(), "text is no work: the clock waits");
        let call = json!({"update": {"sessionUpdate": "tool_call", "toolCallId": "c1", "status": "pending"}});
        let before = Instant::now();
        d.on_update(&call);
        let at = d.queue_at.expect("the tool call started the clock");
        assert!(at >= before + crate::units::secs(0.5));
        d.on_update(&call);
        assert_eq!(d.queue_at, Some(at), "only the first tool call starts it");
    }

    #[tokio::test]
    async fn a_late_response_is_fine_a_second_or_unasked_one_is_bad() {
        let (mut d, mut rx) = drive();
        let _ = d.out.request("session/close", json!({})).await;
        d.stray_response(&json!(0));
        d.stray_response(&json!(0));
        d.stray_response(&json!(7));
        d.stray_response(&json!("zz"));
        let mut bad = Vec::new();
        while let Ok(t) = rx.try_recv() {
            if let Line::Event(Event::BadEvent { line }) = t.line {
                bad.push(line);
            }
        }
        assert_eq!(
            bad,
            [
                "a second response to id 0",
                "a response to id 7, never asked",
                "a response to id \"zz\", never asked"
            ]
        );
    }

    #[test]
    fn a_prompts_response_ends_its_turn_by_stop_reason() {
        let end = |r| turn_end(0, r, "hi".into());
        let done = end(Ok(json!({"stopReason": "end_turn"})));
        assert!(done.completed && !done.failed && done.final_text == "hi");
        let cut = end(Ok(json!({"stopReason": "cancelled"})));
        assert!(cut.interrupted && !cut.failed && !cut.completed);
        let refused = end(Ok(json!({"stopReason": "refusal"})));
        assert!(refused.failed && refused.exit_reason == "refusal");
        let error = end(Err(RpcError::new(-32603, "Internal error")));
        assert!(error.failed && error.exit_reason == "error");
        assert_eq!(error.final_text, "Internal error");
        assert!(end(Ok(json!({}))).failed);
    }
}
