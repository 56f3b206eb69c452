//! `kill`: SIGKILL mid-turn, to the agent alone (its pidfd; its tools are
//! orphaned, as in a crash) or its whole tree (`target: tree`:
//! `cgroup.kill`). chaosrun waits for it to die, then restarts it on the
//! same HOME and session (`resume`, `start_turn`) and the restarted agent
//! must answer the probe (`expect: killed`). Landed when the recorded
//! `kill` signalled a process. A chaos schedule draws kills too.

use serde::{Deserialize, Serialize};

use super::{ActionKind, FaultAction, Landing};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Kill;

impl crate::kinds::Kind for Kill {
    const NAME: &'static str = "kill";
}

impl ActionKind for Kill {
    fn lands(&self) -> Landing {
        Landing::Kill
    }

    fn restarts(&self) -> bool {
        true
    }

    fn recorded(&self) -> FaultAction {
        FaultAction::Kill
    }
}
