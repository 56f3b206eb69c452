//! A trial as a row of the ordinary table schema: its steps and faults laid out
//! on main-call indices (`when: {call: N}`), a persistent fault as a range of
//! calls (`when: {call: {from: N, to: M}}`, or `{from: N}` when it never
//! clears), the final answer as the catch-all rule, an interrupt as
//! `interrupt: {after_reply: N}` (once the error reply it follows is sent:
//! the agent is reading it or backing off, however loaded the machine), a
//! kill as a hung call plus
//! `process_fault: {action: kill, at: {after_calls: N}}`. The expectation
//! follows the schedule: `killed` with a kill, `ended` with an interrupt, a
//! stop or a value fault (the agent may end its turn on an empty or cut
//! answer), `error` with a fault that never clears, else the answer. Calibrated
//! deadlines ([`super::calibrate`]) are written into the row. The row is YAML
//! (insertion-ordered), so a found trial is a pasteable row.

use serde_yaml::{Mapping, Value};

use super::calibrate::Calibration;
use super::generate::{Action, FaultKind, Trial, PERSIST_RETRIES};
use crate::provider::replies::Reply;

/// The retry budget every generated row gives the agent (knob
/// `api_max_retries`): more than the faults before any one step.
pub const RETRIES: u64 = 2;

fn map(pairs: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(Value::from(k), v);
    }
    Value::Mapping(m)
}

fn at_call(c: u64, reply: Value) -> Value {
    map(vec![
        ("when", map(vec![("call", Value::from(c))])),
        ("reply", reply),
    ])
}

fn at_calls(from: u64, to: Option<u64>, reply: Value) -> Value {
    let mut range = vec![("from", Value::from(from))];
    if let Some(to) = to {
        range.push(("to", Value::from(to)));
    }
    map(vec![
        ("when", map(vec![("call", map(range))])),
        ("reply", reply),
    ])
}

/// The short name of a fault kind (`500`, `429`, `drop`, `stall`, `hang`).
pub fn kind_name(k: FaultKind) -> &'static str {
    k.short()
}

/// The fault's reply, as its kind declared it for explore.
fn fault_reply(k: FaultKind) -> Value {
    k.item().yaml.clone()
}

/// A shell call that leaves a side effect (`SE-…` in the journal), works for
/// `secs`, then says it finished.
fn side_effect(secs: f64) -> Value {
    let token = "SE-{{nonce}}-c{{call}}-{{i}}";
    let cmd = format!(
        "echo {token} >> \"$CHAOS_JOURNAL\" && sleep {} && echo done-{token}",
        crate::units::short(secs)
    );
    map(vec![
        ("tool", "shell".into()),
        ("args", map(vec![("command", cmd.into())])),
    ])
}

fn background() -> Value {
    // `date +FORMAT`, not `echo "bg $(date …)"`: Gemini CLI refuses any
    // command with `$(…)` (its command-injection guard), so the job never ran.
    let cmd = "while true; do date +\"bg %s.%N {{nonce}}\" >> \"$CHAOS_JOURNAL\"; sleep 0.2; done";
    map(vec![
        ("tool", "shell".into()),
        (
            "args",
            map(vec![("command", cmd.into()), ("background", true.into())]),
        ),
    ])
}

fn tool_call(calls: Vec<Value>) -> Value {
    map(vec![
        ("kind", Reply::TOOL_CALLS.into()),
        ("calls", Value::Sequence(calls)),
    ])
}

/// One line saying what the schedule is, for `about:`.
pub fn describe(t: &Trial) -> String {
    let mut parts = Vec::new();
    for (i, s) in t.steps.iter().enumerate() {
        if s.kill_before {
            parts.push(format!("kill before step {i}"));
        }
        if let Some(secs) = s.stop_for {
            parts.push(format!("stop {secs} s at step {i}"));
        }
        for f in &s.faults {
            let k = kind_name(f.kind);
            parts.push(if f.interrupt {
                format!("{k} then interrupt before step {i}")
            } else {
                format!("{k} before step {i}")
            });
        }
        if let Some(p) = s.persist {
            let k = kind_name(p.kind);
            parts.push(match p.calls {
                Some(n) => format!("{k} on {n} calls from step {i}, then clears"),
                None => format!("{k} from step {i} on, never clears"),
            });
        }
    }
    let script: Vec<String> = t
        .steps
        .iter()
        .map(|s| match &s.action {
            Action::Tools { secs } if secs.len() == 1 => "tool".to_string(),
            Action::Tools { secs } => format!("{} parallel", secs.len()),
            Action::Background => "background".into(),
            Action::Final { .. } => "answer".into(),
        })
        .collect();
    let faults = if parts.is_empty() {
        "no fault".to_string()
    } else {
        parts.join(", ")
    };
    format!("script [{}]; {faults}", script.join(", "))
}

