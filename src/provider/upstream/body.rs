//! The relaying body: the upstream's reply passed on event by event (SSE) or
//! chunk by chunk, never held whole, the fault acting on it as it passes; records
//! how the relay ended when the body is dropped. The upstream's silence
//! inside the reply (`idle`), the reply's whole length (`reply`) and a reply
//! still unfinished when the scenario ends are the upstream's failures.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::faults::{acting, Act, Fault, RelayFault};
use super::relay::{RelayLog, RelayRecord};
use super::sse::{is_terminal, Splitter};
use crate::provider::replies::wait_or_cancel;
use crate::provider::Wire;

/// What the body does.
pub(super) struct Plan {
    pub wire: Wire,
    /// The reply is an event stream (split at event boundaries).
    pub sse: bool,
    /// The fault acting on the answer, if any.
    pub fault: Option<Fault>,
    /// The upstream's status is already a failure (recorded by the caller).
    pub failed: bool,
    /// For messages.
    pub upstream: String,
    pub bounds: super::client::Bounds,
    /// The relay slot, held until the body ends.
    pub _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Recording this call: fed what the upstream sends, finished when it
    /// has sent all of it.
    pub tape: Option<crate::provider::cassette::tape::Tape>,
}

type Upstream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

struct Pump {
    upstream: Upstream,
    upstream_done: bool,
    plan: Plan,
    splitter: Splitter,
    /// Events (or chunks) ready to send.
    ready: VecDeque<Bytes>,
    /// Not a stream and cutting: the last chunk is held back one step.
    held: Option<Bytes>,
    /// Relayed so far / how it ended.
    rec: RelayRecord,
    log: Arc<RelayLog>,
    cancel: CancellationToken,
    /// When the reply must have ended ([`super::client::Bounds::reply`]).
    deadline: tokio::time::Instant,
}

impl Drop for Pump {
    fn drop(&mut self) {
        // Recorded when the upstream sent its whole answer (its end read, or
        // the answer complete when the agent hung up).
        if let Some(tape) = self.plan.tape.take() {
            if self.upstream_done || tape.complete() {
                self.log.taped(tape.done());
            }
        }
        if self.rec.outcome.is_empty() {
            self.rec.outcome = "client_gone".into();
        }
        self.log.record(std::mem::take(&mut self.rec));
    }
}

fn cut() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "chaosrun: relayed body cut on purpose",
    )
}

