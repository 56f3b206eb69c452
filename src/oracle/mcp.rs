//! The MCP parts of the invariants, for rows with an `mcp:` section:
//! - exercised: the row's targeted rule (its first; with no rule, any
//!   `tools/call`, or on a row with `mcp.restart` the restart after the
//!   agent's first message, or with `mcp.withhold_endpoint` a legacy SSE
//!   stream opened)
//!   matched a real request: "the MCP call arrived";
//! - bounded calls: `tools/call` requests within the row's call bound, and
//!   requests refused as `unauthorized` too;
//! - cancellation: after an interrupt sent while a `tools/call` was in
//!   flight, a `notifications/cancelled` naming that request arrived (not
//!   checked when no call was in flight at the interrupt);
//! - reusability, rows with a `schema_swap` rule that landed: a later main
//!   call offered the probe tool with its new argument (the agent re-listed);
//! - reusability, rows with `mcp.offered`: the probe tool reached the model
//!   (in the tools a main call offered), or the agent surfaced that the
//!   server is missing: never a silent drop.
//!
//! Every check is `not checked` when the recording is missing or capped in a
//! way that hides the evidence.

use super::{Check, Invariant};
use crate::mcp::McpRecording;
use crate::observe::Observation;
use crate::scenarios::Scenario;

fn recording(obs: &Observation) -> Option<&McpRecording> {
    obs.mcp.as_ref()
}

/// The targeted rule matched a request.
pub fn exercised(s: &Scenario, obs: &Observation) -> Option<Check> {
    let spec = s.mcp.as_ref()?;
    let inv = Invariant::Exercised;
    let Some(rec) = recording(obs) else {
        return Some(Check::skipped(
            inv,
            "mcp_call_arrived",
            "no MCP recording (the server never ran)",
        ));
    };
    let v = match spec.rules.first() {
        Some(rule) => {
            if rec.rule_hits.first().copied().unwrap_or(0) > 0 {
                vec![]
            } else {
                let m = rule.when.method();
                vec![format!(
                    "the MCP fault never landed: no `{m}` request matched its rule ({}); the server saw {}",
                    rule.reply.kind_name(),
                    seen(rec)
                )]
            }
        }
        None if spec.restart.is_some() => restart_landed(rec),
        None if spec.withhold_endpoint => withheld_landed(rec),
        None if rec.tool_calls > 0 => vec![],
        None => vec![format!(
            "the MCP call never arrived: no `tools/call` reached the server; it saw {}",
            seen(rec)
        )],
    };
    Some(Check::new(inv, "mcp_call_arrived", v))
}

/// A restart (`mcp.restart`) landed once the agent had reached the server
/// before it (a stdio server started, an HTTP session opened): it had a
/// live connection to lose.
fn restart_landed(rec: &McpRecording) -> Vec<String> {
    use crate::mcp::engine::RESTART;
    let restart = rec.exchanges.iter().position(|e| e.method == RESTART);
    match restart {
        Some(i) if i > 0 => vec![],
        Some(_) => vec![format!(
            "the MCP server restarted before the agent reached it, so it had no live connection \
             to lose; it saw {}",
            seen(rec)
        )],
        None => vec![format!(
            "the MCP server never restarted (the faulted turn never ended); it saw {}",
            seen(rec)
        )],
    }
}

/// A withheld `endpoint` event (`mcp.withhold_endpoint`) landed once the
/// agent opened a legacy SSE stream.
fn withheld_landed(rec: &McpRecording) -> Vec<String> {
    if rec.sse_sessions > 0 {
        return vec![];
    }
    vec![format!(
        "the agent never opened the legacy SSE stream, so no endpoint event was withheld; the \
         server saw {}",
        seen(rec)
    )]
}

/// What the server saw, in a few words.
fn seen(rec: &McpRecording) -> String {
    let mut methods: Vec<&str> = rec.exchanges.iter().map(|e| e.method.as_str()).collect();
    methods.dedup();
    if methods.is_empty() {
        format!(
            "nothing ({} stdio connection(s), {} HTTP session(s)) over {}",
            rec.stdio_connections, rec.http_sessions, rec.transport
        )
    } else {
        super::clip(&methods.join(", "), 200)
    }
}

