//! Bounded termination: the agent boots, the faulted turn returns within its
//! deadline (or within the interrupt deadline after `interrupt`), and its end
//! matches what the scenario expects, with a surfaced (non-empty) `final`.

use super::{clip, with_nonce, Check, Invariant};
use crate::observe::{Event, Observation, Phase, TurnEnd, TurnModel};
use crate::scenarios::{Expect, Scenario};

/// The agent's stderr tail and its own log tails, quoted as evidence.
pub(crate) fn stderr_evidence(obs: &Observation) -> String {
    let mut out = if obs.stderr_tail.trim().is_empty() {
        "stderr was empty".to_string()
    } else {
        format!("stderr tail:\n{}", obs.stderr_tail)
    };
    for (path, tail) in &obs.log_tails {
        if !tail.trim().is_empty() {
            out.push_str(&format!("\nlog {path} tail:\n{tail}"));
        }
    }
    out
}

pub fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::Termination;
    let mut out = vec![protocol(obs)];
    if obs
        .find(|e| matches!(e, Event::Ready).then_some(()))
        .is_none()
    {
        out.extend(never_booted(s, obs));
        return out;
    }
    if let Some(missed) = never_reached(obs) {
        out.extend(missed);
        return out;
    }
    out.push(Check::new(inv, "boots", vec![]));

    if matches!(s.expect, Expect::Killed) {
        out.extend(killed(s, obs));
        return out;
    }
    if let Some(spec) = &s.chaos {
        out.extend(chaos(spec, obs));
        return out;
    }
    let Some((end_at, end)) = obs.turn_end(0) else {
        out.push(Check::new(
            inv,
            "faulted_turn_ends",
            vec![format!(
                "{} (provider calls so far: {}){}; {}",
                why_no_turn_end(obs),
                obs.recording.main_calls,
                super::endpoint::note(s, obs),
                stderr_evidence(obs)
            )],
        ));
        out.push(Check::skipped(
            inv,
            "outcome",
            "the faulted turn never ended",
        ));
        return out;
    };
    out.push(turn_ends_in_time(s, obs, end_at));
    out.push(Check::new(inv, "outcome", outcome(s, obs, &end)));
    out
}

/// Every `CHAOS ` line parsed (over ACP: every JSON-RPC frame valid and
/// answering a request chaosrun made), none dropped past the cap, and
/// restarts resumed where they were told.
fn protocol(obs: &Observation) -> Check {
    let acp = obs.turn_model() == TurnModel::ACP;
    let mut bad: Vec<String> = obs
        .events
        .iter()
        .filter_map(|t| match &t.event {
            Event::BadEvent { line } if acp => {
                Some(format!("bad ACP frame from the agent: {line}"))
            }
            Event::BadEvent { line } => Some(format!("unparseable event line: CHAOS {line}")),
            _ => None,
        })
        .collect();
    if obs.capped.events_dropped > 0 {
        bad.push(format!(
            "the agent sent {} events past chaosrun's cap of {} per scenario; they were dropped",
            obs.capped.events_dropped,
            crate::driver::output::MAX_EVENTS
        ));
    }
    bad.extend(restart_protocol(obs));
    Check::new(Invariant::Termination, "protocol", bad)
}

/// The checks of an agent that never said `ready`.
fn never_booted(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::Termination;
    let why = match (obs.deadline_missed(Phase::Boot), obs.exited()) {
        (Some(d), _) => format!("the agent never said ready within {d:.0} s"),
        (None, Some((at, Event::Exited { code, signal, .. }))) => format!(
            "the agent exited before it was ready (after {at:.1} s, code {code:?}, signal {signal:?})"
        ),
        _ => "the agent never said ready".into(),
    };
    vec![
        Check::new(
            inv,
            "boots",
            vec![format!(
                "{why}{}; {}",
                super::endpoint::note(s, obs),
                stderr_evidence(obs)
            )],
        ),
        Check::skipped(inv, "faulted_turn_ends", "the agent never booted"),
        Check::skipped(inv, "outcome", "the agent never booted"),
    ]
}

/// Exec mode: how long after its spawn turn `i`'s process first reached the
/// provider, as a note for a deadline's message (empty if it never did, or
/// in session mode).
pub(crate) fn first_call_note(obs: &Observation, i: u64) -> String {
    match obs.turn_model().start_up(obs, i) {
        Some((_, after)) => format!(" (first call at {after:.1} s after spawn)"),
        None => String::new(),
    }
}

