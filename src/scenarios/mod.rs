//! The scenario table: its YAML schema ([`schema`]), loading with `file:line:col`
//! errors and validation ([`load`]), and selection by `--only`/`--skip`
//! ([`select`]).

pub mod actions;
pub mod agent_sandbox;
pub mod client;
pub mod damage;
pub mod load;
pub mod schema;
pub mod select;

pub use actions::{Evidence, Landing, Sent};
pub use load::{load_file, load_str, TableError};
pub use schema::{
    CallBound, ChaosSpec, Deadlines, Expect, FaultAction, FaultTarget, Knobs, ProbeMode,
    ProcessFault, Scenario, Table, Trigger, MAX_FAULTS,
};
pub use select::{select, shard, Shard};
