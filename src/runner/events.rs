//! The typed events a run emits. Reporters (progress, text, JSON, JUnit)
//! consume them and never re-run any logic.

use std::path::PathBuf;

use serde::Serialize;

use crate::observe::{Observation, Phase};
use crate::oracle::Check;

/// A finished scenario.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    pub id: String,
    /// Which run of this scenario (1-based) out of `attempts` (`--repeat`).
    pub attempt: u32,
    pub attempts: u32,
    pub passed: bool,
    pub seconds: f64,
    pub main_calls: u64,
    pub checks: Vec<Check>,
    pub observation: Observation,
    /// Where its artifacts were kept, if they were.
    pub artifacts: Option<PathBuf>,
}

impl ScenarioResult {
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.failed())
    }

    pub fn not_checked(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.not_checked())
    }
}

/// One event of a run.
#[derive(Debug, Clone)]
pub enum RunEvent {
    Started {
        total: usize,
        jobs: usize,
    },
    ScenarioStarted {
        id: String,
    },
    Phase {
        id: String,
        phase: Phase,
        deadline: f64,
    },
    ScenarioFinished(Box<ScenarioResult>),
    Finished {
        passed: usize,
        failed: usize,
        wall: f64,
    },
}
