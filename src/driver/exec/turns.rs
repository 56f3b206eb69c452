//! The loop over an exec-mode agent's turns: each turn's process started,
//! its events synthesised (`ready`, `turn_start`, `first_call`, `turn_end`,
//! `closed`), an interrupt sent as SIGINT then SIGKILL after the grace, and
//! the turn judged through the selectors on what its output showed.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::driver::output::STDERR;
use crate::driver::process::{Exit, Line, Sink, Tagged, FINAL_KEEP_CHARS};
use crate::observe::{Event, TurnEnd};
use crate::profile::exec::FinalSel;

use super::read::{clip, clip_tail, Seen};
use super::turn::{capture_missing, Started, Turn};
use super::{Running, Shared, DRAIN_AFTER_EXIT, STDERR_KEEP_CHARS};

impl Turn {
    pub(super) async fn run_all(
        self,
        first: Result<Started, Event>,
        start: usize,
        shared: Arc<Shared>,
        sink: Sink,
        mut ctl: mpsc::UnboundedReceiver<()>,
        exit_tx: watch::Sender<Option<Exit>>,
    ) {
        let send = |line: Line| {
            let _ = sink.tx.send(Tagged {
                at: Instant::now(),
                worker: sink.worker,
                incarnation: sink.incarnation,
                line,
            });
        };
        let mut last = Exit {
            code: Some(0),
            signal: None,
        };
        let mut next = match first {
            Ok(s) => Some(s),
            Err(why) => {
                send(Line::Event(why));
                let _ = exit_tx.send(Some(Exit {
                    code: None,
                    signal: None,
                }));
                send(Line::Eof);
                return;
            }
        };
        send(Line::Event(Event::Ready));
        let turns = self.run.turns.len();
        let mut i = start;
        while i < turns {
            let started = match next.take() {
                Some(s) => s,
                None => match self.spawn_off_worker(i) {
                    Ok(s) => s,
                    Err(e) => {
                        if let Some(why) = capture_missing(&e) {
                            send(Line::Event(why));
                        }
                        if let Ok(mut log) = self.append(STDERR) {
                            let _ = writeln!(log, "[chaosrun] {e:#}");
                        }
                        last = Exit {
                            code: None,
                            signal: None,
                        };
                        break;
                    }
                },
            };
            {
                let mut cur = shared.current.lock().unwrap_or_else(|e| e.into_inner());
                shared.reached.store(false, Ordering::SeqCst);
                *cur = Some(Running {
                    pid: started.pid,
                    pidfd: crate::proc_hygiene::pidfd_open(started.pid),
                });
            }
            send(Line::Event(Event::TurnStart { i: i as u64 }));
            let reached = Reached {
                shared: &shared,
                sink: &sink,
            };
            let (exit, end, after_interrupt, captured) =
                self.finish(started, i, &mut ctl, reached).await;
            *shared.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
            for ev in captured {
                send(Line::Event(ev));
            }
            last = exit;
            // A SIGKILL chaosrun's interrupt did not send (a kill of the
            // scenario's whole tree, the OOM killer): the agent died, as a
            // driver-protocol agent would, with no `turn_end`.
            if exit.signal == Some(libc::SIGKILL) && !after_interrupt {
                shared.killed.store(true, Ordering::SeqCst);
            }
            if shared.killed.load(Ordering::SeqCst) {
                break;
            }
            send(Line::Event(Event::TurnEnd(end)));
            self.refresh_credential();
            i += 1;
            if shared.killed.load(Ordering::SeqCst) {
                break;
            }
        }
        if !shared.killed.load(Ordering::SeqCst) && i >= turns {
            send(Line::Event(Event::Closed));
        }
        let _ = exit_tx.send(Some(last));
        send(Line::Eof);
    }

    /// A turn ended: a row's expired credential (`refresh: turn_end`) is
    /// refreshed before the next turn's process is started with it.
    fn refresh_credential(&self) {
        if let Some(c) = &self.run.credential {
            c.refresh();
        }
    }

