//! `mcp_reconnected` (reusability, rows with `mcp.restart`): chaosrun's MCP
//! server restarted when the faulted turn ended (every stdio server exited,
//! every HTTP session forgotten) and was healthy again at once; the probe
//! turn's first answer asks for the MCP tool (`text: again-NONCE`). The
//! call must reach the restarted server and its result (`probe:again-NONCE`)
//! the model: an agent that drops a lost server's tools for good (or keeps
//! a dead connection) fails, naming what it told the model instead
//! (hermes-agent #50170). Not checked when the server never restarted, the
//! agent never reached it before the restart (no connection to lose), the
//! probe turn never asked for the tool, or the recordings were capped.

use super::{clip, Check, Invariant};
use crate::mcp::engine::RESTART;
use crate::mcp::McpRecording;
use crate::observe::Observation;
use crate::provider::recording::RequestRecord;
use crate::provider::{CallKind, Reply};
use crate::scenarios::Scenario;

const NAME: &str = "mcp_reconnected";

pub fn check(s: &Scenario, mapped: Option<&str>, obs: &Observation) -> Option<Check> {
    s.mcp.as_ref()?.restart?;
    let inv = Invariant::Reusability;
    let skip = |why: &str| Some(Check::skipped(inv, NAME, why));
    let Some(rec) = obs.mcp.as_ref() else {
        return skip("no MCP recording (the server never ran)");
    };
    let Some(restart) = restarted_at(rec) else {
        return skip(if rec.dropped > 0 {
            "the MCP recording was capped before the restart"
        } else {
            "the MCP server never restarted (the faulted turn never ended)"
        });
    };
    if !rec
        .exchanges
        .iter()
        .take_while(|e| e.method != RESTART)
        .any(|e| e.at <= restart)
    {
        return skip("the agent never reached the server before the restart, so it had no connection to lose (mcp_call_arrived says so)");
    }
    let probes: Vec<&RequestRecord> = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.kind == CallKind::Probe)
        .collect();
    let Some(asked) = probes.iter().position(|r| r.reply == Reply::TOOL_CALLS) else {
        return skip("the probe turn never asked for the MCP tool (the probe check says why)");
    };
    let text = format!("{}{}", crate::mcp::AGAIN, obs.nonce);
    let result = format!("probe:{text}");
    let reached = rec
        .exchanges
        .iter()
        .any(|e| e.method == "tools/call" && e.at >= restart && e.params.contains(&text));
    let carried = probes[asked + 1..].iter().any(|r| {
        r.messages
            .iter()
            .any(|m| m.role == "tool" && m.content.contains(&result))
    });
    let name = mapped.unwrap_or("mcp_probe");
    let v = match (reached, carried) {
        (_, true) => vec![],
        (true, false) => vec![format!(
            "the restarted MCP server answered the probe turn's `{name}` call (`{result}`), but no \
             later probe request carried that result to the model{}",
            told(&probes[asked + 1..])
        )],
        (false, _) => vec![format!(
            "the MCP server restarted as the faulted turn ended (+{restart:.1} s) and was healthy \
             again at once, but the probe turn's `{name}` call never reached it (after the restart \
             it saw: {}){}{}",
            after(rec, restart),
            offered(probes[asked], name),
            told(&probes[asked + 1..])
        )],
    };
    Some(Check::new(inv, NAME, v))
}

/// When the server restarted (its `<restart>` exchange).
fn restarted_at(rec: &McpRecording) -> Option<f64> {
    rec.exchanges
        .iter()
        .find(|e| e.method == RESTART)
        .map(|e| e.at)
}

/// What the server saw after the restart, in a few words.
fn after(rec: &McpRecording, restart: f64) -> String {
    let mut seen: Vec<&str> = rec
        .exchanges
        .iter()
        .filter(|e| e.at >= restart && e.method != RESTART)
        .map(|e| e.method.as_str())
        .collect();
    seen.dedup();
    if seen.is_empty() {
        "nothing".into()
    } else {
        clip(&seen.join(", "), 200)
    }
}

/// Whether the request that got the tool call offered the tool at all.
fn offered(asked: &RequestRecord, name: &str) -> String {
    let has = asked
        .tools
        .iter()
        .any(|t| t.split('(').next() == Some(name));
    if has || asked.tools.is_empty() {
        String::new()
    } else {
        format!(
            "; the probe turn's request offered the model no `{name}`: the agent dropped the \
             server's tools without a word"
        )
    }
}

