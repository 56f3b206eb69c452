//! `mcp_timeout_cancelled`: an MCP `tools/call` the agent stopped waiting
//! for on its own (its per-call timeout: the turn moved on, or the call's
//! result, often a tool error, went to the model) while the server still
//! worked on it (no answer by [`SLACK`] after) must be cancelled: a `notifications/cancelled` naming its
//! request id, or the connection closed (stdio stdin closed, HTTP session
//! deleted) while the session goes on, by [`SLACK`] after the agent moved
//! on. Else the server works for ever on a request nobody waits for.
//!
//! A call the server ended itself (`crash`, `malformed`) is not judged, nor
//! one in flight at an interrupt (the `cancellation` check's). No abandoned
//! call: no check. Missing or capped recording: not checked. Times: the MCP
//! recording is on the run's clock; a provider request's `at` plus
//! `provider_offset` is too.

use super::{Check, Invariant};
use crate::mcp::{McpExchange, McpRecording};
use crate::observe::Observation;
use crate::scenarios::Scenario;

const NAME: &str = "mcp_timeout_cancelled";

/// Seconds after the agent moved on by which the cancel (or close) must
/// have arrived.
pub const SLACK: f64 = 1.0;

/// When and how the agent stopped waiting for a call.
struct MovedOn {
    at: f64,
    how: &'static str,
}

/// Every `tools/call` the agent abandoned on its own was cancelled or its
/// connection closed (rows with an `mcp:` section).
pub fn check(s: &Scenario, mapped: Option<&str>, obs: &Observation) -> Option<Check> {
    s.mcp.as_ref()?;
    let inv = Invariant::Termination;
    let Some(rec) = obs.mcp.as_ref() else {
        return Some(Check::skipped(inv, NAME, "no MCP recording"));
    };
    let name = mapped.unwrap_or("mcp_probe");
    let interrupt = obs.interrupt_sent().map(|(at, _)| at);
    let abandoned: Vec<(&McpExchange, MovedOn)> = rec
        .exchanges
        .iter()
        .filter(|e| e.method == "tools/call" && e.id.is_some())
        .filter(|e| {
            !e.kind
                .as_deref()
                .is_some_and(crate::mcp::replies::Reply::ends_call)
        })
        .filter(|e| interrupt.is_none_or(|t| !(e.at <= t && e.answered.is_none_or(|a| a > t))))
        .filter_map(|e| {
            let m = moved_on(e, name, obs)?;
            // Answered within the slack: the server let go by itself (and
            // an answer is stamped once sent, maybe after the agent read it).
            e.answered
                .is_none_or(|a| a > m.at + SLACK)
                .then_some((e, m))
        })
        .collect();
    if abandoned.is_empty() {
        return None;
    }
    if rec.dropped > 0 {
        return Some(Check::skipped(
            inv,
            NAME,
            format!(
                "{} MCP messages past the recording cap were not kept",
                rec.dropped
            ),
        ));
    }
    let last_call = last_model_call(obs);
    let v = abandoned
        .iter()
        .filter(|(e, m)| !let_go(rec, e, m.at + SLACK, last_call))
        .map(|(e, m)| {
            format!(
                "tools/call #{} ({}) was abandoned: the agent moved on at +{:.1} s ({}) and never sent \
                 notifications/cancelled for it or closed the connection",
                id_text(e),
                e.tool.as_deref().unwrap_or("?"),
                m.at,
                m.how
            )
        })
        .collect();
    Some(Check::new(inv, NAME, v))
}

/// A request id as written in a message (`7`, `"a-7"`).
fn id_text(e: &McpExchange) -> String {
    e.id.as_ref().map_or_else(String::new, |v| v.to_string())
}

/// Whether the agent let the server go of `e` by `by`: a
/// `notifications/cancelled` naming it, or its connection closed while the
/// session went on (before `last_call`, the agent's last model call: a
/// close at its shutdown is no release, a longer session would have kept
/// the server working).
fn let_go(rec: &McpRecording, e: &McpExchange, by: f64, last_call: Option<f64>) -> bool {
    let id = e.id.as_ref();
    rec.exchanges.iter().any(|x| {
        let cancel = x.method == "notifications/cancelled" && x.cancels.as_ref() == id;
        let close = x.conn == e.conn
            && matches!(x.method.as_str(), "<stdin closed>" | "<delete>")
            && last_call.is_none_or(|t| x.at < t);
        x.at >= e.at && x.at <= by && (cancel || close)
    })
}

