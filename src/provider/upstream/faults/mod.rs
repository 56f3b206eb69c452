//! The faults a `relay` reply applies to a real upstream reply, one small
//! type per file. The YAML form is internally tagged like the reply kinds:
//! `fault: {kind: stall_after_events, events: 3}`.
//!
//! "Events" are the SSE events of a streaming reply (split at blank lines),
//! or the body's chunks as they arrive when the reply is not a stream.

pub mod answer_then_hang;
pub mod cut_before_terminal;
pub mod delay_first_byte;
pub mod stall_after_events;

pub use answer_then_hang::AnswerThenHang;
pub use cut_before_terminal::CutBeforeTerminal;
pub use delay_first_byte::DelayFirstByte;
pub use stall_after_events::StallAfterEvents;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::provider::replies::ErrorReply;

/// One fault on a relayed reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RelayFault {
    DelayFirstByte(DelayFirstByte),
    StallAfterEvents(StallAfterEvents),
    CutBeforeTerminal(CutBeforeTerminal),
    /// The upstream is called, its reply discarded, and this error (the
    /// `error` reply kind, same fields) answered instead.
    Error(ErrorReply),
    AnswerThenHang(AnswerThenHang),
}

impl RelayFault {
    /// The fault's name as written in YAML.
    pub fn kind_name(&self) -> &'static str {
        match self {
            RelayFault::DelayFirstByte(_) => "delay_first_byte",
            RelayFault::StallAfterEvents(_) => "stall_after_events",
            RelayFault::CutBeforeTerminal(_) => "cut_before_terminal",
            RelayFault::Error(_) => "error",
            RelayFault::AnswerThenHang(_) => "answer_then_hang",
        }
    }

    /// What the relaying body does with the stream.
    pub(crate) fn shape(&self) -> Shape {
        match self {
            RelayFault::DelayFirstByte(f) => Shape {
                first_byte_delay: f.delay(),
                ..Shape::default()
            },
            RelayFault::StallAfterEvents(f) => Shape {
                stall_after: Some(f.after()),
                ..Shape::default()
            },
            RelayFault::CutBeforeTerminal(_) => Shape {
                cut_before_terminal: true,
                ..Shape::default()
            },
            RelayFault::AnswerThenHang(f) => Shape {
                hold_at_end: Some(f.hold()),
                ..Shape::default()
            },
            RelayFault::Error(_) => Shape::default(),
        }
    }
}

/// A fault as the relaying body applies it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Shape {
    /// Wait this long before the response head.
    pub first_byte_delay: Duration,
    /// After this many events, hold the socket open silent for the duration,
    /// then cut.
    pub stall_after: Option<(usize, Duration)>,
    /// Cut the body instead of sending the terminal event.
    pub cut_before_terminal: bool,
    /// Relay everything, then hold the body open (no end) for the duration,
    /// then cut.
    pub hold_at_end: Option<Duration>,
}
