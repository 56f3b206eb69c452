//! Exercised: evidence, from the observation alone, that the scenario's fault
//! landed. A scenario whose fault never landed proves nothing, so it fails here
//! saying what was missing:
//! - a provider fault (any rule but a plain answer): the rule answered a main call;
//! - a hung or background tool (`tool_gone`, a `wait_for` rule): its process was
//!   seen (sampled, in a snapshot, by a `wait_for`, or by a `when_process`
//!   trigger); if not, the agent's own answer to the call is quoted;
//! - a background job (a `background: true` call): it existed (its heartbeat
//!   is in the journal, or its process was seen);
//! - an interrupt: sent while the faulted turn was running;
//! - a process fault: the kill or stop hit at least one process;
//! - a chaos run: at least `min_faults` kills and stops landed in a turn's
//!   working time (exec mode: after the turn's first provider call);
//! - an MCP row: its targeted rule matched a real request ([`super::mcp`]);
//! - a context window: at least one main call overflowed it, or the agent
//!   kept its tool's output under it ([`super::overflow`]);
//! - a credential that expires: a main call was refused as expired;
//! - the agent's own sandbox: the command ran in a network namespace other
//!   than the scenario's, or its failure was named ([`super::sandbox`]);
//! - an endpoint fault: a request besides the model calls was faulted
//!   ([`super::endpoint`]).

use super::{clip, Check, Invariant};
use crate::observe::{Event, Observation};
use crate::scenarios::{ChaosSpec, Evidence, FaultAction, Scenario, Trigger};

#[cfg(test)]
fn check(s: &Scenario, obs: &Observation) -> Vec<Check> {
    check_with(s, obs, None)
}

/// [`check`], with what the profile's `background:` says marks a started
/// background job in its tool result (more evidence the job existed).
pub fn check_with(
    s: &Scenario,
    obs: &Observation,
    background: Option<&crate::profile::BackgroundSpec>,
) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(spec) = &s.chaos {
        out.push(chaos(spec, obs));
        return out;
    }
    if let Some(f) = &s.process_fault {
        out.push(process_fault(f.action, &f.at, obs));
    } else {
        out.extend(provider_rules(s, obs));
    }
    if s.interrupt.is_some() {
        out.push(interrupt(obs));
    }
    out.extend(super::overflow::exercised(s, obs));
    out.extend(credential_expired(s, obs));
    out.extend(super::sandbox::engaged(s, obs));
    out.extend(tools_ran(s, obs));
    if s.responder.iter().all(|r| r.wait_for.is_none()) {
        out.extend(background_job(s, obs, background));
    }
    out.extend(super::mcp::exercised(s, obs));
    out.extend(super::client_served::exercised(s, obs));
    out.extend(super::endpoint::exercised(s, obs));
    if out.is_empty() {
        out.push(Check::skipped(
            Invariant::Exercised,
            "fault_landed",
            "the scenario names no fault chaosrun could look for",
        ));
    }
    out
}

/// A chaos run means something only when enough faults landed, counting
/// only those that landed in a turn's working time (an exec-mode fault
/// during a turn's start-up tests the start-up, not the agent at work).
fn chaos(spec: &ChaosSpec, obs: &Observation) -> Check {
    let (kills, stops) = obs.faults_landed_working();
    let (all_kills, all_stops) = obs.faults_landed();
    let early = all_kills + all_stops - kills - stops;
    let v = if kills + stops < spec.min_faults {
        let note = match early {
            0 => String::new(),
            n => format!(" ({n} more landed during a turn's start-up, before its first provider call: not counted)"),
        };
        vec![format!(
            "the run is meaningless: only {} faults landed ({kills} kills, {stops} stops){note}; at least {} are needed",
            kills + stops,
            spec.min_faults
        )]
    } else {
        vec![]
    };
    Check::new(Invariant::Exercised, "enough_faults_landed", v)
}

