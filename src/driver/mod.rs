//! The agent process: its hermetic environment ([`env`]), its HOME and spec
//! file ([`home`]), and the running process speaking the driver protocol
//! ([`process`]): `CHAOS ` events on stdout, `interrupt` on stdin.

pub mod env;
pub mod home;
pub mod process;

pub use home::{Prepared, RunDirs};
pub use process::{AgentProcess, Exit, Line, Sink, Tagged};
