//! What a turn's stderr held, quoted where its `final` came out empty: an
//! exec-mode agent that answers, or prints its error, on stderr is read only
//! through `from: stderr` in its profile, and a violation that says "`final`
//! is empty" while the error sat on stderr says so (and how to read it).

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
    format!(
        "; stderr held: {cut}{quoted:?}; if the agent answers on stderr, \
         use `from: stderr` in the profile's final/failed selector"
    )
}

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
        assert!(note.chars().count() < QUOTE_CHARS + 200, "{note}");
        e.final_text = "HTTP 500".into();
        assert_eq!(unread_stderr(&e), "");
    }
}