/// When the last model call arrived, on the run's clock (both servers
/// stamp on receipt, so its order with the MCP messages is the agent's).
fn last_model_call(obs: &Observation) -> Option<f64> {
    obs.recording
        .requests
        .iter()
        .map(|r| r.at + obs.provider_offset)
        .reduce(f64::max)
}

/// When the agent stopped waiting for `e`: the first main call after it
/// arrived that carries a new result of a call to the MCP tool (`mcp_probe`
/// as the row names it, `name` as the agent offers it), else the end of the
/// turn it arrived in; `None` while the agent never moved on.
fn moved_on(e: &McpExchange, name: &str, obs: &Observation) -> Option<MovedOn> {
    let issued = obs
        .recording
        .issued_tool_calls
        .iter()
        .filter(|c| c.tool == "mcp_probe")
        .map(|c| c.id.as_str());
    let at = |r: &crate::provider::RequestRecord| r.at + obs.provider_offset;
    let main: Vec<_> = obs.recording.main_requests().collect();
    // Results the model had before the call arrived are not its.
    let before: Vec<&str> = main
        .iter()
        .filter(|r| at(r) < e.at)
        .flat_map(|r| r.messages.iter().filter_map(|m| m.tool_call_id.as_deref()))
        .collect();
    for r in main.iter().filter(|r| at(r) >= e.at) {
        let ours: Vec<&str> = r
            .messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .filter(|c| c.name == name)
            .map(|c| c.id.as_str())
            .chain(issued.clone())
            .collect();
        let result = r.messages.iter().find(|m| {
            m.role == "tool"
                && m.tool_call_id
                    .as_deref()
                    .is_some_and(|id| ours.contains(&id) && !before.contains(&id))
        });
        if let Some(m) = result {
            let error = m
                .content
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("error");
            return Some(MovedOn {
                at: at(r),
                how: if error {
                    "a tool error went to the model"
                } else {
                    "a tool result went to the model"
                },
            });
        }
    }
    obs.events.iter().find_map(|t| match &t.event {
        crate::observe::Event::TurnEnd(_) if t.at >= e.at => Some(MovedOn {
            at: t.at,
            how: "the turn ended",
        }),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{Event, Timed};
    use crate::oracle::fixtures::{end, healthy, msg, request, scenario, tool};
    use crate::provider::CallKind;

    fn row() -> Scenario {
        let mut s = scenario("expect: ended");
        s.mcp = Some(
            serde_yaml::from_str("{rules: [{when: {call: 0}, reply: {kind: hang}}]}").unwrap(),
        );
        s
    }

    fn ex(at: f64, method: &str) -> McpExchange {
        McpExchange {
            at,
            conn: "stdio#1".into(),
            method: method.into(),
            ..Default::default()
        }
    }

    /// A hung `tools/call` #7 at 1.0 s (run clock); the agent's second main
    /// call, at provider time 11.0 + offset 1.3 = 12.3 s, carries the
    /// timeout error of its probe call `c1`; then `extra` MCP messages.
    fn judged(kind: &str, extra: Vec<McpExchange>) -> Option<Check> {
        let (s, o) = judged_obs(kind, extra);
        check(&s, Some("mcp_chaos_probe"), &o)
    }

    fn judged_obs(kind: &str, extra: Vec<McpExchange>) -> (Scenario, Observation) {
        let s = row();
        let mut o = healthy(&s, end(0, true, false, "done"));
        o.provider_offset = 1.3;
        let mut call = ex(1.0, "tools/call");
        call.id = Some(7.into());
        call.tool = Some("probe".into());
        call.kind = Some(kind.into());
        let mut exchanges = vec![call];
        exchanges.extend(extra);
        o.mcp = Some(McpRecording {
            exchanges,
            tool_calls: 1,
            rule_hits: vec![1],
            ..Default::default()
        });
        let mut calls =
            crate::message::Message::assistant_calls(vec![crate::message::ToolCall::new(
                "c1",
                "mcp_chaos_probe",
                "{}",
            )]);
        calls.content = String::new();
        let mut r = request(
            11,
            CallKind::Main,
            vec![
                msg("user", "u"),
                calls,
                tool("c1", "error: MCP tool mcp_chaos_probe timed out after 10s"),
            ],
        );
        r.at = 11.0;
        o.recording.requests.push(r);
        // The probe turn's call, at 21.3 s.
        o.recording.requests[1].at = 20.0;
        for e in &mut o.events {
            if matches!(e.event, Event::TurnEnd(_)) {
                e.at += 20.0;
            }
        }
        (s, o)
    }

    fn cancel(at: f64, id: i64) -> McpExchange {
        McpExchange {
            cancels: Some(id.into()),
            ..ex(at, "notifications/cancelled")
        }
    }

    #[test]
    fn an_abandoned_call_never_cancelled_is_a_violation() {
        let c = judged("hang", vec![]).unwrap();
        assert_eq!(
            c.violations(),
            ["tools/call #7 (probe) was abandoned: the agent moved on at +12.3 s (a tool error went \
              to the model) and never sent notifications/cancelled for it or closed the connection"],
            "{c:?}"
        );
        // A cancel long after the agent moved on (at its close) is too late;
        // one naming another request does not count.
        let late = judged("hang", vec![cancel(30.0, 7), cancel(12.0, 8)]).unwrap();
        assert!(late.failed(), "{late:?}");
    }

    #[test]
    fn a_cancel_or_a_closed_connection_lets_the_server_go() {
        let cancelled = judged("hang", vec![cancel(12.2, 7)]).unwrap();
        assert_eq!(
            cancelled.status,
            crate::oracle::Status::Pass,
            "{cancelled:?}"
        );
        let closed = judged("hang", vec![ex(12.5, "<stdin closed>")]).unwrap();
        assert_eq!(closed.status, crate::oracle::Status::Pass, "{closed:?}");
        // A close at the agent's shutdown, after its last model call, is no
        // release: a longer session would have kept the server working.
        let (s, mut o) = judged_obs("hang", vec![ex(12.5, "<stdin closed>")]);
        o.recording.requests.retain(|r| r.kind == CallKind::Main);
        assert!(check(&s, None, &o).unwrap().failed());
        let mut deleted = ex(12.0, "<delete>");
        deleted.conn = "http:S".into();
        // Another connection's end is not this call's.
        assert!(judged("hang", vec![deleted]).unwrap().failed());
    }

    #[test]
    fn calls_not_abandoned_by_the_agent_are_not_judged() {
        // Answered before the agent moved on.
        let s = row();
        let mut o = healthy(&s, end(0, true, false, "done"));
        let mut call = ex(1.0, "tools/call");
        call.id = Some(7.into());
        call.kind = Some("healthy".into());
        call.answered = Some(1.1);
        o.mcp = Some(McpRecording {
            exchanges: vec![call],
            ..Default::default()
        });
        assert!(check(&s, None, &o).is_none());
        // Answered as the agent moved on (stamped just after its next call).
        let (s1, mut o1) = judged_obs("slow", vec![]);
        o1.mcp.as_mut().unwrap().exchanges[0].answered = Some(12.31);
        assert!(check(&s1, Some("mcp_chaos_probe"), &o1).is_none());
        // Answered long after: the server worked on for nobody.
        o1.mcp.as_mut().unwrap().exchanges[0].answered = Some(20.0);
        assert!(check(&s1, Some("mcp_chaos_probe"), &o1).unwrap().failed());
        // The server ended it itself.
        assert!(judged("crash", vec![]).is_none());
        // In flight at an interrupt: the `cancellation` check's.
        let (s2, mut o2) = judged_obs("hang", vec![]);
        assert!(check(&s2, Some("mcp_chaos_probe"), &o2).unwrap().failed());
        o2.events.push(Timed {
            at: 2.0,
            worker: None,
            event: Event::InterruptSent { main_calls: 1 },
        });
        assert!(check(&s2, Some("mcp_chaos_probe"), &o2).is_none());
        // Rows without MCP.
        assert!(check(&scenario("expect: ended"), None, &o).is_none());
    }

    #[test]
    fn the_turn_end_is_when_the_agent_moved_on_without_a_main_call() {
        let s = row();
        let mut o = healthy(&s, end(0, true, false, "done"));
        let mut call = ex(1.0, "tools/call");
        call.id = Some("a-1".into());
        o.mcp = Some(McpRecording {
            exchanges: vec![call],
            ..Default::default()
        });
        let c = check(&s, None, &o).unwrap();
        assert!(
            c.violations()[0].contains(
                "#\"a-1\" (?) was abandoned: the agent moved on at +3.0 s (the turn ended)"
            ),
            "{c:?}"
        );
    }

    #[test]
    fn missing_or_capped_recordings_are_not_checked() {
        let s = row();
        let o = healthy(&s, end(0, true, false, "done"));
        assert!(check(&s, None, &o).unwrap().not_checked());
        let (s2, mut o2) = judged_obs("hang", vec![]);
        o2.mcp.as_mut().unwrap().dropped = 3;
        let capped = check(&s2, Some("mcp_chaos_probe"), &o2).unwrap();
        assert!(
            capped
                .not_checked_reason()
                .unwrap()
                .contains("3 MCP messages"),
            "{capped:?}"
        );
    }
}
