//! `chaosrun mcp-stdio --socket PATH`: the stdio MCP server an agent spawns
//! from its own config. It holds no behaviour: it relays its stdin to the
//! scenario runner's private Unix socket and the runner's records (see
//! [`super::stdio`]) to its stdout. It exits 0 when the socket closes (the
//! runner's scenario ended, or the runner told it its stdin ended), exits
//! with the status the runner names (`crash`: 1), and 1 when it cannot
//! connect. Being the agent's descendant, it lives in the scenario's
//! containment and is judged by the hygiene check like any other process.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Largest record accepted from the runner.
const MAX_RECORD: usize = 1 << 20;

/// Run the relay; returns the exit status.
pub fn run(socket: &Path) -> i32 {
    let stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "chaosrun mcp-stdio: cannot reach the scenario's MCP server at {}: {e} \
                 (this command is started by an agent under `chaosrun`, with the socket it names)",
                socket.display()
            );
            return 1;
        }
    };
    if let Ok(mut up) = stream.try_clone() {
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if up.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = up.shutdown(std::net::Shutdown::Write);
        });
    }
    let mut down = std::io::BufReader::new(stream);
    let mut stdout = std::io::stdout().lock();
    let mut payload = Vec::new();
    loop {
        let mut head = [0u8; 5];
        if down.read_exact(&mut head).is_err() {
            let _ = stdout.flush();
            return 0;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_RECORD {
            return 1;
        }
        payload.resize(len, 0);
        if down.read_exact(&mut payload).is_err() {
            return 0;
        }
        match head[0] {
            b'D' => {
                // A closed stdout is not our exit: the runner decides (linger).
                if stdout.write_all(&payload).is_ok() && payload.ends_with(b"\n") {
                    let _ = stdout.flush();
                }
            }
            b'X' => {
                let _ = stdout.flush();
                return payload.first().copied().map_or(1, i32::from);
            }
            _ => return 1,
        }
    }
}
