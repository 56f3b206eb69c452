//! `stop`: SIGSTOP the agent (its pidfd) or freeze its whole tree
//! (`target: tree`: the cgroup freezer), then SIGCONT (or thaw) after
//! `stop_for` seconds, recorded as `cont`. The agent lives on and must
//! finish its turn. Landed when the recorded `stop` signalled a process. A
//! chaos schedule draws stops too (of the tree).

use serde::{Deserialize, Serialize};

use super::{ActionKind, FaultAction, Landing};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stop;

impl crate::kinds::Kind for Stop {
    const NAME: &'static str = "stop";
}

impl ActionKind for Stop {
    fn lands(&self) -> Landing {
        Landing::Pause { silences: false }
    }

    fn recorded(&self) -> FaultAction {
        FaultAction::Stop
    }
}