enum Step {
    Send(Bytes),
    /// Hold silent for this long (or until shutdown), then cut.
    HoldThenCut(Duration, &'static str),
    Cut(&'static str),
    End,
}

impl Pump {
    fn sent(&mut self, b: &Bytes) {
        self.rec.bytes += b.len() as u64;
        self.rec.events += 1;
    }

    /// The fault acting on the answer (none: relayed as is).
    fn fault(&self) -> &dyn RelayFault {
        acting(self.plan.fault.as_ref())
    }

    /// The next thing to do, reading upstream as needed.
    async fn step(&mut self) -> Step {
        loop {
            if let Some(step) = acted(self.fault().after(self.rec.events as usize)) {
                return step;
            }
            if let Some(ev) = self.ready.pop_front() {
                let terminal = self.plan.sse && is_terminal(self.plan.wire, &ev);
                if let Some(step) = acted(self.fault().before(terminal)) {
                    return step;
                }
                return Step::Send(ev);
            }
            if self.upstream_done {
                if let Some(last) = self.held.take() {
                    // Not a stream: half of the last chunk, then the cut the
                    // fault makes before a finishing event.
                    if let Act::Cut(outcome) = self.fault().before(true) {
                        self.rec.outcome = outcome.into();
                    }
                    let half = last.slice(..last.len() / 2);
                    if !half.is_empty() {
                        self.ready.push_back(half);
                        continue;
                    }
                }
                return acted(self.fault().at_end()).unwrap_or(Step::End);
            }
            let Some(next) = self.next_chunk().await else {
                return Step::Cut("upstream_failed");
            };
            match next {
                Some(Ok(chunk)) => {
                    self.tape_chunk(&chunk);
                    if self.plan.sse {
                        let events = self.splitter.push(&chunk);
                        self.tape_events(&events);
                        self.ready.extend(events);
                    } else if self.fault().holds_last_chunk() {
                        self.ready.extend(self.held.replace(chunk));
                    } else {
                        self.ready.push_back(chunk);
                    }
                }
                Some(Err(e)) => {
                    if !self.plan.failed {
                        self.log.error(format!(
                            "upstream {} broke off its reply: {}",
                            self.plan.upstream,
                            super::client::error_chain(&e)
                        ));
                    }
                    return Step::Cut("upstream_failed");
                }
                None => {
                    self.upstream_done = true;
                    let rest: Vec<Bytes> = self.splitter.finish().into_iter().collect();
                    self.tape_events(&rest);
                    self.ready.extend(rest);
                }
            }
        }
    }
}

/// The body's step for what a fault did (none when it let the answer pass).
fn acted(act: Act) -> Option<Step> {
    match act {
        Act::Pass => None,
        Act::Cut(how) => Some(Step::Cut(how)),
        Act::HoldThenCut(hold, how) => Some(Step::HoldThenCut(hold, how)),
    }
}

impl Pump {
    fn tape_chunk(&mut self, chunk: &Bytes) {
        if let Some(t) = self
            .plan
            .tape
            .as_mut()
            .filter(|t| !(t.is_sse() && self.plan.sse))
        {
            t.chunk(chunk);
        }
    }

    fn tape_events(&mut self, events: &[Bytes]) {
        if let Some(t) = self
            .plan
            .tape
            .as_mut()
            .filter(|t| t.is_sse() && self.plan.sse)
        {
            events.iter().for_each(|e| t.event(e));
        }
    }

    /// The upstream's next chunk within the bounds; `None` when a bound ran
    /// out or the scenario ended first (recorded as the upstream's failure).
    async fn next_chunk(&mut self) -> Option<Option<reqwest::Result<Bytes>>> {
        let idle = self.plan.bounds.idle;
        let secs = |d: Duration| crate::units::short(d.as_secs_f64());
        let why = tokio::select! {
            n = tokio::time::timeout(idle, self.upstream.next()) => match n {
                Ok(n) => return Some(n),
                Err(_) => format!("went silent for {} s inside its reply (upstream.idle_timeout)", secs(idle)),
            },
            _ = tokio::time::sleep_until(self.deadline) => format!(
                "was still sending its reply after {} s (upstream.reply_timeout)",
                secs(self.plan.bounds.reply)
            ),
            _ = self.cancel.cancelled() => "had not finished its reply when the scenario ended".into(),
        };
        if !self.plan.failed {
            self.log
                .error(format!("upstream {} {why}", self.plan.upstream));
        }
        None
    }
}

/// The body relaying `resp` under `plan`.
pub(super) fn relay_body(
    resp: reqwest::Response,
    plan: Plan,
    rec: RelayRecord,
    log: Arc<RelayLog>,
    cancel: CancellationToken,
) -> Body {
    let plan_reply = plan.bounds.reply;
    let pump = Pump {
        upstream: Box::pin(resp.bytes_stream()),
        upstream_done: false,
        plan,
        splitter: Splitter::default(),
        ready: VecDeque::new(),
        held: None,
        rec,
        log,
        cancel,
        deadline: tokio::time::Instant::now() + plan_reply,
    };
    let stream = futures_util::stream::unfold(Some(pump), |state| async move {
        let mut pump = state?;
        match pump.step().await {
            Step::Send(b) => {
                pump.sent(&b);
                Some((Ok(b), Some(pump)))
            }
            Step::End => {
                pump.rec.outcome = "relayed".into();
                None
            }
            Step::Cut(how) => {
                pump.rec.outcome = how.into();
                // Let what was sent reach the socket before the cut.
                tokio::task::yield_now().await;
                Some((Err(cut()), None))
            }
            Step::HoldThenCut(hold, how) => {
                pump.rec.outcome = how.into();
                let cancel = pump.cancel.clone();
                wait_or_cancel(hold, &cancel).await;
                Some((Err(cut()), None))
            }
        }
    });
    Body::from_stream(stream)
}
