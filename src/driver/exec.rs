//! Exec mode's runtime: a one-shot CLI agent run as one process per turn,
//! standing in for a driver-protocol agent. [`ExecAgent`] synthesises the
//! protocol's events (`ready` when the first process starts, `turn_start` and
//! `turn_end` per process with `final`/`failed`/`interrupted` read through the
//! profile's selectors, `closed` and end of output once the last turn's
//! process exited), sends an interrupt as SIGINT to the turn's process group
//! (SIGKILL after the grace), and kills a turn's whole process tree on a kill.
//! It also says when each turn's process first reached the provider
//! (`first_call`, from the provider's request count: the first request after
//! the spawn): the runner's deadlines for the turn start there, and a fault
//! sent before it landed in start-up ([`Agent::starting_up`]).
//! Each turn's process starts inside the scenario's containment, like any
//! agent. [`Agent`] is either kind of agent, as the runner drives it.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::home::{ExecRun, Prepared};
use super::output::{copy_capped_with, Budget, MAX_LINE, STDERR, STDOUT};
use super::process::{AgentProcess, Exit, Line, Sink, Tagged, FINAL_KEEP_CHARS};
use super::spawn::SpawnSpec;
use crate::observe::{Event, TurnEnd};
use crate::proc_hygiene::Scope;
use crate::profile::exec::{
    pick_final, Capture, CaptureSel, ExecSpec, FailedSel, FinalSel, Source, Stdin,
    MAX_CAPTURE_CHARS,
};

/// How long a turn's output may stay open after its process exited (a job it
/// left behind may hold stdout): then the turn is judged on what was read.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// Bytes of a turn's stderr kept for the `failed.stderr` pattern.
const STDERR_TAIL: usize = 64 * 1024;
/// Characters of that tail the turn's end carries into the observation
/// ([`TurnEnd::stderr`]): what the oracle quotes when `final` is empty.
const STDERR_KEEP_CHARS: usize = 2000;

/// Either kind of agent the runner drives.
pub enum Agent {
    /// A process speaking the driver protocol.
    Protocol(AgentProcess),
    /// A one-shot CLI, one process per turn.
    Exec(ExecAgent),
}

impl Agent {
    pub fn pid(&self) -> i32 {
        match self {
            Agent::Protocol(p) => p.pid(),
            Agent::Exec(e) => e.pid,
        }
    }

    /// Send `sig` (see [`AgentProcess::signal`]; in exec mode, to the running
    /// turn: SIGKILL takes its whole process tree and ends the agent).
    pub fn signal(&self, sig: i32) -> bool {
        match self {
            Agent::Protocol(p) => p.signal(sig),
            Agent::Exec(e) => e.signal(sig),
        }
    }

    pub async fn wait_for(&mut self, within: Duration) -> Option<Exit> {
        tokio::time::timeout(within, self.wait()).await.ok()
    }

    /// Interrupt the running turn (`interrupt` on stdin, or SIGINT).
    pub async fn interrupt(&mut self) -> std::io::Result<()> {
        match self {
            Agent::Protocol(p) => p.interrupt().await,
            Agent::Exec(e) => e
                .ctl
                .send(())
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe)),
        }
    }

    pub async fn wait(&mut self) -> Exit {
        match self {
            Agent::Protocol(p) => p.wait().await,
            Agent::Exec(e) => match e.exit.wait_for(Option::is_some).await {
                Ok(x) => x.expect("waited for Some"),
                Err(_) => Exit {
                    code: None,
                    signal: None,
                },
            },
        }
    }

    /// Exec mode: whether the running turn's process has not reached the
    /// provider yet (a driver-protocol agent never is: it said `ready`).
    pub fn starting_up(&self) -> bool {
        match self {
            Agent::Protocol(_) => false,
            Agent::Exec(e) => {
                let cur = e.shared.current.lock().unwrap_or_else(|e| e.into_inner());
                cur.is_some() && !e.shared.reached.load(Ordering::SeqCst)
            }
        }
    }

    pub fn exited(&self) -> Option<Exit> {
        match self {
            Agent::Protocol(p) => p.exited(),
            Agent::Exec(e) => *e.exit.borrow(),
        }
    }

    pub fn other_lines(&self) -> u64 {
        match self {
            Agent::Protocol(p) => p.other_lines(),
            Agent::Exec(e) => e.other_lines.load(Ordering::Relaxed),
        }
    }
}

