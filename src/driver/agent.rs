//! [`Agent`]: either kind of agent process the runner drives, behind one
//! set of operations (pid, signal, interrupt, wait, whether a turn is still
//! starting up, its exit, the stray stdout lines): a driver-protocol
//! process ([`AgentProcess`]) or a one-shot CLI run per turn ([`ExecAgent`]).

use std::time::Duration;

use super::exec::ExecAgent;
use super::process::{AgentProcess, Exit};

/// Either kind of agent the runner drives.
pub enum Agent {
    /// A process speaking the driver protocol.
    Protocol(AgentProcess),
    /// A one-shot CLI, one process per turn.
    Exec(ExecAgent),
}

impl Agent {
    pub fn pid(&self) -> i32 {
        match self {
            Agent::Protocol(p) => p.pid(),
            Agent::Exec(e) => e.pid(),
        }
    }

    /// Send `sig` (see [`AgentProcess::signal`]; in exec mode, to the running
    /// turn: SIGKILL takes its whole process tree and ends the agent).
    pub fn signal(&self, sig: i32) -> bool {
        match self {
            Agent::Protocol(p) => p.signal(sig),
            Agent::Exec(e) => e.signal(sig),
        }
    }

    pub async fn wait_for(&mut self, within: Duration) -> Option<Exit> {
        tokio::time::timeout(within, self.wait()).await.ok()
    }

    /// Interrupt the running turn (`interrupt` on stdin, or SIGINT).
    pub async fn interrupt(&mut self) -> std::io::Result<()> {
        match self {
            Agent::Protocol(p) => p.interrupt().await,
            Agent::Exec(e) => e.interrupt(),
        }
    }

    pub async fn wait(&mut self) -> Exit {
        match self {
            Agent::Protocol(p) => p.wait().await,
            Agent::Exec(e) => e.wait().await,
        }
    }

    /// Exec mode: whether the running turn's process has not reached the
    /// provider yet (a driver-protocol agent never is: it said `ready`).
    pub fn starting_up(&self) -> bool {
        match self {
            Agent::Protocol(_) => false,
            Agent::Exec(e) => e.starting_up(),
        }
    }

    pub fn exited(&self) -> Option<Exit> {
        match self {
            Agent::Protocol(p) => p.exited(),
            Agent::Exec(e) => e.exited(),
        }
    }

    pub fn other_lines(&self) -> u64 {
        match self {
            Agent::Protocol(p) => p.other_lines(),
            Agent::Exec(e) => e.other_lines(),
        }
    }
}