/// The tool result the agent sent the model instead, if a later probe
/// request carries one.
fn told(later: &[&RequestRecord]) -> String {
    let result = later
        .first()
        .and_then(|r| r.messages.iter().rev().find(|m| m.role == "tool"))
        .map(|m| m.content.as_str());
    match result {
        Some(c) => format!("; it answered the call with {:?}", excerpt(c)),
        None => String::new(),
    }
}

/// A tool result's first 60 and last 160 characters (an agent's wrapper
/// comes first, the error last).
fn excerpt(c: &str) -> String {
    let n = c.chars().count();
    if n <= 240 {
        return c.to_string();
    }
    let head: String = c.chars().take(60).collect();
    let tail: String = c.chars().skip(n - 160).collect();
    format!("{head} … {tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::{McpExchange, McpRecording};
    use crate::message::Message;

    fn row() -> Scenario {
        super::super::fixtures::scenario("expect: ended\nmcp: {restart: turn_end}")
    }

    fn exchange(at: f64, method: &str, params: &str) -> McpExchange {
        McpExchange {
            at,
            method: method.into(),
            params: params.into(),
            ..Default::default()
        }
    }

    fn probe(reply: &str, tools: &[&str], tool_result: Option<&str>) -> RequestRecord {
        let mut r = super::super::fixtures::request(1, CallKind::Probe, vec![]);
        r.reply = reply.into();
        r.tools = tools.iter().map(|t| t.to_string()).collect();
        if let Some(c) = tool_result {
            r.messages.push(Message::new("tool", c));
        }
        r
    }

    fn obs(exchanges: Vec<McpExchange>, probes: Vec<RequestRecord>) -> Observation {
        let mut o = Observation {
            nonce: "N".into(),
            ..Default::default()
        };
        o.mcp = Some(McpRecording {
            exchanges,
            ..Default::default()
        });
        o.recording.requests = probes;
        o
    }

    #[test]
    fn the_call_must_reach_the_restarted_server_and_its_result_the_model() {
        let s = row();
        let first = exchange(1.0, "tools/call", r#"{"arguments":{"text":"N"}}"#);
        let restart = exchange(2.0, RESTART, "");
        let again = exchange(3.0, "tools/call", r#"{"arguments":{"text":"again-N"}}"#);
        let asked = probe(Reply::TOOL_CALLS, &["mcp_probe(text)"], None);
        let ok = probe("text", &["mcp_probe(text)"], Some("probe:again-N"));
        let pass = check(
            &s,
            None,
            &obs(
                vec![first.clone(), restart.clone(), again],
                vec![asked.clone(), ok],
            ),
        )
        .unwrap();
        assert_eq!(pass.status, crate::oracle::Status::Pass, "{pass:?}");

        // The tools dropped: the call never reached the server.
        let dropped = probe(Reply::TOOL_CALLS, &["shell(cmd)"], None);
        let unknown = probe("text", &["shell(cmd)"], Some("Unknown tool: mcp_probe"));
        let fail = check(
            &s,
            None,
            &obs(vec![first.clone(), restart.clone()], vec![dropped, unknown]),
        )
        .unwrap();
        let v = fail.violations().join(" ");
        assert!(
            v.contains("never reached it (after the restart it saw: nothing)"),
            "{v}"
        );
        assert!(v.contains("offered the model no `mcp_probe`"), "{v}");
        assert!(v.contains("\"Unknown tool: mcp_probe\""), "{v}");

        // A long result: its head and its tail.
        let long = format!(
            "<wrapper>{}{{\"error\": \"ClosedResourceError\"}}",
            "x".repeat(500)
        );
        assert!(
            excerpt(&long).starts_with("<wrapper>")
                && excerpt(&long).ends_with("ClosedResourceError\"}")
        );

        // No restart recorded: not checked.
        let none = check(&s, None, &obs(vec![first], vec![asked.clone()])).unwrap();
        assert!(none.not_checked(), "{none:?}");
        // Never reached before the restart: nothing was lost, not checked.
        let unreached = check(&s, None, &obs(vec![restart], vec![asked])).unwrap();
        assert!(unreached.not_checked(), "{unreached:?}");
    }
}
