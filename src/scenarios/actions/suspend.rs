//! `suspend`: the machine sleeps. SIGSTOP (or the tree's freeze) as for
//! `stop`, and at that moment every answer the provider has in flight goes
//! silent for good (a half-open socket: after a laptop's sleep the clock
//! has jumped past every stream, and no peer says it is gone); SIGCONT
//! after `stop_for` seconds. The agent must notice the dead stream itself.
//! Landed when the recorded `suspend` signalled a process and silenced at
//! least one answer.

use serde::{Deserialize, Serialize};

use super::{ActionKind, Evidence, FaultAction, Landing};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Suspend;

impl crate::kinds::Kind for Suspend {
    const NAME: &'static str = "suspend";
}

impl ActionKind for Suspend {
    fn lands(&self) -> Landing {
        Landing::Pause { silences: true }
    }

    fn evidence(&self) -> Evidence {
        Evidence::SignalledSilencing
    }

    fn recorded(&self) -> FaultAction {
        FaultAction::Suspend
    }
}