/// Exec mode: the first process of the first turn never reached the
/// provider within the boot deadline (its readiness is its first request; a session-mode
/// agent's is `ready`).
fn never_reached(obs: &Observation) -> Option<Vec<Check>> {
    let inv = Invariant::Termination;
    let (0, seconds) = obs.start_up_missed()? else {
        return None;
    };
    // A restarted agent's start-up is judged by the row's own checks.
    if obs
        .find(|e| matches!(e, Event::Restarted { .. }).then_some(()))
        .is_some()
    {
        return None;
    }
    Some(vec![
        Check::new(
            inv,
            "boots",
            vec![format!(
                "the agent's process never reached the provider within {seconds:.0} s of its start (exec mode: a turn's start-up is bounded by the boot deadline); {}",
                stderr_evidence(obs)
            )],
        ),
        Check::skipped(inv, "faulted_turn_ends", "the agent never reached the provider"),
        Check::skipped(inv, "outcome", "the agent never reached the provider"),
    ])
}

/// Why the faulted turn has no `turn_end`.
fn why_no_turn_end(obs: &Observation) -> String {
    if let Some(d) = obs.deadline_missed(Phase::Interrupt) {
        format!("the faulted turn did not return within {d:.0} s of `interrupt`")
    } else if let Some(d) = obs.deadline_missed(Phase::FaultedTurn) {
        format!(
            "the faulted turn did not return within its {d:.0} s deadline{}",
            first_call_note(obs, 0)
        )
    } else if matches!(
        obs.exited(),
        Some((
            _,
            Event::Exited {
                killed_by_chaosrun: true,
                signal: Some(_),
                ..
            }
        ))
    ) {
        "the agent closed its stdout during the faulted turn without exiting; chaosrun killed it"
            .into()
    } else {
        "the agent exited during the faulted turn".into()
    }
}

/// The faulted turn, which ended at `end_at`, ended within its deadline and
/// within the interrupt deadline after `interrupt`.
fn turn_ends_in_time(s: &Scenario, obs: &Observation, end_at: f64) -> Check {
    let mut ends = Vec::new();
    // Exec mode: the turn's time runs from its first request.
    let start = obs.clock_start(0).unwrap_or(0.0);
    if end_at - start > s.deadlines.turn {
        ends.push(format!(
            "the faulted turn took {:.1} s, past its {:.0} s deadline{}{}",
            end_at - start,
            s.deadlines.turn,
            first_call_note(obs, 0),
            super::endpoint::note(s, obs)
        ));
    }
    if let Some((sent, _)) = obs.interrupt_sent() {
        if end_at - sent > s.deadlines.interrupt {
            ends.push(format!(
                "the turn returned {:.1} s after `interrupt`, past the {:.0} s interrupt deadline",
                end_at - sent,
                s.deadlines.interrupt
            ));
        }
    }
    Check::new(Invariant::Termination, "faulted_turn_ends", ends)
}

/// How the faulted turn's end differs from what the scenario expects.
fn outcome(s: &Scenario, obs: &Observation, end: &TurnEnd) -> Vec<String> {
    let shown = format!(
        "failed={} interrupted={} completed={} final={:?} exit_reason={:?}",
        end.failed,
        end.interrupted,
        end.completed,
        clip(&end.final_text, 200),
        end.exit_reason
    ) + &super::stderr_note::unread_stderr(end);
    let surfaced = !end.final_text.trim().is_empty();
    let mut v = Vec::new();
    match &s.expect {
        Expect::Error => {
            if end.completed && !end.failed {
                v.push(format!(
                    "expected a surfaced error, got a completed answer ({shown})"
                ));
            } else if !surfaced {
                v.push(format!(
                    "the error was not surfaced: `final` is empty ({shown})"
                ));
            }
        }
        Expect::Answer(want) => {
            let want = with_nonce(want, obs);
            if !end.completed || !end.final_text.contains(&want) {
                v.push(format!(
                    "expected a completed answer containing {want:?}, got ({shown})"
                ));
            }
        }
        Expect::Ended => {
            if !surfaced && !end.interrupted {
                v.push(format!(
                    "the turn ended silently: `final` is empty ({shown})"
                ));
            }
        }
        Expect::Killed | Expect::Survives => unreachable!("handled by `killed` and `chaos`"),
        Expect::Interrupted => {
            if obs.interrupt_sent().is_none() {
                v.push(format!(
                    "the interrupt trigger never fired: the turn returned first ({shown})"
                ));
            } else if !end.interrupted {
                v.push(format!(
                    "expected the turn to be flagged interrupted, got ({shown})"
                ));
            }
        }
    }
    v
}

