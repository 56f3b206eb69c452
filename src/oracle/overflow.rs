//! `context_overflowed`: what a `context_window` row's evidence says, from
//! the recorded main calls of the faulted turn alone.
//!
//! - **Overflowed** (pass): some main call went over the window and got the
//!   wire's context-length error; the row's other checks judge what the
//!   agent did next (compacted and answered, surfaced it, or looped).
//! - **Avoided** (`not checked`, naming the evidence): no call went over, yet
//!   the tool's result came back to the model, carrying part of the output
//!   (the row's `tool_result_contains`, when it has one): the agent cut,
//!   summarised or spilled the output to a file before sending it
//!   (mistral-vibe, Claude Code, Codex). That is the best outcome, never a
//!   failure; the row passes on its other checks and the report says the
//!   overflow was not exercised, with the largest request against the window.
//! - **No output** (`not checked`, naming the check that judges it): a result
//!   came back without the row's `tool_result_contains` (the command was
//!   refused, say): the tool never printed what would overflow, and
//!   `tool_result_contains` fails for that one cause.
//! - **Neither** (fail): no call went over and no tool result came back, so
//!   the fault never landed.

use super::{with_nonce, Check, Invariant};
use crate::message::Message;
use crate::observe::Observation;
use crate::provider::context_window::{ContextWindow, RECORDED};
use crate::provider::RequestRecord;
use crate::scenarios::Scenario;

const NAME: &str = "context_overflowed";

/// The check of a row with a `context_window`, if it has one.
pub(super) fn exercised(s: &Scenario, obs: &Observation) -> Option<Check> {
    let window = s.context_window?;
    let main: Vec<&RequestRecord> = obs.recording.main_requests().collect();
    if main.iter().any(|r| r.reply == RECORDED) {
        return Some(Check::new(Invariant::Exercised, NAME, vec![]));
    }
    let results: Vec<&Message> = main.iter().filter_map(|r| result_of(r)).collect();
    let Some(result) = results.iter().map(|m| m.content_chars).max() else {
        return Some(Check::new(
            Invariant::Exercised,
            NAME,
            vec![format!(
                "no main call went over the {window} context window and no tool result came back to the model: the faulted turn made {} main call(s){}",
                obs.recording.main_calls,
                super::overflow_hint::hint(window, obs)
            )],
        ));
    };
    if let Some(want) = &s.tool_result_contains {
        let want = with_nonce(want, obs);
        if !results.iter().any(|m| m.content.contains(&want)) {
            return Some(Check::skipped(
                Invariant::Exercised,
                NAME,
                format!(
                    "no call went over the {window} window, but the tool's result came back without its output ({want:?}): nothing was avoided; tool_result_contains judges it"
                ),
            ));
        }
    }
    Some(Check::skipped(
        Invariant::Exercised,
        NAME,
        avoided(window, &main, result),
    ))
}

/// The tool result a request follows, if it follows one (whatever the agent
/// appended after it).
fn result_of(r: &RequestRecord) -> Option<&Message> {
    crate::message::latest_result(&r.messages).map(|i| &r.messages[i])
}

/// Tokens as the provider estimates them (bytes / 4, rounded up).
fn tokens(bytes: usize) -> usize {
    bytes.div_ceil(4)
}

