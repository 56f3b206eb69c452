//! A scenario's verdict and the one place it is decided: [`judge`] makes the
//! checks of an observation and owns every rule that makes a run an ERROR
//! (chaosrun could not set it up, could not finish it after the agent ran,
//! an upstream or a recorded session that could not serve it, a store the
//! profile's query cannot read); [`Verdict::rejudge`] is the same rule over
//! recorded checks (`merge`).

use serde::{Deserialize, Serialize};

use super::cause::{ErrorCause, NotApplicable, PROFILE_MISTAKE};
use super::{Check, Status};
use crate::observe::{Capabilities, Observation};
use crate::scenarios::Scenario;

/// An observed run judged: its checks and its verdict.
pub struct Judged {
    pub checks: Vec<Check>,
    pub verdict: Verdict,
}

/// Judge the observation of row `s` with the profile's capabilities: every
/// check ([`super::check`]), then the verdict. An `Error` when chaosrun could
/// not set the run up (provider, home, spawning the agent: the checks say
/// the agent never ran), could not finish it after the agent ran (a drive
/// past its bound, a cassette it could not write, a capture the store query
/// needed, a failed MCP upstream: the checks are still made and shown), an
/// upstream or a recorded session could not serve a call, or the store's
/// query could not read a healthy store; else what the checks make.
pub fn judge(s: &Scenario, caps: Capabilities, obs: &Observation) -> Judged {
    let mistake = unmapped_mcp_probe(s, &caps, obs);
    let checks = super::check(s, caps, obs);
    let verdict = error_of(obs).or(mistake).map_or_else(
        || Verdict::from_checks(&checks),
        |cause| Verdict::Error { cause },
    );
    // An endpoint fault on an agent that called no endpoint besides the
    // model: nothing of it to test, said apart, never a pass. A failed check
    // still fails it (the turn went wrong without the fault: as `merge`
    // re-judges), and an error of chaosrun's stays one.
    let verdict = match super::endpoint::not_applicable(s, obs) {
        Some(reason) if verdict == Verdict::Pass => Verdict::NotApplicable {
            reason: reason.into(),
        },
        _ => verdict,
    };
    Judged { checks, verdict }
}

/// A profile mistake the run shows: the row's model calls `mcp_probe` but
/// the profile maps no `tools.mcp_probe`, so the name sent is one the agent
/// does not have. The cause names the fix from the tools the agent offered
/// (the chaos server's `probe` under the agent's own name).
fn unmapped_mcp_probe(s: &Scenario, caps: &Capabilities, obs: &Observation) -> Option<ErrorCause> {
    let calls_probe = s
        .responder
        .iter()
        .any(|r| r.reply.tool_calls().iter().any(|c| c.tool == "mcp_probe"));
    if s.mcp.is_none() || caps.mcp_tool.is_some() || !calls_probe {
        return None;
    }
    let mut offered: Vec<&str> = obs
        .recording
        .requests
        .iter()
        .flat_map(|r| r.tools.iter())
        .map(|t| t.split('(').next().unwrap_or(t))
        .collect();
    offered.sort_unstable();
    offered.dedup();
    let fix = match offered.iter().find(|t| t.ends_with("probe") && **t != "mcp_probe") {
        Some(name) => format!(
            "the agent offered the chaos server's `probe` as `{name}`: add `tools: {{mcp_probe: {{name: {name}}}}}`"
        ),
        None => format!(
            "no offered tool is named like `probe` (offered: {}): map it to the name the agent gives the chaos server's `probe` tool",
            super::clip(&offered.join(", "), 300)
        ),
    };
    Some(ErrorCause::ProfileMistake(format!(
        "{PROFILE_MISTAKE}the profile maps no `tools.mcp_probe`, so the model asked for a tool literally named `mcp_probe`, which the agent does not have; {fix}"
    )))
}