/// The value the store query binds as the session id: the profile's
/// `exec.store_session` rendered with the values captured so far (exec mode),
/// else `session_id`. `Err` names a capture the agent never printed.
pub fn store_session(prep: &Prepared, session_id: &str) -> Result<String, String> {
    let Some(run) = &prep.exec else {
        return Ok(session_id.to_string());
    };
    let mut vars = run.vars.clone();
    let captured = run.captured.lock().unwrap_or_else(|e| e.into_inner());
    for (name, value) in captured.iter() {
        vars.insert(crate::profile::exec::captured_var(name), value.clone());
    }
    for name in run.spec.capture.keys() {
        let var = crate::profile::exec::captured_var(name);
        if !vars.contains_key(&var) && mentions(&run.spec.store_session, &var) {
            return Err(format!(
                "the store query needs `{{{{captured.{name}}}}}` (`exec.store_session`), but the agent's output never matched `exec.capture.{name}`"
            ));
        }
    }
    crate::template::render(&run.spec.store_session, &vars)
}

/// The running turn's process.
struct Running {
    pid: i32,
    pidfd: Option<std::os::fd::OwnedFd>,
}

/// What the runner and the turn loop share.
#[derive(Default)]
struct Shared {
    current: Mutex<Option<Running>>,
    /// A kill landed: no further turn starts.
    killed: AtomicBool,
    /// The running turn's process has reached the provider.
    reached: AtomicBool,
}

/// A one-shot CLI agent over its turns.
pub struct ExecAgent {
    pid: i32,
    exit: watch::Receiver<Option<Exit>>,
    ctl: mpsc::UnboundedSender<()>,
    shared: Arc<Shared>,
    other_lines: Arc<AtomicU64>,
}

/// The parent pid from /proc/PID/stat.
fn ppid_of(pid: i32) -> Option<i32> {
    crate::proc_hygiene::stat::read(pid).map(|s| s.ppid)
}

/// Every live descendant of `root` (not `root`), from one /proc scan, each
/// held by a pidfd opened while its parent link still held (so a pid reused
/// later is never signalled).
fn descendants(root: i32) -> Vec<std::os::fd::OwnedFd> {
    let mut parent = BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
                if let Some(ppid) = ppid_of(pid) {
                    parent.insert(pid, ppid);
                }
            }
        }
    }
    let mut out = vec![];
    let mut seen = vec![];
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&c, &pp) in &parent {
            if pp == p && !seen.contains(&c) {
                seen.push(c);
                frontier.push(c);
                if let Some(fd) = crate::proc_hygiene::pidfd_open(c) {
                    if ppid_of(c) == Some(pp) {
                        out.push(fd);
                    }
                }
            }
        }
    }
    out
}

/// SIGKILL each of a turn's descendants (read while it was alive).
fn kill_all(fds: &[std::os::fd::OwnedFd]) {
    for fd in fds {
        crate::proc_hygiene::pidfd_send(fd, libc::SIGKILL);
    }
}

