//! One turn's process in exec mode: its argv from the profile's templates
//! (captured values, the resume argv), its logs, and its start inside the
//! scenario's containment (off the runtime's worker for a later turn).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::driver::home::{ExecRun, Prepared};
use crate::driver::output::{Budget, STDERR, STDOUT};
use crate::driver::spawn::SpawnSpec;
use crate::observe::Event;
use crate::proc_hygiene::Scope;
use crate::profile::exec::{Source, Stdin};

use super::read::{read_stderr, read_stdout, Seen, Selectors};

/// A turn's argv needs `{{captured.NAME}}` and nothing matched it yet.
#[derive(Debug)]
pub(super) struct MissingCapture {
    pub(super) turn: usize,
    pub(super) name: String,
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
pub(super) struct Turn {
    pub(super) prep: Prepared,
    pub(super) run: ExecRun,
    pub(super) env: BTreeMap<String, String>,
    pub(super) scope: Arc<Scope>,
    pub(super) worker: usize,
    pub(super) budget: Arc<Budget>,
    pub(super) other_lines: Arc<AtomicU64>,
    /// The provider's request count (every route).
    pub(super) requests: watch::Receiver<u64>,
}

/// A started turn process.
pub(super) struct Started {
    pub(super) pid: i32,
    /// When it was started, and the provider's request count just before.
    pub(super) spawned: Instant,
    pub(super) requests_before: u64,
    pub(super) child: crate::driver::child::Child,
    pub(super) seen: Arc<Mutex<Seen>>,
    pub(super) stdout: tokio::task::JoinHandle<()>,
    pub(super) stderr: tokio::task::JoinHandle<String>,
}

/// Whether template text `a` uses variable `var` (`{{var}}`, filters or not).
pub(super) fn mentions(a: &str, var: &str) -> bool {
    a.split("{{").skip(1).any(|rest| {
        rest.split("}}")
            .next()
            .and_then(|expr| expr.split('|').next())
            .is_some_and(|name| name.trim() == var)
    })
}

/// The event for a turn that could not start, if a missing capture is why.
pub(super) fn capture_missing(e: &anyhow::Error) -> Option<Event> {
    e.downcast_ref::<MissingCapture>()
        .map(|m| Event::CaptureMissing {
            turn: m.turn as u64,
            name: m.name.clone(),
        })
}

impl Turn {
    pub(super) fn argv(&self, i: usize, resumed: bool) -> anyhow::Result<Vec<String>> {
        let spec = &self.run.spec;
        let template = if resumed {
            &spec.resume
        } else if i == 0 {
            &spec.first
        } else {
            &spec.next
        };
        let mut vars = self.run.vars.clone();
        if let Some(key) = self.refreshed_key() {
            vars.insert("api_key".into(), key);
        }
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
        crate::template::render_argv(template, &vars).map_err(anyhow::Error::msg)
    }

    /// Merge a turn's captured values into the run's; the events for those
    /// first seen or changed.
    pub(super) fn merge_captures(&self, turn: BTreeMap<String, String>) -> Vec<Event> {
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

    pub(super) fn message(&self, i: usize) -> String {
        self.run.turns.get(i).cloned().unwrap_or_default()
    }

    pub(super) fn append(&self, stream: usize) -> std::io::Result<std::fs::File> {
        let (out, err) = self.prep.dirs.logs(self.worker);
        crate::output::append_log(if stream == STDOUT { &out } else { &err })
    }

    /// [`Self::spawn`] for a later turn, off the runtime's worker: the
    /// clone blocks the calling thread until the child execs, and a child that joins a cgroup
    /// frozen by a chaos stop does not exec until the thaw. Run on the worker
    /// itself, that wait starved the runtime's timers, so the thaw (and every
    /// deadline) never came and the run hung (Claude Code's chaos_soak).
    pub(super) fn spawn_off_worker(&self, i: usize) -> anyhow::Result<Started> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        match Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| self.spawn(i, false)),
            _ => self.spawn(i, false),
        }
    }

    /// The row's refreshed API key, once there is one.
    fn refreshed_key(&self) -> Option<String> {
        self.run.credential.as_ref()?.current_key()
    }

    /// The turn's environment: the profile's `env:` entries that use
    /// `{{api_key}}` rendered again once the key was refreshed.
    fn env(&self) -> anyhow::Result<std::borrow::Cow<'_, BTreeMap<String, String>>> {
        let Some(key) = self
            .refreshed_key()
            .filter(|_| !self.run.key_env.is_empty())
        else {
            return Ok(std::borrow::Cow::Borrowed(&self.env));
        };
        let mut vars = self.run.vars.clone();
        vars.insert("api_key".into(), key);
        let mut env = self.env.clone();
        for (name, t) in &self.run.key_env {
            let value = crate::template::render(t, &vars).map_err(anyhow::Error::msg)?;
            env.insert(name.clone(), value);
        }
        Ok(std::borrow::Cow::Owned(env))
    }

    /// Start turn `i`'s process in the scenario's containment.
    pub(super) fn spawn(&self, i: usize, resumed: bool) -> anyhow::Result<Started> {
        let argv = self.argv(i, resumed)?;
        let env = self.env()?;
        let stdout_log = self.append(STDOUT)?;
        let mut stderr_log = self.append(STDERR)?;
        let _ = writeln!(stderr_log, "[chaosrun] turn {i}: {argv:?}");
        let requests_before = *self.requests.borrow();
        let spawned = Instant::now();
        let stdin = match self.run.spec.stdin {
            Stdin::Closed => crate::driver::child::Stdin::Null,
            Stdin::Message => crate::driver::child::Stdin::Piped,
        };
        let (mut child, pid) = crate::driver::spawn::spawn(SpawnSpec {
            argv: &argv,
            env: &env,
            cwd: &self.prep.dirs.work,
            stdin,
            scope: &self.scope,
            netns: self.prep.netns.as_deref(),
            mntns: self.prep.mntns.as_deref(),
            seccomp: self.prep.seccomp,
            tty: self
                .prep
                .tty
                .then_some(crate::driver::pty::TtyStdio::Output),
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
}