/// A restarted agent (`resume`, `start_turn: K`) must begin with
/// `turn_start` K: its first `turn_start` after its `ready` naming any other
/// index is a protocol violation (e.g. replaying the session from turn 0). In
/// worker mode the workers claim turns from their shared store (a restarted
/// worker may take over the unfinished turn another one died in), so there the
/// violation is starting a turn that had already ended.
fn restart_protocol(obs: &Observation) -> Vec<String> {
    let mut out = Vec::new();
    for (n, t) in obs.events.iter().enumerate() {
        let Event::Restarted {
            start_turn: Some(k),
            ..
        } = t.event
        else {
            continue;
        };
        let mut ready = false;
        for (m, e) in obs.events.iter().enumerate().skip(n + 1) {
            if e.worker != t.worker {
                continue;
            }
            match &e.event {
                Event::Ready => ready = true,
                Event::TurnStart { i } if ready => {
                    let ended_before = || {
                        obs.events[..m]
                            .iter()
                            .any(|x| matches!(&x.event, Event::TurnEnd(end) if end.i == *i))
                    };
                    if obs.workers <= 1 && *i != k {
                        out.push(format!(
                            "the agent restarted at {:.1} s with start_turn {k} began with turn_start {i}; a restarted agent must emit turn_start {k} first",
                            t.at
                        ));
                    } else if obs.workers > 1 && ended_before() {
                        out.push(format!(
                            "worker {} restarted at {:.1} s (start_turn {k}) began with turn_start {i}, a turn that had already ended",
                            t.worker.unwrap_or(0),
                            t.at
                        ));
                    }
                    break;
                }
                Event::Restarted { .. } | Event::Exited { .. } => break,
                _ => {}
            }
        }
    }
    out
}

/// How late chaosrun's `oom_kill` event may be recorded after the kernel's
/// kill: the drive re-reads the cgroup's `oom_kill` counter for up to this
/// long after the kernel's notice (v1 signals just before the kill is
/// counted). An agent that learns of its engine's death at once can end its
/// turn inside that lag, so an OOM recorded at most this long after the
/// faulted turn's end still landed in it.
pub const OOM_NOTICE_LAG: f64 = 1.0;

/// Whether the faulted turn's end at `end` came inside the notice lag of
/// an OOM kill recorded at `kill` (the kill landed in the turn).
fn oom_within_lag(obs: &Observation, end: f64, kill: f64) -> bool {
    let oom = obs.find(|e| matches!(e, Event::OomKill { .. }).then_some(()));
    oom.is_some() && kill - end <= OOM_NOTICE_LAG
}

/// `expect: killed`: the kill must land during the faulted turn, and the
/// agent started again on the same HOME must boot (resume) in time.
/// The row's process fault is timed just after the faulted turn's answer.
fn after_answer(s: &Scenario) -> bool {
    s.process_fault
        .as_ref()
        .is_some_and(|f| f.at == crate::scenarios::Trigger::AfterAnswer)
}

fn killed(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::Termination;
    let kill = obs.find(|e| match e {
        Event::ProcessFault { action, .. } if action.kills() => Some(()),
        _ => None,
    });
    let landed = match (kill, obs.turn_end(0)) {
        (None, Some((_, end))) => vec![format!(
            "the kill never fired: the faulted turn returned first (final={:?})",
            clip(&end.final_text, 120)
        )],
        // The turn was still waiting when its deadline fired: the calls the
        // kill waited for never came (e.g. one call hung past the deadline).
        (None, None) => vec![match obs.deadline_missed(Phase::FaultedTurn) {
            Some(secs) => format!(
                "the kill never fired: the faulted turn was still running at its {secs:.0} s deadline, after {} main call(s)",
                obs.recording.main_calls
            ),
            None => "the kill never fired".to_string(),
        }],
        // A fault timed `at: after_answer` lands after the turn's end.
        (Some((k, _)), Some((e, _)))
            if e < k && !oom_within_lag(obs, e, k) && !after_answer(s) =>
        {
            vec!["the faulted turn returned before the kill landed".to_string()]
        }
        _ => vec![],
    };
    let mut out = vec![Check::new(inv, "kill_landed_mid_turn", landed)];
    if kill.is_none() {
        out.push(Check::skipped(
            inv,
            "resumes_after_kill",
            "the kill never fired",
        ));
        return out;
    }
    if let Some(why) = lived_through_oom(obs) {
        out.push(Check::skipped(inv, "resumes_after_kill", why));
        return out;
    }
    let failed = obs.find(|e| match e {
        Event::RestartFailed { error } => Some(error.clone()),
        _ => None,
    });
    let load_error = obs.find(|e| match e {
        Event::SessionLoaded {
            error: Some(error), ..
        } => Some(error.clone()),
        _ => None,
    });
    let v = match (failed, obs.ready_after_restart()) {
        (Some((_, error)), _) => vec![format!("the agent could not be started again: {error}")],
        (None, Some(_)) => vec![],
        (None, None) if load_error.is_some() => vec![format!(
            "the restarted agent answered session/load with an error: {}",
            load_error.map(|(_, e)| e).unwrap_or_default()
        )],
        (None, None) => vec![format!(
            "the restarted agent never said ready within {:.0} s; {}",
            s.deadlines.boot,
            stderr_evidence(obs)
        )],
    };
    out.push(Check::new(inv, "resumes_after_kill", v));
    out
}