/// The cause that makes a run an ERROR whatever its checks say, if any.
fn error_of(obs: &Observation) -> Option<ErrorCause> {
    if let Some(err) = &obs.setup_error {
        return Some(ErrorCause::SetupFailed(err.clone()));
    }
    if let Some(err) = &obs.run_error {
        // A capture the store query needed, never printed because a turn
        // crashed: the crash is the cause to read.
        let crash = match err.contains("`exec.capture.") {
            true => super::store::crash_before(obs, None),
            false => None,
        };
        return Some(ErrorCause::AfterRun(
            err.clone() + &crash.unwrap_or_default(),
        ));
    }
    // Proxy mode: an upstream that failed on its own is chaosrun's failure
    // to run the scenario, not the agent's. A replayed cassette that has no
    // entry for a call is the same.
    if let Some(e) = obs.recording.upstream_errors.first() {
        return Some(
            match crate::provider::cassette::player::is_replay_error(e) {
                true => ErrorCause::Cassette(e.clone()),
                false => ErrorCause::Upstream(e.clone()),
            },
        );
    }
    super::configuration_error(obs)
}

/// A scenario's verdict (docs/architecture.md "Verdicts"). Deserialized (by `merge`)
/// with exactly these names: any other verdict is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every check passed or could not be made (with its reason).
    Pass,
    /// At least one check failed.
    Fail,
    /// chaosrun itself could not run the scenario (a panic, a store it could
    /// not query): counts as not passed.
    Error {
        #[serde(default)]
        cause: ErrorCause,
    },
    /// The profile declares the capability the scenario needs absent: shown
    /// apart, never counted as a pass.
    NotApplicable {
        #[serde(default)]
        reason: NotApplicable,
    },
}

impl Verdict {
    /// The verdict the checks make: `Fail` when any check failed.
    pub fn from_checks(checks: &[Check]) -> Verdict {
        Verdict::from_statuses(checks.iter().map(|c| &c.status))
    }

