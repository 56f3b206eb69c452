//! The client side's `terminal/*` methods: real commands run contained in
//! the scenario, like the agent. A stub here (every method answers -32601);
//! the contained implementation replaces it behind the same interface.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::rpc::RpcError;

/// The scenario's terminals.
pub struct Terminals {
    _private: (),
}

impl Terminals {
    /// `prep`: the scenario's Prepared (its netns, mntns, seccomp policy, dirs: commands run contained exactly like the agent);
    /// `env`: the agent's hermetic env; `scope`: the scenario's process scope (cgroup) every terminal process joins.
    pub fn new(
        prep: &crate::driver::Prepared,
        env: &BTreeMap<String, String>,
        scope: Arc<crate::proc_hygiene::Scope>,
    ) -> Terminals {
        let _ = (prep, env, scope);
        Terminals { _private: () }
    }

    /// Serve one `terminal/*` request (method = "terminal/create", ...; params = the request's params).
    pub async fn handle(
        &self,
        method: &str,
        params: &serde_json::Value,
    ) -> Result<serde_json::Value, RpcError> {
        let _ = params;
        Err(RpcError {
            code: -32601,
            message: format!("method not found: {method}"),
        })
    }

    /// Kill every terminal's process tree (session end, a kill of the agent, chaosrun's cleanup). Idempotent.
    pub fn kill_all(&self) {}
}
