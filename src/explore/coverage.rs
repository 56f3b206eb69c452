//! Coverage of the search: each fault a trial schedules falls in one cell
//! (fault kind × step position × agent state when it lands); the tally counts
//! how often each cell was tried, and the generator draws a few candidate
//! trials per slot and keeps the one whose cells were tried least. Pure over
//! the trials; deterministic for a seed (the counts follow the schedules
//! drawn, never the results).

use std::collections::BTreeMap;

use super::config::Config;
use super::generate::{generate, trial_seed, Action, FaultKind, Trial};
use super::schedule::kind_name;

/// Candidate trials drawn per slot; the least-tried one runs.
pub const CANDIDATES: u64 = 4;

/// Where a fault sits in the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Position {
    /// The first step's call (nothing done yet).
    First,
    /// A later tool step's call (a tool result is behind it).
    AfterTool,
    /// The final answer's call.
    Answer,
}

/// What the agent is doing when the fault lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    /// Waiting on a model call (an error, a hang, a kill while it waits).
    Waiting,
    /// Reading a streamed reply (a drop or a stall mid-stream).
    Streaming,
    /// Backing off between retries (an interrupt after an error; the later
    /// calls of a persistent episode).
    Backoff,
    /// Running a tool (a stop as a tool step's call is answered).
    Tool,
}

/// One coverage cell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cell {
    pub kind: String,
    pub position: Position,
    pub state: State,
}

impl Position {
    fn name(self) -> &'static str {
        match self {
            Position::First => "first step",
            Position::AfterTool => "after a tool step",
            Position::Answer => "final answer",
        }
    }
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Waiting => "waiting on a call",
            State::Streaming => "streaming",
            State::Backoff => "in backoff",
            State::Tool => "running a tool",
        }
    }
}

fn on_call(k: FaultKind) -> State {
    if k.item().mid_stream() {
        State::Streaming
    } else {
        State::Waiting
    }
}

/// The cells `t` tries (each once).
pub fn cells(t: &Trial) -> Vec<Cell> {
    let mut out = Vec::new();
    let last = t.steps.len().saturating_sub(1);
    for (i, s) in t.steps.iter().enumerate() {
        let position = if matches!(s.action, Action::Final { .. }) && i == last && !s.kill_before {
            Position::Answer
        } else if i == 0 {
            Position::First
        } else {
            Position::AfterTool
        };
        let mut push = |kind: String, state| {
            out.push(Cell {
                kind,
                position,
                state,
            })
        };
        for f in &s.faults {
            push(kind_name(f.kind).into(), on_call(f.kind));
            if f.interrupt {
                push("interrupt".into(), State::Backoff);
            }
        }
        if let Some(p) = s.persist {
            let kind = format!(
                "{} {}",
                kind_name(p.kind),
                if p.clears() { "persisting" } else { "forever" }
            );
            push(kind.clone(), on_call(p.kind));
            if on_call(p.kind) == State::Waiting {
                push(kind, State::Backoff);
            }
        }
        if s.kill_before {
            push("kill".into(), State::Waiting);
        }
        if s.stop_for.is_some() {
            let state = match s.action {
                Action::Final { .. } => State::Streaming,
                _ => State::Tool,
            };
            push("stop".into(), state);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// How often each cell was tried.
#[derive(Debug, Default, Clone)]
pub struct Coverage {
    pub counts: BTreeMap<Cell, u64>,
}

impl Coverage {
    pub fn add(&mut self, t: &Trial) {
        for c in cells(t) {
            *self.counts.entry(c).or_default() += 1;
        }
    }

    /// Higher for a trial whose cells were tried less (0 for no fault).
    pub fn score(&self, t: &Trial) -> f64 {
        cells(t)
            .iter()
            .map(|c| 1.0 / (1.0 + *self.counts.get(c).unwrap_or(&0) as f64))
            .sum()
    }

    /// Trial `n` of the search seeded `seed`: of [`CANDIDATES`] drawn
    /// trials (the first has seed `trial_seed(seed, n)`), the one with the
    /// highest [`Coverage::score`] (the first of equals); it is counted.
    pub fn choose(&mut self, seed: u64, n: u64, c: &Config, resume: bool) -> Trial {
        let mut best: Option<(f64, Trial)> = None;
        for j in 0..CANDIDATES {
            let s = trial_seed(seed ^ j.wrapping_mul(0xA076_1D64_78BD_642F), n);
            let t = generate(s, c, resume);
            let score = self.score(&t);
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, t));
            }
        }
        let t = best.expect("at least one candidate").1;
        self.add(&t);
        t
    }

    /// The closing tally: each tried cell with its count, kinds grouped.
    pub fn tally(&self) -> String {
        let mut out = format!("coverage: {} cell(s) tried", self.counts.len());
        let mut kind = "";
        for (c, n) in &self.counts {
            if c.kind != kind {
                kind = &c.kind;
                out.push_str(&format!("\n  {kind}:"));
            } else {
                out.push(';');
            }
            out.push_str(&format!(" {} / {} ×{n}", c.position.name(), c.state.name()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choosing_spreads_the_trials_over_more_cells_than_drawing() {
        let c = Config::default();
        let mut chosen = Coverage::default();
        let mut drawn = Coverage::default();
        for n in 0..60 {
            chosen.choose(5, n, &c, true);
            drawn.add(&generate(trial_seed(5, n), &c, true));
        }
        let min = |cov: &Coverage| *cov.counts.values().min().unwrap();
        assert!(
            chosen.counts.len() > drawn.counts.len(),
            "{} vs {}",
            chosen.counts.len(),
            drawn.counts.len()
        );
        assert!(min(&chosen) >= min(&drawn));
        // Deterministic for a seed.
        let mut again = Coverage::default();
        let a: Vec<Trial> = (0..10).map(|n| again.choose(5, n, &c, true)).collect();
        let mut once = Coverage::default();
        let b: Vec<Trial> = (0..10).map(|n| once.choose(5, n, &c, true)).collect();
        assert_eq!(a, b);
    }

    #[test]
    fn cells_name_kind_position_and_state() {
        let c = Config::default();
        let t = (0..200)
            .map(|n| generate(trial_seed(2, n), &c, true))
            .find(|t| t.persist().is_some_and(|(i, _)| i > 0))
            .expect("a trial with a persistent fault after a step");
        let cs = cells(&t);
        assert!(
            cs.iter().any(|c| c.kind.contains("persisting")
                || c.kind.contains("forever") && c.position != Position::First),
            "{cs:?}"
        );
        let mut cov = Coverage::default();
        cov.add(&t);
        assert!(cov.tally().contains("coverage: "), "{}", cov.tally());
        assert!(cov.score(&t) < cells(&t).len() as f64);
    }
}
