//! Process hygiene: a hung tool is gone before the next turn starts; `closed`
//! arrives; the agent exits by itself; no process carrying the scenario's tag
//! survives it.

use super::{Check, Invariant};
use crate::observe::{Event, Observation, Phase};
use crate::scenarios::Scenario;

fn killed_by_chaosrun(obs: &Observation) -> bool {
    matches!(
        obs.exited(),
        Some((
            _,
            Event::Exited {
                killed_by_chaosrun: true,
                ..
            }
        ))
    )
}

fn through_turns(obs: &Observation) -> bool {
    obs.turn_end(obs.probe_turn).is_some()
}

pub fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let inv = Invariant::ProcessHygiene;
    let mut out = Vec::new();
    if let Some(needle) = &s.tool_gone {
        out.push(tool_gone(obs, needle));
    }
    if !through_turns(obs) {
        let why = "the agent did not get through its turns, so chaosrun stopped it";
        out.push(Check::skipped(inv, "closed", why));
        out.push(Check::skipped(inv, "exits_by_itself", why));
    } else {
        let (closed, silent) = closed(s, obs);
        out.push(closed);
        out.push(exits_by_itself(s, obs, silent));
    }
    if let Some(c) = background_silent(obs) {
        out.push(c);
    }
    out.extend(adopted(obs));
    out.push(no_survivors(s, obs));
    out
}

/// The tool whose command line contains `needle` is gone when the probe
/// turn starts.
fn tool_gone(obs: &Observation, needle: &str) -> Check {
    let inv = Invariant::ProcessHygiene;
    match obs.snapshots.iter().find(|s| s.label == "probe_turn_start") {
        None => Check::skipped(
            inv,
            "tool_gone_before_next_turn",
            "the probe turn never started",
        ),
        Some(snap) => Check::new(
            inv,
            "tool_gone_before_next_turn",
            snap.procs
                .iter()
                .filter(|p| p.cmdline.contains(needle))
                .map(|p| format!("still running when the next turn started: {p}"))
                .collect(),
        ),
    }
}

/// Every worker (a single agent is worker 0) said `closed`; also whether
/// every one did.
fn closed(s: &Scenario, obs: &Observation) -> (Check, bool) {
    let closed: std::collections::BTreeSet<usize> = obs
        .events
        .iter()
        .filter(|t| matches!(t.event, Event::Closed))
        .map(|t| t.worker.unwrap_or(0))
        .collect();
    let silent: Vec<String> = (0..obs.workers)
        .filter(|k| !closed.contains(k))
        .map(|k| k.to_string())
        .collect();
    let check = Check::new(
        Invariant::ProcessHygiene,
        "closed",
        match (silent.is_empty(), obs.workers) {
            (true, _) => vec![],
            (false, 1) => vec![format!(
                "`closed` never arrived within {:.0} s of the probe turn",
                s.deadlines.exit
            )],
            (false, _) => vec![format!(
                "worker(s) {} never said `closed` within {:.0} s of the probe turn",
                silent.join(", "),
                s.deadlines.exit
            )],
        },
    );
    (check, silent.is_empty())
}

/// Each worker's last exit is its own, not chaosrun's kill; `all_closed`:
/// every worker said `closed`.
fn exits_by_itself(s: &Scenario, obs: &Observation, all_closed: bool) -> Check {
    let mut last_exit: std::collections::BTreeMap<usize, bool> = Default::default();
    for t in &obs.events {
        if let Event::Exited {
            killed_by_chaosrun, ..
        } = t.event
        {
            last_exit.insert(t.worker.unwrap_or(0), killed_by_chaosrun);
        }
    }
    let after_closed = if obs.deadline_missed(Phase::Exit).is_some() && all_closed {
        " of `closed`"
    } else {
        ""
    };
    let mut v = Vec::new();
    for k in 0..obs.workers {
        let who = if obs.workers == 1 {
            "the agent".to_string()
        } else {
            format!("worker {k}")
        };
        match last_exit.get(&k) {
            Some(true) => v.push(format!(
                "{who} did not exit by itself within {:.0} s{after_closed}; chaosrun killed it",
                s.deadlines.exit
            )),
            Some(false) => {}
            None => v.push(format!("{who}'s exit was never observed")),
        }
    }
    Check::new(Invariant::ProcessHygiene, "exits_by_itself", v)
}

