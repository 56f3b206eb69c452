//! A scenario's recorded requests on disk: while it runs, each kept request's
//! messages and headers (the bulk of a real agent's traffic: its system
//! prompt, tool schemas and whole history, every call) are appended to an
//! unlinked temporary file as one JSON line, and memory keeps the rest of the
//! record (times, kinds, replies, sizes, tools). [`Spool::read_into`] puts
//! them back for judging. The bounds of [`super::recording::RecordLimits`]
//! are applied before a request is spooled, so what the oracle reads is the
//! same as if it had stayed in memory. Lines of requests the recorder no
//! longer keeps ([`Spool::forget`]) are compacted away, so the file stays
//! within about twice what is kept.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;

use super::recording::RequestRecord;
use crate::message::Message;

/// The file is compacted past this size when most of it is forgotten.
const COMPACT_BYTES: u64 = 64 << 20;
/// ... or past this many forgotten lines.
const COMPACT_LINES: u64 = 1000;

/// The spooled part of requests, in an unlinked file.
#[derive(Debug)]
pub struct Spool {
    file: BufWriter<File>,
    /// Bytes and lines in the file.
    file_len: u64,
    lines: u64,
    /// The line length of each request still kept, by `seq`.
    live: HashMap<u64, u64>,
    live_len: u64,
}

#[derive(serde::Serialize)]
struct PartRef<'a> {
    seq: u64,
    headers: &'a [String],
    messages: &'a [Message],
}

#[derive(serde::Deserialize)]
struct Part {
    seq: u64,
    headers: Vec<String>,
    messages: Vec<Message>,
}

fn new_file() -> Option<BufWriter<File>> {
    Some(BufWriter::with_capacity(
        64 * 1024,
        tempfile::tempfile().ok()?,
    ))
}

impl Spool {
    /// A new spool, or `None` when no temporary file can be made (then the
    /// requests stay whole in memory).
    pub fn new() -> Option<Spool> {
        Some(Spool {
            file: new_file()?,
            file_len: 0,
            lines: 0,
            live: HashMap::new(),
            live_len: 0,
        })
    }

    /// Bytes of the requests still kept (what reading them back reads).
    pub fn len(&self) -> u64 {
        self.live_len
    }

    pub fn is_empty(&self) -> bool {
        self.live_len == 0
    }

    /// Bytes in the file.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Append `r`'s messages and headers and take them out of it; on a
    /// write error `r` is left whole (and kept in memory).
    pub fn put(&mut self, r: &mut RequestRecord) {
        let part = PartRef {
            seq: r.seq,
            headers: &r.headers,
            messages: &r.messages,
        };
        let Ok(mut bytes) = serde_json::to_vec(&part) else {
            return;
        };
        bytes.push(b'\n');
        if self.file.write_all(&bytes).is_err() {
            return;
        }
        let n = bytes.len() as u64;
        self.file_len += n;
        self.lines += 1;
        self.live_len += n;
        if let Some(old) = self.live.insert(r.seq, n) {
            self.live_len -= old;
        }
        r.headers = Vec::new();
        r.messages = Vec::new();
        let forgotten = self.lines - self.live.len() as u64;
        if forgotten > COMPACT_LINES
            || (self.file_len > COMPACT_BYTES && self.file_len > 2 * self.live_len)
        {
            // On failure the file stays as it was.
            let _ = self.compact();
        }
    }

    /// The request `seq` is no longer kept: its line may go.
    pub fn forget(&mut self, seq: u64) {
        if let Some(n) = self.live.remove(&seq) {
            self.live_len -= n;
        }
    }

    /// Copy the lines still kept into a new file.
    fn compact(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        let mut fresh = new_file().ok_or_else(|| std::io::Error::other("no temporary file"))?;
        let mut reader = BufReader::new(At {
            file: self.file.get_ref(),
            pos: 0,
        });
        let (mut line, mut len, mut lines) = (Vec::new(), 0u64, 0u64);
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            if seq_of(&line).is_some_and(|s| self.live.contains_key(&s)) {
                fresh.write_all(&line)?;
                len += line.len() as u64;
                lines += 1;
            }
        }
        fresh.flush()?;
        (self.file, self.file_len, self.lines) = (fresh, len, lines);
        Ok(())
    }

    /// Put the spooled messages and headers back into `records` (matched by
    /// `seq`, which they are sorted by; lines of requests no longer kept are
    /// skipped).
    pub fn read_into(&mut self, records: &mut [RequestRecord]) -> std::io::Result<()> {
        self.file.flush()?;
        let reader = BufReader::new(At {
            file: self.file.get_ref(),
            pos: 0,
        });
        for line in reader.lines() {
            let part: Part = serde_json::from_str(&line?)?;
            if let Ok(i) = records.binary_search_by_key(&part.seq, |r| r.seq) {
                let r = &mut records[i];
                r.headers = part.headers;
                r.messages = part.messages;
            }
        }
        Ok(())
    }
}

/// The `seq` a line starts with (`{"seq":N,`).
fn seq_of(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// Reads a file from `pos` without moving its descriptor's offset (where
/// appends go).
struct At<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::recording::{RecordLimits, Recorder};

    fn request(seq: u64, text: &str) -> RequestRecord {
        let mut r: RequestRecord = serde_json::from_value(serde_json::json!({
            "seq": seq, "at": 0.0, "kind": "main", "method": "POST", "path": "/",
            "headers": [], "size": 0, "stream": false, "messages": [],
            "truncated": false, "reply": "text"}))
        .unwrap();
        r.messages = vec![Message::new("tool", text)];
        r
    }

    #[test]
    fn a_retry_storm_leaves_a_spool_of_about_what_is_kept() {
        // 1,500 requests of 100 KB through a ring of 10: 150 MB sent.
        let mut rec = Recorder::new(RecordLimits {
            head: 0,
            tail: 10,
            ..RecordLimits::SCENARIO
        });
        let big = "x".repeat(100_000);
        for seq in 0..1_500 {
            rec.push(request(seq, &big));
        }
        let spool = rec.spool().expect("spooled");
        assert!(spool.len() < 1_100_000, "{}", spool.len());
        assert!(
            spool.file_len() < COMPACT_BYTES + 2 * 1_100_000,
            "the file is compacted: {}",
            spool.file_len()
        );
        let (kept, dropped) = rec.snapshot();
        assert_eq!((kept.len(), dropped), (10, 1_490));
        assert_eq!(kept[9].seq, 1_499);
        assert_eq!(kept[9].messages[0].content.len(), 100_000);
    }

    #[test]
    fn seqs_are_read_from_a_lines_start() {
        assert_eq!(seq_of(b"{\"seq\":42,\"headers\":[]}"), Some(42));
        assert_eq!(seq_of(b"{\"headers\":[]}"), None);
    }
}
