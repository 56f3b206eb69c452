//! Reading a turn's output: stdout and stderr copied into the logs within
//! the worker's caps, split into lines, each line through the profile's
//! selectors that read that stream (`final`, `failed`, captures).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncRead;

use crate::driver::output::{copy_capped_with, Budget, MAX_LINE, STDERR, STDOUT};
use crate::driver::process::FINAL_KEEP_CHARS;
use crate::profile::exec::{
    pick_final_from, Capture, CaptureSel, ExecSpec, FailedSel, FinalSel, Source, MAX_CAPTURE_CHARS,
};

use super::STDERR_TAIL;

/// What a turn's stdout showed, through the selectors.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) final_text: Option<String>,
    /// Per `final.jsonl` selector: its text so far, and whether the last JSON
    /// line matched it (a `join` run goes on).
    pub(super) picks: Vec<crate::profile::exec::Pick>,
    pub(super) failed: bool,
    pub(super) last_line: String,
    /// The last non-empty line of the stream `failed.unless_last_line`
    /// reads.
    pub(super) failed_last_line: String,
    /// `exec.capture` values this turn printed (the latest of each).
    pub(super) captured: BTreeMap<String, String>,
}

/// The profile's captures that read one stream, their regexes compiled once
/// per turn.
pub(super) struct Captures {
    pub(super) sels: Vec<(String, CaptureSel, Option<regex::Regex>)>,
    pub(super) want_json: bool,
}

impl Captures {
    fn new(spec: &BTreeMap<String, Capture>, stream: Source) -> Captures {
        let sels: Vec<_> = spec
            .iter()
            .filter(|(_, c)| c.from == stream)
            .map(|(name, c)| {
                let re = match &c.sel {
                    CaptureSel::Regex(r) => regex::Regex::new(r).ok(),
                    CaptureSel::Jsonl(_) => None,
                };
                (name.clone(), c.sel.clone(), re)
            })
            .collect();
        let want_json = sels
            .iter()
            .any(|(_, s, _)| matches!(s, CaptureSel::Jsonl(_)));
        Captures { sels, want_json }
    }

    /// Take every capture this line holds into `into` (the latest wins).
    fn read(
        &self,
        line: &str,
        rec: Option<&serde_json::Value>,
        into: &mut BTreeMap<String, String>,
    ) {
        for (name, sel, re) in &self.sels {
            let got = match (sel, re) {
                (CaptureSel::Jsonl(j), _) => rec.filter(|r| j.matches(r)).and_then(|r| j.take(r)),
                (CaptureSel::Regex(_), Some(re)) => re.captures(line).and_then(|c| {
                    c.get(1)
                        .or_else(|| c.get(0))
                        .map(|m| m.as_str().to_string())
                }),
                (CaptureSel::Regex(_), None) => None,
            };
            if let Some(v) = got.filter(|v| !v.is_empty()) {
                into.insert(name.clone(), clip(&v, MAX_CAPTURE_CHARS));
            }
        }
    }
}

/// The profile's selectors that read one of a turn's streams (`from:`):
/// `final`, `failed.jsonl` and the captures, compiled once per turn.
pub(super) struct Selectors {
    /// `final`, when it (or, for a `jsonl` list, one of its selectors)
    /// reads this stream, and its regex.
    pub(super) final_sel: Option<FinalSel>,
    /// This stream, and the stream `final.from` names (the default of a
    /// `final.jsonl` selector without its own `from`).
    pub(super) read: (Source, Source),
    pub(super) final_re: Option<regex::Regex>,
    /// `failed`, when its `jsonl` reads this stream.
    pub(super) failed: Option<FailedSel>,
    pub(super) captures: Captures,
}

impl Selectors {
    pub(super) fn new(spec: &ExecSpec, stream: Source) -> Selectors {
        let default = spec.final_sel.from;
        let reads = match &spec.final_sel.sel {
            FinalSel::Jsonl(sels) => sels.iter().any(|j| j.source(default) == stream),
            _ => default == stream,
        };
        let final_sel = reads.then(|| spec.final_sel.sel.clone());
        let final_re = match &final_sel {
            Some(FinalSel::Regex(r)) => regex::Regex::new(r).ok(),
            _ => None,
        };
        let failed = (spec.failed.from == stream
            && (spec.failed.jsonl.is_some() || spec.failed.unless_last_line.is_some()))
        .then(|| spec.failed.clone());
        Selectors {
            final_sel,
            read: (stream, default),
            final_re,
            failed,
            captures: Captures::new(&spec.capture, stream),
        }
    }

    /// Whether no selector reads this stream.
    fn is_empty(&self) -> bool {
        self.final_sel.is_none() && self.failed.is_none() && self.captures.sels.is_empty()
    }