/// The evidence that the agent kept under the window: its largest request
/// against the window, and the result it sent back (under the window's
/// headroom: the output was not sent whole).
fn avoided(window: ContextWindow, main: &[&RequestRecord], result: usize) -> String {
    let largest = main.iter().map(|r| r.size).max().unwrap_or(0);
    let first = main.iter().min_by_key(|r| r.seq).map(|r| r.size);
    let limit = match (window, first) {
        (ContextWindow::MaxRequestBytes(n), _) => Some(n),
        (ContextWindow::HeadroomBytes(h), Some(first)) => Some(first.saturating_add(h)),
        (ContextWindow::HeadroomBytes(_), None) => None,
    };
    let limit = limit.map_or_else(
        || format!("the {window} window"),
        |l| format!("the window is {} tokens", tokens(l)),
    );
    let whole = match window {
        ContextWindow::HeadroomBytes(h) if result < h => {
            format!(
                ", less than the window's {h}-byte headroom: the tool output was not sent whole"
            )
        }
        _ => String::new(),
    };
    format!(
        "not exercised: the agent avoided the overflow: it never sent more than {} tokens ({limit}), and the tool result it sent back was {result} chars{whole}",
        tokens(largest)
    )
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::provider::recording::CallKind;

    const ROW: &str = "context_window: {headroom_bytes: 12000}\nexpect: ended";

    /// The row's faulted turn: a first call, and one after the tool's result
    /// of `result` chars (followed by a note) in a request of `size` bytes.
    fn after_result(result: usize, size: usize, reply: &str) -> (Scenario, Observation) {
        let s = scenario(ROW);
        let mut o = healthy(&s, end(0, true, false, "x"));
        o.recording.requests[0].size = 4000;
        let mut second = request(
            5,
            CallKind::Main,
            vec![
                msg("user", "task"),
                assistant_calls(&["c1"]),
                tool("c1", &"x".repeat(result)),
                msg("user", "<system-reminder>note</system-reminder>"),
            ],
        );
        second.size = size;
        second.reply = reply.into();
        o.recording.requests.push(second);
        o.recording.main_calls += 1;
        (s, o)
    }

    #[test]
    fn an_overflow_passes_whatever_the_agent_did_next() {
        let (s, o) = after_result(40_000, 44_100, RECORDED);
        let c = exercised(&s, &o).unwrap();
        assert_eq!(c.status, super::super::Status::Pass, "{c:?}");
    }

    #[test]
    fn an_output_cut_before_it_was_sent_is_an_overflow_avoided_not_a_failure() {
        let (s, o) = after_result(2_080, 6_400, "text");
        let c = exercised(&s, &o).unwrap();
        let why = c.not_checked_reason().unwrap_or_else(|| panic!("{c:?}"));
        assert_eq!(
            why,
            "not exercised: the agent avoided the overflow: it never sent more than 1600 tokens \
             (the window is 4000 tokens), and the tool result it sent back was 2080 chars, less \
             than the window's 12000-byte headroom: the tool output was not sent whole"
        );
    }

    /// A command the agent refused comes back short too: with the row's
    /// `tool_result_contains` missing from it, nothing was avoided, and that
    /// check (not this one) fails for it.
    #[test]
    fn a_result_without_the_output_is_no_overflow_avoided() {
        let (mut s, mut o) = after_result(2_080, 6_400, "text");
        s.tool_result_contains = Some("xxxx".into());
        let c = exercised(&s, &o).unwrap();
        assert!(c
            .not_checked_reason()
            .unwrap()
            .starts_with("not exercised: the agent avoided"));
        let refusal = "Permission denied because no interactive user response was available";
        o.recording.requests.last_mut().unwrap().messages[2] = tool("c1", refusal);
        let c = exercised(&s, &o).unwrap();
        let why = c.not_checked_reason().unwrap_or_else(|| panic!("{c:?}"));
        assert!(
            why.contains("came back without its output (\"xxxx\"): nothing was avoided; tool_result_contains judges it"),
            "{why}"
        );
    }

    #[test]
    fn no_overflow_and_no_result_is_a_fault_that_never_landed() {
        let s = scenario(ROW);
        let o = healthy(&s, end(0, true, false, "x"));
        let c = exercised(&s, &o).unwrap();
        assert!(
            c.violations()[0].contains("no tool result came back"),
            "{c:?}"
        );
    }

    #[test]
    fn a_row_without_a_window_has_no_such_check() {
        let s = scenario("expect: ended");
        assert!(exercised(&s, &healthy(&s, end(0, true, false, "x"))).is_none());
    }
}
