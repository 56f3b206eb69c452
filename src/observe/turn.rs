//! [`TurnModel`]: how an agent's turn runs, decided once by the agent's drive
//! (driver protocol, exec mode, ACP) and
//! recorded in the observation. The runner's clock, the oracle and the
//! report all read it; [`TurnModel::clock_start`] is the one place that says
//! where a turn's clock starts on the run clock.

use serde::{Deserialize, Serialize};

use super::{Event, Observation, Timed};

/// What a turn's own deadline counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockStart {
    /// The turn's start: the agent said `ready` and takes the turn at once
    /// (driver protocol).
    TurnStart,
    /// The turn process's first provider call; its start-up before that is
    /// bounded by the boot deadline (exec mode: a process per turn).
    FirstCall,
}

/// How an agent's turn runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnModel {
    /// What the turn's own deadline counts from.
    pub clock: ClockStart,
    /// Each turn first starts up (spawn to first provider call), bounded by
    /// the boot deadline, not the turn's.
    pub start_up: bool,
    /// The agent hands back the session id its store is read under (exec
    /// mode's `exec.store_session`); else the scenario's own is used.
    pub session_from_agent: bool,
}

impl TurnModel {
    /// A process speaking the driver protocol: booted once, takes each turn
    /// at once, under the scenario's session id.
    pub const DRIVER_PROTOCOL: TurnModel = TurnModel {
        clock: ClockStart::TurnStart,
        start_up: false,
        session_from_agent: false,
    };

    /// A one-shot CLI, a process per turn that starts up before it works.
    pub const EXEC: TurnModel = TurnModel {
        clock: ClockStart::FirstCall,
        start_up: true,
        session_from_agent: true,
    };

    /// An Agent Client Protocol session: one process booted once
    /// (`initialize`, `session/new`), a `session/prompt` per turn taken at
    /// once, under the session id the agent handed back.
    pub const ACP: TurnModel = TurnModel {
        clock: ClockStart::TurnStart,
        start_up: false,
        session_from_agent: true,
    };

    /// The model of an observation saved before the model was recorded:
    /// exec mode if a turn's process was seen reaching the provider (only
    /// exec mode records `first_call`), else the driver protocol. Either
    /// reading gives an exec turn that never reached the provider the same
    /// clock start (its `turn_start`).
    pub fn of_saved(events: &[Timed]) -> TurnModel {
        match events
            .iter()
            .any(|t| matches!(t.event, Event::FirstCall { .. }))
        {
            true => TurnModel::EXEC,
            false => TurnModel::DRIVER_PROTOCOL,
        }
    }

    /// Where turn `i`'s own deadline starts on the run clock: its first
    /// provider call (the last, after a restart) when the clock starts
    /// there, else (or before that call) its `turn_start`.
    pub fn clock_start(&self, obs: &Observation, i: u64) -> Option<f64> {
        let first = match self.clock {
            ClockStart::FirstCall => obs.first_call(i).map(|(at, _)| at),
            ClockStart::TurnStart => None,
        };
        first.or_else(|| obs.turn_start(i))
    }

    /// Turn `i`'s start-up, if the model has one and it reached the
    /// provider: (when its first call came, seconds after its spawn).
    pub fn start_up(&self, obs: &Observation, i: u64) -> Option<(f64, f64)> {
        self.start_up.then(|| obs.first_call(i)).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Timed;

    fn at(at: f64, event: Event) -> Timed {
        Timed {
            at,
            worker: None,
            event,
        }
    }

    fn obs(events: Vec<Timed>, model: Option<TurnModel>) -> Observation {
        Observation {
            events,
            turn_model: model,
            ..Observation::default()
        }
    }

    #[test]
    fn a_saved_observation_without_the_model_reads_it_from_its_events() {
        let driver = vec![at(0.5, Event::Ready), at(0.6, Event::TurnStart { i: 0 })];
        let exec = vec![
            at(0.5, Event::Ready),
            at(0.6, Event::TurnStart { i: 0 }),
            at(
                3.0,
                Event::FirstCall {
                    turn: 0,
                    after_spawn: 2.4,
                    first_output: None,
                },
            ),
        ];
        let (d, e) = (obs(driver, None), obs(exec, None));
        assert_eq!(d.turn_model(), TurnModel::DRIVER_PROTOCOL);
        assert_eq!(e.turn_model(), TurnModel::EXEC);
        assert_eq!(d.turn_model().clock_start(&d, 0), Some(0.6));
        assert_eq!(e.turn_model().clock_start(&e, 0), Some(3.0));
        assert_eq!(e.turn_model().start_up(&e, 0), Some((3.0, 2.4)));
        assert_eq!(d.turn_model().start_up(&d, 0), None);
    }

    #[test]
    fn a_recorded_model_wins_over_the_events() {
        // An exec turn that never reached the provider: no `first_call`, but
        // the recorded model says exec; its clock falls back to turn_start.
        let o = obs(
            vec![at(0.6, Event::TurnStart { i: 0 })],
            Some(TurnModel::EXEC),
        );
        assert_eq!(o.turn_model(), TurnModel::EXEC);
        assert_eq!(o.turn_model().clock_start(&o, 0), Some(0.6));
        let json = serde_json::to_value(&o).unwrap();
        assert_eq!(json["turn_model"]["clock"], "first_call");
        let back: Observation = serde_json::from_value(json).unwrap();
        assert_eq!(back.turn_model, Some(TurnModel::EXEC));
    }
}
