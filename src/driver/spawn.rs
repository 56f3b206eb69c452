//! The one way chaosrun starts an agent process and the one way it ends one.
//! [`spawn`] starts a driver-protocol agent or an exec-mode turn alike: the
//! hermetic environment only, cwd the work dir, its own process group, moved
//! into the scenario's cgroup and network namespace before exec (so nothing
//! it ever starts is outside either), owned by chaosrun until reaped.
//! [`Agent::kill_and_wait`] is the one bounded kill-and-wait: SIGKILL, wait
//! up to [`KILL_WAIT`], kill again (the scenario's whole tree when allowed),
//! wait once more, then give up waiting.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::child::{self, Child, Stdin};
use super::exec::Agent;
use super::netns::NetNs;
use super::process::Exit;
use crate::proc_hygiene::Scope;
use anyhow::Context;

/// How long a process chaosrun killed may take to be reaped, per attempt.
pub const KILL_WAIT: Duration = Duration::from_secs(10);

/// What starting one agent process needs.
pub struct SpawnSpec<'a> {
    pub argv: &'a [String],
    /// Exactly the environment the process gets.
    pub env: &'a BTreeMap<String, String>,
    pub cwd: &'a Path,
    pub stdin: Stdin,
    /// The scenario's containment: its cgroup (joined before exec) and the
    /// fallback's tracker.
    pub scope: &'a Scope,
    /// The scenario's network namespace, joined before exec.
    pub netns: Option<&'a NetNs>,
    /// What the command is, for the error (`agent command`, `exec turn command`).
    pub what: &'a str,
}

/// Start `spec.argv` contained; returns the child (stdout and stderr piped)
/// and its pid, already owned (see [`crate::proc_hygiene::own`]) and known
/// to the scope.
pub fn spawn(spec: SpawnSpec<'_>) -> anyhow::Result<(Child, i32)> {
    let argv = spec.argv;
    anyhow::ensure!(!argv.is_empty(), "the {} is empty", spec.what);
    let procs = spec.scope.procs_file()?;
    let cmd = child::Command {
        argv,
        env: spec.env,
        cwd: spec.cwd,
        stdin: spec.stdin,
        cgroup: procs.as_ref().map(AsFd::as_fd),
        netns: spec.netns.map(NetNs::fd),
    };
    // Owned before the orphan reaper can see it (it may exit at once).
    let child = crate::children::start_owned(|| child::start(&cmd), |c| Some(c.id()))
        .with_context(|| format!("cannot start {} `{}`", spec.what, argv[0]))?;
    drop(procs);
    let pid = child.id() as i32;
    spec.scope.started(pid);
    Ok((child, pid))
}

impl Agent {
    /// The one bounded kill-and-wait: SIGKILL this agent (its own process
    /// through its pidfd; in exec mode the running turn's whole tree) and
    /// wait up to [`KILL_WAIT`] for its exit. Still there: kill it again,
    /// and with `tree` the scenario's whole scope too, and wait once more;
    /// then give up waiting (exit unknown).
    pub async fn kill_and_wait(&mut self, tree: Option<Arc<Scope>>) -> Exit {
        self.signal(libc::SIGKILL);
        if let Some(e) = self.wait_for(KILL_WAIT).await {
            return e;
        }
        self.signal(libc::SIGKILL);
        if let Some(scope) = tree {
            let _ = tokio::task::spawn_blocking(move || scope.kill()).await;
        }
        self.wait_for(KILL_WAIT).await.unwrap_or(Exit {
            code: None,
            signal: None,
        })
    }
}