impl ExecAgent {
    /// Start the agent's first turn process: turn `start` (0, or the turn to
    /// resume at after a kill with the `resume` argv).
    pub fn spawn(
        prep: &Prepared,
        run: &ExecRun,
        env: &BTreeMap<String, String>,
        sink: Sink,
        scope: Arc<Scope>,
        resume: Option<u64>,
        requests: watch::Receiver<u64>,
    ) -> anyhow::Result<ExecAgent> {
        let start = resume.unwrap_or(0) as usize;
        let shared = Arc::new(Shared::default());
        let other_lines = Arc::new(AtomicU64::new(0));
        let turn = Turn {
            prep: prep.clone(),
            run: run.clone(),
            env: env.clone(),
            scope,
            worker: sink.worker,
            budget: sink.budget.clone(),
            other_lines: other_lines.clone(),
            requests,
        };
        // A first turn that needs a value never captured is not a spawn
        // failure: the agent says why (and ends) through its events.
        let first = match turn.spawn(start, resume.is_some()) {
            Ok(s) => Ok(s),
            Err(e) => Err(capture_missing(&e).ok_or(e)?),
        };
        let pid = first.as_ref().map_or(-1, |s| s.pid);
        let (ctl, ctl_rx) = mpsc::unbounded_channel();
        let (exit_tx, exit) = watch::channel(None);
        let loop_shared = shared.clone();
        tokio::spawn(async move {
            turn.run_all(first, start, loop_shared, sink, ctl_rx, exit_tx)
                .await
        });
        Ok(ExecAgent {
            pid,
            exit,
            ctl,
            shared,
            other_lines,
        })
    }

    fn signal(&self, sig: i32) -> bool {
        let cur = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if sig == libc::SIGKILL {
            self.shared.killed.store(true, Ordering::SeqCst);
        }
        let Some(r) = cur.as_ref() else { return false };
        if crate::proc_hygiene::is_zombie(r.pid) {
            return false;
        }
        // The tree is read before the kill: once the turn's process is
        // dead its children are re-parented and no longer look like its.
        let tree = if sig == libc::SIGKILL {
            descendants(r.pid)
        } else {
            Vec::new()
        };
        let hit = r
            .pidfd
            .as_ref()
            .is_some_and(|fd| crate::proc_hygiene::pidfd_send(fd, sig));
        if hit {
            // The rest of the turn's tree: its process group, and any
            // descendant that left it (a launcher's real agent, a tool).
            if let Ok(s) = nix::sys::signal::Signal::try_from(sig) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(r.pid), s);
            }
            kill_all(&tree);
        }
        hit
    }
}

/// What a turn's stdout showed, through the selectors.
#[derive(Default)]
struct Seen {
    final_text: Option<String>,
    /// Per `final.jsonl` selector: its text so far, and whether the last JSON
    /// line matched it (a `join` run goes on).
    picks: Vec<crate::profile::exec::Pick>,
    failed: bool,
    last_line: String,
    /// `exec.capture` values this turn printed (the latest of each).
    captured: BTreeMap<String, String>,
}

/// A turn's argv needs `{{captured.NAME}}` and nothing matched it yet.
#[derive(Debug)]
struct MissingCapture {
    turn: usize,
    name: String,
}

impl std::fmt::Display for MissingCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "turn {} needs `{{{{captured.{}}}}}`, but the agent's output never matched `exec.capture.{}`",
            self.turn, self.name, self.name
        )
    }
}

impl std::error::Error for MissingCapture {}

/// Everything the turn loop needs.
struct Turn {
    prep: Prepared,
    run: ExecRun,
    env: BTreeMap<String, String>,
    scope: Arc<Scope>,
    worker: usize,
    budget: Arc<Budget>,
    other_lines: Arc<AtomicU64>,
    /// The provider's request count (every route).
    requests: watch::Receiver<u64>,
}

/// A started turn process.
struct Started {
    pid: i32,
    /// When it was started, and the provider's request count just before.
    spawned: Instant,
    requests_before: u64,
    child: super::child::Child,
    seen: Arc<Mutex<Seen>>,
    stdout: tokio::task::JoinHandle<()>,
    stderr: tokio::task::JoinHandle<String>,
}

/// Whether template text `a` uses variable `var` (`{{var}}`, filters or not).
fn mentions(a: &str, var: &str) -> bool {
    a.split("{{").skip(1).any(|rest| {
        rest.split("}}")
            .next()
            .and_then(|expr| expr.split('|').next())
            .is_some_and(|name| name.trim() == var)
    })
}

