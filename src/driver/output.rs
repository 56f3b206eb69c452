//! What an agent process writes, read within fixed caps so that no agent can
//! grow chaosrun's memory or disk: stdout is split into lines (a line is never
//! held past [`MAX_LINE`]), `CHAOS ` lines become events forwarded up to
//! [`MAX_EVENTS`] per scenario run, and `stdout.log` / `stderr.log` keep at
//! most [`LOG_KEEP_BYTES`] each per worker. Past a cap the pipe is still
//! drained (the agent never blocks on it) and what was dropped is counted in a
//! [`Budget`] the run shares over its workers and incarnations.

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::Notify;

use super::process::parse_line;
use crate::observe::{Capped, Event};

/// The longest stdout line held in memory; a longer `CHAOS ` line is a bad
/// event, and the rest of any longer line is dropped as it arrives.
pub const MAX_LINE: usize = 1 << 20;
/// Bytes kept of each of a worker's `stdout.log` and `stderr.log` (over all
/// its incarnations): 16 MiB. The rest is counted, not written.
pub const LOG_KEEP_BYTES: u64 = 16 << 20;
/// Protocol events forwarded per scenario run (over every worker and
/// incarnation). An agent that sends more fails `protocol`; the rest are
/// counted, never queued.
pub const MAX_EVENTS: u64 = 10_000;
/// Bytes of event lines forwarded per scenario run (8 MiB): with
/// [`MAX_EVENTS`], what the run's events can hold in memory.
pub const MAX_EVENT_BYTES: u64 = 8 << 20;
/// Read size of the pipe copiers.
const CHUNK: usize = 64 * 1024;

/// Bytes one log saw and kept.
#[derive(Debug, Default)]
pub struct LogCount {
    seen: AtomicU64,
    kept: AtomicU64,
}

impl LogCount {
    /// Count `n` bytes seen; how many of them may still be kept.
    pub(crate) fn admit(&self, n: usize) -> usize {
        self.seen.fetch_add(n as u64, Ordering::Relaxed);
        let mut kept = self.kept.load(Ordering::Relaxed);
        loop {
            let room = LOG_KEEP_BYTES.saturating_sub(kept).min(n as u64);
            if room == 0 {
                return 0;
            }
            match self.kept.compare_exchange_weak(
                kept,
                kept + room,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return room as usize,
                Err(k) => kept = k,
            }
        }
    }

    fn get(&self) -> (u64, u64) {
        (
            self.seen.load(Ordering::Relaxed),
            self.kept.load(Ordering::Relaxed),
        )
    }
}

/// The caps of one scenario run, shared by every process it starts.
#[derive(Debug)]
pub struct Budget {
    events: AtomicU64,
    event_bytes: AtomicU64,
    events_dropped: AtomicU64,
    /// Per worker: stdout, stderr.
    logs: Vec<[LogCount; 2]>,
    /// Readers and copiers still running, and a wake-up when one ends.
    open: AtomicUsize,
    closed: Notify,
}

impl Budget {
    pub fn new(workers: usize) -> Arc<Budget> {
        Arc::new(Budget {
            events: AtomicU64::new(0),
            event_bytes: AtomicU64::new(0),
            events_dropped: AtomicU64::new(0),
            logs: (0..workers.max(1)).map(|_| Default::default()).collect(),
            open: AtomicUsize::new(0),
            closed: Notify::new(),
        })
    }

