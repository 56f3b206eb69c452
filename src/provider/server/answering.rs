//! When each model call's answer is over ([`RequestRecord::ended`]): a
//! guard, made once the call is recorded, marks it over when it is dropped.
//! It lives in the handler until the response is ready (a `hang` answers
//! nothing, so a client that gives up drops it with the connection) and
//! then in the response's body, which the server drops once the last byte
//! is sent or the connection closes under it. So the record tells a call
//! answered, or given up by its client, from one still held open (a
//! subagent left inside its model call after its parent's turn ended).
//! A main call's answer over is also published by its index
//! ([`super::Running::main_answered`]: an `after_reply` trigger).
//!
//! And the wait that makes such a call visible: the probe turn's call is
//! answered once no subagent call is open, or after
//! [`SUBAGENT_CLOSE_WAIT`], so an agent that left its subagent inside a
//! call cannot close (and drop that call with its process) right after the
//! parent's turn ended; an agent that stopped its subagent is not held.
//!
//! [`RequestRecord::ended`]: crate::provider::recording::RequestRecord::ended

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use futures_util::StreamExt;

use super::Shared;
use crate::provider::CallKind;

/// How long the probe turn's call waits for the subagent calls still open
/// to close (`oracle::orphan::OPEN_GRACE`, the time a call may stay open
/// after its parent's turn ended, is well within it).
pub const SUBAGENT_CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Marks request `seq`'s answer over when dropped.
pub(super) struct Answering {
    shared: Arc<Shared>,
    seq: u64,
    subagent: bool,
    /// A main call's index (its answer over fires `after_reply` triggers).
    main: Option<u64>,
}

impl Answering {
    pub(super) fn new(
        shared: Arc<Shared>,
        seq: u64,
        kind: CallKind,
        main_index: Option<u64>,
    ) -> Answering {
        let subagent = kind == CallKind::Subagent;
        if subagent {
            shared.open_subagent.send_modify(|n| *n += 1);
        }
        Answering {
            shared,
            seq,
            subagent,
            main: main_index.filter(|_| kind == CallKind::Main),
        }
    }

    /// `resp`, its body holding this guard: the answer is over when the
    /// body is sent whole or dropped with its connection.
    pub(super) fn until_sent(self, resp: Response) -> Response {
        let (parts, body) = resp.into_parts();
        let held = body.into_data_stream().map(move |chunk| {
            let _answering = &self;
            chunk
        });
        Response::from_parts(parts, Body::from_stream(held))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.shared.answered(self.seq);
        // Only indices a trigger can name (`after_reply` is at most
        // MAX_COUNT): the set stays bounded however many calls an agent makes.
        if let Some(i) = self.main.filter(|i| *i < crate::units::MAX_COUNT) {
            self.shared.main_answered.send_modify(|over| {
                over.insert(i);
            });
        }
        if self.subagent {
            self.shared
                .open_subagent
                .send_modify(|n| *n = n.saturating_sub(1));
        }
    }
}

impl Shared {
    /// Request `seq`'s answer is over now (sent whole, given up, or a
    /// refusal answered at once).
    pub(super) fn answered(&self, seq: u64) {
        let at = self.started.elapsed().as_secs_f64();
        if let Ok(mut records) = self.records.lock() {
            records.end(seq, at);
        }
    }

    /// A probe call: until no subagent call is open, at most
    /// [`SUBAGENT_CLOSE_WAIT`] (or the provider shuts down), and until the
    /// probes are no longer held ([`super::Running::hold_probes`]).
    pub(super) async fn subagents_closed(&self, kind: CallKind) {
        if kind != CallKind::Probe {
            return;
        }
        let mut held = self.probes_held.subscribe();
        tokio::select! {
            _ = held.wait_for(|h| !*h) => {}
            _ = self.cancel.cancelled() => {}
        }
        let mut open = self.open_subagent.subscribe();
        tokio::select! {
            _ = tokio::time::timeout(SUBAGENT_CLOSE_WAIT, open.wait_for(|n| *n == 0)) => {}
            _ = self.cancel.cancelled() => {}
        }
    }
}