/// What a trial's faulted turn must end with.
pub fn expect(t: &Trial) -> Value {
    let kill = t.steps.iter().any(|s| s.kill_before);
    let other = t
        .steps
        .iter()
        .any(|s| s.stop_for.is_some() || s.faults.iter().any(|f| f.interrupt));
    if kill {
        "killed".into()
    } else if other || t.value_faulted() {
        "ended".into()
    } else if !t.answers() {
        "error".into()
    } else {
        map(vec![("answer", ANSWER.into())])
    }
}

/// The final answer's text (and what an `answer` expectation looks for).
pub const ANSWER: &str = "all steps done {{nonce}}";

/// The retry budget of `t`'s row.
pub fn retries(t: &Trial) -> u64 {
    if t.persist().is_some() {
        u64::from(PERSIST_RETRIES)
    } else {
        RETRIES
    }
}

/// The rule answering a step's scripted call (index `c`) with its action;
/// the final answer is the catch-all rule.
fn action_rule(c: u64, a: &Action) -> Value {
    match a {
        Action::Tools { secs } => {
            at_call(c, tool_call(secs.iter().map(|d| side_effect(*d)).collect()))
        }
        Action::Background => at_call(c, tool_call(vec![background()])),
        Action::Final { gap } => {
            let mut text = vec![("kind", Reply::PLAIN.into()), ("text", ANSWER.into())];
            if *gap > 0.0 {
                text.push(("chunk_chars", 8.into()));
                text.push(("delay_per_chunk", (*gap).into()));
            }
            map(vec![("reply", map(text))])
        }
    }
}

/// The row of `t`, with id `id` and, when calibrated, its deadlines.
pub fn row(t: &Trial, id: &str, cal: Option<&Calibration>) -> Value {
    let mut rules = Vec::new();
    let mut c: u64 = 0;
    let (mut kill, mut interrupt, mut stop) = (None, None, None);
    let mut bound = None;
    'steps: for s in &t.steps {
        if s.kill_before && kill.is_none() && interrupt.is_none() {
            // Killed while waiting on this call; the restarted agent goes on
            // with the probe turn, so nothing after it is laid out.
            rules.push(at_call(c, map(vec![("kind", Reply::WAITING.into())])));
            c += 1;
            kill = Some(c);
            break 'steps;
        }
        for f in &s.faults {
            rules.push(at_call(c, fault_reply(f.kind)));
            c += 1;
            if f.interrupt && kill.is_none() && stop.is_none() {
                interrupt = Some(c);
                break 'steps;
            }
        }
        // The oracle's backoff check (src/oracle/backoff.rs) runs on every
        // row whose main calls got an error reply, so a persistent episode's
        // retries are judged for hot loops and ignored retry-after as well.
        if let Some(p) = s.persist {
            match p.calls {
                Some(n) => {
                    let n = u64::from(n);
                    rules.push(at_calls(c, Some(c + n - 1), fault_reply(p.kind)));
                    c += n;
                }
                None => {
                    // Every call from here on: the agent must give up within
                    // its retries, with a surfaced error.
                    rules.push(at_calls(c, None, fault_reply(p.kind)));
                    bound = Some(c + retries(t) + 1);
                    break 'steps;
                }
            }
        }
        if let (Some(secs), None) = (s.stop_for, &interrupt) {
            if stop.is_none() && kill.is_none() {
                stop = Some((c + 1, secs));
            }
        }
        rules.push(action_rule(c, &s.action));
        c += 1;
    }
    let mut row = vec![
        ("id", Value::from(id)),
        (
            "about",
            format!("explore trial seed {}: {}", t.seed, describe(t)).into(),
        ),
        ("knobs", map(vec![("api_max_retries", retries(t).into())])),
    ];
    if let Some(cal) = cal {
        let d = cal.deadlines(t);
        let d = [("boot", d.boot), ("turn", d.turn), ("probe", d.probe)];
        let d = d.into_iter().map(|(k, v)| (k, v.into())).collect();
        row.push(("deadlines", map(d)));
    }
    row.push(("responder", Value::Sequence(rules)));
    row.push(("expect", expect(t)));
    let max = bound.unwrap_or((c + 4).min(8 * RETRIES));
    row.push(("calls", map(vec![("max", max.into())])));
    if let Some((0, p)) = t.persist() {
        let item = p.kind.item();
        if !p.clears() && item.waits() && item.mid_stream() {
            // Every call of the turn stalled: an agent with a breaker (see
            // the profile's `breaker`) may rightly refuse the probe.
            row.push(("probe", "breaker".into()));
        }
    }
    if let Some(n) = interrupt {
        row.push(("interrupt", map(vec![("after_reply", n.into())])));
    }
    if let Some(n) = kill {
        row.push((
            "process_fault",
            map(vec![
                ("action", "kill".into()),
                ("at", map(vec![("after_calls", n.into())])),
            ]),
        ));
    }
    if let Some((n, secs)) = stop {
        row.push((
            "process_fault",
            map(vec![
                ("action", "stop".into()),
                ("target", "tree".into()),
                ("at", map(vec![("after_calls", n.into())])),
                ("stop_for", secs.into()),
            ]),
        ));
    }
    map(row)
}

