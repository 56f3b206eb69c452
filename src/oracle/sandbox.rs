//! The agent's own sandbox nested in the scenario's (`agent_sandbox`,
//! issues 35.5 and 47.3): on a row with `agent_sandbox:`, the agent turned
//! its own tool sandbox on inside chaosrun's network namespace and cgroup
//! (and, with `namespaces: denied`, where namespaces cannot be made). The
//! tool must have run (a tool result sent to the model carries what the
//! row's command prints) or its failure must be named with its cause (a tool
//! result, the faulted turn's final text or, for a one-shot CLI, what that
//! turn printed on stderr names the namespaces, the permission, unshare,
//! nesting, …; see [`crate::scenarios::agent_sandbox::NAMES_THE_CAUSE`]). An
//! empty or generic result ("sandboxed command failed (exit 1)") fails: the
//! model, and the user, cannot tell a sandbox that could not start from a
//! command that failed. On the denied row a tool that ran in the scenario's
//! own network namespace ran without the agent's sandbox: that fallback
//! must be said the same way ("ran unsandboxed", "without the sandbox", …;
//! [`crate::scenarios::agent_sandbox::says_unsandboxed`]), and a silent one
//! fails. A hang is the termination checks'. Pure over the observation;
//! `not checked` when no tool result reached the model, or when the tool ran
//! on the denied row and either namespace is unknown.
//!
//! Its evidence ([`engaged`], under *fault exercised*): the rows' command
//! also prints its network namespace (`readlink /proc/self/ns/net`); one
//! other than the scenario's shows the agent's sandbox really wrapped it. A
//! tool that ran in the scenario's own namespace on the nested row shows
//! nothing about a nested sandbox: the agent's did not engage (or isolates
//! no network), and the row fails there instead of passing on a tool that
//! ran unsandboxed. On the denied row a fallback that was said shows the
//! fault landed (the sandbox could not start); a silent one is the check's.

use super::{clip, with_nonce, Check, Invariant};
use crate::observe::Observation;
use crate::provider::recording::CallKind;
use crate::scenarios::agent_sandbox::{named_cause, named_failure, says_unsandboxed, AgentSandbox};
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

/// What the model and the user were told in the faulted turn: the tool
/// results, the turn's final text and, for a one-shot CLI (exec mode), what
/// the turn's process printed on stderr (a driver-protocol agent's stderr is
/// its log, not the user's screen).
fn told(obs: &Observation) -> Vec<String> {
    let mut out: Vec<String> = tool_results(obs).into_iter().map(String::from).collect();
    if let Some((_, end)) = obs.turn_end(0) {
        out.push(end.final_text);
        out.extend(end.stderr);
    }
    out
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
        if told(obs).iter().any(|t| says_unsandboxed(t).is_some()) {
            return Some(Check::new(inv, EVIDENCE, vec![]));
        }
        return Some(Check::skipped(
            inv,
            EVIDENCE,
            format!(
                "the command ran in the scenario's own network namespace ({ours}) and nothing said it ran without the sandbox ({NAME} judges that)"
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
    let told = told(obs);
    let ran: Vec<&str> = results
        .iter()
        .copied()
        .filter(|r| r.contains(&want))
        .collect();
    if !ran.is_empty() {
        return Some(ran_check(spec, obs, &ran, &told));
    }
    if told.iter().any(|t| named_cause(t).is_some()) {
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
             result was {shown}, and neither it, the turn's final text nor a one-shot CLI's stderr names a cause (namespaces \
             denied, a permission, unshare, nesting, …); saying only that the sandbox failed is not \
             enough: a sandbox that cannot start inside another must say why"
        )],
    ))
}