    /// Whether one more event of a `len`-byte line may be forwarded (counts
    /// it either way).
    pub(crate) fn take_event(&self, len: usize) -> bool {
        let n = self.events.fetch_add(1, Ordering::Relaxed);
        let bytes = self.event_bytes.fetch_add(len as u64, Ordering::Relaxed);
        if n < MAX_EVENTS && bytes + len as u64 <= MAX_EVENT_BYTES {
            true
        } else {
            self.events_dropped.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    pub(crate) fn log(&self, worker: usize, stream: usize) -> &LogCount {
        &self.logs[worker.min(self.logs.len() - 1)][stream]
    }

    /// What was dropped so far, summed over the workers.
    pub fn capped(&self) -> Capped {
        let mut c = Capped {
            events_dropped: self.events_dropped.load(Ordering::Relaxed),
            ..Capped::default()
        };
        for [out, err] in &self.logs {
            let (seen, kept) = out.get();
            c.stdout_bytes += seen;
            c.stdout_kept += kept;
            let (seen, kept) = err.get();
            c.stderr_bytes += seen;
            c.stderr_kept += kept;
        }
        c
    }

    /// Wait until every reader has hit EOF, or `timeout` passes (a leaked job
    /// may hold a pipe open).
    pub async fn drained(&self, timeout: std::time::Duration) {
        let _ = tokio::time::timeout(timeout, async {
            loop {
                let notified = self.closed.notified();
                if self.open.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }

    pub(crate) fn opened(self: &Arc<Self>) -> OpenGuard {
        self.open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(self.clone())
    }
}

/// Counts a running reader; its drop wakes [`Budget::drained`].
pub(crate) struct OpenGuard(Arc<Budget>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        self.0.closed.notify_waiters();
    }
}

/// Stream index of stdout in a worker's pair of logs.
pub const STDOUT: usize = 0;
/// Stream index of stderr in a worker's pair of logs.
pub const STDERR: usize = 1;

/// Copy `pipe` into `log` up to the worker's cap, draining the rest.
pub async fn copy_capped(
    pipe: impl AsyncRead + Unpin,
    log: std::fs::File,
    budget: Arc<Budget>,
    worker: usize,
    stream: usize,
) {
    copy_capped_with(pipe, log, budget, worker, stream, |_| {}).await
}

/// [`copy_capped`], handing every chunk read (kept in the log or not) to
/// `on_chunk` as well.
pub async fn copy_capped_with(
    mut pipe: impl AsyncRead + Unpin,
    mut log: std::fs::File,
    budget: Arc<Budget>,
    worker: usize,
    stream: usize,
    mut on_chunk: impl FnMut(&[u8]),
) {
    let _open = budget.opened();
    let mut buf = vec![0u8; CHUNK];
    let mut redact = crate::redact::Stream::default();
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        keep_in_log(&budget, worker, stream, &mut log, &redact.feed(&buf[..n]));
        on_chunk(&buf[..n]);
    }
    keep_in_log(&budget, worker, stream, &mut log, &redact.finish());
}

/// Write what the log's cap admits of `bytes` (already redacted).
pub(crate) fn keep_in_log(
    budget: &Budget,
    worker: usize,
    stream: usize,
    log: &mut std::fs::File,
    bytes: &[u8],
) {
    let keep = budget.log(worker, stream).admit(bytes.len());
    if keep > 0 {
        let _ = log.write_all(&bytes[..keep]);
    }
}

/// Splits stdout into lines, holding at most [`MAX_LINE`] bytes of one.
#[derive(Debug, Default)]
pub struct Lines {
    line: Vec<u8>,
    /// Bytes of the current line, including any not held.
    len: usize,
}

/// One finished stdout line.
#[derive(Debug, PartialEq)]
pub enum Finished {
    /// A `CHAOS ` line: its event (a bad one if it was too long), and the
    /// line's length in bytes.
    Event(Event, usize),
    /// Any other line.
    Other,
}

impl Lines {
    /// Feed bytes; `on_line` gets every line they complete.
    pub fn feed(&mut self, bytes: &[u8], mut on_line: impl FnMut(Finished)) {
        for part in bytes.split_inclusive(|&b| b == b'\n') {
            let body = part.strip_suffix(b"\n").unwrap_or(part);
            let room = MAX_LINE.saturating_sub(self.line.len()).min(body.len());
            self.line.extend_from_slice(&body[..room]);
            self.len += body.len();
            if part.ends_with(b"\n") {
                on_line(self.take());
            }
        }
    }

    /// The last line, unterminated at EOF.
    pub fn finish(&mut self, on_line: impl FnOnce(Finished)) {
        if self.len > 0 {
            on_line(self.take());
        }
    }

    fn take(&mut self) -> Finished {
        let len = self.len;
        let finished = if self.len > MAX_LINE {
            if self.line.starts_with(b"CHAOS ") {
                let head = String::from_utf8_lossy(&self.line[..self.line.len().min(200)]);
                Finished::Event(
                    Event::BadEvent {
                        line: format!(
                            "{}… (a line of {} bytes; at most {MAX_LINE} are read)",
                            head.trim_start_matches("CHAOS "),
                            self.len
                        ),
                    },
                    300,
                )
            } else {
                Finished::Other
            }
        } else {
            match parse_line(&self.line) {
                Some(ev) => Finished::Event(ev, len),
                None => Finished::Other,
            }
        };
        self.line.clear();
        if self.line.capacity() > CHUNK {
            self.line = Vec::new();
        }
        self.len = 0;
        finished
    }
}

/// Read stdout to EOF: keep it in `log` up to the cap, forward events through
/// `send` up to the run's cap, count other lines in `others`.
pub async fn read_stdout(
    mut pipe: impl AsyncRead + Unpin,
    mut log: std::fs::File,
    budget: Arc<Budget>,
    worker: usize,
    others: Arc<AtomicU64>,
    send: impl Fn(Event),
) {
    let _open = budget.opened();
    let mut buf = vec![0u8; CHUNK];
    let mut lines = Lines::default();
    let mut on_line = |f: Finished| match f {
        Finished::Event(ev, len) => {
            if budget.take_event(len) {
                send(ev);
            }
        }
        Finished::Other => {
            others.fetch_add(1, Ordering::Relaxed);
        }
    };
    let mut redact = crate::redact::Stream::default();
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        keep_in_log(&budget, worker, STDOUT, &mut log, &redact.feed(&buf[..n]));
        lines.feed(&buf[..n], &mut on_line);
    }
    keep_in_log(&budget, worker, STDOUT, &mut log, &redact.finish());
    lines.finish(on_line);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(chunks: &[&[u8]]) -> Vec<Finished> {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        for c in chunks {
            lines.feed(c, |f| out.push(f));
        }
        lines.finish(|f| out.push(f));
        out
    }

    #[test]
    fn lines_split_across_chunks() {
        let out = collect(&[b"hello\nCHAOS {\"ev\":", b"\"ready\"}\nbye"]);
        assert_eq!(
            out,
            vec![
                Finished::Other,
                Finished::Event(Event::Ready, 20),
                Finished::Other
            ]
        );
    }

    #[test]
    fn an_overlong_event_line_is_bad_and_never_held_whole() {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        lines.feed(b"CHAOS {\"ev\":\"ready\"}", |f| out.push(f));
        let spaces = vec![b' '; 256 * 1024];
        for _ in 0..16 {
            lines.feed(&spaces, |f| out.push(f));
            assert!(lines.line.len() <= MAX_LINE);
        }
        lines.feed(b"\nCHAOS {\"ev\":\"closed\"}\n", |f| out.push(f));
        assert_eq!(out.len(), 2, "{out:?}");
        match &out[0] {
            Finished::Event(Event::BadEvent { line }, _) => {
                assert!(line.contains("a line of 4194324 bytes"), "{line}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(out[1], Finished::Event(Event::Closed, 21));
        assert!(lines.line.capacity() <= CHUNK);
    }

    #[test]
    fn events_past_the_cap_are_counted_not_forwarded() {
        let b = Budget::new(1);
        let forwarded = (0..MAX_EVENTS + 5).filter(|_| b.take_event(20)).count();
        assert_eq!(forwarded as u64, MAX_EVENTS);
        assert_eq!(b.capped().events_dropped, 5);
        // Big events hit the byte cap first.
        let b = Budget::new(1);
        let big = MAX_LINE - 1;
        let forwarded = (0..100).filter(|_| b.take_event(big)).count();
        assert_eq!(forwarded as u64, MAX_EVENT_BYTES / big as u64);
        assert_eq!(b.capped().events_dropped, 100 - forwarded as u64);
    }

    #[test]
    fn logs_keep_up_to_the_cap() {
        let b = Budget::new(2);
        let c = b.log(1, STDERR);
        assert_eq!(c.admit(10), 10);
        assert_eq!(
            c.admit(LOG_KEEP_BYTES as usize),
            LOG_KEEP_BYTES as usize - 10
        );
        assert_eq!(c.admit(5), 0);
        let capped = b.capped();
        assert_eq!(capped.stderr_bytes, LOG_KEEP_BYTES + 15);
        assert_eq!(capped.stderr_kept, LOG_KEEP_BYTES);
        assert_eq!(capped.stdout_bytes, 0);
    }

    #[tokio::test]
    async fn a_flood_is_drained_past_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stderr.log");
        let log = std::fs::File::create(&path).unwrap();
        let b = Budget::new(1);
        let (mut w, r) = tokio::io::duplex(CHUNK);
        let copier = tokio::spawn(copy_capped(r, log, b.clone(), 0, STDERR));
        let total = LOG_KEEP_BYTES as usize + 3 * CHUNK + 7;
        let chunk = vec![b'x'; CHUNK];
        let mut sent = 0;
        use tokio::io::AsyncWriteExt;
        while sent < total {
            let n = CHUNK.min(total - sent);
            w.write_all(&chunk[..n]).await.unwrap();
            sent += n;
        }
        drop(w);
        copier.await.unwrap();
        b.drained(std::time::Duration::from_secs(1)).await;
        assert_eq!(std::fs::metadata(&path).unwrap().len(), LOG_KEEP_BYTES);
        let c = b.capped();
        assert_eq!(c.stderr_bytes, total as u64);
        assert_eq!(c.stderr_kept, LOG_KEEP_BYTES);
    }
}
