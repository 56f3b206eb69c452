//! [`Agent`]: either kind of agent process the runner drives, behind one
//! set of operations (start for a worker, fresh or resuming at turn K; pid,
//! signal, interrupt, wait, whether a turn is still starting up, its exit,
//! the stray stdout lines; how its turns run ([`TurnModel`]); the session id its
//! store is read under): a driver-protocol process ([`AgentProcess`]), a
//! one-shot CLI run per turn ([`ExecAgent`]) or an agent driven over the
//! Agent Client Protocol ([`AcpAgent`]). The runner never asks which.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::acp::AcpAgent;
use super::exec::ExecAgent;
use super::home::{self, Prepared};
use super::process::{AgentProcess, Exit, Sink};
use crate::observe::TurnModel;
use crate::proc_hygiene::Scope;

/// What starting an agent needs, the same for every start of a scenario.
pub struct Launch<'a> {
    pub prepared: &'a Prepared,
    pub env: &'a BTreeMap<String, String>,
    pub scope: &'a Arc<Scope>,
    /// The provider's request count (exec mode: a turn's first call).
    pub requests: &'a watch::Receiver<u64>,
    /// How many workers the scenario runs.
    pub workers: usize,
}

/// How the agent `prep` runs its turns (where a turn's clock starts,
/// whether it starts up first, whether it hands back its session id): the
/// one place a drive's kind decides it; the runner records it in the
/// observation.
pub fn turn_model(prep: &Prepared) -> TurnModel {
    match (&prep.exec, &prep.acp) {
        (Some(_), _) => TurnModel::EXEC,
        (None, Some(_)) => TurnModel::ACP,
        (None, None) => TurnModel::DRIVER_PROTOCOL,
    }
}

/// The session id the agent's store is read under: the profile's
/// `exec.store_session` rendered with the values captured from the agent
/// (exec mode), or the ACP session id the agent returned from `session/new`
/// (ACP drive), else `None` (the scenario's own). `Err` names a capture the
/// agent never printed.
pub fn store_session(prep: &Prepared) -> Result<Option<String>, String> {
    if !turn_model(prep).session_from_agent {
        return Ok(None);
    }
    if prep.acp.is_some() {
        return Ok(super::acp::store_session(prep));
    }
    super::exec::store_session(prep)
}

/// Either kind of agent the runner drives.
pub enum Agent {
    /// A process speaking the driver protocol.
    Protocol(AgentProcess),
    /// A one-shot CLI, one process per turn.
    Exec(ExecAgent),
    /// One process driven over the Agent Client Protocol.
    Acp(AcpAgent),
}

impl Agent {
    /// Start worker `worker` (its events into `sink`): fresh, or resuming at
    /// turn K after a kill (`resume: Some(K)`).
    pub fn start(
        launch: &Launch<'_>,
        worker: usize,
        sink: Sink,
        resume: Option<u64>,
    ) -> anyhow::Result<Agent> {
        let prep = launch.prepared;
        if let Some(run) = &prep.exec {
            let scope = launch.scope.clone();
            let requests = launch.requests.clone();
            let agent = ExecAgent::spawn(prep, run, launch.env, sink, scope, resume, requests)?;
            return Ok(Agent::Exec(agent));
        }
        if let Some(run) = &prep.acp {
            let scope = launch.scope.clone();
            let agent = AcpAgent::spawn(prep, run, launch.env, sink, scope, resume)?;
            return Ok(Agent::Acp(agent));
        }
        let (argv, spec) = home::worker_spec(prep, worker, launch.workers, resume)?;
        let mut env = launch.env.clone();
        env.insert("CHAOS_SPEC".into(), spec.display().to_string());
        let agent = AgentProcess::spawn(prep, &argv, &env, sink, launch.scope)?;
        Ok(Agent::Protocol(agent))
    }

    pub fn pid(&self) -> i32 {
        match self {
            Agent::Protocol(p) => p.pid(),
            Agent::Exec(e) => e.pid(),
            Agent::Acp(a) => a.pid(),
        }
    }

    /// Send `sig` (see [`AgentProcess::signal`]; in exec mode, to the running
    /// turn: SIGKILL takes its whole process tree and ends the agent).
    pub fn signal(&self, sig: i32) -> bool {
        match self {
            Agent::Protocol(p) => p.signal(sig),
            Agent::Exec(e) => e.signal(sig),
            Agent::Acp(a) => a.signal(sig),
        }
    }

    /// The runner is done with turn `i` (its end handled): an ACP drive,
    /// which sends each prompt itself, may send the next one. Nothing for
    /// the other drives (the driver protocol's agent runs its turns from
    /// the spec; exec mode's runner starts each turn's process).
    pub fn turn_done(&self, i: u64) {
        if let Agent::Acp(a) = self {
            a.turn_done(i);
        }
    }

    /// Close the agent's terminal ([`super::pty::hang_up`]; the running
    /// turn's process in exec mode); whether it reached a process.
    pub fn hang_up(&self) -> bool {
        match self {
            Agent::Exec(e) => e.hang_up(),
            _ => self.exited().is_none() && super::pty::hang_up(self.pid()),
        }
    }

    pub async fn wait_for(&mut self, within: Duration) -> Option<Exit> {
        tokio::time::timeout(within, self.wait()).await.ok()
    }

    /// Interrupt the running turn (`interrupt` on stdin, SIGINT, or
    /// `session/cancel`).
    pub async fn interrupt(&mut self) -> std::io::Result<()> {
        match self {
            Agent::Protocol(p) => p.interrupt().await,
            Agent::Exec(e) => e.interrupt(),
            Agent::Acp(a) => a.interrupt(),
        }
    }

    pub async fn wait(&mut self) -> Exit {
        match self {
            Agent::Protocol(p) => p.wait().await,
            Agent::Exec(e) => e.wait().await,
            Agent::Acp(a) => a.wait().await,
        }
    }

    /// Exec mode: whether the running turn's process has not reached the
    /// provider yet (a driver-protocol agent never is: it said `ready`).
    pub fn starting_up(&self) -> bool {
        match self {
            Agent::Protocol(_) => false,
            Agent::Exec(e) => e.starting_up(),
            Agent::Acp(_) => false,
        }
    }

    pub fn exited(&self) -> Option<Exit> {
        match self {
            Agent::Protocol(p) => p.exited(),
            Agent::Exec(e) => e.exited(),
            Agent::Acp(a) => a.exited(),
        }
    }

    pub fn other_lines(&self) -> u64 {
        match self {
            Agent::Protocol(p) => p.other_lines(),
            Agent::Exec(e) => e.other_lines(),
            Agent::Acp(a) => a.other_lines(),
        }
    }
}