/// The tool ran (`ran` are the results holding what it prints). On the row
/// that denies namespaces, in the scenario's own network namespace, it ran
/// without the agent's sandbox: that passes only when it was said.
fn ran_check(spec: &AgentSandbox, obs: &Observation, ran: &[&str], told: &[String]) -> Check {
    let inv = Invariant::AgentSandbox;
    if !spec.denies_namespaces() {
        return Check::new(inv, NAME, vec![]);
    }
    let theirs = ran.iter().find_map(|r| namespace_in(r));
    let (theirs, ours) = match (theirs, obs.network.namespace.as_deref()) {
        (Some(t), Some(o)) => (t, o),
        (None, _) => {
            return Check::skipped(
                inv,
                NAME,
                "the tool ran, but its result shows no network namespace, so whether it ran inside the agent's sandbox is not known",
            )
        }
        (_, None) => {
            return Check::skipped(
                inv,
                NAME,
                "the tool ran, but the observation does not record the scenario's network namespace, so whether it ran inside the agent's sandbox is not known",
            )
        }
    };
    if theirs != ours || told.iter().any(|t| says_unsandboxed(t).is_some()) {
        return Check::new(inv, NAME, vec![]);
    }
    Check::new(
        inv,
        NAME,
        vec![format!(
            "the tool ran without the agent's sandbox (in the scenario's own network namespace {ours}, \
             on a row where namespaces are denied) and nothing said so: no tool result, final text or \
             stderr of the turn says it ran unsandboxed; the user asked for a sandbox, so a fallback \
             must be told to the model or the user"
        )],
    )
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

    /// The denied row's check over one tool result (NONCE rendered), the
    /// scenario's network namespace `net:[1]`, and the turn's end.
    fn judged(result: Option<&str>, turn0: crate::observe::TurnEnd) -> Check {
        let s = row();
        let mut o = healthy(&s, turn0);
        o.network.namespace = Some("net:[1]".into());
        let mut msgs = vec![msg("user", "go")];
        if let Some(r) = result {
            msgs.push(tool("c1", &r.replace("NONCE", NONCE)));
        }
        o.recording.requests = vec![request(1, CallKind::Main, msgs)];
        check(&s, &o).unwrap()
    }

    fn status(result: Option<&str>) -> Check {
        judged(result, end(0, false, true, "tools settled"))
    }

    #[test]
    fn the_printed_text_passes() {
        assert_eq!(
            status(Some("sandboxed-NONCE\nnet:[2]\n")).status,
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
    fn a_failure_naming_only_the_sandbox_fails() {
        // Issue 47.3: the word "sandbox" is not a cause.
        let c = status(Some("sandboxed command failed (exit 1)"));
        assert!(c.violations()[0].contains("names a cause"), "{c:?}");
        // The cause said to the user (the turn's final text) is enough.
        let c = judged(
            Some("sandboxed command failed (exit 1)"),
            end(0, false, true, "the sandbox could not create a namespace"),
        );
        assert_eq!(c.status, super::super::Status::Pass, "{c:?}");
    }

    #[test]
    fn a_silent_fallback_on_the_denied_row_fails() {
        let c = status(Some("sandboxed-NONCE\nnet:[1]\n"));
        assert!(c.violations()[0].contains("nothing said so"), "{c:?}");
    }

    #[test]
    fn a_fallback_said_to_the_model_or_the_user_passes() {
        let said = status(Some(
            "warning: namespaces denied, ran unsandboxed\nsandboxed-NONCE\nnet:[1]\n",
        ));
        assert_eq!(said.status, super::super::Status::Pass, "{said:?}");
        let mut turn0 = end(0, false, true, "tools settled");
        turn0.stderr = Some("⚠ Sandbox disabled: Commands will run WITHOUT sandboxing".into());
        let on_stderr = judged(Some("sandboxed-NONCE\nnet:[1]\n"), turn0);
        assert_eq!(
            on_stderr.status,
            super::super::Status::Pass,
            "{on_stderr:?}"
        );
    }

    #[test]
    fn a_run_without_a_namespace_to_compare_is_not_checked() {
        let c = status(Some("sandboxed-NONCE\n"));
        assert!(
            c.not_checked_reason()
                .unwrap()
                .contains("no network namespace"),
            "{c:?}"
        );
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
        let said = evidence(
            denied,
            &format!("ran unsandboxed\n{}", ran("net:[1]")),
            ours,
        );
        assert_eq!(said.status, super::super::Status::Pass, "{said:?}");
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