/// After a `schema_swap` landed, some main call offered the probe tool with
/// its new argument: the agent listed the tools again on
/// `notifications/tools/list_changed` (rows with a `schema_swap` rule).
pub fn schema_relisted(s: &Scenario, mapped: Option<&str>, obs: &Observation) -> Option<Check> {
    use crate::mcp::replies::schema_swap::NEW_ARG;
    let spec = s.mcp.as_ref()?;
    let i = spec
        .rules
        .iter()
        .position(|r| r.reply.changes_probe_tool())?;
    let rec = recording(obs)?;
    if rec.rule_hits.get(i).copied().unwrap_or(0) == 0 {
        return None; // never landed: the `exercised` check says so
    }
    let inv = Invariant::Reusability;
    let name = mapped.unwrap_or("mcp_probe");
    let main: Vec<_> = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.kind == crate::provider::CallKind::Main)
        .collect();
    let fresh = |t: &String| {
        t.split_once('(').is_some_and(|(n, args)| {
            n == name && args.trim_end_matches(')').split(',').any(|a| a == NEW_ARG)
        })
    };
    if main.iter().any(|r| r.tools.iter().any(fresh)) {
        return Some(Check::new(inv, "mcp_schema_relisted", vec![]));
    }
    let last = main.last().map_or(&[][..], |r| &r.tools[..]);
    Some(Check::new(
        inv,
        "mcp_schema_relisted",
        vec![format!(
            "the server announced tools/list_changed and `probe` now takes `{NEW_ARG}`, but none of the \
             {} main call(s) offered `{name}` with it: the agent kept the stale schema (the last call \
             offered: {})",
            main.len(),
            super::clip(&last.join(", "), 300)
        )],
    ))
}

/// Requests refused as `unauthorized` within the row's call bound: a 401 is
/// surfaced, not retried for ever (rows with an `unauthorized` rule).
pub fn unauthorized_retries(s: &Scenario, obs: &Observation) -> Option<Check> {
    let spec = s.mcp.as_ref()?;
    let refusing: Vec<usize> = spec
        .rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.reply.refuses())
        .map(|(i, _)| i)
        .collect();
    if refusing.is_empty() {
        return None;
    }
    let inv = Invariant::ProviderCalls;
    let rec = recording(obs)?;
    let refused: u64 = refusing
        .iter()
        .map(|i| rec.rule_hits.get(*i).copied().unwrap_or(0))
        .sum();
    let limit = s.calls.limit();
    let v = if refused > limit {
        vec![format!(
            "the agent sent {refused} MCP requests the server refused as unauthorized (401); \
             the bound is {limit}: a 401 is retried for ever instead of surfaced"
        )]
    } else {
        vec![]
    };
    Some(Check::new(inv, "mcp_unauthorized_retries", v))
}

/// `tools/call` requests within the row's bound.
pub fn calls(s: &Scenario, obs: &Observation) -> Option<Check> {
    s.mcp.as_ref()?;
    let inv = Invariant::ProviderCalls;
    let rec = recording(obs)?;
    let limit = s.calls.limit();
    let v = if rec.tool_calls > limit {
        vec![format!(
            "the agent made {} MCP tools/call requests; the bound is {limit}",
            rec.tool_calls
        )]
    } else {
        vec![]
    };
    Some(Check::new(inv, "mcp_call_bound", v))
}

/// A call in flight at the interrupt was cancelled.
pub fn cancellation(s: &Scenario, obs: &Observation) -> Option<Check> {
    s.mcp.as_ref()?;
    s.interrupt.as_ref()?;
    let inv = Invariant::Termination;
    let Some(rec) = recording(obs) else {
        return Some(Check::skipped(inv, "cancellation", "no MCP recording"));
    };
    let Some((at, _)) = obs.interrupt_sent() else {
        return Some(Check::skipped(
            inv,
            "cancellation",
            "the interrupt was never sent",
        ));
    };
    let in_flight = rec.in_flight_at(at);
    if in_flight.is_empty() {
        return Some(Check::skipped(
            inv,
            "cancellation",
            "no MCP tools/call was in flight when the interrupt was sent",
        ));
    }
    if rec.dropped > 0 {
        return Some(Check::skipped(
            inv,
            "cancellation",
            format!(
                "{} MCP messages past the recording cap were not kept",
                rec.dropped
            ),
        ));
    }
    let v = in_flight
        .iter()
        .filter_map(|e| {
            let id = e.id.as_ref()?;
            (!rec.cancelled(id, e.at)).then(|| {
                format!(
                    "the interrupt at {at:.1} s left MCP tools/call {id} (sent at {:.1} s) in flight, and no \
                     notifications/cancelled named it",
                    e.at
                )
            })
        })
        .collect();
    Some(Check::new(inv, "cancellation", v))
}

