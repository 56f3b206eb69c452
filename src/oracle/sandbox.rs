//! The agent's own sandbox nested in the scenario's (`agent_sandbox`,
//! issue 35.5): on a row with `agent_sandbox:`, the agent turned its own
//! tool sandbox on inside chaosrun's network namespace and cgroup (and,
//! with `namespaces: denied`, where namespaces cannot be made). The tool
//! must have run (a tool result sent to the model carries what the row's
//! command prints) or its failure must be named as the sandbox's (a tool
//! result, or the faulted turn's final text, names the sandbox, a
//! namespace, unshare, nesting, …; see
//! [`crate::scenarios::agent_sandbox::NAMES_THE_SANDBOX`]). An empty or
//! generic result fails: the model, and the user, cannot tell a sandbox
//! that could not start from a command that failed. A hang is the
//! termination checks'. Pure over the observation; `not checked` when no
//! tool result reached the model.
//!
//! Its evidence ([`engaged`], under *fault exercised*): the rows' command
//! also prints its network namespace (`readlink /proc/self/ns/net`); one
//! other than the scenario's shows the agent's sandbox really wrapped it. A
//! tool that ran in the scenario's own namespace on the nested row shows
//! nothing about a nested sandbox: the agent's did not engage (or isolates
//! no network), and the row fails there instead of passing on a tool that
//! ran unsandboxed.

use super::{clip, with_nonce, Check, Invariant};
use crate::observe::Observation;
use crate::provider::recording::CallKind;
use crate::scenarios::agent_sandbox::named_failure;
use crate::scenarios::Scenario;

const NAME: &str = "tool_ran_or_sandbox_named";

/// The tool results sent to the model (main, probe and subagent calls).
fn tool_results(obs: &Observation) -> Vec<&str> {
    obs.recording
        .requests
        .iter()
        .filter(|r| r.kind != CallKind::Aux)
        .flat_map(|r| &r.messages)
        .filter(|m| m.role == "tool")
        .map(|m| m.content.as_str())
        .collect()
}

/// The first `net:[INODE]` in `text`.
fn namespace_in(text: &str) -> Option<&str> {
    let start = text.find("net:[")?;
    let len = text[start..].find(']')? + 1;
    Some(&text[start..start + len])
}

/// Evidence that the agent's sandbox engaged (see the module's doc).
pub fn engaged(s: &Scenario, obs: &Observation) -> Option<Check> {
    let spec = s.agent_sandbox.as_ref()?;
    const EVIDENCE: &str = "sandbox_engaged";
    let inv = Invariant::Exercised;
    let want = with_nonce(&spec.prints, obs);
    let results = tool_results(obs);
    let ran: Vec<&str> = results
        .iter()
        .copied()
        .filter(|r| r.contains(&want))
        .collect();
    if ran.is_empty() && results.iter().any(|r| named_failure(r).is_some()) {
        return Some(Check::new(inv, EVIDENCE, vec![]));
    }
    let Some(theirs) = ran.iter().find_map(|r| namespace_in(r)) else {
        return Some(Check::skipped(
            inv,
            EVIDENCE,
            "no tool result shows the command's network namespace (or names the sandbox's failure)",
        ));
    };
    let Some(ours) = obs.network.namespace.as_deref() else {
        return Some(Check::skipped(
            inv,
            EVIDENCE,
            "the observation does not record the scenario's network namespace",
        ));
    };
    if theirs != ours {
        return Some(Check::new(inv, EVIDENCE, vec![]));
    }
    if spec.denies_namespaces() {
        return Some(Check::skipped(
            inv,
            EVIDENCE,
            format!(
                "the command ran in the scenario's own network namespace ({ours}): the agent's sandbox fell back or never engaged (the nested row tells which)"
            ),
        ));
    }
    Some(Check::new(
        inv,
        EVIDENCE,
        vec![format!(
            "the sandboxed command ran in the scenario's own network namespace ({ours}), the agent's: \
             the agent's sandbox did not engage (or isolates no network), so the row shows nothing \
             about a sandbox nested in chaosrun's"
        )],
    ))
}

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let spec = s.agent_sandbox.as_ref()?;
    let inv = Invariant::AgentSandbox;
    let want = with_nonce(&spec.prints, obs);
    let results = tool_results(obs);
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

    fn evidence(row: &str, result: &str, ours: Option<&str>) -> Check {
        let s = scenario(row);
        let mut o = healthy(&s, end(0, false, true, "tools settled"));
        o.network.namespace = ours.map(String::from);
        let msgs = vec![
            msg("user", "go"),
            tool("c1", &result.replace("NONCE", NONCE)),
        ];
        o.recording.requests = vec![request(1, CallKind::Main, msgs)];
        engaged(&s, &o).unwrap()
    }

    #[test]
    fn evidence_needs_another_namespace_than_the_scenarios() {
        let nested = "agent_sandbox: {prints: \"probe-ran-{{nonce}}\"}\nexpect: ended";
        let denied =
            "agent_sandbox: {prints: \"probe-ran-{{nonce}}\", namespaces: denied}\nexpect: ended";
        let ran = |ns: &str| format!("probe-ran-NONCE\n{ns}\n");
        let ours = Some("net:[1]");
        assert_eq!(
            evidence(nested, &ran("net:[2]"), ours).status,
            super::super::Status::Pass
        );
        let same = evidence(nested, &ran("net:[1]"), ours);
        assert!(same.violations()[0].contains("did not engage"), "{same:?}");
        assert!(evidence(denied, &ran("net:[1]"), ours).not_checked());
        assert!(evidence(nested, &ran("net:[2]"), None).not_checked());
        assert!(evidence(nested, "probe-ran-NONCE", ours).not_checked());
        let named = evidence(
            denied,
            "bwrap: No permissions to create a new namespace",
            ours,
        );
        assert_eq!(named.status, super::super::Status::Pass);
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
