//! The upstream MCP server process: started as chaosrun's child in a process
//! group of its own, with the environment its [`Host`] gives (in a table
//! run: the agent's allow-list, none of the caller's secrets, and the run
//! marker so the run's guard sweeps it if chaosrun dies) plus a private HOME
//! and TMPDIR under the scenario's directory, its stderr kept as a bounded
//! tail, killed (the whole group) and reaped by [`Child::kill`]; registered
//! in [`crate::children`] while it lives, so the orphan reaper leaves it to
//! us. The host is handed down by the runner, so this layer does not need
//! the driver's environment rules.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::process::{ChildStdin, ChildStdout};

/// Bytes of the server's stderr kept (its last ones).
pub const STDERR_TAIL: usize = 4096;

/// The last [`STDERR_TAIL`] bytes a process wrote to stderr.
#[derive(Clone, Default)]
pub struct Tail(Arc<Mutex<Vec<u8>>>);

impl Tail {
    fn push(&self, b: &[u8]) {
        let mut t = self.0.lock().unwrap();
        t.extend_from_slice(b);
        let over = t.len().saturating_sub(STDERR_TAIL);
        t.drain(..over);
    }

    /// The tail as text, trimmed; `(no stderr)` when empty.
    pub fn text(&self) -> String {
        let t = String::from_utf8_lossy(&self.0.lock().unwrap())
            .trim()
            .to_string();
        if t.is_empty() {
            "(no stderr)".into()
        } else {
            t
        }
    }
}

/// A running upstream server.
pub struct Child {
    child: tokio::process::Child,
    pid: i32,
    pub tail: Tail,
    /// The stderr reader: done once every holder of the pipe closed it.
    stderr: Option<tokio::task::JoinHandle<()>>,
}

/// What the runner gives the upstream's processes: their base environment.
#[derive(Clone)]
pub struct Host {
    pub env: BTreeMap<String, String>,
}

impl Default for Host {
    /// `chaosrun serve`: only PATH and LANG of the caller.
    fn default() -> Host {
        Host {
            env: std::env::vars()
                .filter(|(k, _)| k == "PATH" || k == "LANG")
                .collect(),
        }
    }
}

/// The server's environment: the host's, a HOME and TMPDIR of its own under
/// `dir`, then the spec's `env`.
pub fn environment(
    dir: &Path,
    host: &Host,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = host.env.clone();
    env.insert("HOME".into(), dir.join("home").display().to_string());
    env.insert("TMPDIR".into(), dir.join("tmp").display().to_string());
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Start `argv` in `cwd` (default `dir`) with `env`; stdin and stdout piped
/// for frames, stderr read into the tail.
pub fn spawn(
    argv: &[String],
    env: &BTreeMap<String, String>,
    dir: &Path,
    cwd: Option<&Path>,
) -> Result<(Child, ChildStdin, ChildStdout), String> {
    for d in ["home", "tmp"] {
        std::fs::create_dir_all(dir.join(d))
            .map_err(|e| format!("cannot make {}: {e}", dir.join(d).display()))?;
    }
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env)
        .current_dir(cwd.unwrap_or(dir))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // Waited for by `kill`: the orphan reaper leaves it alone.
    let mut child = crate::children::start_owned(|| cmd.spawn(), tokio::process::Child::id)
        .map_err(|e| format!("cannot start `{}`: {e}", argv[0]))?;
    let pid = child.id().map_or(-1, |p| p as i32);
    let tail = Tail::default();
    let mut stderr = None;
    if let Some(mut err) = child.stderr.take() {
        let tail = tail.clone();
        stderr = Some(tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                tail.push(&buf[..n]);
            }
        }));
    }
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the upstream's pipes were not opened".into());
    };
    Ok((
        Child {
            child,
            pid,
            tail,
            stderr,
        },
        stdin,
        stdout,
    ))
}

impl Child {
    /// SIGKILL its whole process group and reap it (bounded wait).
    pub async fn kill(mut self) -> Option<std::process::ExitStatus> {
        if self.pid > 0 {
            // The group is the child's own (process_group(0)): only what it started.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.start_kill();
        let status =
            tokio::time::timeout(std::time::Duration::from_secs(5), self.child.wait()).await;
        crate::children::disown(self.pid);
        // The last of its stderr, once the pipe closed (bounded: a
        // grandchild still holding it does not hold this up).
        if let Some(h) = self.stderr.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), h).await;
        }
        status.ok().and_then(Result::ok)
    }
}