/// The event for a turn that could not start, if a missing capture is why.
fn capture_missing(e: &anyhow::Error) -> Option<Event> {
    e.downcast_ref::<MissingCapture>()
        .map(|m| Event::CaptureMissing {
            turn: m.turn as u64,
            name: m.name.clone(),
        })
}

fn clip(s: &str, chars: usize) -> String {
    s.chars().take(chars).collect()
}

/// The last `chars` characters of `s`.
fn clip_tail(s: &str, chars: usize) -> String {
    let skip = s.chars().count().saturating_sub(chars);
    s.chars().skip(skip).collect()
}

impl Turn {
    fn argv(&self, i: usize, resumed: bool) -> anyhow::Result<Vec<String>> {
        let spec = &self.run.spec;
        let template = if resumed {
            &spec.resume
        } else if i == 0 {
            &spec.first
        } else {
            &spec.next
        };
        let mut vars = self.run.vars.clone();
        vars.insert("message".into(), self.message(i));
        vars.insert("turn".into(), i.to_string());
        let captured = self.run.captured.lock().unwrap_or_else(|e| e.into_inner());
        for (name, value) in captured.iter() {
            vars.insert(crate::profile::exec::captured_var(name), value.clone());
        }
        // Never a silent empty string: a declared capture with no value yet.
        for name in spec.capture.keys() {
            let var = crate::profile::exec::captured_var(name);
            if !vars.contains_key(&var) && template.iter().any(|a| mentions(a, &var)) {
                return Err(MissingCapture {
                    turn: i,
                    name: name.clone(),
                }
                .into());
            }
        }
        template
            .iter()
            .map(|a| crate::template::render(a, &vars).map_err(anyhow::Error::msg))
            .collect()
    }

    /// Merge a turn's captured values into the run's; the events for those
    /// first seen or changed.
    fn merge_captures(&self, turn: BTreeMap<String, String>) -> Vec<Event> {
        let mut run = self.run.captured.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (name, value) in turn {
            if run.get(&name) != Some(&value) {
                run.insert(name.clone(), value.clone());
                out.push(Event::Captured { name, value });
            }
        }
        out
    }

    fn message(&self, i: usize) -> String {
        self.run.turns.get(i).cloned().unwrap_or_default()
    }

    fn append(&self, stream: usize) -> std::io::Result<std::fs::File> {
        let (out, err) = self.prep.dirs.logs(self.worker);
        crate::output::append_log(if stream == STDOUT { &out } else { &err })
    }