    /// Pass one line of the stream (its bytes, up to [`MAX_LINE`]) through.
    fn line(&self, line: &[u8], seen: &Mutex<Seen>) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        if text.is_empty() || self.is_empty() {
            return;
        }
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(self.final_sel, Some(FinalSel::LastLine)) {
            seen.last_line = clip(text, FINAL_KEEP_CHARS);
        }
        if self
            .failed
            .as_ref()
            .is_some_and(|f| f.unless_last_line.is_some())
        {
            seen.failed_last_line = clip(text, FINAL_KEEP_CHARS);
        }
        if let Some(c) = self.final_re.as_ref().and_then(|re| re.captures(text)) {
            let m = c.get(1).or_else(|| c.get(0)).map_or("", |m| m.as_str());
            seen.final_text = Some(clip(m, FINAL_KEEP_CHARS));
        }
        let wants_json = matches!(self.final_sel, Some(FinalSel::Jsonl(_)))
            || self.failed.is_some()
            || self.captures.want_json;
        let rec = (wants_json && text.starts_with('{'))
            .then(|| serde_json::from_str::<serde_json::Value>(text).ok())
            .flatten();
        self.captures.read(text, rec.as_ref(), &mut seen.captured);
        let Some(rec) = rec else { return };
        if let Some(FinalSel::Jsonl(sels)) = &self.final_sel {
            let (read, picks) = (Some(self.read), &mut seen.picks);
            let picked = pick_final_from(sels, read, picks, &rec, FINAL_KEEP_CHARS);
            seen.final_text = picked;
        }
        if let Some(failed) = self.failed.as_ref().and_then(|f| f.judge_line(&rec)) {
            seen.failed = failed;
        }
    }
}

/// Splits a stream's chunks into lines, each held up to [`MAX_LINE`] bytes
/// (the rest of a longer line is dropped).
#[derive(Default)]
struct LineSplit(Vec<u8>);

impl LineSplit {
    fn feed(&mut self, chunk: &[u8], mut on_line: impl FnMut(&[u8])) {
        for part in chunk.split_inclusive(|&b| b == b'\n') {
            let body = part.strip_suffix(b"\n").unwrap_or(part);
            let room = MAX_LINE.saturating_sub(self.0.len()).min(body.len());
            self.0.extend_from_slice(&body[..room]);
            if part.ends_with(b"\n") {
                on_line(&self.0);
                self.0.clear();
            }
        }
    }

    /// The last line, if the stream did not end with a newline.
    fn finish(self, on_line: impl FnOnce(&[u8])) {
        if !self.0.is_empty() {
            on_line(&self.0);
        }
    }
}

/// Read a turn's stdout to EOF: keep it in the log within the worker's cap,
/// and pass each line through the selectors that read stdout.
pub(super) async fn read_stdout(
    pipe: impl AsyncRead + Unpin,
    log: std::fs::File,
    budget: Arc<Budget>,
    worker: usize,
    sels: Selectors,
    seen: Arc<Mutex<Seen>>,
    others: Arc<AtomicU64>,
) {
    // Held until the last line is judged, after the copy's own handle ends.
    let _open = budget.opened();
    let on_line = |line: &[u8]| {
        others.fetch_add(1, Ordering::Relaxed);
        sels.line(line, &seen);
    };
    let mut split = LineSplit::default();
    copy_capped_with(pipe, log, budget, worker, STDOUT, |chunk| {
        split.feed(chunk, on_line)
    })
    .await;
    split.finish(on_line);
}

/// Copy a turn's stderr into the log within the worker's cap, passing each
/// line through the selectors that read stderr (`from: stderr`); its last
/// [`STDERR_TAIL`] bytes are returned for the `failed.stderr` pattern and
/// the turn's end.
pub(super) async fn read_stderr(
    pipe: impl AsyncRead + Unpin,
    log: std::fs::File,
    budget: Arc<Budget>,
    worker: usize,
    sels: Selectors,
    seen: Arc<Mutex<Seen>>,
) -> String {
    let mut tail: Vec<u8> = Vec::new();
    let mut split = LineSplit::default();
    let reads = !sels.is_empty();
    copy_capped_with(pipe, log, budget, worker, STDERR, |chunk| {
        if reads {
            split.feed(chunk, |l| sels.line(l, &seen));
        }
        tail.extend_from_slice(chunk);
        if tail.len() > STDERR_TAIL {
            tail.drain(..tail.len() - STDERR_TAIL);
        }
    })
    .await;
    split.finish(|l| sels.line(l, &seen));
    String::from_utf8_lossy(&tail).into_owned()
}

pub(super) fn clip(s: &str, chars: usize) -> String {
    s.chars().take(chars).collect()
}

