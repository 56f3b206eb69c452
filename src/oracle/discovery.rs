//! MCP discovery at start-up. When the row's MCP server never answers the
//! agent's `initialize` or `tools/list` (`list_hang`), an exec-mode turn's
//! start-up (its spawn to its first model call) is where the agent waits on
//! it, so the turn's deadline counts that start-up: `start_up_bounded` fails
//! a turn whose start-up and work together passed its deadline (the faulted
//! turn's, or the probe's), with the wait, the unanswered request and the
//! tools the agent then offered as evidence. (Elsewhere an exec turn's
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
        let total = end_at - (first_at - start_up);
        if total > deadline {
            v.push(format!(
                "turn {i} took {total:.1} s, {start_up:.1} s of it starting up while the MCP server's {} \
                 (sent at {:.1} s) was never answered: past the {deadline} s deadline, which counts the \
                 start-up when the fault is the MCP discovery (bound the listing, then go on without the \
                 server or say it is missing); the first model call offered: {}",
                hung.method,
                hung.at,
                clip(&offered, 300)
            ));
        }
    }
    measured.then(|| Check::new(Invariant::Termination, "start_up_bounded", v))
}
