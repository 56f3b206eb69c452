//! The runner's side of the stdio transport: a private Unix socket (0600)
//! that each `chaosrun mcp-stdio` relay ([`super::shim`]) connects to. What
//! the relay reads on its stdin arrives here raw (newline-delimited
//! JSON-RPC); what it must write to its stdout goes back in small records
//! `[tag u8][len u32 BE][payload]`: `D` bytes for stdout, `X` exit with the
//! status in the payload's first byte. When the relay's stdin ends it shuts
//! its write half: the relay is told to exit 0, unless the row lingers. When
//! the scenario ends the socket closes and the relay exits.
//!
//! Backpressure: at most [`MAX_IN_FLIGHT`] requests of a connection are in
//! flight, and answers wait in a queue of [`QUEUE`] frames for the writer.
//! A client that floods and never reads fills the queue, its requests stop
//! finishing, and this side stops reading its socket until one does: the
//! flood then waits in the kernel's buffers, not in chaosrun's memory.

use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::engine::{Engine, Incoming, MAX_IN_FLIGHT, RESTART_WAIT};
use super::replies::Out;

/// Longest line read from a relay; a longer one is skipped to its newline
/// and recorded as unparseable.
pub const MAX_LINE: usize = 8 << 20;
/// Largest payload of one record to the relay.
pub const CHUNK: usize = 64 * 1024;
/// Frames queued per connection before a reply waits for the writer.
const QUEUE: usize = 64;

/// Bind the socket at `path`, owner-only.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Accept relays until the engine is cancelled.
pub async fn serve(listener: UnixListener, engine: Arc<Engine>) {
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = engine.cancel.cancelled() => return,
            acc = listener.accept() => {
                let Ok((stream, _)) = acc else { continue };
                n += 1;
                engine.note("", "stdio");
                tokio::spawn(connection(stream, format!("stdio#{n}"), engine.clone()));
            }
        }
    }
}

async fn write_record(
    w: &mut (impl AsyncWriteExt + Unpin),
    tag: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut head = [0u8; 5];
    head[0] = tag;
    head[1..].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    w.write_all(&head).await?;
    w.write_all(payload).await
}

/// Write what replies send, as records, until the connection or the engine ends.
async fn writer(
    mut w: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Out>,
    engine: Arc<Engine>,
) {
    loop {
        let out = tokio::select! {
            _ = engine.cancel.cancelled() => return,
            o = rx.recv() => match o { Some(o) => o, None => return },
        };
        let ok = match out {
            Out::Frame(f) => {
                let mut r = Ok(());
                for c in f.chunks(CHUNK) {
                    r = write_record(&mut w, b'D', &c).await;
                    if r.is_err() {
                        break;
                    }
                }
                match r {
                    Ok(()) => write_record(&mut w, b'D', b"\n").await,
                    e => e,
                }
            }
            Out::Crash => {
                let _ = write_record(&mut w, b'X', &[1]).await;
                return;
            }
        };
        if ok.is_err() {
            return;
        }
    }
}

async fn connection(stream: UnixStream, conn: String, engine: Arc<Engine>) {
    let (r, w) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Out>(QUEUE);
    let writing = tokio::spawn(writer(w, rx, engine.clone()));
    // Proxy mode: this connection's own upstream session (what the server
    // sends on its own goes out on this connection).
    engine.attach(&conn, tx.clone());
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let (_held, mut generation) = engine.hold();
    let mut r = BufReader::new(r);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut limited = (&mut r).take(MAX_LINE as u64 + 1);
        let read = tokio::select! {
            _ = engine.cancel.cancelled() => break,
            _ = generation.changed() => return restarted(&conn, &engine, (r, tx), writing).await,
            n = limited.read_until(b'\n', &mut line) => n,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() > MAX_LINE && !line.ends_with(b"\n") {
            // Skip the rest of the oversize line, bounded per read.
            let mut sink = Vec::new();
            loop {
                sink.clear();
                match (&mut r)
                    .take(CHUNK as u64)
                    .read_until(b'\n', &mut sink)
                    .await
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) if sink.ends_with(b"\n") => break,
                    Ok(_) => {}
                }
            }
            line.truncate(1024);
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match engine.receive(&conn, text) {
            Incoming::Nothing => {}
            Incoming::Invalid(f) => {
                let _ = tx.send(Out::Frame(f)).await;
            }
            Incoming::Request(job) => {
                // Not reading on while the connection is at its limit.
                let permit = tokio::select! {
                    _ = engine.cancel.cancelled() => break,
                    p = in_flight.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                };
                let (e, tx) = (engine.clone(), tx.clone());
                tokio::spawn(async move {
                    e.play(job, tx).await;
                    drop(permit);
                });
            }
        }
    }
    // The relay's stdin ended (or the engine stopped).
    if !engine.cancel.is_cancelled() {
        engine.note(&conn, "<stdin closed>");
    }
    if !engine.linger {
        engine.detach(&conn).await;
    }
    if engine.linger {
        // Keep the relay running: hold the socket open (answers in flight
        // still go out) until the scenario ends.
        engine.cancel.cancelled().await;
        drop(tx);
        let _ = writing.await;
        return;
    }
    // Answers already on their way still go out (briefly); then the socket
    // closes and the relay exits 0.
    drop(tx);
    let mut writing = writing;
    if tokio::time::timeout(EOF_GRACE, &mut writing).await.is_err() {
        writing.abort();
    }
}

