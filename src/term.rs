//! Text that the agent or a file controls, made safe to print to a terminal:
//! [`escape`] is the one function every printer uses (the text reporter,
//! `merge`, `history`, `--list`, error messages), so a crafted scenario id,
//! check message or `version_cmd` output cannot retitle the window
//! (`ESC ] 0 ; … BEL`), clear the screen (`ESC [ 2 J`) or hide text.

use std::borrow::Cow;

/// Whether `c` is a control character a terminal may act on: C0 (except
/// `\n` and `\t`, which the line structure needs), DEL, and C1.
fn is_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || ('\u{80}'..='\u{9f}').contains(&c)
}

/// `text` with every control character but `\n` and `\t` written as `\uXXXX`
/// (readable, and the same escape a JSON string uses, so JSON output stays
/// JSON). Borrowed when there is nothing to escape.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_control(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_osc_csi_and_c1_but_keeps_lines_and_tabs() {
        assert_eq!(
            escape("id\x1b]0;pwn\x07 \x1b[2J\r\u{9b}31m\x7f"),
            "id\\u001b]0;pwn\\u0007 \\u001b[2J\\u000d\\u009b31m\\u007f"
        );
        assert!(matches!(
            escape("a\tb\nc é ✓"),
            Cow::Borrowed("a\tb\nc é ✓")
        ));
        // Inside a JSON string the escape means the same character.
        let json = format!("\"{}\"", escape("x\u{85}y"));
        assert_eq!(serde_json::from_str::<String>(&json).unwrap(), "x\u{85}y");
    }
}
