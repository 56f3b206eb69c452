//! Reusability: the same agent answers the probe turn (`alive NONCE`), and the
//! probe request still carries the faulted user turn (unless the row's
//! `store_damage` destroyed it: `store_resumed_past_damage` judges what the
//! damage left). Where the scenario expects
//! a breaker and the adapter declares one, the probe is instead refused at
//! once, surfaced, and never reaches the provider.

use super::{clip, Check, Invariant};
use crate::observe::{Capabilities, Event, Observation, Phase};
use crate::provider::CallKind;
use crate::scenarios::{ProbeMode, Scenario};

/// How fast a breaker must refuse the probe, in seconds.
pub const BREAKER_REFUSAL_S: f64 = 5.0;

/// A chaos run cut at its bound before the probe turn: the probe is not
/// checked (one cause, one failed check: `every_turn_finishes` names the
/// cut).
fn cut_before_probe(obs: &Observation) -> Option<Check> {
    obs.find(|e| match e {
        Event::ChaosBoundReached { seconds } => Some(*seconds),
        _ => None,
    })
    .map(|(_, bound)| {
        Check::skipped(
            Invariant::Reusability,
            "probe",
            format!("the chaos run was cut at its bound of {bound:.0} s before the probe turn (every_turn_finishes)"),
        )
    })
}

pub fn check(s: &Scenario, caps: Capabilities, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::Reusability;
    // After a kill the faulted turn never ends: the restarted agent's probe is
    // exactly what must be checked.
    let killed = matches!(
        s.expect,
        crate::scenarios::Expect::Killed | crate::scenarios::Expect::Survives
    );
    if obs
        .find(|e| matches!(e, Event::Ready).then_some(()))
        .is_none()
    {
        return vec![Check::skipped(inv, "probe", "the agent never booted")];
    }
    if obs.turn_end(0).is_none() && !killed {
        return vec![Check::skipped(inv, "probe", "the faulted turn never ended")];
    }
    let Some(start) = obs.turn_start(obs.probe_turn) else {
        if let Some(skipped) = cut_before_probe(obs) {
            return vec![skipped];
        }
        let why = if obs.deadline_missed(Phase::Probe).is_some() {
            "the probe turn never started"
        } else {
            "the agent exited before the probe turn"
        };
        return vec![Check::new(inv, "probe", vec![why.into()])];
    };
    let Some((end_at, end)) = obs.turn_end(obs.probe_turn) else {
        return vec![Check::new(inv, "probe", vec![probe_unfinished(s, obs)])];
    };
    let probes: Vec<_> = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.kind == CallKind::Probe)
        .collect();
    let got = format!(
        "completed={} failed={} final={:?}",
        end.completed,
        end.failed,
        clip(&end.final_text, 200)
    ) + &super::stderr_note::unread_stderr(&end);
    if s.probe == ProbeMode::Breaker && caps.breaker {
        let mut v = Vec::new();
        if !probes.is_empty() {
            v.push(format!(
                "the breaker should refuse the probe, but {} probe request(s) reached the provider",
                probes.len()
            ));
        }
        if end.completed || end.final_text.trim().is_empty() {
            v.push(format!(
                "the probe was not refused with a surfaced reason ({got})"
            ));
        }
        if end_at - start > BREAKER_REFUSAL_S {
            v.push(format!(
                "the refusal took {:.1} s; a breaker answers at once (≤ {BREAKER_REFUSAL_S:.0} s)",
                end_at - start
            ));
        }
        return vec![Check::new(inv, "probe_refused_by_breaker", v)];
    }
    let mut v = Vec::new();
    let alive = format!("alive {}", obs.nonce);
    if !end.completed || !end.final_text.contains(&alive) {
        v.push(format!("the probe was not answered {alive:?} ({got})"));
    }
    if probes.is_empty() {
        v.push(if end.completed {
            "no probe request reached the provider".into()
        } else {
            format!(
                "the agent refused the probe without calling the provider (a breaker?{})",
                if caps.breaker && s.probe == ProbeMode::Answer {
                    " this scenario expects the probe answered"
                } else if !caps.breaker {
                    " the profile declares none"
                } else {
                    ""
                }
            )
        });
    } else if !probes.iter().any(|r| {
        r.messages
            .iter()
            .any(|m| m.role == "user" && m.content.contains(&obs.fault_message))
    }) && !super::store_damage::took_fault_message(obs)
    {
        v.push(format!(
            "the probe request does not carry the faulted user turn {:?}: the agent lost its history",
            clip(&obs.fault_message, 80)
        ));
    }
    vec![Check::new(inv, "probe_answered", v)]
}