/// The kill or stop was sent and hit at least one process, with the
/// evidence its action declares ([`Evidence`]).
fn process_fault(action: FaultAction, at: &Trigger, obs: &Observation) -> Check {
    let evidence = action.evidence();
    if evidence == Evidence::KernelOomKill {
        return oom_landed(at, obs);
    }
    let (recorded, name) = (action.recorded(), action.kind_name());
    let sent: Vec<usize> = obs
        .events
        .iter()
        .filter_map(|t| match &t.event {
            Event::ProcessFault {
                action, signalled, ..
            } if *action == recorded => Some(*signalled),
            _ => None,
        })
        .collect();
    let v = if sent.is_empty() {
        let why = match at {
            Trigger::StoreWriteAfterCalls(n) => format!(
                "no write to the agent's store was seen once {n} main call(s) had arrived (an agent that persists nothing until its turn ends cannot be killed at a store write)"
            ),
            _ => format!("its trigger {at:?} did not hold during the faulted turn"),
        };
        vec![format!("the {name} never fired: {why}")]
    } else if sent.iter().all(|n| *n == 0) {
        vec![format!(
            "the {name} signalled no process (the agent was already gone)"
        )]
    } else if evidence == Evidence::SignalledSilencing && obs.recording.silenced == 0 {
        vec![format!(
            "the suspend silenced no answer: no provider call was in flight when the machine slept ({} main call(s) by then), so no dead stream was left to detect",
            fault_main_calls(obs)
        )]
    } else {
        vec![]
    };
    Check::new(Invariant::Exercised, "process_fault_landed", v)
}

/// `action: oom`: the limit was set and the memory cgroup's own `oom_kill`
/// counter rose (the kernel killed, not chaosrun). Whichever process of the
/// agent's tree the kernel picked (the agent's main process, its engine, its
/// tool), it was the agent's OOM: the cgroup holds nothing else.
fn oom_landed(at: &Trigger, obs: &Observation) -> Check {
    let oom = obs
        .find(|e| match e {
            Event::OomKill {
                via,
                usage_mb,
                limit_mb,
                oom_kills,
                error,
            } => Some((via.clone(), *usage_mb, *limit_mb, *oom_kills, error.clone())),
            _ => None,
        })
        .map(|(_, o)| o);
    let v = match oom {
        None => vec![format!(
            "the memory limit was never set: its trigger {at:?} did not hold during the faulted turn"
        )],
        Some((_, _, _, _, Some(e))) => vec![format!("no memory limit could be set: {e}")],
        Some((via, usage, limit, 0, None)) => vec![format!(
            "no OOM kill: under a {limit} MB limit ({via}; {usage} MB in use when it was set) the kernel's oom_kill counter did not rise before the faulted turn ended: no process of the agent's tree was killed"
        )],
        Some(_) => vec![],
    };
    Check::new(Invariant::Exercised, "process_fault_landed", v)
}

/// The main calls the provider had received when the first process fault
/// landed.
fn fault_main_calls(obs: &Observation) -> u64 {
    obs.find(|e| match e {
        Event::ProcessFault { main_calls, .. } => Some(*main_calls),
        _ => None,
    })
    .map_or(0, |(_, n)| n)
}

/// A row's credential expired on a main call (the refusal landed).
fn credential_expired(s: &Scenario, obs: &Observation) -> Option<Check> {
    let spec = s.credential.as_ref()?;
    let refused = obs
        .recording
        .main_requests()
        .any(|r| crate::provider::replies::Reply::refuses_credential(&r.reply));
    let v = if refused {
        vec![]
    } else {
        vec![format!(
            "no main call was refused as expired (from call {} on): the faulted turn made {} main call(s)",
            spec.expires_at_call, obs.recording.main_calls
        )]
    };
    Some(Check::new(Invariant::Exercised, "credential_expired", v))
}