/// An `oom` whose kill hit another process of the agent's tree (its
/// engine, its tool) while the agent itself lived on and ended the faulted
/// turn: it was not restarted, so there is nothing to resume (the probe is
/// reusability's). Why, if so.
fn lived_through_oom(obs: &Observation) -> Option<String> {
    let (oom_at, kills) = obs.find(|e| match e {
        Event::OomKill { oom_kills, .. } => Some(*oom_kills),
        _ => None,
    })?;
    let restarted = obs
        .events
        .iter()
        .any(|t| matches!(t.event, Event::Restarted { .. }));
    let (end_at, _) = obs.turn_end(0)?;
    (kills > 0 && !restarted && end_at + OOM_NOTICE_LAG >= oom_at).then(|| {
        format!(
            "the agent was not restarted: the kernel's OOM kill at {oom_at:.1} s hit another process of its tree, and the agent itself lived on and ended the faulted turn at {end_at:.1} s, so there was nothing to resume"
        )
    })
}

/// A chaos run: every turn finished, and every kill was followed by a resumed
/// agent (whether enough faults landed is the `exercised` check's).
fn chaos(_spec: &crate::scenarios::ChaosSpec, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::Termination;
    let unfinished: Vec<String> = (0..obs.probe_turn)
        .filter(|i| obs.turn_end(*i).is_none())
        .map(|i| i.to_string())
        .collect();
    let turns = if unfinished.is_empty() {
        vec![]
    } else {
        let cut = obs.find(|e| match e {
            Event::ChaosBoundReached { seconds } => Some(*seconds),
            _ => None,
        });
        let why = match (obs.start_up_missed(), obs.deadline_missed(Phase::FaultedTurn)) {
            _ if cut.is_some() => format!(
                "(the run reached its bound of {:.0} s after the boot, derived from the row: its duration, the longest fault landing, a turn in flight and the probe; chaosrun cut it there)",
                cut.map_or(0.0, |(_, s)| s)
            ),
            (Some((i, d)), _) => format!(
                "(turn {i}'s process never reached the provider within {d:.0} s of its start, the boot deadline)"
            ),
            (None, Some(d)) => format!("(no turn ended for {d:.0} s, the turn deadline)"),
            (None, None) => "before the agent stopped".to_string(),
        };
        vec![format!(
            "turn(s) {} never finished {why}; {}",
            unfinished.join(", "),
            stderr_evidence(obs)
        )]
    };
    let restarts = obs
        .events
        .iter()
        .filter(|t| matches!(t.event, Event::Restarted { .. }))
        .count();
    let failed_restarts: Vec<String> = obs
        .events
        .iter()
        .filter_map(|t| match &t.event {
            Event::RestartFailed { error } => Some(format!("a restart failed: {error}")),
            _ => None,
        })
        .collect();
    let readies = obs
        .events
        .iter()
        .filter(|t| matches!(t.event, Event::Ready))
        .count();
    let mut resumed = failed_restarts;
    if resumed.is_empty() && readies < restarts + obs.workers {
        resumed.push(format!(
            "{restarts} restarts but only {} said ready again; {}",
            readies.saturating_sub(obs.workers),
            stderr_evidence(obs)
        ));
    }
    vec![
        Check::new(inv, "every_turn_finishes", turns),
        Check::new(inv, "resumes_after_every_kill", resumed),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn outcome(checks: &[Check]) -> &Check {
        checks.iter().find(|c| c.name == "outcome").unwrap()
    }

    #[test]
    fn surfaced_error_passes_error_expectation() {
        let s = scenario("expect: error");
        let obs = healthy(&s, end(0, false, true, "provider error: HTTP 500"));
        assert!(check(&s, &obs).iter().all(|c| !c.failed()));
    }

    #[test]
    fn completed_answer_fails_error_expectation() {
        let s = scenario("expect: error");
        let obs = healthy(&s, end(0, true, false, "all good"));
        assert!(outcome(&check(&s, &obs)).failed());
    }

    #[test]
    fn silent_error_is_a_violation() {
        let s = scenario("expect: error");
        let obs = healthy(&s, end(0, false, true, "  "));
        let c = check(&s, &obs);
        assert!(outcome(&c).violations()[0].contains("not surfaced"));
    }

    #[test]
    fn answer_must_contain_the_rendered_nonce() {
        let s = scenario("expect: {answer: \"recovered {{nonce}}\"}");
        let good = healthy(&s, end(0, true, false, "recovered N0NCE"));
        assert!(!outcome(&check(&s, &good)).failed());
        let bad = healthy(&s, end(0, true, false, "recovered {{nonce}}"));
        assert!(outcome(&check(&s, &bad)).failed());
    }

    /// `s`'s faulted turn that never ended: its 90 s deadline missed at 95 s.
    fn missed_faulted_turn(s: &Scenario) -> Observation {
        let mut obs = healthy(s, end(0, false, true, "x"));
        obs.events.retain(|t| !matches!(t.event, Event::TurnEnd(_)));
        obs.events.push(at(
            95.0,
            Event::DeadlineMissed {
                phase: Phase::FaultedTurn,
                seconds: 90.0,
            },
        ));
        obs
    }

    #[test]
    fn missed_turn_deadline_fails_and_outcome_is_not_checked() {
        let s = scenario("expect: error");
        let mut obs = missed_faulted_turn(&s);
        obs.stderr_tail = "Traceback: stuck in read()".into();
        let c = check(&s, &obs);
        let ends = c.iter().find(|c| c.name == "faulted_turn_ends").unwrap();
        assert!(ends.violations()[0].contains("90 s deadline"));
        assert!(
            ends.violations()[0].contains("stuck in read()"),
            "stderr is evidence"
        );
        assert!(outcome(&c).not_checked());
    }

    /// A turn that missed its deadline while the row's endpoint fault held
    /// a request (an exec-mode agent's start-up is in its turn) names it.
    #[test]
    fn a_missed_turn_deadline_names_the_hung_endpoint_requests() {
        let s = scenario("expect: ended\nendpoint_fault: {kind: hang}");
        let mut obs = missed_faulted_turn(&s);
        let mut list = request(9, crate::provider::CallKind::Aux, vec![]);
        (list.method, list.path, list.model) = ("GET".into(), "/v1/models".into(), None);
        list.reply = crate::provider::endpoints::RECORDED_HANG.into();
        obs.recording.requests.push(list);
        let c = check(&s, &obs);
        let ends = c.iter().find(|c| c.name == "faulted_turn_ends").unwrap();
        assert!(
            ends.violations()[0]
                .contains("each never answered by the row's `endpoint_fault`: GET /v1/models"),
            "{ends:?}"
        );
    }

    #[test]
    fn interrupt_must_end_the_turn_within_its_deadline() {
        let s = scenario("expect: interrupted\ninterrupt: {after_calls: 1}");
        let mut obs = healthy(&s, end_interrupted(0));
        obs.events
            .insert(2, at(1.0, Event::InterruptSent { main_calls: 1 }));
        set_turn_end_time(&mut obs, 0, 30.0);
        let c = check(&s, &obs);
        assert!(c
            .iter()
            .find(|c| c.name == "faulted_turn_ends")
            .unwrap()
            .failed());
        set_turn_end_time(&mut obs, 0, 2.0);
        assert!(check(&s, &obs).iter().all(|c| !c.failed()));
    }

    #[test]
    fn interrupted_expectation_fails_when_the_trigger_never_fired() {
        let s = scenario("expect: interrupted\ninterrupt: {after_calls: 3}");
        let obs = healthy(&s, end(0, false, true, "gave up"));
        assert!(outcome(&check(&s, &obs)).violations()[0].contains("never fired"));
    }

    #[test]
    fn agent_that_never_boots_names_the_deadline() {
        let s = scenario("expect: error");
        let mut obs = healthy(&s, end(0, false, true, "x"));
        obs.events = vec![at(
            120.0,
            Event::DeadlineMissed {
                phase: Phase::Boot,
                seconds: 120.0,
            },
        )];
        let c = check(&s, &obs);
        assert!(
            c.iter().find(|c| c.name == "boots").unwrap().violations()[0]
                .contains("never said ready within 120 s")
        );
    }

    fn killed_run(s: &Scenario) -> Observation {
        let mut obs = healthy(s, end(0, false, false, "unused"));
        obs.events
            .retain(|t| !matches!(t.event, Event::TurnEnd(ref e) if e.i == 0));
        let kill = Event::ProcessFault {
            action: "kill".into(),
            signalled: 1,
            main_calls: 1,
            start_up: false,
        };
        obs.events.insert(3, at(1.0, kill));
        obs.events.insert(
            4,
            at(
                1.1,
                Event::Exited {
                    code: None,
                    signal: Some(9),
                    killed_by_chaosrun: false,
                },
            ),
        );
        obs.events.insert(
            5,
            at(
                1.2,
                Event::Restarted {
                    pid: 43,
                    start_turn: Some(1),
                },
            ),
        );
        obs.events.insert(6, at(1.5, Event::Ready));
        obs
    }

    #[test]
    fn a_restarted_agent_that_replays_from_turn_zero_breaks_the_protocol() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 1}}");
        let mut obs = killed_run(&s);
        let c = check(&s, &obs);
        assert!(!c.iter().find(|c| c.name == "protocol").unwrap().failed());
        // The restarted agent (ready at 1.5 s) starts turn 0 again.
        let replay = obs
            .events
            .iter()
            .position(|t| t.at == 1.5 && matches!(t.event, Event::Ready))
            .unwrap();
        obs.events
            .insert(replay + 1, at(1.6, Event::TurnStart { i: 0 }));
        let c = check(&s, &obs);
        let v = c
            .iter()
            .find(|c| c.name == "protocol")
            .unwrap()
            .violations();
        assert!(
            v[0].contains("start_turn 1 began with turn_start 0"),
            "{v:?}"
        );
    }

    #[test]
    fn killed_and_resumed_passes() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 1}}");
        let c = check(&s, &killed_run(&s));
        assert!(c.iter().all(|c| !c.failed()), "{c:?}");
        assert!(c.iter().any(|c| c.name == "resumes_after_kill"));
    }

    /// The kernel killed the agent's engine child, not the agent: no
    /// restart, the agent ended the faulted turn itself after the kill. The
    /// kill landed mid-turn; resuming is not checked, and says why.
    #[test]
    fn an_oom_of_another_process_of_the_tree_needs_no_resume() {
        let s = scenario("expect: killed\nprocess_fault: {action: oom, at: {after_calls: 1}}");
        let mut obs = healthy(&s, end(0, true, false, "tools settled"));
        let end0 = obs
            .events
            .iter()
            .position(|t| matches!(t.event, Event::TurnEnd(ref e) if e.i == 0))
            .unwrap();
        let at_end = obs.events[end0].at;
        let oom = Event::OomKill {
            via: "cgroup v1 memory.limit_in_bytes".into(),
            usage_mb: 0.0,
            limit_mb: 32.0,
            oom_kills: 1,
            error: None,
        };
        let kill = Event::ProcessFault {
            action: "kill".into(),
            signalled: 1,
            main_calls: 1,
            start_up: false,
        };
        obs.events.insert(end0, at(at_end - 0.1, kill));
        obs.events.insert(end0, at(at_end - 0.1, oom));
        let c = check(&s, &obs);
        assert!(c.iter().all(|c| !c.failed()), "{c:?}");
        let r = c.iter().find(|c| c.name == "resumes_after_kill").unwrap();
        let why = r.not_checked_reason().unwrap_or_default();
        assert!(why.contains("hit another process of its tree"), "{r:?}");
        // The agent heard of its engine's death at once and ended the turn
        // 0.7 ms before chaosrun recorded the OOM (inside the notice lag, as
        // seen in CI on 2026-12-06): the kill still landed in the turn.
        let mut raced = obs.clone();
        for t in raced.events.iter_mut() {
            if matches!(t.event, Event::OomKill { .. } | Event::ProcessFault { .. }) {
                t.at = at_end + 0.0007;
            }
        }
        raced.events.sort_by(|a, b| a.at.total_cmp(&b.at));
        let c = check(&s, &raced);
        assert!(c.iter().all(|c| !c.failed()), "{c:?}");
        // Killed, with no restart and no turn end: that is a failure.
        obs.events
            .retain(|t| !matches!(t.event, Event::TurnEnd(ref e) if e.i == 0));
        let c = check(&s, &obs);
        let r = c.iter().find(|c| c.name == "resumes_after_kill").unwrap();
        assert!(r.failed(), "{r:?}");
    }

    #[test]
    fn restarted_agent_that_never_boots_fails() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 1}}");
        let mut obs = killed_run(&s);
        obs.events
            .retain(|t| !(t.at == 1.5 && matches!(t.event, Event::Ready)));
        let c = check(&s, &obs);
        let r = c.iter().find(|c| c.name == "resumes_after_kill").unwrap();
        assert!(r.violations()[0].contains("never said ready"), "{r:?}");
    }

    /// ACP: a restart whose session/load was answered with an error says
    /// that error, not only that the agent never said ready.
    #[test]
    fn a_session_load_error_is_named() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 1}}");
        let mut obs = killed_run(&s);
        obs.events
            .retain(|t| !(t.at == 1.5 && matches!(t.event, Event::Ready)));
        obs.events.push(at(
            1.5,
            Event::SessionLoaded {
                before_turn: 0,
                turns: vec![],
                dropped: 0,
                tool_calls: 0,
                error: Some("-32603 session file unreadable".into()),
            },
        ));
        let c = check(&s, &obs);
        let r = c.iter().find(|c| c.name == "resumes_after_kill").unwrap();
        assert_eq!(
            r.violations(),
            ["the restarted agent answered session/load with an error: -32603 session file unreadable"]
        );
    }

    #[test]
    fn kill_that_never_fired_fails() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 9}}");
        let obs = healthy(&s, end(0, true, false, "done early"));
        let c = check(&s, &obs);
        assert!(c
            .iter()
            .find(|c| c.name == "kill_landed_mid_turn")
            .unwrap()
            .failed());
    }

    #[test]
    fn kill_behind_a_turn_stuck_past_its_deadline_says_so() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 3}}");
        let mut obs = healthy(&s, end(0, true, false, "x"));
        obs.events.retain(|t| !matches!(t.event, Event::TurnEnd(_)));
        obs.events.push(at(
            90.0,
            Event::DeadlineMissed {
                phase: Phase::FaultedTurn,
                seconds: 90.0,
            },
        ));
        obs.recording.main_calls = 1;
        let c = check(&s, &obs);
        let k = c.iter().find(|c| c.name == "kill_landed_mid_turn").unwrap();
        assert!(
            k.violations()[0].contains("still running at its 90 s deadline, after 1 main call(s)"),
            "{k:?}"
        );
    }

    #[test]
    fn agent_log_tails_are_evidence() {
        let s = scenario("expect: error");
        let mut obs = healthy(&s, end(0, false, true, "x"));
        obs.events.retain(|t| !matches!(t.event, Event::TurnEnd(_)));
        obs.log_tails = vec![(
            "h/.hermes/logs/agent.log".into(),
            "stale stream killed".into(),
        )];
        let c = check(&s, &obs);
        let v = &c
            .iter()
            .find(|c| c.name == "faulted_turn_ends")
            .unwrap()
            .violations()[0];
        assert!(
            v.contains("log h/.hermes/logs/agent.log tail:\nstale stream killed"),
            "{v}"
        );
    }

    fn chaos_run(kills: usize, stops: usize) -> (Scenario, Observation) {
        let s = scenario("expect: survives\nchaos: {turns: 2, duration: 10, min_faults: 3}");
        let mut o = healthy(&s, end(0, true, false, "ok"));
        o.probe_turn = 2;
        let mut t = 0.5;
        for _ in 0..kills {
            o.events.push(at(
                t,
                Event::ProcessFault {
                    action: "kill".into(),
                    signalled: 1,
                    main_calls: 1,
                    start_up: false,
                },
            ));
            o.events.push(at(
                t + 0.1,
                Event::Restarted {
                    pid: 50,
                    start_turn: Some(1),
                },
            ));
            o.events.push(at(t + 0.2, Event::Ready));
            t += 0.5;
        }
        for _ in 0..stops {
            o.events.push(at(
                t,
                Event::ProcessFault {
                    action: "stop".into(),
                    signalled: 3,
                    main_calls: 1,
                    start_up: false,
                },
            ));
            t += 0.5;
        }
        o.events
            .push(at(t, Event::TurnEnd(end(1, true, false, "ok"))));
        o.events.push(at(
            t,
            Event::TurnEnd(end(2, true, false, &format!("alive {NONCE}"))),
        ));
        (s, o)
    }

    #[test]
    fn chaos_run_with_enough_faults_passes() {
        let (s, o) = chaos_run(2, 1);
        assert!(
            check(&s, &o).iter().all(|c| !c.failed()),
            "{:?}",
            check(&s, &o)
        );
    }

    #[test]
    fn chaos_run_with_too_few_faults_is_meaningless() {
        let (s, o) = chaos_run(1, 1);
        let c = crate::oracle::check(&s, crate::observe::Capabilities::default(), &o);
        let v = c
            .iter()
            .find(|c| c.name == "enough_faults_landed")
            .unwrap()
            .violations();
        assert!(v[0].contains("meaningless: only 2 faults landed"), "{v:?}");
    }

    #[test]
    fn faults_in_a_turns_start_up_are_shown_but_not_counted() {
        // Three faults landed, enough, but all during exec-mode start-ups.
        let (s, mut o) = chaos_run(2, 1);
        let full = o.clone();
        for t in &mut o.events {
            if let Event::ProcessFault { start_up, .. } = &mut t.event {
                *start_up = true;
            }
        }
        let named = |o: &Observation| {
            crate::oracle::check(&s, crate::observe::Capabilities::default(), o)
                .into_iter()
                .find(|c| c.name == "enough_faults_landed")
                .unwrap()
        };
        let v = named(&o).violations().to_vec();
        assert!(
            v[0].contains(
                "only 0 faults landed (0 kills, 0 stops) (3 more landed during a turn's start-up"
            ),
            "{v:?}"
        );
        // One in working time, two in start-up: still too few.
        if let Some(Event::ProcessFault { start_up, .. }) = o
            .events
            .iter_mut()
            .map(|t| &mut t.event)
            .find(|e| matches!(e, Event::ProcessFault { .. }))
        {
            *start_up = false;
        }
        assert!(named(&o).violations()[0].contains("only 1 faults landed"));
        // The same faults in working time pass.
        assert!(!named(&full).failed(), "{:?}", named(&full));
        assert_eq!(
            o.faults_landed(),
            (2, 1),
            "every landed fault is still shown"
        );
    }

    /// An exec-mode faulted turn: spawned at 0.2 s, first call `first` s
    /// later, ended at `end_at`.
    fn exec_turn(s: &Scenario, first: Option<f64>, end_at: f64) -> Observation {
        let mut o = healthy(s, end(0, false, true, "provider error"));
        o.events
            .retain(|t| !matches!(t.event, Event::TurnEnd(_) | Event::TurnStart { .. }));
        o.events.push(at(0.2, Event::TurnStart { i: 0 }));
        if let Some(after) = first {
            o.events.push(at(
                0.2 + after,
                Event::FirstCall {
                    turn: 0,
                    after_spawn: after,
                    first_output: None,
                },
            ));
        }
        o.events.push(at(
            end_at,
            Event::TurnEnd(end(0, false, true, "provider error")),
        ));
        o
    }

    #[test]
    fn an_exec_turns_time_runs_from_its_first_call() {
        let s = scenario("expect: error\ndeadlines: {turn: 10, boot: 20}");
        let named = |o: &Observation| {
            check(&s, o)
                .into_iter()
                .find(|c| c.name == "faulted_turn_ends")
                .unwrap()
        };
        // 8 s of start-up, then 9 s of work: within the 10 s turn deadline.
        assert!(!named(&exec_turn(&s, Some(8.0), 17.2)).failed());
        // Counted from the spawn it would be 17 s: what session mode does.
        let v = named(&exec_turn(&s, None, 17.2)).violations().to_vec();
        assert!(
            v[0].contains("took 17.0 s, past its 10 s deadline"),
            "{v:?}"
        );
        // 12 s of work after the first call is late, and says when it came.
        let v = named(&exec_turn(&s, Some(3.0), 15.3)).violations().to_vec();
        assert!(
            v[0].contains("took 12.1 s, past its 10 s deadline (first call at 3.0 s after spawn)"),
            "{v:?}"
        );
    }

    #[test]
    fn an_exec_turn_that_never_reached_the_provider_fails_boots() {
        let s = scenario("expect: error\ndeadlines: {boot: 4}");
        let mut o = healthy(&s, end(0, false, true, "x"));
        o.events
            .retain(|t| !matches!(t.event, Event::TurnEnd(_) | Event::TurnStart { .. }));
        o.events.push(at(0.2, Event::TurnStart { i: 0 }));
        o.events.push(at(
            4.2,
            Event::DeadlineMissed {
                phase: Phase::StartUp,
                seconds: 4.0,
            },
        ));
        let c = check(&s, &o);
        let boots = c.iter().find(|c| c.name == "boots").unwrap();
        assert!(
            boots.violations()[0].contains("never reached the provider within 4 s of its start"),
            "{c:?}"
        );
        assert!(c
            .iter()
            .find(|c| c.name == "faulted_turn_ends")
            .is_some_and(|c| c.not_checked_reason().is_some()));
    }

    #[test]
    fn chaos_run_with_an_unfinished_turn_fails() {
        let (s, mut o) = chaos_run(2, 1);
        o.events
            .retain(|t| !matches!(&t.event, Event::TurnEnd(e) if e.i == 1));
        let c = check(&s, &o);
        assert!(c
            .iter()
            .find(|c| c.name == "every_turn_finishes")
            .unwrap()
            .violations()[0]
            .contains("turn(s) 1 never finished"));
    }

    #[test]
    fn an_event_flood_past_the_cap_is_a_protocol_violation() {
        let s = scenario("expect: error");
        let mut obs = healthy(&s, end(0, false, true, "x"));
        assert!(!check(&s, &obs)
            .iter()
            .find(|c| c.name == "protocol")
            .unwrap()
            .failed());
        obs.capped.events_dropped = 990_000;
        let protocol = check(&s, &obs)
            .into_iter()
            .find(|c| c.name == "protocol")
            .unwrap();
        assert!(protocol.violations()[0].contains("990000 events past"));
    }

    #[test]
    fn bad_event_lines_are_protocol_violations() {
        let s = scenario("expect: error");
        let mut obs = healthy(&s, end(0, false, true, "x"));
        obs.events.push(at(
            0.5,
            Event::BadEvent {
                line: "{oops".into(),
            },
        ));
        assert!(check(&s, &obs)
            .iter()
            .find(|c| c.name == "protocol")
            .unwrap()
            .failed());
    }

    /// Over ACP a bad event is a frame of the JSON-RPC stream (an invalid
    /// one, a response to an id never asked), not a `CHAOS ` line: the
    /// violation says so instead of quoting it as a driver-protocol line.
    #[test]
    fn a_bad_acp_frame_is_named_as_one() {
        let s = scenario("expect: error");
        let bad = vec![at(
            0.5,
            Event::BadEvent {
                line: "response to id 99, which chaosrun never asked: {\"id\":99}".into(),
            },
        )];
        let obs = acp(&s, end(0, false, true, "x"), bad);
        let c = check(&s, &obs);
        let v = c
            .iter()
            .find(|c| c.name == "protocol")
            .unwrap()
            .violations();
        assert_eq!(
            v,
            ["bad ACP frame from the agent: response to id 99, which chaosrun never asked: {\"id\":99}"]
        );
    }
}
