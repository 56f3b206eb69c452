//! MCP discovery at start-up. When the row's MCP server never answers the
//! agent's `initialize` or `tools/list` (`list_hang`), an exec-mode turn's
//! start-up (from its first sign of life to its first model call) is where
//! the agent waits on it, so the turn's deadline counts that start-up:
//! `start_up_bounded` fails a turn whose start-up and work together passed
//! its deadline (the faulted turn's, or the probe's), with the wait, the
//! unanswered request and the tools the agent then offered as evidence.
//! The start-up is measured from the process's first sign of life (its
//! first byte on stdout or stderr, its first message to the MCP server or
//! its first request to the provider, whichever came first), not from its
//! spawn: a runtime's own boot (node's, 13-23 s on a loaded machine) is not
//! MCP waiting. (Elsewhere an exec turn's
//! start-up is bounded by the boot deadline alone, so that a slow start is
//! not held against the turn; a 60 s wait on a hung listing in every turn
//! passed that way.) A driver-protocol agent's discovery is its boot,
//! bounded by the boot deadline (`boots`): no check.

use super::{clip, Check, Invariant};
use crate::observe::Observation;
use crate::scenarios::Scenario;

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let hung = obs.mcp.as_ref()?.exchanges.iter().find(|e| {
        e.kind
            .as_deref()
            .is_some_and(crate::mcp::Reply::withholds_listing)
            && e.answered.is_none()
    })?;
    let offered = obs
        .recording
        .main_requests()
        .next()
        .map_or_else(|| "no model call".to_string(), |r| r.tools.join(", "));
    let mut measured = false;
    let mut v = Vec::new();
    for (i, deadline) in [(0, s.deadlines.turn), (obs.probe_turn, s.deadlines.probe)] {
        let model = obs.turn_model();
        let (Some((first_at, start_up)), Some((end_at, _))) =
            (model.start_up(obs, i), obs.turn_end(i))
        else {
            // Not an exec turn, or one that never ended (its own check says so).
            continue;
        };
        measured = true;
        let (boot, sign) = first_sign_of_life(obs, i, first_at, start_up);
        let start_up = start_up - boot;
        let total = end_at - (first_at - start_up);
        if total > deadline {
            v.push(format!(
                "turn {i} took {total:.1} s from its first sign of life ({sign}, {boot:.1} s after its spawn: \
                 the process's own boot before it is not counted), {start_up:.1} s of it starting up while \
                 the MCP server's {} (sent at {:.1} s) was never answered: past the {deadline} s deadline, \
                 which counts the start-up when the fault is the MCP discovery (bound the listing, then go \
                 on without the server or say it is missing); the first model call offered: {}",
                hung.method,
                hung.at,
                clip(&offered, 300)
            ));
        }
    }
    measured.then(|| Check::new(Invariant::Termination, "start_up_bounded", v))
}

/// Turn `i`'s first sign of life, in seconds after its spawn, and what it
/// was: its first byte on stdout or stderr, its first message to the MCP
/// server, or its first request to the provider (at `first_at`,
/// `after_spawn` after the spawn), whichever came first.
fn first_sign_of_life(
    obs: &Observation,
    i: u64,
    first_at: f64,
    after_spawn: f64,
) -> (f64, &'static str) {
    let spawn = first_at - after_spawn;
    let mcp = obs.mcp.as_ref().and_then(|m| {
        m.exchanges
            .iter()
            .map(|e| e.at - spawn)
            .filter(|&d| (0.0..after_spawn).contains(&d))
            .reduce(f64::min)
    });
    [
        (obs.first_output(i), "its first output"),
        (mcp, "its first message to the MCP server"),
    ]
    .into_iter()
    .filter_map(|(d, what)| Some((d?.clamp(0.0, after_spawn), what)))
    .fold((after_spawn, "its first model request"), |a, b| {
        if b.0 < a.0 {
            b
        } else {
            a
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::Event;
    use crate::oracle::fixtures::at;

    fn first_call(after_spawn: f64, first_output: Option<f64>) -> Observation {
        Observation {
            events: vec![at(
                20.0,
                Event::FirstCall {
                    turn: 0,
                    after_spawn,
                    first_output,
                },
            )],
            ..Observation::default()
        }
    }

    /// The earliest sign of life wins: the first output, else the first
    /// request (no MCP message here).
    #[test]
    fn the_start_up_counts_from_the_first_sign_of_life() {
        let o = first_call(15.0, Some(12.0));
        assert_eq!(
            first_sign_of_life(&o, 0, 20.0, 15.0),
            (12.0, "its first output")
        );
        let o = first_call(15.0, None);
        assert_eq!(
            first_sign_of_life(&o, 0, 20.0, 15.0),
            (15.0, "its first model request")
        );
    }
}