/// A scenarios file holding `rows`, with a header naming how it was found.
pub fn table_text(header: &str, rows: &[Value]) -> String {
    let doc = map(vec![("scenarios", Value::Sequence(rows.to_vec()))]);
    let body = serde_yaml::to_string(&doc).unwrap_or_default();
    let mut out = String::new();
    for line in header.lines() {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&body);
    out
}

#[cfg(test)]
mod tests {
    use super::super::config::Config;
    use super::super::generate::{generate, trial_seed};
    use super::*;

    /// Each fault a row writes parses back as the registered reply kind a
    /// retrying agent rides through, or as a value fault.
    #[test]
    fn every_explore_fault_is_a_registered_retryable_reply_or_a_value_fault() {
        for k in FaultKind::all() {
            let r: crate::provider::replies::Reply =
                serde_yaml::from_value(fault_reply(k)).unwrap_or_else(|e| panic!("{k:?}: {e}"));
            assert!(r.is_fault(), "{k:?}");
            assert!(r.retryable() || r.value_fault(), "{k:?}");
        }
    }

    #[test]
    fn the_background_heartbeat_writes_bg_lines_without_command_substitution() {
        let v = background();
        let cmd = v["args"]["command"].as_str().unwrap();
        assert!(!cmd.contains("$(") && !cmd.contains('`'), "{cmd}");
        let journal = std::env::temp_dir().join(format!("chaos-bg-{}", std::process::id()));
        let _ = std::fs::remove_file(&journal);
        let mut sh = std::process::Command::new("sh");
        sh.arg("-c")
            .arg(cmd.replace("{{nonce}}", "n0nce"))
            .env("CHAOS_JOURNAL", &journal);
        // Owned: another test's orphan reaping must leave it to this one.
        let mut child = crate::children::spawn_owned(&mut sh).unwrap();
        let t0 = std::time::Instant::now();
        let line = loop {
            let text = std::fs::read_to_string(&journal).unwrap_or_default();
            if let Some(l) = text.lines().next() {
                break l.to_string();
            }
            assert!(t0.elapsed().as_secs() < 10, "no heartbeat in 10 s");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        child.kill().unwrap();
        child.wait().unwrap();
        crate::children::disown(child.id() as i32);
        let _ = std::fs::remove_file(&journal);
        let mut it = line.split_whitespace();
        assert_eq!(it.next(), Some("bg"), "{line}");
        let at: f64 = it.next().unwrap().parse().unwrap();
        assert!(at > 1.0e9, "{line}");
        assert_eq!(it.next(), Some("n0nce"), "{line}");
    }

    #[test]
    fn every_generated_row_loads_as_a_table() {
        let c = Config::default();
        for n in 0..300 {
            let t = generate(trial_seed(3, n), &c, true);
            let text = table_text("x", &[row(&t, "t", None)]);
            let table = crate::scenarios::load_str(&text, "gen.yaml")
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            let s = &table.scenarios[0];
            assert!(s.calls.limit() <= 16);
            assert!(s.interrupt.is_none() || s.process_fault.is_none());
        }
    }

    #[test]
    fn a_persistent_fault_is_a_call_range_and_sets_the_expectation() {
        use super::super::generate::{Persist, Step};
        let t = |calls, kind| Trial {
            seed: 3,
            steps: vec![
                Step {
                    action: Action::Tools { secs: vec![0.1] },
                    ..Step::answer(0.0)
                },
                Step {
                    persist: Some(Persist { kind, calls }),
                    ..Step::answer(0.0)
                },
            ],
        };
        let load = |t: &Trial| {
            let text = table_text("", &[row(t, "r", None)]);
            crate::scenarios::load_str(&text, "r.yaml")
                .unwrap_or_else(|e| panic!("{e}\n{text}"))
                .scenarios
                .remove(0)
        };
        let forever = load(&t(None, FaultKind::Error500));
        assert!(matches!(forever.expect, crate::scenarios::Expect::Error));
        // The tool call, then 3 retries + 1 of the faulted call.
        assert_eq!(forever.calls.limit(), 1 + 4);
        assert_eq!(forever.knobs.api_max_retries, PERSIST_RETRIES);
        let call = |index, after_tool| crate::provider::rules::Call {
            index,
            after_tool,
            ..Default::default()
        };
        assert!(forever.responder[1].when.matches(1, &call(1000, true)));
        let clears = load(&t(Some(3), FaultKind::Hang));
        assert!(matches!(clears.expect, crate::scenarios::Expect::Answer(_)));
        let kinds: Vec<_> = (0..6)
            .map(|i| {
                crate::provider::rules::pick(&clears.responder, &call(i, false))
                    .unwrap()
                    .1
                    .reply
                    .kind_name()
            })
            .collect();
        assert_eq!(kinds, ["tool_call", "hang", "hang", "hang", "text", "text"]);
        // Stalls on every call of a one-step turn: a breaker may refuse the probe.
        let mut only = t(None, FaultKind::StallMidStream);
        only.steps.remove(0);
        assert_eq!(load(&only).probe, crate::scenarios::ProbeMode::Breaker);
        assert_eq!(
            load(&t(None, FaultKind::StallMidStream)).probe,
            crate::scenarios::ProbeMode::Answer
        );
    }

    #[test]
    fn faults_take_call_indices_before_their_step() {
        use super::super::generate::{Fault, Step};
        let t = Trial {
            seed: 9,
            steps: vec![
                Step {
                    kill_before: false,
                    stop_for: None,
                    faults: vec![],
                    persist: None,
                    action: Action::Tools {
                        secs: vec![0.1, 0.2],
                    },
                },
                Step {
                    kill_before: true,
                    stop_for: None,
                    faults: vec![Fault {
                        kind: FaultKind::Error429,
                        interrupt: false,
                    }],
                    persist: None,
                    action: Action::Final { gap: 0.0 },
                },
            ],
        };
        let text = table_text("", &[row(&t, "r", None)]);
        let s = &crate::scenarios::load_str(&text, "r.yaml")
            .unwrap()
            .scenarios[0];
        let kinds: Vec<_> = s.responder.iter().map(|r| r.reply.kind_name()).collect();
        // The faults after the kill would never run: not laid out.
        assert_eq!(kinds, ["tool_call", "hang"], "{text}");
        assert!(text.contains("after_calls: 2"), "{text}");
        assert!(matches!(s.expect, crate::scenarios::Expect::Killed));
        assert_eq!(t.fault_count(), 2);
        assert!(!text.contains("status: 429"), "{text}");
    }
}
