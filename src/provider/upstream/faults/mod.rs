//! The faults a `relay` reply (or a `cassette` replay) applies to a real
//! answer, one small type per file implementing [`RelayFault`]: it acts on
//! the answer as it passes, event by event (a wait before its head, a cut or
//! a stall at some event, a hold at its end), or replaces it. Registered once
//! in [`Fault`]; the YAML form is internally tagged like the reply kinds:
//! `fault: {kind: stall_after_events, events: 3}`.
//!
//! "Events" are the SSE events of a streaming reply (split at blank lines),
//! or the body's chunks as they arrive when the reply is not a stream; a
//! replayed answer's events are its recorded ones after the start.
//!
//! Value faults change the answer itself (its text, tool calls, finish):
//! a relayed answer is then read whole, decoded into wire-neutral
//! [`Recorded`] events (as a cassette records them), changed, and sent as
//! chaosrun's own reply on the wire; a replayed one is changed before it is
//! planned.

use std::time::Duration;

use crate::provider::cassette::Recorded;
use crate::provider::replies::ErrorReply;

crate::kinds::registry! {
    /// One fault on a relayed (or replayed) answer.
    "relay fault", Fault: dyn RelayFault {
        DelayFirstByte(delay_first_byte::DelayFirstByte),
        StallAfterEvents(stall_after_events::StallAfterEvents),
        CutBeforeTerminal(cut_before_terminal::CutBeforeTerminal),
        Error(error::ErrorFault),
        AnswerThenHang(answer_then_hang::AnswerThenHang),
        CutForLength(cut_for_length::CutForLength),
        EmptyAnswer(empty_answer::EmptyAnswer),
        RefusedAnswer(refused_answer::RefusedAnswer),
        DropToolCalls(drop_tool_calls::DropToolCalls),
        BreakToolArgs(break_tool_args::BreakToolArgs),
        ReuseCallId(reuse_call_id::ReuseCallId),
        DuplicateFrames(duplicate_frames::DuplicateFrames),
    }
}

/// Every relay fault's name, in registry order.
pub fn kind_names() -> &'static [&'static str] {
    Fault::KINDS
}

/// What a fault does at one point of the answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Act {
    /// Go on.
    Pass,
    /// Cut the body now (what was sent reaches the socket first); the
    /// relay's outcome is named.
    Cut(&'static str),
    /// Hold the body open and silent this long (or until shutdown), then cut.
    HoldThenCut(Duration, &'static str),
}

/// A relay fault: acts on a relayed stream. Every hook defaults to passing
/// the answer through unchanged.
pub(crate) trait RelayFault {
    /// The answer replaced by this error (the upstream is still called, its
    /// reply discarded).
    fn replacement(&self) -> Option<&ErrorReply> {
        None
    }

    /// Hold the answer this long before its response head.
    fn first_byte_delay(&self) -> Duration {
        Duration::ZERO
    }

    /// `sent` events have passed; checked before the next one is read.
    fn after(&self, _sent: usize) -> Act {
        Act::Pass
    }

    /// The next event is at hand; `terminal` when it finishes the answer.
    fn before(&self, _terminal: bool) -> Act {
        Act::Pass
    }

    /// A reply that is not a stream keeps its last chunk back (to act on it
    /// as on the finishing event: only its first half is sent).
    fn holds_last_chunk(&self) -> bool {
        false
    }

    /// The whole answer passed; its end is next.
    fn at_end(&self) -> Act {
        Act::Pass
    }

    /// A value fault: the answer is changed by [`RelayFault::mutate`]
    /// (read whole first when relayed).
    fn mutates(&self) -> bool {
        false
    }

    /// Change the answer's events (a value fault).
    fn mutate(&self, _events: &mut Vec<Recorded>) {}

    /// Send every content delta of the (changed) answer twice in a row.
    fn duplicates_frames(&self) -> bool {
        false
    }
}

/// The answer's finish reason set to `reason` (one added at the end when
/// it had none).
pub(crate) fn set_finish(events: &mut Vec<Recorded>, to: &str) {
    let mut found = false;
    for ev in events.iter_mut() {
        if let Recorded::Finish { reason, .. } = ev {
            *reason = to.to_string();
            found = true;
        }
    }
    if !found {
        let at = events.last().map_or(0.0, Recorded::at);
        events.push(Recorded::Finish {
            at,
            reason: to.to_string(),
            input_tokens: 0,
            output_tokens: 0,
        });
    }
}

/// The answer without its text and tool calls (reasoning and finish kept).
pub(crate) fn without_content(events: &mut Vec<Recorded>) {
    events.retain(|e| !matches!(e, Recorded::Text { .. } | Recorded::ToolCall { .. }));
}

/// No fault: the answer as it is.
pub(crate) struct NoFault;

impl RelayFault for NoFault {}

/// The fault's behaviour, or none.
pub(crate) fn acting(f: Option<&Fault>) -> &dyn RelayFault {
    match f {
        Some(f) => f.as_dyn(),
        None => &NoFault,
    }
}