    /// Wait for turn `i`'s process, honouring interrupts, and judge it; also
    /// whether the turn was interrupted (so a SIGKILL may be the grace's),
    /// and the events of the values it captured (a killed turn's too: the
    /// session id it printed is the one to resume).
    pub(super) async fn finish(
        &self,
        mut s: Started,
        i: usize,
        ctl: &mut mpsc::UnboundedReceiver<()>,
        reached: Reached<'_>,
    ) -> (Exit, TurnEnd, bool, Vec<Event>) {
        use std::os::unix::process::ExitStatusExt;
        let grace = Duration::from_secs_f64(self.run.spec.interrupt_grace);
        let mut interrupted_at: Option<Instant> = None;
        let mut escalated = false;
        let mut requests = self.requests.clone();
        let mut first_call = false;
        let status = loop {
            let kill_at = interrupted_at.map(|t| t + grace);
            // Biased: a first request already there is told before the exit,
            // and an exit already there wins over a grace timer that fired
            // while the runtime was busy (never escalate the exited).
            tokio::select! {
                biased;
                _ = requests.wait_for(|n| *n > s.requests_before), if !first_call => {
                    first_call = true;
                    reached.now(i, s.spawned, first_output(&s.seen));
                }
                st = s.child.wait() => break st,
                Some(()) = ctl.recv(), if interrupted_at.is_none() => {
                    interrupted_at = Some(Instant::now());
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(s.pid),
                        nix::sys::signal::Signal::SIGINT,
                    );
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() && !escalated => {
                    escalated = true;
                    let tree = crate::proc_hygiene::descendant_pidfds(s.pid);
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(s.pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    crate::proc_hygiene::kill_pidfds(&tree);
                }
            }
        };
        if !first_call && *requests.borrow() > s.requests_before {
            reached.now(i, s.spawned, first_output(&s.seen));
        }
        crate::proc_hygiene::disown(s.pid);
        let exit = match status {
            Ok(st) => Exit {
                code: st.code(),
                signal: st.signal(),
            },
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        };
        let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut s.stdout).await;
        s.stdout.abort();
        let stderr_tail = match tokio::time::timeout(DRAIN_AFTER_EXIT, &mut s.stderr).await {
            Ok(Ok(t)) => t,
            _ => {
                s.stderr.abort();
                String::new()
            }
        };
        let mut seen = std::mem::take(&mut *s.seen.lock().unwrap_or_else(|e| e.into_inner()));
        let captured = self.merge_captures(std::mem::take(&mut seen.captured));
        let interrupted = interrupted_at.is_some() && !escalated;
        let end = self.judge(i, exit, seen, &stderr_tail, interrupted, escalated);
        (exit, end, interrupted_at.is_some(), captured)
    }

    /// Turn `i`'s end from its exit, what its stdout showed through the
    /// selectors, and its stderr's tail.
    pub(super) fn judge(
        &self,
        i: usize,
        exit: Exit,
        seen: Seen,
        stderr_tail: &str,
        interrupted: bool,
        escalated: bool,
    ) -> TurnEnd {
        let spec = &self.run.spec;
        let stderr_hit = spec.failed.stderr.as_ref().is_some_and(|r| {
            regex::Regex::new(r).is_ok_and(|re| stderr_tail.lines().any(|l| re.is_match(l)))
        });
        // `unless_last_line`: no success line last (none at all included).
        let no_success_line = spec.failed.unless_last_line.as_ref().is_some_and(|r| {
            regex::Regex::new(r).is_ok_and(|re| !re.is_match(&seen.failed_last_line))
        });
        let exit_bad = exit.code != Some(0);
        let failed = !interrupted
            && (escalated
                || (spec.failed.exit_code_nonzero && exit_bad)
                || seen.failed
                || stderr_hit
                || no_success_line);
        let mut reason = match (exit.code, exit.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(sig)) => format!("signal {sig}"),
            _ => "exit unknown".to_string(),
        };
        if escalated {
            reason = format!(
                "did not stop within {} s of SIGINT: killed ({reason})",
                spec.interrupt_grace
            );
        } else if interrupted {
            reason = format!("interrupted by SIGINT ({reason})");
        }
        let final_text = match &spec.final_sel.sel {
            FinalSel::LastLine => Some(seen.last_line),
            _ => seen.final_text,
        }
        .unwrap_or_default();
        TurnEnd {
            i: i as u64,
            failed,
            interrupted,
            completed: !failed && !interrupted,
            final_text: clip(&final_text, FINAL_KEEP_CHARS),
            exit_reason: clip(&reason, 200),
            stderr: Some(clip_tail(stderr_tail.trim_end(), STDERR_KEEP_CHARS)),
        }
    }
}

/// When the turn's process first wrote to stdout or stderr, if it has.
fn first_output(seen: &std::sync::Mutex<super::read::Seen>) -> Option<Instant> {
    seen.lock().unwrap_or_else(|e| e.into_inner()).first_output
}

/// Where a turn tells that its process reached the provider.
pub(super) struct Reached<'a> {
    pub(super) shared: &'a Shared,
    pub(super) sink: &'a Sink,
}

impl Reached<'_> {
    /// Turn `i`'s process (started at `spawned`) made its first request.
    /// Stamped before the runner can see it: a fault the runner sends once
    /// the turn is working is never recorded before its first call.
    fn now(&self, i: usize, spawned: Instant, first_output: Option<Instant>) {
        let at = Instant::now();
        self.shared.reached.store(true, Ordering::SeqCst);
        let _ = self.sink.tx.send(Tagged {
            at,
            worker: self.sink.worker,
            incarnation: self.sink.incarnation,
            line: Line::Event(Event::FirstCall {
                turn: i as u64,
                after_spawn: (at - spawned).as_secs_f64(),
                first_output: first_output
                    .filter(|o| *o <= at)
                    .map(|o| (o - spawned).as_secs_f64()),
            }),
        });
    }
}