/// The last `chars` characters of `s`.
pub(super) fn clip_tail(s: &str, chars: usize) -> String {
    let skip = s.chars().count().saturating_sub(chars);
    s.chars().skip(skip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(y: &str) -> ExecSpec {
        serde_yaml::from_str(y).unwrap()
    }

    #[test]
    fn a_line_is_held_to_max_line_however_long() {
        let mut split = LineSplit::default();
        let mut lines = Vec::new();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..(MAX_LINE / chunk.len() + 4) {
            split.feed(&chunk, |l| lines.push(l.len()));
            assert!(split.0.len() <= MAX_LINE);
        }
        split.feed(b"\nend", |l| lines.push(l.len()));
        split.finish(|l| lines.push(l.len()));
        assert_eq!(lines, [MAX_LINE, 3]);
    }

    #[test]
    fn each_stream_runs_only_the_selectors_that_read_it() {
        let s = spec(
            "first: [a]\nfinal: {regex: \"^answer: (.*)\", from: stderr}\n\
             failed: {jsonl: {where: {error: true}}}\n",
        );
        let (out, err) = (
            Selectors::new(&s, Source::Stdout),
            Selectors::new(&s, Source::Stderr),
        );
        let seen = Mutex::new(Seen::default());
        out.line(b"answer: from stdout", &seen);
        err.line(br#"{"error": true}"#, &seen);
        assert_eq!(seen.lock().unwrap().final_text, None);
        assert!(!seen.lock().unwrap().failed);
        err.line(b"answer: 42", &seen);
        out.line(br#"{"error": true}"#, &seen);
        assert_eq!(seen.lock().unwrap().final_text.as_deref(), Some("42"));
        assert!(seen.lock().unwrap().failed);
    }

    /// An answer on stdout and an error on stderr (Continue CLI,
    /// mistral-vibe): one `final.jsonl` list, a selector per stream. A healthy
    /// turn's answer is read on stdout whatever stderr printed, a failed
    /// turn's error on stderr.
    #[test]
    fn a_final_list_reads_each_selector_on_its_own_stream() {
        let s = spec(
            "first: [a]\nfinal: {jsonl: [{where: {status: success}, field: response},\n  \
             {where: {status: error}, field: message, from: stderr}]}\n",
        );
        let turn = |out_lines: &[&str], err_lines: &[&str]| {
            let (out, err) = (
                Selectors::new(&s, Source::Stdout),
                Selectors::new(&s, Source::Stderr),
            );
            let seen = Mutex::new(Seen::default());
            for l in err_lines {
                err.line(l.as_bytes(), &seen);
            }
            for l in out_lines {
                out.line(l.as_bytes(), &seen);
            }
            let text = seen.lock().unwrap().final_text.clone();
            text
        };
        let healthy = turn(
            &[r#"{"status": "success", "response": "alive 42"}"#],
            &[
                "warning: update check skipped",
                r#"{"status": "error", "message": "on stdout only"}"#,
            ],
        );
        assert_eq!(healthy.as_deref(), Some("alive 42"));
        let failed = turn(&[], &[r#"{"status": "error", "message": "HTTP 500"}"#]);
        assert_eq!(failed.as_deref(), Some("HTTP 500"));
        // A success line on stderr is not the answer: that selector reads stdout.
        let wrong = turn(&[], &[r#"{"status": "success", "response": "no"}"#]);
        assert_eq!(wrong, None);
    }

    /// `failed.unless_last_line` (aider): the last non-empty line of its
    /// stream is kept whatever `final` reads, and the aider-style answer and
    /// error show the line the turn's judge tests.
    #[test]
    fn unless_last_line_keeps_the_last_line_of_its_stream() {
        let s = spec(
            "first: [a]\nfinal: {regex: \"^(ok.*)$\"}\n\
             failed: {unless_last_line: \"^Tokens: \"}\n",
        );
        assert!(s.failed.unless_last_line.is_some());
        let (out, err) = (
            Selectors::new(&s, Source::Stdout),
            Selectors::new(&s, Source::Stderr),
        );
        let seen = Mutex::new(Seen::default());
        for l in ["Aider v0.86.2", "ok 42", "", "Tokens: 10 sent, 2 received."] {
            out.line(l.as_bytes(), &seen);
        }
        err.line(b"a warning on stderr", &seen);
        let got = seen.lock().unwrap().failed_last_line.clone();
        assert_eq!(got, "Tokens: 10 sent, 2 received.");
        out.line(b"litellm.BadRequestError: OpenAIException - bad", &seen);
        let got = seen.lock().unwrap().failed_last_line.clone();
        assert!(got.starts_with("litellm."), "{got}");
        // `from: stderr` without `jsonl` is accepted with `unless_last_line`.
        spec("first: [a]\nfinal: {last_line: true}\nfailed: {unless_last_line: x, from: stderr}\n");
        let bad: Result<ExecSpec, _> = serde_yaml::from_str(
            "first: [a]\nfinal: {last_line: true}\nfailed: {unless_last_line: \"(\"}\n",
        );
        assert!(bad.unwrap_err().to_string().contains("unless_last_line"));
    }
}
