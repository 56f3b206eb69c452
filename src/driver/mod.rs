//! The agent process: its hermetic environment ([`env`]), its HOME and spec
//! file ([`home`]), the running process speaking the driver protocol
//! ([`process`]): `CHAOS ` events on stdout, `interrupt` on stdin; and what it
//! writes, read within caps ([`output`]).

pub mod env;
pub mod exec;
pub mod home;
pub mod output;
pub mod process;

pub use exec::Agent;
pub use home::{Prepared, RunDirs};
pub use output::Budget;
pub use process::{AgentProcess, Exit, Line, Sink, Tagged};