/// No process of the scenario outlived the reap deadline (not checked when
/// chaosrun had to kill the agent, or when orphans could not be attributed).
fn no_survivors(s: &Scenario, obs: &Observation) -> Check {
    let inv = Invariant::ProcessHygiene;
    if killed_by_chaosrun(obs) {
        let listed: Vec<String> = obs.survivors.iter().map(|p| p.to_string()).collect();
        return Check::skipped(
            inv,
            "no_survivors",
            if listed.is_empty() {
                "chaosrun had to kill the agent, so it had no chance to clean up".to_string()
            } else {
                format!(
                    "chaosrun had to kill the agent, so it had no chance to clean up; left: {}",
                    listed.join("; ")
                )
            },
        );
    }
    if obs.survivors.is_empty() && !obs.containment.unattributed.is_empty() {
        // The tag fallback saw untagged processes orphaned onto chaosrun that
        // no scenario's tree had seen: whose they are cannot be told.
        let listed: Vec<String> = obs
            .containment
            .unattributed
            .iter()
            .map(|p| p.to_string())
            .collect();
        return Check::skipped(
            inv,
            "no_survivors",
            format!(
                "no cgroup ({}): untagged processes orphaned onto chaosrun could not be attributed to a scenario: {}",
                obs.containment.reason.as_deref().unwrap_or("tag fallback"),
                listed.join("; ")
            ),
        );
    }
    Check::new(
        inv,
        "no_survivors",
        obs.survivors
            .iter()
            .map(|p| {
                // The stdio MCP relay chaosrun hands the agent, by its argv.
                let what = if p.cmdline.contains("mcp-stdio") {
                    "MCP stdio server left running: "
                } else {
                    ""
                };
                format!("{what}survived the agent by {:.0} s: {p}", s.deadlines.reap)
            })
            .collect(),
    )
}

/// A process older than the scenario that the agent moved into its cgroup:
/// chaosrun moved it back out and left it alone (never signalled); the
/// agent's doing is a violation, reported by pid.
fn adopted(obs: &Observation) -> Option<Check> {
    let adopted = &obs.containment.adopted;
    (!adopted.is_empty()).then(|| {
        Check::new(
            Invariant::ProcessHygiene,
            "no_adopted_process",
            adopted
                .iter()
                .map(|p| {
                    format!(
                        "the agent moved pid {}, started before the scenario, into its cgroup; chaosrun moved it out and left it alone: {p}",
                        p.pid
                    )
                })
                .collect(),
        )
    })
}

/// Seconds a dying job may take to stop writing after its agent is gone.
pub const JOURNAL_GRACE_S: f64 = 1.0;

/// The worker running a turn at `t` (None: a single agent): the one whose
/// `turn_start` came last at or before `t`, unless that turn had already
/// ended by `t`, or its worker had been killed by `t` (another worker takes
/// the turn over); then the next turn to start. A turn's `turn_start` line
/// and its first request travel separately (stdout, the provider's socket),
/// so the request can be seen first: a call made after the last turn ended,
/// or after its worker died, belongs to the next one. When the call's turn
/// is known (`turn`, from its last user message), only that turn's starts
/// count: a turn's first request can even arrive before the previous
/// turn's `turn_end` line.
fn turn_owner(obs: &Observation, t: f64, turn: Option<u64>) -> Option<usize> {
    let starts = || {
        obs.events.iter().filter_map(|e| match e.event {
            Event::TurnStart { i } if turn.is_none_or(|k| k == i) => Some((e.at, e.worker, i)),
            _ => None,
        })
    };
    let last = starts()
        .filter(|s| s.0 <= t)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let gone = |(at, worker, i): (f64, Option<usize>, u64)| {
        obs.events.iter().any(|e| {
            let over = match &e.event {
                Event::TurnEnd(end) => end.i == i,
                other => landed_kill(other),
            };
            over && e.worker == worker && e.at > at && e.at <= t
        })
    };
    match last {
        Some(s) if !gone(s) => s.1,
        _ => starts()
            .filter(|s| s.0 > t)
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .or(last)
            .and_then(|s| s.1),
    }
}