/// Every faulting responder rule answered at least one main call (on a row
/// with a `p` rule, at least one did). When the turn's last main call got a
/// value fault (an empty answer, one cut for length: the agent may end its
/// turn on it), the rules listed after that one could not be reached and
/// are not asked for.
fn provider_rules(s: &Scenario, obs: &Observation) -> Vec<Check> {
    let faults: Vec<(usize, &'static str)> = s
        .responder
        .iter()
        .enumerate()
        .filter(|(_, r)| r.reply.is_fault())
        .map(|(i, r)| (i, r.reply.kind_name()))
        .collect();
    if faults.is_empty() {
        return Vec::new();
    }
    if obs.recording.main_calls == 0 && obs.interrupt_sent().is_some_and(|(_, n)| n == 0) {
        // A row that cancels with the prompt: its rules only hold a call
        // that comes before the cancel; the cancel itself is the fault
        // (`interrupt_landed`).
        return vec![Check::skipped(
            Invariant::Exercised,
            "fault_served",
            "`interrupt` went out before the faulted turn's first model call and the turn made none: no responder rule could serve (the interrupt is judged by interrupt_landed)",
        )];
    }
    // The exact per-rule counts when recorded, else the requests kept.
    let served = |i: usize| match obs.recording.rule_hits.get(i) {
        Some(n) => *n > 0,
        None => obs.recording.main_requests().any(|r| r.rule == Some(i)),
    };
    // A row whose rules fire by a seeded draw (`when.p`): which of them
    // answer is the draw's; one faulting rule that answered is the fault.
    let drawn = s.responder.iter().any(|r| r.when.p.is_some());
    if drawn && faults.iter().any(|(i, _)| served(*i)) {
        return vec![Check::new(Invariant::Exercised, "fault_served", vec![])];
    }
    let ended_on_value = obs
        .recording
        .main_requests()
        .last()
        .and_then(|r| r.rule)
        .filter(|i| s.responder.get(*i).is_some_and(|r| r.reply.value_fault()));
    let reachable = |i: usize| ended_on_value.is_none_or(|last| i <= last);
    let v = faults
        .iter()
        .filter(|(i, _)| !served(*i) && reachable(*i))
        .map(|(i, kind)| {
            format!(
                "responder rule {} ({kind}) never answered a call: the faulted turn made {} main call(s)",
                i + 1,
                obs.recording.main_calls
            )
        })
        .collect();
    vec![Check::new(Invariant::Exercised, "fault_served", v)]
}

/// `interrupt` was sent while the faulted turn was running. Events are
/// compared by time, not by the order they were recorded in: the agent's
/// `turn_start` line may still be in the pipe when the interrupt goes out, so
/// a main call served before it (the turn was busy on the provider) also
/// counts as the turn running.
fn interrupt(obs: &Observation) -> Check {
    let sent = obs.find(|e| match e {
        Event::InterruptSent { main_calls } => Some(*main_calls),
        _ => None,
    });
    let started = obs.turn_start(0);
    let ended = obs.turn_end(0);
    let v = match (sent, ended) {
        (None, Some((_, e))) => vec![format!(
            "the interrupt was never sent: the faulted turn returned first (final={:?})",
            clip(&e.final_text, 120)
        )],
        (None, None) => vec![
            "the interrupt was never sent: its trigger did not hold during the faulted turn"
                .to_string(),
        ],
        (Some((at, _)), Some((end_at, e))) if end_at < at => vec![format!(
            "the interrupt was never sent while the turn ran: the faulted turn returned first (final={:?})",
            clip(&e.final_text, 120)
        )],
        (Some((at, main_calls)), _) if main_calls == 0 && started.is_none_or(|s| s > at) => {
            vec!["the interrupt was sent before the faulted turn started".to_string()]
        }
        _ => vec![],
    };
    Check::new(Invariant::Exercised, "interrupt_landed", v)
}

/// Hung and background tools: their processes were seen.
fn tools_ran(s: &Scenario, obs: &Observation) -> Option<Check> {
    // (needle, how many at once, the wait_for rule's index)
    let mut wanted: Vec<(&str, usize, Option<usize>)> = Vec::new();
    for (i, r) in s.responder.iter().enumerate() {
        if let Some(w) = &r.wait_for {
            wanted.push((&w.cmdline, w.count, Some(i)));
        }
    }
    if let Some(t) = &s.tool_gone {
        if !wanted.iter().any(|(n, _, _)| *n == t.as_str()) {
            wanted.push((t, 1, None));
        }
    }
    if wanted.is_empty() {
        return None;
    }
    let v = wanted
        .into_iter()
        .filter_map(|(needle, count, rule)| tool_missing(s, obs, needle, count, rule))
        .collect();
    Some(Check::new(Invariant::Exercised, "tool_ran", v))
}

/// What is missing for the tool matching `needle`, if anything.
fn tool_missing(
    s: &Scenario,
    obs: &Observation,
    needle: &str,
    count: usize,
    rule: Option<usize>,
) -> Option<String> {
    let waits: Vec<_> = obs
        .recording
        .waits
        .iter()
        .filter(|w| Some(w.rule) == rule)
        .collect();
    if waits.iter().any(|w| w.satisfied) {
        return None;
    }
    if let Some(w) = waits.iter().max_by_key(|w| w.seen) {
        return Some(format!(
            "the background job never reached {count} process(es) matching `{needle}`: at most {} were seen while the reply waited",
            w.seen
        ));
    }
    let fired = |t: &Trigger| matches!(t, Trigger::WhenProcess(n) if n.contains(needle) || needle.contains(n.as_str()));
    let seen = obs.processes_seen.iter().any(|c| c.contains(needle))
        || obs
            .snapshots
            .iter()
            .any(|sn| sn.procs.iter().any(|p| p.cmdline.contains(needle)))
        || (s.interrupt.as_ref().is_some_and(fired) && obs.interrupt_sent().is_some())
        || (s.process_fault.as_ref().is_some_and(|f| fired(&f.at))
            && obs
                .events
                .iter()
                .any(|t| matches!(t.event, Event::ProcessFault { .. })));
    if seen {
        return None;
    }
    Some(format!(
        "the tool never ran: no process whose command line contains `{needle}` was seen; {}",
        agent_answer(obs, needle)
    ))
}

/// Whether a call asks for a background job.
fn background(args: &serde_json::Value) -> bool {
    args.get("background") == Some(&serde_json::Value::Bool(true))
}

/// Background jobs the responder asks for existed: a heartbeat (`bg ...`
/// journal line) or the job's process was seen.
fn background_job(
    s: &Scenario,
    obs: &Observation,
    marker: Option<&crate::profile::BackgroundSpec>,
) -> Option<Check> {
    let asked = s
        .responder
        .iter()
        .any(|r| r.reply.tool_calls().iter().any(|c| background(&c.args)));
    if !asked {
        return None;
    }
    let issued: Vec<&str> = obs
        .recording
        .issued_tool_calls
        .iter()
        .filter(|c| background(&c.args))
        .filter_map(|c| c.args.get("command")?.as_str())
        .collect();
    let heartbeat = obs.journal.iter().any(|l| l.starts_with("bg "));
    let seen = issued.iter().any(|cmd| {
        let head: String = cmd.chars().take(40).collect();
        obs.processes_seen.iter().any(|c| c.contains(&head))
            || obs
                .snapshots
                .iter()
                .any(|sn| sn.procs.iter().any(|p| p.cmdline.contains(&head)))
    });
    let reported = marker.is_some_and(|m| job_reported(obs, m));
    let v = if heartbeat || seen || reported {
        vec![]
    } else if issued.is_empty() {
        vec![
            "the background job was never asked for: no call with `background: true` was issued"
                .into(),
        ]
    } else {
        vec![format!(
            "the background job never existed: no heartbeat in the journal and no process running `{}` was seen; {}",
            clip(issued[0], 80),
            agent_answer(obs, issued[0])
        )]
    };
    Some(Check::new(
        Invariant::Exercised,
        "background_job_existed",
        v,
    ))
}

/// Whether a tool result answering a `background: true` call carries the
/// profile's marker of a started job: its id prefix (`proc_…`) or its pid
/// field with a number (`"pid": 123`, `pid=123`).
fn job_reported(obs: &Observation, m: &crate::profile::BackgroundSpec) -> bool {
    let ids: Vec<&str> = obs
        .recording
        .issued_tool_calls
        .iter()
        .filter(|c| background(&c.args))
        .map(|c| c.id.as_str())
        .collect();
    let pid = regex::Regex::new(&format!(
        r#"\b{}"?\s*[:=]\s*"?\d+"#,
        regex::escape(&m.pid_field)
    ))
    .ok();
    obs.recording
        .requests
        .iter()
        .flat_map(|r| &r.messages)
        .filter(|msg| msg.role == "tool")
        .filter(|msg| {
            msg.tool_call_id
                .as_deref()
                .is_some_and(|id| ids.contains(&id))
        })
        .any(|msg| {
            (!m.id_prefix.is_empty() && msg.content.contains(&m.id_prefix))
                || pid.as_ref().is_some_and(|re| re.is_match(&msg.content))
        })
}

/// What the agent sent back for the tool call that would have run `needle`.
fn agent_answer(obs: &Observation, needle: &str) -> String {
    let calls: Vec<&str> = obs
        .recording
        .issued_tool_calls
        .iter()
        .filter(|c| {
            c.args
                .get("command")
                .and_then(|v| v.as_str())
                .is_some_and(|cmd| cmd.contains(needle))
                || c.args.to_string().contains(needle)
        })
        .map(|c| c.id.as_str())
        .collect();
    if calls.is_empty() {
        return "the provider never asked for it".into();
    }
    let answer = obs
        .recording
        .requests
        .iter()
        .flat_map(|r| &r.messages)
        .find(|m| {
            m.role == "tool"
                && m.tool_call_id
                    .as_deref()
                    .is_some_and(|id| calls.contains(&id))
        });
    match answer {
        Some(m) => format!("the agent answered `{}`", clip(m.content.trim(), 200)),
        None => "no result for the call reached the provider either".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::proc_hygiene::ProcInfo;
    use crate::provider::recording::{IssuedToolCall, WaitOutcome};

    fn named<'a>(c: &'a [Check], name: &str) -> &'a Check {
        c.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn a_provider_fault_rule_that_never_answered_fails() {
        let s = scenario("expect: error");
        let mut o = healthy(&s, end(0, false, true, "x"));
        assert!(!named(&check(&s, &o), "fault_served").failed());
        o.recording.requests[0].rule = Some(1);
        let c = check(&s, &o);
        assert!(named(&c, "fault_served").failed(), "{c:?}");
        o.recording.requests[0].rule = Some(0);
        o.recording.rule_hits = vec![0];
        let c = check(&s, &o);
        assert!(
            named(&c, "fault_served").violations()[0].contains("rule 1 (hang) never answered"),
            "{c:?}"
        );
    }

    /// A turn that ended on an empty answer could not reach the rules after
    /// it; a rule before it, or after a turn that ended elsewhere, still
    /// must serve.
    #[test]
    fn rules_after_a_value_fault_the_turn_ended_on_are_not_asked_for() {
        let rows = "scenarios:\n  - id: s\n    expect: ended\n    responder:\n      \
            - {when: {call: 0}, reply: {kind: text, text: ''}}\n      \
            - {when: {call: 1}, reply: {kind: hang}}\n";
        let s = crate::scenarios::load_str(rows, "f.yaml")
            .unwrap()
            .scenarios
            .remove(0);
        let mut o = healthy(&s, end(0, true, false, ""));
        o.recording.requests.truncate(1);
        o.recording.requests[0].rule = Some(0);
        o.recording.rule_hits = vec![1, 0];
        let c = check(&s, &o);
        assert!(!named(&c, "fault_served").failed(), "{c:?}");
        // The turn's last call got the hang's rule's answer, not the value
        // fault's: the empty answer's rule never served.
        o.recording.requests[0].rule = Some(1);
        o.recording.rule_hits = vec![0, 1];
        let c = check(&s, &o);
        assert!(
            named(&c, "fault_served").violations()[0].contains("rule 1 (text) never answered"),
            "{c:?}"
        );
    }

    #[test]
    fn rules_a_cancel_sent_with_the_prompt_kept_from_serving_are_not_checked() {
        let s = scenario("expect: interrupted\ninterrupt: {after_seconds: 0}");
        let mut o = healthy(&s, end_interrupted(0));
        o.recording.requests.clear();
        o.recording.rule_hits = vec![0];
        o.recording.main_calls = 0;
        o.events
            .insert(1, at(0.0, Event::InterruptSent { main_calls: 0 }));
        let c = check(&s, &o);
        assert!(named(&c, "fault_served").not_checked(), "{c:?}");
        // A call made before the cancel went out: the rule had to serve it.
        o.recording.main_calls = 1;
        assert!(named(&check(&s, &o), "fault_served").failed());
    }

    const HUNG: &str = "expect: ended\ntool_gone: \"sleep 3600\"";

    fn hung_tool(answer: &str) -> (Scenario, Observation) {
        let s = scenario(HUNG);
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.recording.issued_tool_calls.push(IssuedToolCall {
            id: "c1".into(),
            tool: "shell".into(),
            args: serde_json::json!({"command": "sleep 3600"}),
            main_index: 0,
        });
        o.recording.requests[0]
            .messages
            .extend([assistant_calls(&["c1"]), tool("c1", answer)]);
        (s, o)
    }

    #[test]
    fn a_hung_tool_that_never_ran_fails_quoting_the_agent() {
        let (s, o) = hung_tool("Blocked: sleep is not allowed");
        let v = named(&check(&s, &o), "tool_ran").violations().to_vec();
        assert!(v[0].contains("the tool never ran"), "{v:?}");
        assert!(v[0].contains("`Blocked: sleep is not allowed`"), "{v:?}");
    }

    #[test]
    fn a_hung_tool_seen_by_the_sampler_or_a_snapshot_passes() {
        let (s, mut o) = hung_tool("timed out");
        o.processes_seen = vec!["/bin/sh -c sleep 3600".into()];
        assert!(!named(&check(&s, &o), "tool_ran").failed());
        let (s, mut o) = hung_tool("timed out");
        o.snapshots[0].procs.push(ProcInfo {
            pid: 9,
            ppid: 1,
            state: 'S',
            cmdline: "sleep 3600".into(),
        });
        assert!(!named(&check(&s, &o), "tool_ran").failed());
    }

    #[test]
    fn a_wait_for_that_timed_out_says_how_many_it_saw() {
        let yaml = "scenarios:\n  - id: s\n    expect: ended\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: shell, args: {command: x}}]}\n      - wait_for: {count: 10, cmdline: \"sleep 3600\"}\n        reply: {kind: text, text: ok}\n";
        let s = crate::scenarios::load_str(yaml, "t.yaml")
            .unwrap()
            .scenarios
            .remove(0);
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.recording.waits.push(WaitOutcome {
            rule: 1,
            main_index: 1,
            satisfied: false,
            seen: 3,
        });
        let c = check(&s, &o);
        assert!(
            named(&c, "tool_ran").violations()[0].contains("at most 3"),
            "{c:?}"
        );
        o.recording.waits[0].satisfied = true;
        assert!(!named(&check(&s, &o), "tool_ran").failed());
    }

    #[test]
    fn a_background_job_needs_a_heartbeat_or_its_process() {
        let yaml = "scenarios:\n  - id: s\n    expect: ended\n    responder:\n      - reply: {kind: tool_call, calls: [{tool: shell, args: {command: \"while true; do echo bg; done\", background: true}}]}\n";
        let s = crate::scenarios::load_str(yaml, "t.yaml")
            .unwrap()
            .scenarios
            .remove(0);
        let mut o = healthy(&s, end(0, true, false, "x"));
        let c = check(&s, &o);
        assert!(named(&c, "background_job_existed").violations()[0].contains("never asked for"));
        o.recording.issued_tool_calls.push(IssuedToolCall {
            id: "c1".into(),
            tool: "shell".into(),
            args: serde_json::json!({"command": "while true; do echo bg; done", "background": true}),
            main_index: 0,
        });
        o.recording.requests[0].messages.extend([
            assistant_calls(&["c1"]),
            tool("c1", "Blocked: background jobs are off"),
        ]);
        let c = check(&s, &o);
        let v = named(&c, "background_job_existed").violations();
        assert!(v[0].contains("`Blocked: background jobs are off`"), "{v:?}");
        o.journal = vec!["bg 1.0 x".into()];
        assert!(!named(&check(&s, &o), "background_job_existed").failed());
        o.journal.clear();
        o.processes_seen = vec!["bash -c while true; do echo bg; done".into()];
        assert!(!named(&check(&s, &o), "background_job_existed").failed());
        // The profile's `background:` marker in the call's result is evidence
        // too; a refusal carries neither marker.
        o.processes_seen.clear();
        let m = crate::profile::BackgroundSpec {
            pid_field: "pid".into(),
            id_prefix: "proc_".into(),
        };
        let with = |o: &Observation| check_with(&s, o, Some(&m));
        assert!(named(&with(&o), "background_job_existed").failed());
        for answer in [
            r#"{"session_id": "proc_ab12"}"#,
            r#"{"pid": 4242}"#,
            "started, pid=77",
        ] {
            o.recording.requests[0].messages.pop();
            o.recording.requests[0].messages.push(tool("c1", answer));
            assert!(
                !named(&with(&o), "background_job_existed").failed(),
                "{answer}"
            );
            assert!(named(&check(&s, &o), "background_job_existed").failed());
        }
    }

    #[test]
    fn an_interrupt_must_land_while_the_turn_runs() {
        let s = scenario("expect: interrupted\ninterrupt: {after_calls: 1}");
        let mut o = healthy(&s, end_interrupted(0));
        let c = check(&s, &o);
        assert!(named(&c, "interrupt_landed").violations()[0].contains("returned first"));
        o.events
            .insert(3, at(1.0, Event::InterruptSent { main_calls: 1 }));
        assert!(!named(&check(&s, &o), "interrupt_landed").failed());
    }

    #[test]
    fn a_kill_that_hit_nothing_did_not_land() {
        let s = scenario("expect: killed\nprocess_fault: {action: kill, at: {after_calls: 1}}");
        let mut o = healthy(&s, end(0, true, false, "x"));
        let c = check(&s, &o);
        assert!(named(&c, "process_fault_landed").violations()[0].contains("never fired"));
        o.events.push(at(
            1.0,
            Event::ProcessFault {
                action: "kill".into(),
                signalled: 0,
                main_calls: 1,
                start_up: false,
            },
        ));
        let c = check(&s, &o);
        assert!(named(&c, "process_fault_landed").violations()[0].contains("no process"));
    }

    /// `action: oom` lands only when the cgroup's counter rose and the agent
    /// died: a limit never set, one the agent kept within, and an OOM kill
    /// of another process each fail, named.
    #[test]
    /// Landed when the kernel's counter rose, whichever process of the
    /// agent's tree it killed (issue 47.7: a kill of mistral-vibe's engine
    /// child was called "not the agent").
    fn an_oom_kill_lands_when_the_kernel_killed_any_process_of_the_agents_tree() {
        let s = scenario("expect: killed\nprocess_fault: {action: oom, at: {after_calls: 1}}");
        let mut o = healthy(&s, end(0, true, false, "x"));
        let landed = |o: &Observation| {
            let c = check(&s, o);
            named(&c, "process_fault_landed").violations().to_vec()
        };
        assert!(landed(&o)[0].contains("never set"));
        let oom = |kills: u64, error: Option<&str>| Event::OomKill {
            via: "cgroup v1 memory.limit_in_bytes".into(),
            usage_mb: 0.0,
            limit_mb: 32.0,
            oom_kills: kills,
            error: error.map(String::from),
        };
        let kill = |signalled: usize| Event::ProcessFault {
            action: "kill".into(),
            signalled,
            main_calls: 1,
            start_up: false,
        };
        o.events.push(at(1.0, oom(0, Some("no memory controller"))));
        assert!(landed(&o)[0].contains("no memory controller"));
        o.events.pop();
        o.events.push(at(1.0, oom(0, None)));
        o.events.push(at(1.0, kill(0)));
        assert!(landed(&o)[0].contains("no OOM kill"));
        o.events.truncate(o.events.len() - 2);
        o.events.push(at(1.0, oom(2, None)));
        o.events.push(at(1.0, kill(2)));
        assert!(landed(&o).is_empty());
        // Saved before: a kill of another process of the tree recorded as
        // signalling nothing; the counter rose, so it landed.
        o.events.pop();
        o.events.push(at(1.0, kill(0)));
        assert!(landed(&o).is_empty());
    }

    #[test]
    fn a_suspend_that_silenced_no_answer_did_not_land() {
        let s = scenario(
            "expect: {answer: \"awake\"}\nprocess_fault: {action: suspend, target: tree, at: {after_seconds: 1}, stop_for: 12}",
        );
        let mut o = healthy(&s, end(0, true, false, "awake"));
        o.events.push(at(
            1.0,
            Event::ProcessFault {
                action: "suspend".into(),
                signalled: 2,
                main_calls: 0,
                start_up: false,
            },
        ));
        let v = named(&check(&s, &o), "process_fault_landed")
            .violations()
            .to_vec();
        assert!(
            v[0].contains("silenced no answer") && v[0].contains("0 main call(s)"),
            "{v:?}"
        );
        o.recording.silenced = 1;
        assert!(!named(&check(&s, &o), "process_fault_landed").failed());
    }
}