    /// The one rule over check outcomes, shared by the run ([`judge`])
    /// and `merge` ([`Verdict::rejudge`]): any failed check fails the
    /// scenario; a check that could not be made is never a failure.
    pub fn from_statuses<'a>(statuses: impl IntoIterator<Item = &'a Status>) -> Verdict {
        if statuses
            .into_iter()
            .any(|s| matches!(s, Status::Fail { .. }))
        {
            Verdict::Fail
        } else {
            Verdict::Pass
        }
    }

    /// A recorded verdict judged again from its recorded checks (`merge`):
    /// an error stays an error (it never passes anyway); a failed check
    /// fails it whatever it says; an N/A stays apart; a pass or fail with no
    /// check at all is an error (nothing was checked); else the checks'
    /// verdict by [`Verdict::from_statuses`], never the recorded one.
    pub fn rejudge(recorded: Verdict, checks: &[Status]) -> Verdict {
        let by_checks = Verdict::from_statuses(checks);
        match recorded {
            e @ Verdict::Error { .. } => e,
            _ if by_checks == Verdict::Fail => Verdict::Fail,
            na @ Verdict::NotApplicable { .. } => na,
            _ if checks.is_empty() => Verdict::Error {
                cause: ErrorCause::NoCheck,
            },
            _ => by_checks,
        }
    }

    /// `PASS`, `FAIL`, `ERROR` or `N/A`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Error { .. } => "ERROR",
            Verdict::NotApplicable { .. } => "N/A",
        }
    }

    /// The JSON name: `pass`, `fail`, `error`, `not_applicable`.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Error { .. } => "error",
            Verdict::NotApplicable { .. } => "not_applicable",
        }
    }

    /// The error's cause or the N/A reason, in words.
    pub fn detail(&self) -> Option<String> {
        match self {
            Verdict::Error { cause } => Some(cause.to_string()),
            Verdict::NotApplicable { reason } => Some(reason.to_string()),
            _ => None,
        }
    }

    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Pass)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::observe::TurnEnd;

    /// An error found after the agent ran (a cassette that could not be
    /// written, a capture the store query needed) makes the run an ERROR
    /// with every check still made from what the agent did; only a setup
    /// error (the agent never ran) replaces them.
    #[test]
    fn a_run_error_keeps_the_checks_a_setup_error_replaces_them() {
        let s = scenario("expect: error");
        let mut obs = healthy(&s, end(0, true, false, "all good"));
        let clean = judge(&s, Capabilities::default(), &obs);
        assert_eq!(
            clean.verdict,
            Verdict::Fail,
            "the answer fails `expect: error`"
        );
        obs.run_error = Some("cannot write cassettes/s.jsonl: read-only".into());
        let ran = judge(&s, Capabilities::default(), &obs);
        let cause = ran.verdict.detail().unwrap_or_default().to_string();
        assert!(
            matches!(ran.verdict, Verdict::Error { .. }),
            "{:?}",
            ran.verdict
        );
        assert!(
            cause.contains("after the agent ran: cannot write cassettes"),
            "{cause}"
        );
        assert_eq!(ran.checks, clean.checks, "the same checks, made");
        assert!(ran.checks.iter().any(|c| c.failed()));
        obs.setup_error = Some("cannot bind 127.0.0.1:1: in use".into());
        let never = judge(&s, Capabilities::default(), &obs);
        assert!(never
            .verdict
            .detail()
            .unwrap_or_default()
            .contains("could not be run"));
        assert!(never
            .checks
            .iter()
            .any(|c| c.not_checked_reason() == Some("the agent never ran")));
    }

    /// A capture the store query needed, never printed because turn 0
    /// crashed (a config it could not load): the ERROR quotes the crash;
    /// a turn that printed its answer is no crash, and the cause stays the
    /// capture's.
    #[test]
    fn a_missing_capture_after_a_crash_quotes_the_crash() {
        let s = scenario("expect: error");
        let crashed = TurnEnd {
            exit_reason: "exit 1".into(),
            stderr: Some("Error: cannot load config.json: unknown key 'modle'".into()),
            ..end(0, false, true, "")
        };
        let mut obs = healthy(&s, crashed);
        obs.run_error = Some("the store query needs `{{captured.session}}` (`exec.store_session`), but the agent's output never matched `exec.capture.session`".into());
        let cause = judge(&s, Capabilities::default(), &obs)
            .verdict
            .detail()
            .unwrap();
        assert!(
            cause.contains("turn 0 crashed before it printed anything to capture (exit 1); its stderr ended: \"Error: cannot load config.json: unknown key 'modle'\""),
            "{cause}"
        );
        let answered = healthy(&s, end(0, false, true, "provider error 500"));
        let obs = Observation {
            run_error: obs.run_error.clone(),
            ..answered
        };
        let cause = judge(&s, Capabilities::default(), &obs)
            .verdict
            .detail()
            .unwrap();
        assert!(!cause.contains("crashed"), "{cause}");
    }

    /// The upstream's failures are typed by who wrote them: a replayed
    /// cassette's miss (the player's own words) or a live upstream's, and
    /// the saved text reads back as the same cause.
    #[test]
    fn an_upstream_failure_is_a_typed_cause() {
        let s = scenario("expect: error");
        let mut obs = healthy(&s, end(0, true, false, "x"));
        obs.recording.upstream_errors = vec!["cassette c.jsonl: no entry for main call 2".into()];
        let Verdict::Error { cause } = judge(&s, Capabilities::default(), &obs).verdict else {
            panic!("an error");
        };
        assert!(matches!(&cause, ErrorCause::Cassette(e) if e.starts_with("cassette c.jsonl")));
        assert_eq!(ErrorCause::from(cause.to_string()), cause);
        obs.recording.upstream_errors = vec!["502 from upstream: cassette c.jsonl".into()];
        let Verdict::Error { cause } = judge(&s, Capabilities::default(), &obs).verdict else {
            panic!("an error");
        };
        assert!(matches!(cause, ErrorCause::Upstream(_)), "{cause:?}");
        assert!(cause
            .to_string()
            .starts_with("the upstream could not serve the scenario: 502"));
    }
}