/// A kill chaosrun sent that reached at least one process.
fn landed_kill(e: &Event) -> bool {
    matches!(e, Event::ProcessFault { action, signalled, .. } if action.kills() && *signalled > 0)
}

/// A landed kill: when, which worker (None: the single agent), and when that
/// worker's jobs must have been fenced by: its restarted incarnation's
/// `ready`, or the second turn any worker started after it, whichever came
/// first. Not the first: that turn may have been claimed (and its fence run)
/// just before the kill, its `turn_start` line printed just after; the next
/// turn is claimed only once that one is done.
struct Kill {
    at: f64,
    worker: Option<usize>,
    fenced: Option<f64>,
}

fn kills(obs: &Observation) -> Vec<Kill> {
    let fenced = |at: f64, worker: Option<usize>| {
        let ready = obs
            .events
            .iter()
            .find(|r| r.at > at && r.worker == worker && matches!(r.event, Event::Ready))
            .map(|r| r.at);
        let second_turn = obs
            .events
            .iter()
            .filter(|r| r.at > at && matches!(r.event, Event::TurnStart { .. }))
            .nth(1)
            .map(|r| r.at);
        ready.into_iter().chain(second_turn).reduce(f64::min)
    };
    obs.events
        .iter()
        .filter(|t| landed_kill(&t.event))
        .map(|t| Kill {
            at: t.at,
            worker: t.worker,
            fenced: fenced(t.at, t.worker),
        })
        .collect()
}

/// A background job's heartbeats (`bg UNIX_TIME [CALL]` journal lines) must
/// stop once the agent that owns it is gone: after a kill, by the time the
/// restarted agent is ready; at the end, when the agent has exited. `CALL`, the
/// main call that started the job, tells which incarnation owns it (the one
/// alive when that call was made); without it, the first.
fn background_silent(obs: &Observation) -> Option<Check> {
    let beats: Vec<(f64, Option<u64>)> = obs
        .journal
        .iter()
        .filter_map(|l| {
            let mut it = l.strip_prefix("bg ")?.split_whitespace();
            let at: f64 = it.next()?.parse().ok()?;
            Some((at, it.next().and_then(|c| c.parse().ok())))
        })
        .collect();
    if beats.is_empty() {
        return None;
    }
    let kills = kills(obs);
    // When the main call that started a job was made, and in which turn
    // (its last user message).
    let born = |call: Option<u64>| -> (f64, Option<u64>) {
        let r = call.and_then(|c| {
            obs.recording
                .requests
                .iter()
                .find(|r| r.main_index == Some(c))
        });
        let turn = r.and_then(|r| {
            let last = r.messages.iter().rev().find(|m| m.role == "user")?;
            crate::observe::turn_of_message(&last.content, &obs.fault_message)
        });
        (r.map_or(0.0, |r| r.at + obs.provider_offset), turn)
    };
    let exit = obs.exited().map(|(at, _)| at);
    // Late beats after a restart (how late, the job's call, its owner's
    // kill), and after the exit (how late).
    let (mut after_restart, mut after_exit): (Vec<Late>, Vec<f64>) = (vec![], vec![]);
    for (beat, call) in beats {
        let beat = beat - obs.started_unix;
        let (start, turn) = born(call);
        let who = turn_owner(obs, start, turn);
        let owner_killed = kills.iter().find(|k| k.at > start && k.worker == who);
        if let Some(
            kill @ Kill {
                fenced: Some(fenced),
                ..
            },
        ) = owner_killed
        {
            if beat > fenced + JOURNAL_GRACE_S {
                after_restart.push((beat - fenced, call, kill));
            }
        }
        if let Some(exit) = exit {
            if beat > exit + JOURNAL_GRACE_S {
                after_exit.push(beat - exit);
            }
        }
    }
    let worst = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let mut v = Vec::new();
    // The first of the latest beats after a restart.
    let worst_job = after_restart
        .iter()
        .copied()
        .reduce(|a, b| if b.0 > a.0 { b } else { a });
    if let Some(job) = worst_job {
        v.push(format!(
            "a background job of a killed agent still wrote to the journal {:.1} s after the restarted agent was ready ({} late writes){}",
            job.0,
            after_restart.len(),
            whose(job)
        ));
    }
    if !after_exit.is_empty() {
        v.push(format!(
            "a background job wrote to the journal {:.1} s after the agent exited ({} late writes)",
            worst(&after_exit),
            after_exit.len()
        ));
    }
    Some(Check::new(
        Invariant::ProcessHygiene,
        "background_silent_after_death",
        v,
    ))
}

