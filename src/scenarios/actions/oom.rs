//! `oom`: the kernel's OOM kill. The reply to the trigger's call
//! (`at: {after_calls: N}`) is held while the agent's processes get a
//! memory cgroup limit of their usage then plus `headroom_mb` (1 to 65536);
//! the turn makes the agent's processes outgrow it and the kernel kills one
//! of them (any process of the agent's tree is the agent's OOM). chaosrun
//! sends no signal: it lifts the limit and restarts the agent as after a
//! `kill` if its process died (the limit: proc_hygiene's `memory_limit`;
//! the landing: runner's `drive/oom.rs`). Landed when the cgroup's own
//! `oom_kill` counter rose, recorded as a `kill`.

use serde::{Deserialize, Serialize};

use super::{ActionKind, Evidence, FaultAction, Landing};
use crate::scenarios::{FaultTarget, ProcessFault, Trigger};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Oom;

impl crate::kinds::Kind for Oom {
    const NAME: &'static str = "oom";
}

impl ActionKind for Oom {
    fn lands(&self) -> Landing {
        Landing::MemoryLimit
    }

    fn restarts(&self) -> bool {
        true
    }

    fn evidence(&self) -> Evidence {
        Evidence::KernelOomKill
    }

    fn recorded(&self) -> FaultAction {
        FaultAction::Kill
    }

    fn check(&self, f: &ProcessFault) -> Result<(), String> {
        if f.target != FaultTarget::Agent {
            return Err(
                "`action: oom` limits the agent's processes: `target` must be `agent`".into(),
            );
        }
        let counted = matches!(f.at, Trigger::AfterCalls(n) if n >= 1);
        if !(counted && f.delay == 0.0) {
            return Err("`action: oom` needs `at: {after_calls: N}` (N >= 1) and no `delay`: the N-th call's reply is held until the limit is set".into());
        }
        Ok(())
    }
}
