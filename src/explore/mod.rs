//! `chaosrun explore`: generated trials instead of a table. Each trial is a
//! row of the ordinary schema ([`generate`] draws it from a seed, [`coverage`]
//! keeps the least-tried of a few, [`schedule`] lays it out with the
//! deadlines [`calibrate`] measured), run and judged by the usual runner and
//! oracle. A failure is re-run to confirm it (k of k, else a flake), then
//! shrunk ([`shrink`]) while the same check fails, verified, and printed once
//! per signature as a pasteable row ([`emit`], [`findings`]). [`search`]
//! owns the loop (and its signals); the flags, the run's set-up and teardown
//! and the exit codes are `chaosrun::cli::explore`'s.

pub mod calibrate;
pub mod config;
pub mod coverage;
pub mod emit;
pub mod findings;
pub mod generate;
pub mod menu;
pub mod progress;
pub mod schedule;
pub mod search;
pub mod shrink;
pub mod weights;