/// A beat written after its owner's fence: seconds past the fence, the
/// job's call, the owner's kill.
type Late<'a> = (f64, Option<u64>, &'a Kill);

/// Which job wrote the worst late beat, in worker mode (a single agent's
/// message is already whole): its call, its owner, the kill and the fence.
fn whose((_, call, kill): Late) -> String {
    match (kill.worker, kill.fenced) {
        (Some(w), Some(fenced)) => format!(
            "; the worst from the job started by call {}, owned by worker {w}, killed at {:.2} s, fenced by {:.2} s",
            call.map_or("?".into(), |c| c.to_string()),
            kill.at,
            fenced
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::message::Message;
    use crate::proc_hygiene::ProcInfo;

    fn proc(cmd: &str) -> ProcInfo {
        ProcInfo {
            pid: 7,
            ppid: 1,
            state: 'S',
            cmdline: cmd.into(),
        }
    }

    /// An event of worker `worker` at `t` s.
    fn w(t: f64, worker: usize, e: Event) -> crate::observe::Timed {
        crate::observe::Timed {
            worker: Some(worker),
            ..at(t, e)
        }
    }

    /// The owner of a call at `t` whose turn is not known.
    fn turn_owner_at(o: &Observation, t: f64) -> Option<usize> {
        turn_owner(o, t, None)
    }

    /// A kill chaosrun landed.
    fn kill() -> Event {
        Event::ProcessFault {
            action: "kill".into(),
            signalled: 1,
            main_calls: 99,
            start_up: false,
        }
    }

    fn named<'a>(c: &'a [Check], name: &str) -> &'a Check {
        c.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn clean_run_passes() {
        let s = scenario("expect: ended\ntool_gone: sleep 3600");
        let o = healthy(&s, end(0, true, false, "x"));
        assert!(check(&s, &o)
            .iter()
            .all(|c| c.status == super::super::Status::Pass));
    }

    #[test]
    fn hung_tool_alive_at_next_turn_fails() {
        let s = scenario("expect: ended\ntool_gone: sleep 3600");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.snapshots[0].procs = vec![proc("python3 agent.py"), proc("sleep 3600")];
        let c = check(&s, &o);
        let v = named(&c, "tool_gone_before_next_turn").violations();
        assert_eq!(v.len(), 1);
        assert!(v[0].contains("sleep 3600"));
    }

    #[test]
    fn heartbeats_after_restart_or_exit_fail() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        let t0 = o.started_unix;
        o.journal = vec![format!("bg {} j", t0 + 1.0)];
        assert!(!named(&check(&s, &o), "background_silent_after_death").failed());
        // The agent exited at 3.6 s; a beat at 6 s is a job that outlived it.
        o.journal.push(format!("bg {} j", t0 + 6.0));
        let c = check(&s, &o);
        assert!(named(&c, "background_silent_after_death").violations()[0]
            .contains("after the agent exited"));
    }

    /// Worker mode, the timings of a CI soak (seconds on the run clock):
    /// worker 1's request for turn 48 (call 96, which starts the job) reached
    /// the provider 3 ms before its `turn_start` line reached chaosrun, just
    /// after worker 2 ended turn 47; worker 2's later kill is not the job's
    /// owner's.
    #[test]
    fn a_call_seen_before_its_turn_start_belongs_to_the_next_turn() {
        use crate::provider::recording::CallKind;
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.events = vec![
            w(40.21, 2, Event::TurnStart { i: 47 }),
            w(41.58, 2, Event::TurnEnd(end(47, true, false, "x"))),
            w(41.618, 1, Event::TurnStart { i: 48 }),
            w(42.10, 1, Event::TurnEnd(end(48, true, false, "x"))),
            w(42.36, 2, kill()),
            w(42.79, 0, Event::TurnStart { i: 50 }),
            w(44.78, 1, kill()),
        ];
        let mut call = request(96, CallKind::Main, vec![]);
        call.at = 41.615 - o.provider_offset;
        o.recording.requests = vec![call];
        let t0 = o.started_unix;
        o.journal = [42.03, 43.04, 44.05]
            .iter()
            .map(|b| format!("bg {} 96", t0 + b))
            .collect();
        assert_eq!(turn_owner_at(&o, 41.615), Some(1));
        assert_eq!(turn_owner_at(&o, 41.0), Some(2));
        assert!(!named(&check(&s, &o), "background_silent_after_death").failed());
        // Had worker 1 (the owner) been killed at 42.36, the beat at 44.05
        // would be 1.25 s past its restarted incarnation's `ready`: a
        // violation, named with the job's call, owner, kill and fence.
        o.events[4].worker = Some(1);
        o.events.insert(5, w(42.80, 1, Event::Ready));
        let c = check(&s, &o);
        let v = named(&c, "background_silent_after_death").violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("1.2 s after the restarted agent was ready (1 late writes)")
                && v[0]
                    .contains("call 96, owned by worker 1, killed at 42.36 s, fenced by 42.80 s"),
            "{v:?}"
        );
    }

    /// A turn taken over after its worker's kill: the taker's first request
    /// is seen before its `turn_start` line, while the last `turn_start` is
    /// still the dead worker's (its turn never ended). The job is the
    /// taker's; the dead worker's second kill is not its owner's.
    #[test]
    fn a_call_of_a_taken_over_turn_belongs_to_the_taker() {
        use crate::provider::recording::CallKind;
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.events = vec![
            w(10.0, 1, Event::TurnStart { i: 48 }),
            w(10.5, 1, kill()),
            w(11.0, 1, Event::Ready),
            w(12.003, 2, Event::TurnStart { i: 48 }),
            w(12.8, 1, kill()),
            w(13.0, 1, Event::Ready),
            w(15.0, 2, Event::TurnEnd(end(48, true, false, "x"))),
        ];
        let mut call = request(96, CallKind::Main, vec![]);
        call.at = 12.0 - o.provider_offset;
        o.recording.requests = vec![call];
        let t0 = o.started_unix;
        o.journal = [12.5, 13.5, 14.5]
            .iter()
            .map(|b| format!("bg {} 96", t0 + b))
            .collect();
        assert_eq!(turn_owner_at(&o, 10.2), Some(1));
        assert_eq!(turn_owner_at(&o, 12.0), Some(2));
        assert!(!named(&check(&s, &o), "background_silent_after_death").failed());
    }

    /// A local soak's timings: worker 0's first request of turn 43 (call 86,
    /// which starts the job) reached the provider 8 ms before worker 2's
    /// `turn_end` line for turn 42, just after worker 2's SIGCONT. By time
    /// alone turn 42's worker 2 owned it; its last user message says turn
    /// 43, so worker 2's later kill is not the owner's.
    #[test]
    fn a_call_belongs_to_the_turn_its_last_user_message_names() {
        use crate::provider::recording::CallKind;
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.events = vec![
            w(21.33, 2, Event::TurnStart { i: 42 }),
            w(22.004, 2, Event::TurnEnd(end(42, true, false, "x"))),
            w(22.02, 0, Event::TurnStart { i: 43 }),
            w(22.37, 0, Event::TurnEnd(end(43, true, false, "x"))),
            w(22.601, 2, kill()),
            w(23.03, 2, Event::Ready),
        ];
        let user = |text: &str| Message {
            role: "user".into(),
            content: text.into(),
            ..Message::default()
        };
        let msgs = vec![
            user("Chaos turn 42: carry on with the task."),
            user(&crate::observe::chaos_turn_message(43)),
        ];
        let mut call = request(86, CallKind::Main, msgs);
        call.at = 21.996 - o.provider_offset;
        o.recording.requests = vec![call];
        let t0 = o.started_unix;
        o.journal = [22.36, 23.366, 24.37]
            .iter()
            .map(|b| format!("bg {} 86", t0 + b))
            .collect();
        assert_eq!(turn_owner_at(&o, 21.996), Some(2), "by time alone");
        assert_eq!(turn_owner(&o, 21.996, Some(43)), Some(0));
        assert!(!named(&check(&s, &o), "background_silent_after_death").failed());
        assert_eq!(
            crate::observe::turn_of_message(&o.fault_message, &o.fault_message),
            Some(0)
        );
    }

    /// The first turn to start after a kill may have been claimed, and its
    /// fence run, just before the kill: only the second turn after it (or
    /// the killed worker's own restart) bounds when the job must be gone.
    #[test]
    fn a_turn_claimed_before_the_kill_is_not_its_fence() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.events = vec![
            w(1.0, 0, Event::TurnStart { i: 0 }),
            w(1.5, 0, Event::TurnEnd(end(0, true, false, "x"))),
            w(2.000, 0, kill()),
            w(2.004, 1, Event::TurnStart { i: 1 }),
            w(4.0, 1, Event::TurnEnd(end(1, true, false, "x"))),
            w(4.2, 2, Event::TurnStart { i: 2 }),
        ];
        let t0 = o.started_unix;
        o.journal = vec![format!("bg {} 0", t0 + 3.5)];
        let mut call = request(0, crate::provider::recording::CallKind::Main, vec![]);
        call.at = 1.1 - o.provider_offset;
        o.recording.requests = vec![call];
        assert!(!named(&check(&s, &o), "background_silent_after_death").failed());
        // A beat 1.3 s after the second turn's start is late.
        o.journal.push(format!("bg {} 0", t0 + 5.5));
        assert!(named(&check(&s, &o), "background_silent_after_death").failed());
    }

    #[test]
    fn survivors_fail_with_their_command_lines() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.survivors = vec![proc("setsid sleep 3600")];
        assert!(named(&check(&s, &o), "no_survivors").violations()[0].contains("setsid sleep 3600"));
    }

    #[test]
    fn an_adopted_older_process_is_reported_by_pid_and_fails() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        assert!(!check(&s, &o).iter().any(|c| c.name == "no_adopted_process"));
        o.containment.adopted = vec![proc("sleep 3600 DECOY-x")];
        let c = check(&s, &o);
        let v = named(&c, "no_adopted_process").violations();
        assert!(
            v[0].contains("started before the scenario, into its cgroup"),
            "{v:?}"
        );
        assert!(v[0].contains("DECOY-x"), "{v:?}");
        assert!(!named(&c, "no_survivors").failed());
    }

    #[test]
    fn unattributed_orphans_under_the_tag_fallback_are_not_checked() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.containment.reason = Some("no cgroup2 filesystem is mounted".into());
        o.containment.unattributed = vec![proc("sleep 3600 HOSTILE-x")];
        let c = check(&s, &o);
        let n = named(&c, "no_survivors");
        assert!(n.not_checked(), "{n:?}");
        assert!(format!("{n:?}").contains("HOSTILE-x"));
    }

    #[test]
    fn missing_closed_and_a_kill_fail() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.events
            .retain(|t| !matches!(t.event, Event::Closed | Event::Exited { .. }));
        o.events.push(at(
            40.0,
            Event::DeadlineMissed {
                phase: Phase::Exit,
                seconds: 30.0,
            },
        ));
        o.events.push(at(
            40.1,
            Event::Exited {
                code: None,
                signal: Some(9),
                killed_by_chaosrun: true,
            },
        ));
        let c = check(&s, &o);
        assert!(named(&c, "closed").failed());
        assert!(named(&c, "exits_by_itself").failed());
        assert!(named(&c, "no_survivors").not_checked());
    }

    #[test]
    fn stopped_mid_turn_is_not_checked_not_passed() {
        let s = scenario("expect: ended");
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.events.retain(|t| {
            !matches!(
                t.event,
                Event::TurnEnd(_) | Event::Closed | Event::Exited { .. }
            )
        });
        o.events.push(at(
            91.0,
            Event::Exited {
                code: None,
                signal: Some(9),
                killed_by_chaosrun: true,
            },
        ));
        let c = check(&s, &o);
        assert!(c.iter().all(|c| c.not_checked()), "{c:?}");
    }
}
