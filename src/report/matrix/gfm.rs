//! Text made safe for a GFM (GitHub-flavoured markdown) table cell: whatever
//! a report names (a scenario id, an agent's folder, a README path) renders
//! as exactly that text, in its one cell. A `|` cannot split the cell, a
//! newline or CR cannot end the row (so no row can be forged), no raw HTML
//! renders (`<`, `>` and `&` are entities), no backtick can close a code
//! span, and invisible characters (controls, bidi overrides, zero-width
//! ones) are shown as their escapes (`\n`, `\u{202e}`).

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// Characters shown as their Rust escape: controls (a newline or CR would
/// end the row) and format characters that hide or reorder text.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Text for a cell or a link's text, outside any code span.
pub fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' | '\\' | '`' | '*' | '_' | '[' | ']' | '~' => {
                out.push('\\');
                out.push(c);
            }
            c if hidden(c) => {
                // `\n` shown as text: its backslash escaped for markdown.
                for e in c.escape_default() {
                    if e == '\\' {
                        out.push_str("\\\\");
                    } else {
                        out.push(e);
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// A character that needs no escape inside a code span in a table.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/' | '@' | '+' | '=' | ',')
}

/// Text in code style: a plain id (letters, digits, `_-.:/@+=,`) as a code
/// span, as the tables have always printed it; anything else in `<code>`,
/// escaped as [`text`] (inside a code span no escape but `\|` works).
pub fn code(s: &str) -> String {
    if !s.is_empty() && s.chars().all(plain) {
        format!("`{s}`")
    } else {
        format!("<code>{}</code>", text(s))
    }
}

/// What a link target percent-encodes: everything but ASCII letters, digits
/// and `-._~/:@!$'+,;=` (non-ASCII is always encoded).
const LINK: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'&')
    .add(b'(')
    .add(b')')
    .add(b'*')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// A link target safe in a markdown table: nothing in it can end the link,
/// the cell or the row.
pub fn link(s: &str) -> String {
    utf8_percent_encode(s, LINK).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_split_end_the_row_or_render_html() {
        let t = text("a|b\nc\r<img src=x onerror=alert(1)>&amp;`x`\u{202e}");
        assert_eq!(
            t,
            "a\\|b\\\\nc\\\\r&lt;img src=x onerror=alert(1)&gt;&amp;amp;\\`x\\`\\\\u{202e}"
        );
        assert_eq!(code("provider_hang"), "`provider_hang`");
        assert_eq!(code("a`|b"), "<code>a\\`\\|b</code>");
        assert_eq!(code(""), "<code></code>");
        assert_eq!(
            link("../a b/(x)|\n\"<>.md"),
            "../a%20b/%28x%29%7C%0A%22%3C%3E.md"
        );
    }
}