    /// [`Self::spawn`] for a later turn, off the runtime's worker: the
    /// clone blocks the calling thread until the child execs, and a child that joins a cgroup
    /// frozen by a chaos stop does not exec until the thaw. Run on the worker
    /// itself, that wait starved the runtime's timers, so the thaw (and every
    /// deadline) never came and the run hung (Claude Code's chaos_soak).
    fn spawn_off_worker(&self, i: usize) -> anyhow::Result<Started> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| self.spawn(i, false)),
            _ => self.spawn(i, false),
        }
    }

    /// Start turn `i`'s process in the scenario's containment.
    fn spawn(&self, i: usize, resumed: bool) -> anyhow::Result<Started> {
        let argv = self.argv(i, resumed)?;
        let stdout_log = self.append(STDOUT)?;
        let mut stderr_log = self.append(STDERR)?;
        let _ = writeln!(stderr_log, "[chaosrun] turn {i}: {argv:?}");
        let requests_before = *self.requests.borrow();
        let spawned = Instant::now();
        let stdin = match self.run.spec.stdin {
            Stdin::Closed => super::child::Stdin::Null,
            Stdin::Message => super::child::Stdin::Piped,
        };
        let (mut child, pid) = super::spawn::spawn(SpawnSpec {
            argv: &argv,
            env: &self.env,
            cwd: &self.prep.dirs.work,
            stdin,
            scope: &self.scope,
            netns: self.prep.netns.as_deref(),
            what: "exec turn command",
        })?;
        if let Some(mut w) = child.stdin.take() {
            let msg = self.message(i);
            tokio::spawn(async move {
                let _ = w.write_all(msg.as_bytes()).await;
            });
        }
        let seen = Arc::new(Mutex::new(Seen::default()));
        let out = child.stdout.take().expect("stdout is piped");
        let err = child.stderr.take().expect("stderr is piped");
        let stdout = tokio::spawn(read_stdout(
            out,
            stdout_log,
            self.budget.clone(),
            self.worker,
            Selectors::new(&self.run.spec, Source::Stdout),
            seen.clone(),
            self.other_lines.clone(),
        ));
        let stderr = tokio::spawn(read_stderr(
            err,
            stderr_log,
            self.budget.clone(),
            self.worker,
            Selectors::new(&self.run.spec, Source::Stderr),
            seen.clone(),
        ));
        Ok(Started {
            pid,
            spawned,
            requests_before,
            child,
            seen,
            stdout,
            stderr,
        })
    }

    async fn run_all(
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

    /// Wait for turn `i`'s process, honouring interrupts, and judge it; also
    /// whether the turn was interrupted (so a SIGKILL may be the grace's),
    /// and the events of the values it captured (a killed turn's too: the
    /// session id it printed is the one to resume).
    async fn finish(
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
                    reached.now(i, s.spawned);
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
                    let tree = descendants(s.pid);
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(s.pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    kill_all(&tree);
                }
            }
        };
        if !first_call && *requests.borrow() > s.requests_before {
            reached.now(i, s.spawned);
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
    fn judge(
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
        let exit_bad = exit.code != Some(0);
        let failed = !interrupted
            && (escalated
                || (spec.failed.exit_code_nonzero && exit_bad)
                || seen.failed
                || stderr_hit);
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

/// Where a turn tells that its process reached the provider.
struct Reached<'a> {
    shared: &'a Shared,
    sink: &'a Sink,
}

impl Reached<'_> {
    /// Turn `i`'s process (started at `spawned`) made its first request.
    /// Stamped before the runner can see it: a fault the runner sends once
    /// the turn is working is never recorded before its first call.
    fn now(&self, i: usize, spawned: Instant) {
        let at = Instant::now();
        self.shared.reached.store(true, Ordering::SeqCst);
        let _ = self.sink.tx.send(Tagged {
            at,
            worker: self.sink.worker,
            incarnation: self.sink.incarnation,
            line: Line::Event(Event::FirstCall {
                turn: i as u64,
                after_spawn: (at - spawned).as_secs_f64(),
            }),
        });
    }
}

/// The profile's captures that read one stream, their regexes compiled once
/// per turn.
struct Captures {
    sels: Vec<(String, CaptureSel, Option<regex::Regex>)>,
    want_json: bool,
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
struct Selectors {
    /// `final`, when it reads this stream, and its regex.
    final_sel: Option<FinalSel>,
    final_re: Option<regex::Regex>,
    /// `failed`, when its `jsonl` reads this stream.
    failed: Option<FailedSel>,
    captures: Captures,
}

impl Selectors {
    fn new(spec: &ExecSpec, stream: Source) -> Selectors {
        let final_sel = (spec.final_sel.from == stream).then(|| spec.final_sel.sel.clone());
        let final_re = match &final_sel {
            Some(FinalSel::Regex(r)) => regex::Regex::new(r).ok(),
            _ => None,
        };
        let failed = (spec.failed.from == stream && spec.failed.jsonl.is_some())
            .then(|| spec.failed.clone());
        Selectors {
            final_sel,
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
            let picked = pick_final(sels, &mut seen.picks, &rec, FINAL_KEEP_CHARS);
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
async fn read_stdout(
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
async fn read_stderr(
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
}
