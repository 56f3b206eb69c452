//! Secret redaction at every sink: the one [`Redactor`] of a run, built once
//! from every value chaosrun knows to be secret (the upstream key, the
//! password of an `--upstream` or `--history` URL, `--pass-env` values, a
//! Postgres DSN's password) and installed process-wide ([`install`]), then
//! applied where chaosrun writes: reports and artifacts
//! ([`crate::output::write_atomic`], [`crate::output::write_beneath`]), the
//! agent's captured stdout/stderr logs, the text on chaosrun's own stdout
//! and stderr ([`Lines`], `say`), and the history. Whatever the text came
//! from (an upstream that echoes the key in an error body, an agent that
//! logs its environment), each occurrence becomes [`MARK`]. `--record`
//! cassettes go through it too (see `provider::cassette::scrub`).
//!
//! Matching is Aho-Corasick (the `aho-corasick` crate, leftmost-longest)
//! over each secret's raw, JSON-escaped and percent-decoded spellings.
//! Values shorter than [`MIN_LEN`] are not redacted: they would match
//! ordinary text (the run warns).

use std::borrow::Cow;
use std::io::Write;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// What a secret is replaced with.
pub const MARK: &str = "<redacted>";
/// Shorter values are not redacted (they would match ordinary text).
pub const MIN_LEN: usize = 4;

/// Replaces every known secret.
pub struct Redactor {
    ac: Option<AhoCorasick>,
    /// Longest pattern, in bytes (what a streaming copy must hold back).
    longest: usize,
}

static RUN: OnceLock<Redactor> = OnceLock::new();

/// The spellings of `secret` that may appear in written text.
fn spellings(secret: &str) -> Vec<String> {
    let mut out = vec![secret.to_string()];
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or("");
    out.push(json.to_string());
    if let Ok(decoded) = percent_decode(secret) {
        out.push(decoded);
    }
    out.retain(|s| s.len() >= MIN_LEN);
    out.sort();
    out.dedup();
    out
}

fn percent_decode(s: &str) -> Result<String, ()> {
    if !s.contains('%') {
        return Err(());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 3 <= b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

impl Redactor {
    /// A redactor for `secrets`; returns the values too short to redact.
    pub fn new<I: IntoIterator<Item = String>>(secrets: I) -> (Redactor, Vec<String>) {
        let mut patterns = Vec::new();
        let mut short = Vec::new();
        for s in secrets {
            if s.is_empty() {
                continue;
            }
            if s.len() < MIN_LEN {
                short.push(s);
                continue;
            }
            patterns.extend(spellings(&s));
        }
        patterns.sort();
        patterns.dedup();
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        let ac = (!patterns.is_empty())
            .then(|| {
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&patterns)
                    .ok()
            })
            .flatten();
        (Redactor { ac, longest }, short)
    }

    /// `b` with every secret replaced.
    pub fn bytes<'a>(&self, b: &'a [u8]) -> Cow<'a, [u8]> {
        match &self.ac {
            Some(ac) if ac.is_match(b) => {
                let marks = vec![MARK.as_bytes(); ac.patterns_len()];
                Cow::Owned(ac.replace_all_bytes(b, &marks))
            }
            _ => Cow::Borrowed(b),
        }
    }

    /// `s` with every secret replaced.
    pub fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        match &self.ac {
            Some(ac) if ac.is_match(s) => {
                let marks = vec![MARK; ac.patterns_len()];
                Cow::Owned(ac.replace_all(s, &marks))
            }
            _ => Cow::Borrowed(s),
        }
    }

    /// The byte ranges of `s` that hold a secret (leftmost-longest, not
    /// overlapping), for a caller that must see where a secret crosses its
    /// own pieces (a cassette's streamed text chunks).
    pub fn spans(&self, s: &str) -> Vec<std::ops::Range<usize>> {
        match &self.ac {
            Some(ac) => ac.find_iter(s).map(|m| m.range()).collect(),
            None => Vec::new(),
        }
    }

    /// Bytes a streaming copy must hold back so a secret split across two
    /// chunks is still seen whole.
    pub fn overlap(&self) -> usize {
        self.longest.saturating_sub(1)
    }
}

/// Install the run's redactor (once; a later call is ignored) and return
/// the values too short to redact.
pub fn install<I: IntoIterator<Item = String>>(secrets: I) -> Vec<String> {
    let (r, short) = Redactor::new(secrets);
    let _ = RUN.set(r);
    short
}

/// The run's redactor, if one was installed.
pub fn run() -> Option<&'static Redactor> {
    RUN.get()
}

/// `b` redacted by the run's redactor.
pub fn bytes(b: &[u8]) -> Cow<'_, [u8]> {
    match run() {
        Some(r) => r.bytes(b),
        None => Cow::Borrowed(b),
    }
}

/// `s` redacted by the run's redactor.
pub fn text(s: &str) -> Cow<'_, str> {
    match run() {
        Some(r) => r.text(s),
        None => Cow::Borrowed(s),
    }
}

/// The secrets chaosrun knows from its command line and environment: the
/// value of each variable in `env_names` (`--pass-env`, the upstream key's),
/// and the password of each URL or DSN in `urls` (`--upstream`, `--history`,
/// a Postgres store): `scheme://user:PASS@host` or `password=PASS`.
pub fn known_secrets(env_names: &[String], urls: &[String]) -> Vec<String> {
    let mut out: Vec<String> = env_names
        .iter()
        .filter_map(|n| std::env::var(n).ok())
        .collect();
    for u in urls {
        out.extend(url_password(u));
        out.extend(dsn_password(u));
    }
    out
}

