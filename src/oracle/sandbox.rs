//! The agent's own sandbox nested in the scenario's (`agent_sandbox`,
//! issue 35.5): on a row with `agent_sandbox:`, the agent turned its own
//! tool sandbox on inside chaosrun's network namespace and cgroup (and,
//! with `namespaces: denied`, where namespaces cannot be made). The tool
//! must have run (a tool result sent to the model carries what the row's
//! command prints) or its failure must be named as the sandbox's (a tool
//! result, or the faulted turn's final text, names the sandbox, a
//! namespace, unshare, nesting, …; see
//! [`crate::driver::agent_sandbox::NAMES_THE_SANDBOX`]). An empty or
//! generic result fails: the model, and the user, cannot tell a sandbox
//! that could not start from a command that failed. A hang is the
//! termination checks'. Pure over the observation; `not checked` when no
//! tool result reached the model.

use super::{clip, with_nonce, Check, Invariant};
use crate::driver::agent_sandbox::named_failure;
use crate::observe::Observation;
use crate::provider::recording::CallKind;
use crate::scenarios::Scenario;

const NAME: &str = "tool_ran_or_sandbox_named";

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let spec = s.agent_sandbox.as_ref()?;
    let inv = Invariant::AgentSandbox;
    let want = with_nonce(&spec.prints, obs);
    let results: Vec<&str> = obs
        .recording
        .requests
        .iter()
        .filter(|r| r.kind != CallKind::Aux)
        .flat_map(|r| &r.messages)
        .filter(|m| m.role == "tool")
        .map(|m| m.content.as_str())
        .collect();
    if results.iter().any(|r| r.contains(&want)) {
        return Some(Check::new(inv, NAME, vec![]));
    }
    let final_text = obs
        .turn_end(0)
        .map(|(_, t)| t.final_text)
        .unwrap_or_default();
    if results
        .iter()
        .copied()
        .chain(std::iter::once(final_text.as_str()))
        .any(|t| named_failure(t).is_some())
    {
        return Some(Check::new(inv, NAME, vec![]));
    }
    let Some(last) = results.last() else {
        return Some(Check::skipped(
            inv,
            NAME,
            "no tool result reached the model (the sandboxed tool was never asked for, or its turn never got that far)",
        ));
    };
    let shown = if last.trim().is_empty() {
        "an empty result".to_string()
    } else {
        format!("{:?}", clip(last, 160))
    };
    Some(Check::new(
        inv,
        NAME,
        vec![format!(
            "the agent's sandboxed tool neither ran (no tool result holds {want:?}) nor named why: its \
             result was {shown}, and neither it nor the turn's final text names the sandbox, a \
             namespace or nesting; a sandbox that cannot start inside another must say so"
        )],
    ))
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn row() -> Scenario {
        scenario(
            "agent_sandbox: {prints: \"sandboxed-{{nonce}}\", namespaces: denied}\nexpect: ended",
        )
    }

    fn status(result: Option<&str>) -> Check {
        let s = row();
        let mut o = healthy(&s, end(0, false, true, "tools settled"));
        let mut msgs = vec![msg("user", "go")];
        if let Some(r) = result {
            msgs.push(tool("c1", &r.replace("NONCE", NONCE)));
        }
        o.recording.requests = vec![request(1, CallKind::Main, msgs)];
        check(&s, &o).unwrap()
    }

    #[test]
    fn the_printed_text_passes() {
        assert_eq!(
            status(Some("sandboxed-NONCE\n")).status,
            super::super::Status::Pass
        );
    }

    #[test]
    fn a_named_sandbox_failure_passes() {
        let c = status(Some(
            "error: sandbox unavailable: unshare: Operation not permitted",
        ));
        assert!(!c.failed() && !c.not_checked(), "{c:?}");
    }

    #[test]
    fn an_empty_or_generic_result_fails_naming_it() {
        let c = status(Some(""));
        assert!(c.violations()[0].contains("an empty result"), "{c:?}");
        let c = status(Some("error: command failed (exit 1)"));
        assert!(c.violations()[0].contains("command failed"), "{c:?}");
    }

    #[test]
    fn no_tool_result_is_not_checked() {
        assert!(status(None).not_checked());
    }

    #[test]
    fn a_row_without_agent_sandbox_has_no_check() {
        let s = scenario("expect: ended");
        let o = healthy(&s, end(0, false, true, "tools settled"));
        assert!(check(&s, &o).is_none());
    }
}
