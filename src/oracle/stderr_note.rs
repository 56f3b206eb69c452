//! What a turn's stderr held, quoted where its `final` came out empty: an
//! exec-mode agent that answers, or prints its error, on stderr is read only
//! through a selector that says `from: stderr`, and a violation that says
//! "`final` is empty" while the error sat on stderr says so, and how to read
//! it without losing the stdout answer of a healthy turn.

use crate::observe::TurnEnd;

/// Characters of the turn's stderr tail quoted.
const QUOTE_CHARS: usize = 300;

/// For a turn whose `final` is empty while its stderr (as the exec driver
/// recorded it) was not: `; stderr held: "..."` and the profile hint. Empty
/// otherwise (an answer was read, nothing was printed, or nothing recorded).
pub(super) fn unread_stderr(end: &TurnEnd) -> String {
    let Some(err) = end.stderr.as_deref().map(str::trim) else {
        return String::new();
    };
    if err.is_empty() || !end.final_text.trim().is_empty() {
        return String::new();
    }
    let n = err.chars().count();
    let quoted: String = err.chars().skip(n.saturating_sub(QUOTE_CHARS)).collect();
    let cut = if n > QUOTE_CHARS { "…" } else { "" };
    format!("; stderr held: {cut}{quoted:?}; {HINT}")
}

/// What to change when the answer or error sat on stderr: a selector of
/// its own for stderr, beside the stdout one, so a healthy turn's answer is
/// still read where it is (moving the whole `final` to `from: stderr`
/// breaks every row the agent answers on stdout).
pub(super) const HINT: &str = "if the agent prints its error (or answer) there as JSON, add a \
     selector with its own `from: stderr` after the one that reads stdout \
     (`final: {jsonl: [{where: ..., field: ...}, {where: ..., field: ..., from: stderr}]}`); \
     put `from: stderr` on the whole `final` only if every answer is printed there";

#[cfg(test)]
mod tests {
    use super::super::fixtures::end;
    use super::*;

    #[test]
    fn quotes_the_tail_only_when_final_is_empty_and_stderr_is_not() {
        let mut e = end(0, false, true, "");
        assert_eq!(unread_stderr(&e), "", "nothing recorded: no note");
        e.stderr = Some("  \n".into());
        assert_eq!(unread_stderr(&e), "");
        e.stderr = Some(format!(
            "{}\n{{\"error\": \"HTTP 500\"}}\n",
            "x".repeat(1000)
        ));
        let note = unread_stderr(&e);
        assert!(note.contains(r#"stderr held: …"#), "{note}");
        assert!(note.contains(r#"{\"error\": \"HTTP 500\"}""#), "{note}");
        assert!(note.contains("`from: stderr`"), "{note}");
        // The fix it names keeps the stdout selector: never "move `final`
        // to stderr", which loses every healthy turn's answer.
        assert!(note.contains("after the one that reads stdout"), "{note}");
        assert!(
            !note.contains("use `from: stderr` in the profile's final"),
            "{note}"
        );
        assert!(note.chars().count() < QUOTE_CHARS + 500, "{note}");
        e.final_text = "HTTP 500".into();
        assert_eq!(unread_stderr(&e), "");
    }
}
