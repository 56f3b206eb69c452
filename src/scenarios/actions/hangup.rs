//! `hangup`: the agent's terminal closes, as when a user closes the window
//! mid-turn or just after an answer (claude-code #20117, #21861). Under
//! `tty: true` chaosrun hangs its pseudo-terminal up (the kernel's hangup,
//! what closing the master does: SIGHUP to the session leader and the
//! foreground process group, reads end, writes fail); without a terminal
//! it sends SIGHUP to the agent's process group. The agent must exit of it
//! within 10 s (the driver's `KILL_WAIT`) (`exits_on_hangup`); one that
//! does not is SIGKILLed. Either way chaosrun restarts it on the same HOME
//! and session and the restarted agent must answer the probe (`expect:
//! killed`), with what it answered before in its store. Landed when the
//! recorded `hangup` reached a process.

use serde::{Deserialize, Serialize};

use super::{ActionKind, FaultAction, Landing};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Hangup;

impl crate::kinds::Kind for Hangup {
    const NAME: &'static str = "hangup";
}

impl ActionKind for Hangup {
    fn lands(&self) -> Landing {
        Landing::Hangup
    }

    fn restarts(&self) -> bool {
        true
    }

    fn recorded(&self) -> FaultAction {
        FaultAction::Hangup
    }
}
