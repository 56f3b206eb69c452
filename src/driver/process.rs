//! The running agent: spawned through [`super::spawn`] (its own process
//! group, the hermetic env, the scenario's cgroup and network namespace), and
//! signalled only through a pidfd opened at spawn; stdout is split into lines,
//! `CHAOS ` lines become events, stdout and stderr are kept in `stdout.log`
//! and `stderr.log` up to their caps (see [`super::output`]); stdin stays open
//! for control lines until the process exits.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::home::Prepared;
use super::output::{self, Budget, STDERR};
use super::spawn::SpawnSpec;
use crate::observe::{Event, TurnEnd};
use crate::proc_hygiene::Scope;

/// What an agent process said on stdout.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Event(Event),
    /// stdout closed (the process exited, or closed it).
    Eof,
}

/// One line, from which process: worker index, and which incarnation of it
/// (a restart makes a new one).
#[derive(Debug, Clone, PartialEq)]
pub struct Tagged {
    pub at: Instant,
    pub worker: usize,
    pub incarnation: u32,
    pub line: Line,
}

/// Where a process's lines go: one channel shared by every worker of a run.
#[derive(Clone)]
pub struct Sink {
    pub tx: mpsc::UnboundedSender<Tagged>,
    pub worker: usize,
    pub incarnation: u32,
    /// The run's caps: at most [`output::MAX_EVENTS`] events ever reach `tx`,
    /// so the channel cannot queue a flood.
    pub budget: Arc<Budget>,
}

/// The protocol's events, as the agent writes them.
#[derive(Debug, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
enum Wire {
    Ready,
    TurnStart { i: u64 },
    TurnEnd(TurnEnd),
    Closed,
}

/// Reap the agent `child` (pid `pid`) when it exits, off the caller: its
/// exit, once known, in the returned watch (the one place an agent process
/// is waited for, so its pid is forgotten by the scope as it is reaped).
pub(crate) fn watch_exit(
    mut child: super::child::Child,
    pid: i32,
) -> watch::Receiver<Option<Exit>> {
    let (exit_tx, exit) = watch::channel(None);
    tokio::spawn(async move {
        use std::os::unix::process::ExitStatusExt;
        let status = child.wait().await;
        crate::proc_hygiene::disown(pid);
        let exit = match status {
            Ok(s) => Exit {
                code: s.code(),
                signal: s.signal(),
            },
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        };
        let _ = exit_tx.send(Some(exit));
    });
    exit
}

/// Characters kept of a `turn_end`'s `final` (an answer is judged on them).
pub const FINAL_KEEP_CHARS: usize = 16 * 1024;

fn clip_in_place(s: &mut String, chars: usize) {
    if let Some((end, _)) = s.char_indices().nth(chars) {
        *s = s[..end].to_owned();
    }
}

/// Parse one stdout line: `Some` for a `CHAOS ` line (an event or a bad one).
/// Strings an event carries are bounded.
pub fn parse_line(line: &[u8]) -> Option<Event> {
    let rest = line.strip_prefix(b"CHAOS ")?;
    let text = String::from_utf8_lossy(rest);
    let text = text.trim_end();
    Some(match serde_json::from_str::<Wire>(text) {
        Ok(Wire::Ready) => Event::Ready,
        Ok(Wire::TurnStart { i }) => Event::TurnStart { i },
        Ok(Wire::TurnEnd(mut t)) => {
            clip_in_place(&mut t.final_text, FINAL_KEEP_CHARS);
            clip_in_place(&mut t.exit_reason, 200);
            // chaosrun's own reading of an exec turn's stderr, never an
            // agent's word.
            t.stderr = None;
            Event::TurnEnd(t)
        }
        Ok(Wire::Closed) => Event::Closed,
        Err(_) => Event::BadEvent {
            line: text.chars().take(200).collect(),
        },
    })
}

/// How the agent process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// A spawned agent (or one worker of it).
pub struct AgentProcess {
    exit: watch::Receiver<Option<Exit>>,
    pid: i32,
    /// Opened right after spawn, before anyone can reap the child: signals
    /// through it reach this process or nothing, never a reused pid.
    pidfd: Option<std::os::fd::OwnedFd>,
    stdin: Option<ChildStdin>,
    other_lines: Arc<AtomicU64>,
}

