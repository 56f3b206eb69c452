//! The agent process: its hermetic environment ([`env`]), its HOME and spec
//! file ([`home`]), its network and mount namespaces ([`netns`],
//! [`mountns`]), what it gives up before exec ([`harden`], [`seccomp`]), the one way it is
//! started and killed ([`spawn`], through [`child`]: no fork), the running process speaking the driver
//! protocol ([`process`]): `CHAOS ` events on stdout, `interrupt` on stdin; a
//! one-shot CLI run per turn ([`exec`]); one long-lived agent driven over the
//! Agent Client Protocol, chaosrun its client ([`acp`]); and what it writes,
//! read within caps ([`output`]).

pub mod acp;
pub mod agent;
pub mod child;
pub mod env;
pub mod exec;
mod handoff;
pub mod harden;
pub mod home;
pub mod mountns;
pub mod netns;
pub mod output;
pub mod process;
pub mod pty;
pub mod seccomp;
pub mod spawn;

pub use agent::Agent;
pub use home::{Prepared, RunDirs};
pub use output::Budget;
pub use process::{AgentProcess, Exit, Line, Sink, Tagged};