/// The server restarted ([`Engine::restart`]): this connection's relay
/// exits with status 1, as a server process that died; the agent must start
/// a new one. Returns (releasing the restart's wait) once the relay closed
/// its socket (it has exited) or after [`RESTART_WAIT`].
async fn restarted(
    conn: &str,
    engine: &Engine,
    (mut r, tx): (
        BufReader<tokio::net::unix::OwnedReadHalf>,
        mpsc::Sender<Out>,
    ),
    writing: tokio::task::JoinHandle<()>,
) {
    engine.note(conn, "<exited: restart>");
    // Bounded: a relay that stopped reading has filled the queue.
    let _ = tokio::time::timeout(RESTART_WAIT, tx.send(Out::Crash)).await;
    drop(tx);
    engine.detach(conn).await;
    let gone = async {
        let mut sink = [0u8; 4096];
        while matches!(r.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    let _ = tokio::time::timeout(RESTART_WAIT, gone).await;
    writing.abort();
}

/// How long answers in flight may still go out after the relay's stdin ended.
const EOF_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_frame_a_reply_and_say_exit_on_stdin_end() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("s.sock");
        let l = bind(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let engine = Arc::new(Engine::new(
            Vec::new(),
            "N".into(),
            tokio::time::Instant::now(),
            false,
        ));
        tokio::spawn(serve(l, engine.clone()));
        let mut s = UnixStream::connect(&path).await.unwrap();
        s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let mut head = [0u8; 5];
        s.read_exact(&mut head).await.unwrap();
        assert_eq!(head[0], b'D');
        let mut body = vec![0u8; u32::from_be_bytes(head[1..].try_into().unwrap()) as usize];
        s.read_exact(&mut body).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], 1);
        s.shutdown().await.unwrap();
        // Newline record, then the connection closes (no linger).
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).await.unwrap();
        assert_eq!(&rest[..6], b"D\0\0\0\x01\n");
        let rec = engine.recording();
        assert_eq!(rec.stdio_connections, 1);
        assert_eq!(rec.exchanges[0].method, "ping");
    }

    /// A restart tells the relay to exit 1 and waits for it to be gone (its
    /// socket closed); a relay connected after it is served and kept.
    #[tokio::test]
    async fn a_restart_exits_the_relay_and_waits_until_it_is_gone() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("s.sock");
        let engine = Arc::new(Engine::new(
            Vec::new(),
            "N".into(),
            tokio::time::Instant::now(),
            false,
        ));
        tokio::spawn(serve(bind(&path).unwrap(), engine.clone()));
        async fn record(s: &mut UnixStream) -> (u8, Vec<u8>) {
            let mut head = [0u8; 5];
            s.read_exact(&mut head).await.unwrap();
            let mut body = vec![0u8; u32::from_be_bytes(head[1..].try_into().unwrap()) as usize];
            s.read_exact(&mut body).await.unwrap();
            (head[0], body)
        }
        let ping = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        let mut old = UnixStream::connect(&path).await.unwrap();
        old.write_all(ping).await.unwrap();
        assert_eq!(record(&mut old).await.0, b'D');
        assert_eq!(record(&mut old).await.1, b"\n");
        let restarting = tokio::spawn({
            let e = engine.clone();
            async move { e.restart().await }
        });
        assert_eq!(record(&mut old).await, (b'X', vec![1]));
        // Still waiting: the relay has not closed its socket.
        assert!(!restarting.is_finished());
        drop(old);
        restarting.await.unwrap();
        let mut new = UnixStream::connect(&path).await.unwrap();
        new.write_all(ping).await.unwrap();
        assert_eq!(record(&mut new).await.0, b'D');
        let methods: Vec<String> = engine
            .recording()
            .exchanges
            .iter()
            .map(|e| e.method.clone())
            .collect();
        assert_eq!(methods, ["ping", RESTART_NOTE, "<exited: restart>", "ping"]);
    }

    const RESTART_NOTE: &str = super::super::engine::RESTART;
}