impl AgentProcess {
    /// Spawn `argv` with exactly `env`, cwd the work dir, contained (see
    /// [`super::spawn::spawn`]: a process group of its own, so a terminal's
    /// Ctrl+C reaches chaosrun, which then cleans up; the scenario's cgroup
    /// and network namespace joined before exec, a failed join failing the
    /// spawn). Its events go to `sink`, ending with [`Line::Eof`]; stdout and
    /// stderr are appended to the worker's logs, so no incarnation's output
    /// is lost.
    pub fn spawn(
        prep: &Prepared,
        argv: &[String],
        env: &BTreeMap<String, String>,
        sink: Sink,
        scope: &Scope,
    ) -> anyhow::Result<AgentProcess> {
        // A restart reopens the logs after the agent ran: never follow a
        // symlink nor block on a FIFO it planted in its run folder.
        let append = crate::output::append_log;
        let (stdout_path, stderr_path) = prep.dirs.logs(sink.worker);
        let stderr_log = append(&stderr_path)?;
        let stdout_log = append(&stdout_path)?;
        let (mut child, pid) = super::spawn::spawn(SpawnSpec {
            argv,
            env,
            cwd: &prep.dirs.work,
            stdin: super::child::Stdin::Piped,
            scope,
            netns: prep.netns.as_deref(),
            mntns: prep.mntns.as_deref(),
            seccomp: prep.seccomp,
            tty: prep.tty.then_some(super::pty::TtyStdio::Stderr),
            what: "agent command",
        })?;
        // Not reaped yet (its waiter starts below, and the orphan reaper
        // skips owned pids), so this pidfd is this child's.
        let pidfd = crate::proc_hygiene::pidfd_open(pid);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let Sink {
            tx,
            worker,
            incarnation,
            budget,
        } = sink;
        if let Some(stderr) = child.stderr.take() {
            let b = budget.clone();
            tokio::spawn(output::copy_capped(stderr, stderr_log, b, worker, STDERR));
        }
        let send = move |line: Line| {
            let _ = tx.send(Tagged {
                at: Instant::now(),
                worker,
                incarnation,
                line,
            });
        };
        let other_lines = Arc::new(AtomicU64::new(0));
        let others = other_lines.clone();
        tokio::spawn(async move {
            output::read_stdout(stdout, stdout_log, budget, worker, others, |ev| {
                send(Line::Event(ev))
            })
            .await;
            send(Line::Eof);
        });
        let exit = watch_exit(child, pid);
        Ok(AgentProcess {
            exit,
            pid,
            pidfd,
            stdin,
            other_lines,
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Send `sig` to this process (chaosrun's own child, whatever its
    /// environment says); whether it hit a live process (false once it is
    /// gone, a zombie included: a kill of the dead does not land).
    pub fn signal(&self, sig: i32) -> bool {
        self.exited().is_none()
            && !crate::proc_hygiene::is_zombie(self.pid)
            && self
                .pidfd
                .as_ref()
                .is_some_and(|fd| crate::proc_hygiene::pidfd_send(fd, sig))
    }

    /// Wait for the exit up to `within`; `None` at the deadline.
    pub async fn wait_for(&mut self, within: std::time::Duration) -> Option<Exit> {
        tokio::time::timeout(within, self.wait()).await.ok()
    }

    /// Write `interrupt` on the agent's stdin.
    pub async fn interrupt(&mut self) -> std::io::Result<()> {
        match self.stdin.as_mut() {
            Some(s) => {
                s.write_all(b"interrupt\n").await?;
                s.flush().await
            }
            None => Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        }
    }

    /// Wait for the process to exit (independently of stdout, which a leaked
    /// job may hold open).
    pub async fn wait(&mut self) -> Exit {
        let exit = match self.exit.wait_for(Option::is_some).await {
            Ok(e) => e.expect("waited for Some"),
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        };
        self.stdin = None;
        exit
    }

    /// The exit, if it already happened.
    pub fn exited(&self) -> Option<Exit> {
        *self.exit.borrow()
    }

    pub fn other_lines(&self) -> u64 {
        self.other_lines.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_protocol_events_and_flags_bad_ones() {
        assert_eq!(parse_line(b"CHAOS {\"ev\":\"ready\"}"), Some(Event::Ready));
        assert_eq!(
            parse_line(b"CHAOS {\"ev\":\"turn_start\",\"i\":1}\r"),
            Some(Event::TurnStart { i: 1 })
        );
        let end = parse_line(
            br#"CHAOS {"ev":"turn_end","i":0,"failed":true,"interrupted":false,"completed":false,"final":"boom","exit_reason":"error"}"#,
        );
        match end {
            Some(Event::TurnEnd(t)) => {
                assert!(t.failed && !t.completed);
                assert_eq!(t.final_text, "boom");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_line(b"CHAOS {not json"),
            Some(Event::BadEvent { .. })
        ));
        assert!(matches!(
            parse_line(b"CHAOS {\"ev\":\"spawned\",\"pid\":1}"),
            Some(Event::BadEvent { .. })
        ));
        assert_eq!(parse_line(b"hello from the agent"), None);
        let long = format!(
            r#"CHAOS {{"ev":"turn_end","i":0,"final":"{}","exit_reason":"{}"}}"#,
            "é".repeat(FINAL_KEEP_CHARS + 5),
            "r".repeat(1000)
        );
        match parse_line(long.as_bytes()) {
            Some(Event::TurnEnd(t)) => {
                assert_eq!(t.final_text.chars().count(), FINAL_KEEP_CHARS);
                assert_eq!(t.exit_reason.len(), 200);
            }
            other => panic!("{other:?}"),
        }
    }
}