/// The MCP server's name in every profile's config (`mcp_servers.chaos`),
/// which an agent names when it says the server is missing.
const SERVER_NAME: &str = "chaos";

/// Rows with `mcp.offered`: some main call of the faulted turn offered the
/// probe tool (as the profile maps it), or the agent surfaced that the
/// server is missing: the faulted turn ended `failed`, or its final answer or
/// a system message it sent the model names the server `chaos` (a tool
/// result does not count: it echoes the tool's name, `mcp_chaos_probe`).
pub fn offered(s: &Scenario, mapped: Option<&str>, obs: &Observation) -> Option<Check> {
    if !s.mcp.as_ref()?.offered {
        return None;
    }
    let inv = Invariant::Reusability;
    let name = mapped.unwrap_or("mcp_probe");
    let main: Vec<_> = obs.recording.main_requests().collect();
    if main.is_empty() {
        return Some(Check::skipped(
            inv,
            "mcp_tool_offered",
            "no main call was made",
        ));
    }
    let is_probe = |t: &String| t.split('(').next() == Some(name);
    if main.iter().any(|r| r.tools.iter().any(is_probe)) {
        return Some(Check::new(inv, "mcp_tool_offered", vec![]));
    }
    let end = obs.turn_end(0).map(|(_, e)| e);
    let said = end
        .as_ref()
        .is_some_and(|e| e.failed || e.final_text.contains(SERVER_NAME))
        || main.iter().any(|r| {
            r.messages
                .iter()
                .any(|m| m.role == "system" && m.content.contains(SERVER_NAME))
        });
    if said {
        return Some(Check::new(inv, "mcp_tool_offered", vec![]));
    }
    let last = main.last().map_or(&[][..], |r| &r.tools[..]);
    let offered: Vec<&str> = last.iter().map(String::as_str).collect();
    Some(Check::new(
        inv,
        "mcp_tool_offered",
        vec![format!(
            "the MCP tool `{name}` was offered in none of the {} main call(s), and the agent never said \
             the server `{SERVER_NAME}` is missing: a silent drop (the last call offered: {})",
            main.len(),
            super::clip(&offered.join(", "), 300)
        )],
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::McpExchange;
    use crate::observe::{Event, Timed};
    use crate::oracle::fixtures::scenario;

    /// A restart lands once the agent reached the server before it.
    #[test]
    fn a_restart_lands_after_the_agents_first_message() {
        let ex = |m: &str| McpExchange {
            method: m.into(),
            ..Default::default()
        };
        let rec = |ms: &[&str]| McpRecording {
            exchanges: ms.iter().map(|m| ex(m)).collect(),
            ..Default::default()
        };
        assert!(restart_landed(&rec(&["initialize", "tools/list", "<restart>"])).is_empty());
        let early = restart_landed(&rec(&["<restart>"])).join(" ");
        assert!(early.contains("before the agent reached it"), "{early}");
        let never = restart_landed(&rec(&["initialize"])).join(" ");
        assert!(never.contains("never restarted"), "{never}");
    }

    fn mcp_row(extra: &str) -> Scenario {
        let mut s = scenario(extra);
        s.mcp = Some(
            serde_yaml::from_str("{rules: [{when: {call: 0}, reply: {kind: hang}}]}").unwrap(),
        );
        s
    }

    fn call(at: f64, id: i64, answered: Option<f64>) -> McpExchange {
        McpExchange {
            at,
            method: "tools/call".into(),
            id: Some(id.into()),
            kind: Some("hang".into()),
            answered,
            ..Default::default()
        }
    }

    fn obs(ex: Vec<McpExchange>, hits: u64, interrupt_at: Option<f64>) -> Observation {
        let tool_calls = ex.iter().filter(|e| e.method == "tools/call").count() as u64;
        Observation {
            mcp: Some(McpRecording {
                exchanges: ex,
                rule_hits: vec![hits],
                tool_calls,
                ..Default::default()
            }),
            events: interrupt_at
                .map(|at| Timed {
                    at,
                    worker: None,
                    event: Event::InterruptSent { main_calls: 1 },
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn exercised_needs_the_targeted_rule_to_match() {
        let s = mcp_row("expect: ended");
        assert!(!exercised(&s, &obs(vec![call(1.0, 1, None)], 1, None))
            .unwrap()
            .failed());
        let c = exercised(&s, &obs(vec![], 0, None)).unwrap();
        assert!(
            c.failed() && c.violations()[0].contains("never landed"),
            "{c:?}"
        );
        assert!(exercised(&s, &Observation::default())
            .unwrap()
            .not_checked());
        assert!(exercised(&scenario("expect: ended"), &Observation::default()).is_none());
    }

    #[test]
    fn mcp_calls_are_bounded_by_the_row() {
        let s = mcp_row("expect: ended\ncalls: {max: 2}");
        let three = obs(
            (1..=3).map(|i| call(i as f64, i, Some(i as f64))).collect(),
            1,
            None,
        );
        assert!(calls(&s, &three).unwrap().violations()[0].contains("3 MCP tools/call"));
        let two = obs(
            (1..=2).map(|i| call(i as f64, i, Some(i as f64))).collect(),
            1,
            None,
        );
        assert!(!calls(&s, &two).unwrap().failed());
    }

    #[test]
    fn an_in_flight_call_must_be_cancelled_after_the_interrupt() {
        let s = mcp_row("interrupt: {after_calls: 1}\nexpect: interrupted");
        let hung = obs(vec![call(1.0, 5, None)], 1, Some(2.0));
        let c = cancellation(&s, &hung).unwrap();
        assert!(
            c.failed() && c.violations()[0].contains("tools/call 5"),
            "{c:?}"
        );
        let mut ok = hung.clone();
        ok.mcp.as_mut().unwrap().exchanges.push(McpExchange {
            at: 2.1,
            method: "notifications/cancelled".into(),
            cancels: Some(5.into()),
            ..Default::default()
        });
        assert!(!cancellation(&s, &ok).unwrap().failed());
        // Answered before the interrupt: nothing was in flight.
        let done = obs(vec![call(1.0, 5, Some(1.5))], 1, Some(2.0));
        assert!(cancellation(&s, &done).unwrap().not_checked());
        assert!(cancellation(&mcp_row("expect: ended"), &hung).is_none());
    }

    #[test]
    fn history_integrity_covers_mcp_probe_calls_like_any_tool() {
        use crate::oracle::fixtures::{assistant_calls, end, healthy, msg, request, tool};
        use crate::provider::recording::IssuedToolCall;
        use crate::provider::CallKind;
        let s = mcp_row("expect: ended");
        let judge = |msgs| {
            let mut o = healthy(&s, end(0, true, false, "done"));
            o.recording.issued_tool_calls.push(IssuedToolCall {
                id: "m1".into(),
                tool: "mcp_probe".into(),
                args: serde_json::json!({"text": "n"}),
                main_index: 0,
            });
            o.recording.requests.push(request(2, CallKind::Main, msgs));
            let checks = crate::oracle::history::check(&s, &o);
            checks
                .into_iter()
                .find(|c| c.name == "wire_tool_results")
                .unwrap()
        };
        let answered = judge(vec![
            msg("user", "u"),
            assistant_calls(&["m1"]),
            tool("m1", "probe:n"),
        ]);
        assert!(!answered.failed(), "{answered:?}");
        let dropped = judge(vec![
            msg("user", "u"),
            assistant_calls(&["m1"]),
            msg("user", "next"),
        ]);
        assert!(dropped.violations()[0].contains("m1"), "{dropped:?}");
    }

    #[test]
    fn the_mcp_tool_must_be_offered_or_its_absence_surfaced() {
        use crate::oracle::fixtures::{end, healthy, msg, request, tool};
        use crate::provider::CallKind;
        let mut s = mcp_row("expect: ended");
        s.mcp.as_mut().unwrap().offered = true;
        let judge = |tools: &[&str], system: &str, e| {
            let mut o = healthy(&s, e);
            let msgs = vec![
                msg("system", system),
                msg("user", "u"),
                tool("c1", "error: unknown tool mcp_chaos_probe"),
            ];
            let mut r = request(2, CallKind::Main, msgs);
            r.tools = tools.iter().map(|t| t.to_string()).collect();
            o.recording.requests.push(r);
            offered(&s, Some("mcp_chaos_probe"), &o).unwrap()
        };
        let ok = judge(
            &["shell(command)", "mcp_chaos_probe(text)"],
            "sys",
            end(0, true, false, "done"),
        );
        assert_eq!(ok.status, crate::oracle::Status::Pass, "{ok:?}");
        let dropped = judge(&["shell(command)"], "sys", end(0, true, false, "done"));
        assert!(
            dropped.violations()[0].contains("offered in none of the 2 main call(s)")
                && dropped.violations()[0].contains("shell(command)"),
            "{dropped:?}"
        );
        let said = judge(
            &["shell(command)"],
            "MCP server `chaos` is unavailable: HTTP 401",
            end(0, true, false, "done"),
        );
        assert_eq!(said.status, crate::oracle::Status::Pass, "{said:?}");
        let failed = judge(&["shell(command)"], "sys", end(0, false, true, "error"));
        assert_eq!(failed.status, crate::oracle::Status::Pass, "{failed:?}");
        // Rows without `mcp.offered` are not judged on it.
        s.mcp.as_mut().unwrap().offered = false;
        assert!(offered(&s, None, &healthy(&s, end(0, true, false, "x"))).is_none());
    }

    #[test]
    fn unauthorized_refusals_are_bounded_by_the_row() {
        let mut s = scenario("expect: ended\ncalls: {max: 4}");
        s.mcp = Some(
            serde_yaml::from_str(
                "{rules: [{when: {method: initialize}, reply: {kind: unauthorized}}]}",
            )
            .unwrap(),
        );
        let judge = |hits| unauthorized_retries(&s, &obs(vec![], hits, None)).unwrap();
        assert!(!judge(4).failed());
        let storm = judge(200);
        assert!(
            storm.violations()[0].contains("200 MCP requests"),
            "{storm:?}"
        );
        assert!(unauthorized_retries(&mcp_row("expect: ended"), &obs(vec![], 9, None)).is_none());
    }

    #[test]
    fn a_swapped_schema_must_be_offered_again() {
        use crate::oracle::fixtures::{end, healthy, msg, request};
        use crate::provider::CallKind;
        let mut s = mcp_row("expect: ended");
        s.mcp = Some(
            serde_yaml::from_str("{rules: [{when: {call: 0}, reply: {kind: schema_swap}}]}")
                .unwrap(),
        );
        let judge = |hits, offered: &[&str]| {
            let mut o = healthy(&s, end(0, true, false, "done"));
            o.mcp = obs(vec![], hits, None).mcp;
            let mut r = request(3, CallKind::Main, vec![msg("user", "u")]);
            r.tools = offered.iter().map(|t| t.to_string()).collect();
            o.recording.requests.push(r);
            schema_relisted(&s, Some("mcp_chaos_probe"), &o)
        };
        let fresh = judge(1, &["shell(command)", "mcp_chaos_probe(query)"]).unwrap();
        assert!(!fresh.failed(), "{fresh:?}");
        let stale = judge(1, &["shell(command)", "mcp_chaos_probe(text)"]).unwrap();
        assert!(
            stale.violations()[0].contains("kept the stale schema")
                && stale.violations()[0].contains("mcp_chaos_probe(text)"),
            "{stale:?}"
        );
        // A swap that never landed is the `exercised` check's to report.
        assert!(judge(0, &["mcp_chaos_probe(text)"]).is_none());
    }
}
