//! Finished scenarios for the file reporters' unit tests: one healthy run
//! judged by the real oracle, and one retry storm that never finished its
//! faulted turn, with hostile text in its id and stderr.

use std::path::PathBuf;
use std::sync::Arc;

use super::Reporter;
use crate::observe::{Capabilities, Event, Phase, ProcSample};
use crate::oracle::fixtures::{at, end, healthy, request, scenario};
use crate::oracle::{check, Check, Invariant};
use crate::provider::recording::CallKind;
use crate::runner::{RunEvent, ScenarioResult, Stats, Verdict};

pub const VIOLATION: &str = "the faulted turn made 61 provider calls; the bound is 16";

pub fn sample_results() -> Vec<ScenarioResult> {
    let s = scenario("expect: error");
    let mut obs = healthy(&s, end(0, false, true, "x"));
    obs.proc_samples = [1.0, 2.5]
        .map(|at| ProcSample {
            at,
            count: 1,
            rss: 40 << 20,
            zombies: Some(vec![]),
            ..ProcSample::default()
        })
        .to_vec();
    let checks = check(&s, Capabilities::default(), &obs);
    assert!(checks.iter().all(|c| !c.failed()), "{checks:?}");
    let ok = ScenarioResult {
        id: "healthy_one".into(),
        attempt: 1,
        attempts: 1,
        verdict: Verdict::Pass,
        seconds: 4.0,
        main_calls: 1,
        checks,
        observation: obs,
        artifacts: None,
    };

    let mut obs = healthy(&s, end(0, false, true, "x"));
    // The faulted turn starts and never ends: 61 calls, then the deadline.
    obs.events.retain(|e| e.at < 1.0);
    let kinds = ["error", "hang", "stall_mid_stream", "text", "tool_call"];
    obs.recording.requests = (0..61)
        .map(|i| {
            let mut r = request(i, CallKind::Main, vec![]);
            r.at = 0.5 + i as f64 * 0.4;
            r.reply = kinds[i as usize % kinds.len()].into();
            r
        })
        .collect();
    let mut aux = request(61, CallKind::Aux, vec![]);
    aux.at = 2.0;
    aux.main_index = None;
    obs.recording.requests.push(aux);
    obs.provider_offset = 0.1;
    obs.recording.main_calls = 61;
    obs.recording.probe_calls = 0;
    obs.recording.aux_calls = 1;
    obs.events.extend([
        at(12.0, Event::InterruptSent { main_calls: 28 }),
        at(
            27.0,
            Event::DeadlineMissed {
                phase: Phase::Interrupt,
                seconds: 15.0,
            },
        ),
        at(
            31.0,
            Event::Exited {
                code: None,
                signal: Some(9),
                killed_by_chaosrun: true,
            },
        ),
    ]);
    obs.proc_samples = (0..64)
        .map(|i| ProcSample {
            at: i as f64 * 0.5,
            count: if i < 62 { 1 + (i % 7) / 3 } else { 0 },
            ..ProcSample::default()
        })
        .collect();
    obs.stderr_tail = "Traceback <boom>\n  <script>alert(1)</script> & \"quotes\"".into();
    obs.wall = 31.25;
    let checks = vec![
        Check::new(Invariant::Termination, "turn_returns", vec![]),
        Check::new(
            Invariant::ProviderCalls,
            "call_bound",
            vec![VIOLATION.to_string()],
        ),
        Check::new(
            Invariant::HistoryIntegrity,
            "history",
            vec!["a second violation\nwith <evidence>".into()],
        ),
        Check::skipped(Invariant::StoreIntegrity, "integrity_check", "no store"),
    ];
    let bad = ScenarioResult {
        id: "storm<&>".into(),
        attempt: 1,
        attempts: 1,
        verdict: Verdict::Fail,
        seconds: 31.25,
        main_calls: 61,
        checks,
        observation: obs,
        artifacts: Some(PathBuf::from("/tmp/art/storm")),
    };
    vec![ok, bad]
}

/// The sample results plus a scenario chaosrun could not run (`ERROR`).
pub fn sample_with_error() -> Vec<ScenarioResult> {
    let mut v = sample_results();
    v.push(ScenarioResult::error(
        "crashed_one",
        1,
        1,
        crate::oracle::ErrorCause::Crashed("panic: <boom> & co".into()),
        0.5,
    ));
    v
}

/// A whole run's events for `results`, as the runner sends them.
pub fn feed(reporter: &mut dyn Reporter, results: Vec<ScenarioResult>) {
    reporter.on(&RunEvent::Started {
        total: results.len(),
        jobs: results.len(),
    });
    for r in &results {
        reporter.on(&RunEvent::ScenarioStarted { id: r.id.clone() });
        for (phase, deadline) in [
            (Phase::Boot, 120.0),
            (Phase::FaultedTurn, 90.0),
            (Phase::Interrupt, 15.0),
        ] {
            reporter.on(&RunEvent::Phase {
                id: r.id.clone(),
                phase,
                deadline,
            });
        }
    }
    let stats = Stats::tally(results.iter().map(|r| &r.verdict), results.len());
    for r in results {
        reporter.on(&RunEvent::ScenarioFinished(Arc::new(r)));
    }
    reporter.on(&RunEvent::Finished { stats, wall: 31.5 });
}

/// The sample results with an error and the optional parts of a scenario
/// entry: a chaos run with a subagent's calls, and an N/A run.
pub fn sample_with_optional_parts() -> Vec<ScenarioResult> {
    let mut results = sample_with_error();
    let first = &mut results[0];
    first.observation.recording.subagent_calls = 2;
    first.observation.chaos = Some(crate::observe::ChaosRecord {
        seed: 9,
        schedule: vec![crate::observe::ScheduledFault {
            at: 1.5,
            action: crate::scenarios::FaultAction::Kill,
            stop_for: 0.0,
            worker: 0,
        }],
        bound: 120.0,
    });
    let mut na = results[0].clone();
    na.id = "na_one".into();
    na.verdict = Verdict::NotApplicable {
        reason: crate::oracle::NotApplicable::Profile("the profile declares no MCP".into()),
    };
    results.push(na);
    results
}
