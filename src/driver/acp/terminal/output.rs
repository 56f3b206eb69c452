//! One terminal's retained output: stdout and stderr interleaved as they
//! arrive, kept up to a byte limit by dropping the oldest bytes (the end is
//! what an agent wants to see), and rendered as text cut at a character
//! boundary, as the ACP spec asks of `terminal/output`.

use std::collections::VecDeque;

/// The most any terminal keeps, whatever `outputByteLimit` asks (and when it
/// asks nothing): a command that floods cannot grow chaosrun's memory.
pub const HARD_CAP: usize = 1 << 20;

/// The bytes kept and whether any were dropped.
#[derive(Debug)]
pub struct Output {
    bytes: VecDeque<u8>,
    limit: usize,
    dropped: bool,
}

impl Output {
    /// Keep at most `limit` bytes (never more than [`HARD_CAP`]).
    pub fn new(limit: Option<u64>) -> Output {
        let limit = limit.map_or(HARD_CAP, |l| l.min(HARD_CAP as u64) as usize);
        Output {
            bytes: VecDeque::new(),
            limit,
            dropped: false,
        }
    }

    /// Append what the command wrote; the oldest bytes go past the limit.
    pub fn push(&mut self, chunk: &[u8]) {
        let chunk = if chunk.len() > self.limit {
            self.dropped = true;
            self.bytes.clear();
            &chunk[chunk.len() - self.limit..]
        } else {
            chunk
        };
        let over = (self.bytes.len() + chunk.len()).saturating_sub(self.limit);
        if over > 0 {
            self.dropped = true;
            self.bytes.drain(..over);
        }
        self.bytes.extend(chunk);
    }

    /// The text kept (invalid UTF-8 replaced) and whether it was truncated:
    /// never more than the limit in bytes, cut from the front at a
    /// character boundary.
    pub fn text(&mut self) -> (String, bool) {
        let text = String::from_utf8_lossy(self.bytes.make_contiguous()).into_owned();
        let mut cut = text.len().saturating_sub(self.limit);
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        (text[cut..].to_string(), self.dropped || cut > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_under_the_limit() {
        let mut o = Output::new(Some(10));
        o.push(b"abc");
        o.push(b"def");
        assert_eq!(o.text(), ("abcdef".to_string(), false));
    }

    #[test]
    fn keeps_the_end_past_the_limit() {
        let mut o = Output::new(Some(4));
        o.push(b"abc");
        o.push(b"defg");
        assert_eq!(o.text(), ("defg".to_string(), true));
        o.push(b"0123456789");
        assert_eq!(o.text(), ("6789".to_string(), true));
    }

    /// "é" is two bytes: a limit that falls inside it drops all of it.
    #[test]
    fn cuts_at_a_character_boundary() {
        let mut o = Output::new(Some(4));
        o.push("aéxyz".as_bytes());
        assert_eq!(o.text(), ("xyz".to_string(), true));
        let mut o = Output::new(Some(5));
        o.push("aéxyz".as_bytes());
        assert_eq!(o.text(), ("éxyz".to_string(), true));
    }

    /// A replacement character is three bytes: the rendered text is cut
    /// again so it never exceeds the limit.
    #[test]
    fn invalid_bytes_never_push_the_text_past_the_limit() {
        let mut o = Output::new(Some(4));
        o.push(&[0xff, 0xff, b'a', b'b']);
        let (text, truncated) = o.text();
        assert!(text.len() <= 4 && text.ends_with("ab"), "{text:?}");
        assert!(truncated);
    }

    #[test]
    fn a_zero_limit_keeps_nothing_and_no_limit_is_the_hard_cap() {
        let mut o = Output::new(Some(0));
        o.push(b"x");
        assert_eq!(o.text(), (String::new(), true));
        let mut o = Output::new(None);
        o.push(&vec![b'a'; HARD_CAP + 7]);
        let (text, truncated) = o.text();
        assert_eq!((text.len(), truncated), (HARD_CAP, true));
        let mut o = Output::new(Some(u64::MAX));
        o.push(&vec![b'a'; HARD_CAP + 1]);
        assert_eq!(o.text().0.len(), HARD_CAP);
    }
}