/// Why the probe turn, which started, has no end: its deadline, or (exec
/// mode) its process never reached the provider within the boot deadline.
fn probe_unfinished(s: &Scenario, obs: &Observation) -> String {
    match obs.start_up_missed() {
        Some((i, d)) if i == obs.probe_turn => format!(
            "the probe turn's process never reached the provider within {d:.0} s of its start (exec mode: its start-up is bounded by the boot deadline)"
        ),
        _ => format!(
            "the probe turn did not return within {:.0} s{}",
            s.deadlines.probe,
            super::termination::first_call_note(obs, obs.probe_turn)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::observe::{Event, TurnEnd};

    const NO_BREAKER: Capabilities = Capabilities {
        breaker: false,
        background: None,
        mcp_tool: None,
        renders_retries: false,
    };
    const BREAKER: Capabilities = Capabilities {
        breaker: true,
        background: None,
        mcp_tool: None,
        renders_retries: false,
    };

    #[test]
    fn an_exec_probe_that_never_reached_the_provider_says_so() {
        let s = scenario("expect: error\ndeadlines: {boot: 4, probe: 6}");
        let mut o = healthy(&s, end(0, false, true, "provider error"));
        o.events
            .retain(|t| !matches!(&t.event, Event::TurnEnd(x) if x.i == 1));
        let probe = |o: &Observation| check(&s, NO_BREAKER, o)[0].violations().join("\n");
        assert!(
            probe(&o).contains("did not return within 6 s"),
            "{}",
            probe(&o)
        );
        o.events.push(at(
            7.1,
            Event::DeadlineMissed {
                phase: Phase::StartUp,
                seconds: 4.0,
            },
        ));
        assert!(
            probe(&o).contains("the probe turn's process never reached the provider within 4 s"),
            "{}",
            probe(&o)
        );
    }

    fn set_probe_end(o: &mut Observation, e: TurnEnd) {
        for t in &mut o.events {
            if matches!(&t.event, Event::TurnEnd(x) if x.i == 1) {
                t.event = Event::TurnEnd(e.clone());
            }
        }
    }

    #[test]
    fn answered_probe_with_history_passes() {
        let s = scenario("expect: error");
        let o = healthy(&s, end(0, false, true, "err"));
        assert!(!check(&s, NO_BREAKER, &o)[0].failed());
    }

    #[test]
    fn probe_that_lost_the_faulted_turn_fails() {
        let s = scenario("expect: error");
        let mut o = healthy(&s, end(0, false, true, "err"));
        o.recording.requests[1].messages.remove(0);
        let c = check(&s, NO_BREAKER, &o);
        assert!(c[0].violations()[0].contains("lost its history"));
    }

    #[test]
    fn wedged_probe_fails() {
        let s = scenario("expect: error");
        let mut o = healthy(&s, end(0, false, true, "err"));
        set_probe_end(&mut o, end_interrupted(1));
        o.recording.requests.truncate(1);
        let c = check(&s, NO_BREAKER, &o);
        assert_eq!(c[0].violations().len(), 2, "{:?}", c[0]);
    }

    #[test]
    fn breaker_refusal_passes_only_where_declared() {
        let s = scenario("expect: error\nprobe: breaker");
        let mut o = healthy(&s, end(0, false, true, "err"));
        set_probe_end(&mut o, end(1, false, true, "refused: circuit open"));
        o.recording.requests.truncate(1);
        assert!(!check(&s, BREAKER, &o)[0].failed());
        // An agent without a breaker must answer the probe.
        assert!(check(&s, NO_BREAKER, &o)[0].failed());
    }

    #[test]
    fn breaker_that_lets_the_probe_through_fails() {
        let s = scenario("expect: error\nprobe: breaker");
        let o = healthy(&s, end(0, false, true, "err"));
        let c = check(&s, BREAKER, &o);
        assert!(c[0]
            .violations()
            .iter()
            .any(|v| v.contains("reached the provider")));
    }

    #[test]
    fn probe_after_a_kill_is_checked() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 1}}");
        let mut o = healthy(&s, end(0, false, true, "err"));
        o.events
            .retain(|t| !matches!(&t.event, Event::TurnEnd(e) if e.i == 0));
        assert!(!check(&s, NO_BREAKER, &o)[0].not_checked());
        o.recording.requests[1].messages.remove(0);
        assert!(check(&s, NO_BREAKER, &o)[0].violations()[0].contains("lost its history"));
    }

    #[test]
    fn agent_that_never_booted_makes_probe_not_checked() {
        let s = scenario("expect: survives\nchaos: {turns: 2, duration: 5, min_faults: 1}");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.events
            .retain(|t| matches!(t.event, Event::Spawned { .. }));
        assert!(check(&s, NO_BREAKER, &o)[0].not_checked());
    }

    #[test]
    fn never_ended_faulted_turn_makes_probe_not_checked() {
        let s = scenario("expect: error");
        let mut o = healthy(&s, end(0, false, true, "err"));
        o.events.retain(|t| !matches!(t.event, Event::TurnEnd(_)));
        assert!(check(&s, NO_BREAKER, &o)[0].not_checked());
    }
}