/// The password of `scheme://user:PASS@host…`, as written.
fn url_password(u: &str) -> Option<String> {
    let rest = u.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let pass = userinfo.split_once(':')?.1;
    (!pass.is_empty()).then(|| pass.to_string())
}

/// The `password=…` of a libpq `key=value` DSN (quoted or not).
fn dsn_password(u: &str) -> Option<String> {
    let at = u.find("password=")?;
    let v = &u[at + "password=".len()..];
    let pass = match v.strip_prefix('\'') {
        Some(q) => q.split('\'').next()?.to_string(),
        None => v.split_whitespace().next()?.to_string(),
    };
    (!pass.is_empty()).then_some(pass)
}

/// Redaction of a byte stream copied chunk by chunk (the agent's stdout and
/// stderr logs): the last [`Redactor::overlap`] bytes are held back until
/// the next chunk (or [`Stream::finish`]), so a secret split across two reads
/// is still replaced whole. Without a run redactor it passes chunks through.
#[derive(Default)]
pub struct Stream {
    held: Vec<u8>,
}

impl Stream {
    /// The bytes of `chunk` (after what was held) that may be written now.
    pub fn feed<'a>(&mut self, chunk: &'a [u8]) -> Cow<'a, [u8]> {
        let Some((r, ac)) = run().and_then(|r| Some((r, r.ac.as_ref()?))) else {
            return Cow::Borrowed(chunk);
        };
        self.held.extend_from_slice(chunk);
        let safe = self.held.len().saturating_sub(r.overlap());
        let mut out = Vec::with_capacity(safe + MARK.len());
        let mut at = 0;
        for m in ac.find_iter(&self.held) {
            if m.start() >= safe {
                break;
            }
            out.extend_from_slice(&self.held[at..m.start()]);
            out.extend_from_slice(MARK.as_bytes());
            at = m.end();
        }
        let upto = at.max(safe);
        out.extend_from_slice(&self.held[at..upto]);
        self.held.drain(..upto);
        Cow::Owned(out)
    }

    /// What is still held, redacted.
    pub fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.held);
        bytes(&rest).into_owned()
    }
}

/// A line-buffered writer that redacts each complete line (and the rest at
/// flush), so a secret split across `write` calls is still seen whole.
pub struct Lines<W: Write> {
    inner: W,
    buf: Vec<u8>,
    /// None: the run's (looked up at each line).
    with: Option<&'static Redactor>,
}

impl<W: Write> Lines<W> {
    pub fn new(inner: W) -> Self {
        Lines {
            inner,
            buf: Vec::new(),
            with: None,
        }
    }

    fn emit(&mut self, upto: usize) -> std::io::Result<()> {
        let chunk: Vec<u8> = self.buf.drain(..upto).collect();
        match self.with.or_else(run) {
            Some(r) => self.inner.write_all(&r.bytes(&chunk)),
            None => self.inner.write_all(&chunk),
        }
    }
}

impl<W: Write> Write for Lines<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if let Some(nl) = self.buf.iter().rposition(|&c| c == b'\n') {
            self.emit(nl + 1)?;
        }
        // A line longer than 1 MiB goes out as it is, redacted.
        if self.buf.len() > 1 << 20 {
            self.emit(self.buf.len())?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let n = self.buf.len();
        self.emit(n)?;
        self.inner.flush()
    }
}

impl<W: Write> Drop for Lines<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_is_replaced_and_short_values_are_reported() {
        let (r, short) = Redactor::new(vec![
            "sk-live-\"quoted\"".to_string(),
            "p%40ss".to_string(),
            "abc".to_string(),
            String::new(),
        ]);
        assert_eq!(short, ["abc"]);
        let json = serde_json::json!({"body": "echo sk-live-\"quoted\" back"}).to_string();
        assert_eq!(
            r.text(&json),
            r#"{"body":"echo <redacted> back"}"#,
            "the JSON-escaped spelling"
        );
        assert_eq!(r.text("raw sk-live-\"quoted\""), "raw <redacted>");
        assert_eq!(
            r.text("url p%40ss and p@ss"),
            "url <redacted> and <redacted>"
        );
        assert!(matches!(r.text("nothing here abc"), Cow::Borrowed(_)));
        assert_eq!(r.overlap(), "sk-live-\\\"quoted\\\"".len() - 1);
    }

    #[test]
    fn url_and_dsn_passwords_are_found() {
        let s = known_secrets(
            &[],
            &[
                "http://user:hunter22@127.0.0.1:9/v1".into(),
                "postgres://u:pgpass99@h/db".into(),
                "host=h password='dsn pw' user=u".into(),
                "host=h password=plainpw user=u".into(),
                "http://nouser@h/".into(),
            ],
        );
        assert_eq!(s, ["hunter22", "pgpass99", "dsn pw", "plainpw"]);
    }

    #[test]
    fn lines_redacts_a_secret_split_across_writes() {
        let r: &'static Redactor = Box::leak(Box::new(Redactor::new(vec!["topsecret".into()]).0));
        let mut out = Vec::new();
        {
            let mut w = Lines {
                inner: &mut out,
                buf: Vec::new(),
                with: Some(r),
            };
            w.write_all(b"key top").unwrap();
            w.write_all(b"secret here\nand topsec").unwrap();
            w.write_all(b"ret at the end").unwrap();
        }
        assert_eq!(out, b"key <redacted> here\nand <redacted> at the end");
    }
}
