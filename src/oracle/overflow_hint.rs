//! What to read when a context-window row never overflowed
//! (`exercised/context_overflowed` failed): the largest main request against
//! the window, and which of the usual causes the requests show (no tool
//! result ever reached the model, so nothing grew the conversation; or the
//! tool results sent were cut or spilled before they reached it).

use crate::observe::Observation;
use crate::provider::context_window::ContextWindow;

/// `; the largest main request was … : …` for a row whose window no main
/// call went over.
pub(super) fn hint(window: ContextWindow, obs: &Observation) -> String {
    let mains: Vec<_> = obs.recording.main_requests().collect();
    let Some(first) = mains.first() else {
        return "; the agent made no main call, so nothing could go over the window (see `boots` and the turn's stderr)".into();
    };
    let limit = window.limit(first.size);
    let largest = mains.iter().map(|r| r.size).max().unwrap_or(0);
    let sizes =
        format!("the largest main request was {largest} bytes against the {limit}-byte window");
    let longest = mains
        .iter()
        .flat_map(|r| &r.messages)
        .filter(|m| m.role == "tool")
        .map(|m| m.content.chars().count())
        .max();
    match longest {
        None => format!(
            "; {sizes}, and no tool result reached the model: the row's tool output is what grows the conversation, so check that the profile maps the tool (`tools.shell`) and that the tool ran (the turn's stderr)"
        ),
        Some(n) => format!(
            "; {sizes}, and the longest tool result sent was {n} chars: the agent cut or spilled the tool's output before it reached the model (compare the row's command; an agent that avoids the overflow this way never had to handle it)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use crate::provider::CallKind;

    fn overflowed(o: &crate::observe::Observation, s: &crate::scenarios::Scenario) -> String {
        super::super::check(s, crate::observe::Capabilities::default(), o)
            .into_iter()
            .find(|c| c.name == "context_overflowed")
            .expect("the check")
            .violations()
            .join("\n")
    }

    /// A failed `context_overflowed` says what the requests show: the
    /// sizes against the window, and whether a tool result reached the
    /// model (cut short) or none did.
    #[test]
    fn a_window_never_reached_says_what_the_requests_show() {
        let s = scenario("context_window: {headroom_bytes: 12000}\nexpect: ended");
        let mut o = healthy(&s, end(0, true, false, "done"));
        let v = overflowed(&o, &s);
        assert!(v.contains("no main call went over"), "{v}");
        assert!(v.contains("against the 13000-byte window"), "{v}");
        assert!(v.contains("no tool result reached the model"), "{v}");
        o.recording.requests.push(request(
            2,
            CallKind::Main,
            vec![assistant_calls(&["c1"]), tool("c1", &"x".repeat(300))],
        ));
        // A result that came back with no call over the window is an
        // overflow avoided (`oracle::overflow`), not this failure; the hint
        // itself still says what the requests show.
        let v = super::hint(s.context_window.expect("a window"), &o);
        assert!(
            v.contains("the longest tool result sent was 300 chars: the agent cut or spilled"),
            "{v}"
        );
    }
}
