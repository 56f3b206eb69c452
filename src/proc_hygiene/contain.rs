//! Containment of a run's processes, decided once per run: a cgroup v2 per
//! scenario under a run cgroup when one can be made (the agent enters its
//! cgroup before exec, so nothing it forks escapes), otherwise the fallback:
//! the tag, the descendant tree of the agent processes, and the untagged
//! orphans re-parented to chaosrun (the subreaper) that no scenario can
//! claim. A [`Scope`] is one scenario's: membership, kill, freeze/thaw,
//! "all gone", sweep, removal. Every wait has a deadline.
//!
//! Only processes chaosrun started may be signalled: a process in a
//! scenario's cgroup whose start time (boot-relative, /proc/PID/stat) is
//! before the scenario's first agent was spawned was moved in from outside
//! (a hostile agent can write any pid into its own `cgroup.procs`). Before
//! every kill, freeze and wait, such an *adopted* process is moved back out
//! to chaosrun's own cgroup, never signalled, and recorded for the report.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cgroup::{self, Cgroup};
use super::freeze_gate::{
    FreezeGate, Spawning, FREEZE_SETTLE, FREEZE_WAITS_FOR_EXEC, SPAWN_WAITS_FOR_THAW,
};
use super::scan::{self, ProcInfo};
use super::tree::Tree;
use super::{kill, RUN_VAR, TAG_VAR};

/// Set (to anything but `0` or empty) to force the tag fallback.
pub const NO_CGROUP_VAR: &str = "CHAOSRUN_NO_CGROUP";

/// Which containment a scenario had.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Its own cgroup v2: membership, kill and freeze by the kernel.
    Cgroup,
    /// The fallback: tag, descendant tree, untagged orphans.
    #[default]
    Tag,
}

/// What the observation records about containment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Containment {
    pub kind: Kind,
    /// Why there was no cgroup (the fallback only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The fallback only: untagged processes re-parented to chaosrun that no
    /// scenario's tree had seen when this scenario was reaped, so whose they
    /// are cannot be told.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unattributed: Vec<ProcInfo>,
    /// Processes started before the scenario's agent that the agent moved
    /// into its cgroup: moved back out and left alone, never signalled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adopted: Vec<ProcInfo>,
}

/// The run's containment: the parent cgroup, or why there is none.
pub struct RunContainment {
    run_id: String,
    parent: Result<Cgroup, String>,
    trees: Trees,
}

/// Every scenario's tree in a run (for telling whose an orphan is), and the
/// one task that rescans /proc for all of them (fallback only).
#[derive(Default)]
struct Registry {
    trees: Mutex<Vec<Weak<Tree>>>,
    tracker: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

type Trees = Arc<Registry>;

impl Registry {
    fn live(&self) -> Vec<Arc<Tree>> {
        let g = self.trees.lock().unwrap_or_else(|e| e.into_inner());
        g.iter().filter_map(Weak::upgrade).collect()
    }

    fn add(&self, tree: &Arc<Tree>) {
        let mut g = self.trees.lock().unwrap_or_else(|e| e.into_inner());
        g.retain(|w| w.strong_count() > 0);
        g.push(Arc::downgrade(tree));
    }

    /// Blocking: one /proc scan, every tree refreshed from it.
    fn refresh(&self) -> Vec<Arc<Tree>> {
        let trees = self.live();
        let table = super::tree::table();
        for t in &trees {
            t.refresh_from(&table);
        }
        trees
    }

    /// Start the rescans (every 200 ms, one /proc scan for all trees) if
    /// they are not running yet; they end with the run's containment.
    fn track(self: &Arc<Self>) {
        let mut tracker = self.tracker.lock().unwrap_or_else(|e| e.into_inner());
        if tracker.is_some() {
            return;
        }
        let weak = Arc::downgrade(self);
        *tracker = Some(tokio::spawn(async move {
            while let Some(reg) = weak.upgrade() {
                let _ = tokio::task::spawn_blocking(move || reg.refresh()).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let tracker = self.tracker.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = tracker.take() {
            t.abort();
        }
    }
}

impl RunContainment {
    /// Make the run's cgroup `chaosrun-RUN`, or record why it cannot be.
    pub fn new(run_id: &str) -> RunContainment {
        let forced = std::env::var(NO_CGROUP_VAR).is_ok_and(|v| !v.is_empty() && v != "0");
        let parent = if forced {
            Err(format!("{NO_CGROUP_VAR} is set"))
        } else {
            cgroup::base().and_then(|b| {
                let path = b.join(format!("chaosrun-{run_id}"));
                let cg = Cgroup::create(path.clone())
                    .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
                cg.account_memory();
                Ok(cg)
            })
        };
        RunContainment {
            run_id: run_id.into(),
            parent,
            trees: Trees::default(),
        }
    }

    pub fn kind(&self) -> Kind {
        match self.parent {
            Ok(_) => Kind::Cgroup,
            Err(_) => Kind::Tag,
        }
    }

    /// One line for the run header.
    pub fn describe(&self) -> String {
        match &self.parent {
            Ok(cg) => format!("containment: cgroup ({})", cg.path.display()),
            Err(why) => format!(
                "containment: tag (no cgroup: {why}); processes are found by tag, descendant tree and orphans"
            ),
        }
    }

    /// A scenario's scope. A scenario whose own cgroup cannot be made falls
    /// back to the tag, with the reason.
    pub fn scope(&self, tag: &str) -> Scope {
        let (cgroup, reason) = match &self.parent {
            Ok(p) => match p.child(tag) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(format!("cannot create a scenario cgroup: {e}"))),
            },
            Err(why) => (None, Some(why.clone())),
        };
        let tree = Arc::new(Tree::default());
        self.trees.add(&tree);
        Scope {
            tag: tag.into(),
            run_id: self.run_id.clone(),
            cgroup,
            reason,
            tree,
            trees: self.trees.clone(),
            spawned: Mutex::new(None),
            adopted: Mutex::new(Vec::new()),
            gate: FreezeGate::default(),
        }
    }

    /// Whether the run's scenarios have cgroups (else they are found by tag).
    pub fn has_cgroups(&self) -> bool {
        self.parent.is_ok()
    }

    /// Blocking: scenario `tag`'s cgroup with its `cgroup.procs` kept open
    /// (for a caller that lists it again and again: one fd while it is
    /// kept, two with its directory where there is room: [`Cgroup`]), if
    /// the run has cgroups and it exists.
    pub fn cgroup_of(&self, tag: &str) -> Option<Cgroup> {
        let parent = self.parent.as_ref().ok()?;
        Cgroup::open(parent.path.join(tag)).ok()
    }

    /// Blocking: the live processes in `cg` and its sub-cgroups.
    pub fn members_in(cg: &Cgroup) -> Vec<ProcInfo> {
        cg.pids().into_iter().filter_map(scan::live_info).collect()
    }

    /// Blocking: kill whatever is left of the run (its cgroup tree and, in
    /// the fallback, untagged orphans re-parented to chaosrun), and remove
    /// the run's cgroups. Returns how many processes were hit.
    pub fn end(&self) -> usize {
        let mut n = cgroup::end_run(&self.run_id);
        if self.parent.is_err() {
            n += kill_orphans(&self.run_id);
        }
        n
    }
}

/// Live untagged children of chaosrun that it does not wait for itself
/// (`owned`, taken with the gate held: no child is between its start and
/// its registration): descendants orphaned onto the subreaper.
fn orphans(run_id: &str, owned: &[i32]) -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    scan::children(me)
        .into_iter()
        .filter(|p| !owned.contains(&p.pid) && !scan::has_env(p.pid, RUN_VAR, run_id))
        .collect()
}

/// SIGKILL the untagged orphans (our own children: the pid stays ours until
/// we reap it, and the pidfd pins it). Returns how many were hit.
fn kill_orphans(run_id: &str) -> usize {
    let me = std::process::id() as i32;
    let (_gate, owned) = crate::children::reaping();
    orphans(run_id, &owned)
        .iter()
        .filter(|p| kill::pidfd_signal_if(p.pid, libc::SIGKILL, |pid| tree_parent(pid) == Some(me)))
        .count()
}

/// Now, in the clock ticks since boot that /proc/PID/stat's start time uses.
fn boot_ticks_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec; sysconf has no preconditions.
    let (ok, hz) = unsafe {
        (
            libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) == 0,
            libc::sysconf(libc::_SC_CLK_TCK),
        )
    };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    if !ok {
        return 0;
    }
    ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000
}

fn tree_parent(pid: i32) -> Option<i32> {
    super::tree::stat(pid).map(|(ppid, _)| ppid)
}

/// One scenario's containment.
pub struct Scope {
    tag: String,
    run_id: String,
    cgroup: Option<Cgroup>,
    reason: Option<String>,
    tree: Arc<Tree>,
    /// Every scenario's tree in the run (for orphans).
    trees: Trees,
    /// Start time (clock ticks since boot) of the scenario's first agent
    /// process: nothing that started before it is ours to signal.
    spawned: Mutex<Option<u64>>,
    /// Older processes found in the cgroup and moved out (see the module doc).
    adopted: Mutex<Vec<ProcInfo>>,
    /// No spawn into a frozen scope, no freeze inside a spawn.
    gate: FreezeGate,
}

impl Scope {
    pub fn kind(&self) -> Kind {
        if self.cgroup.is_some() {
            Kind::Cgroup
        } else {
            Kind::Tag
        }
    }

    /// Blocking: the scenario cgroup's peak memory in bytes, where the kernel
    /// keeps one (see [`Cgroup::memory_peak`]).
    pub fn memory_peak(&self) -> Option<u64> {
        self.cgroup.as_ref().and_then(Cgroup::memory_peak)
    }

    /// The scenario cgroup's directory (None in the fallback): where a
    /// memory limit goes when its hierarchy has the memory controller
    /// ([`super::memory_limit`]).
    pub fn cgroup_path(&self) -> Option<&std::path::Path> {
        self.cgroup.as_ref().map(|c| c.path.as_path())
    }

    /// Blocking: before a process is started into the scope. Waits (bounded)
    /// while chaosrun has the scope frozen; the guard, held until the spawn
    /// has exec'd, keeps a freeze from landing meanwhile
    /// ([`super::freeze_gate`]).
    pub fn spawning(&self) -> std::io::Result<Spawning<'_>> {
        self.gate.spawning(SPAWN_WAITS_FOR_THAW)
    }

    /// What to hand the spawn: the scenario cgroup's `cgroup.procs`, which
    /// the child writes `0` to before exec. `None` in the fallback.
    pub fn procs_file(&self) -> std::io::Result<Option<std::fs::File>> {
        self.cgroup.as_ref().map(Cgroup::procs_file).transpose()
    }

    /// An agent process was started: the fallback follows its descendants
    /// (the run's tracker rescans /proc every 200 ms).
    pub fn started(&self, pid: i32) {
        let start = super::tree::stat(pid)
            .map(|(_, s)| s)
            .unwrap_or_else(|| boot_ticks_now().saturating_sub(1));
        {
            let mut g = self.spawned.lock().unwrap_or_else(|e| e.into_inner());
            *g = Some(g.map_or(start, |s| s.min(start)));
        }
        if self.cgroup.is_some() {
            return;
        }
        self.tree.add_root(pid);
        self.trees.track();
    }

    /// Blocking: the scenario's live processes (agents included).
    pub fn members(&self) -> Vec<ProcInfo> {
        match &self.cgroup {
            Some(cg) => cg
                .pids()
                .into_iter()
                .filter(|&p| self.is_ours(p))
                .filter_map(scan::live_info)
                .collect(),
            None => {
                let mut v = scan::tagged(&self.tag);
                for p in self.tree.members() {
                    if !v.iter().any(|q| q.pid == p.pid) {
                        v.push(p);
                    }
                }
                v.sort_by_key(|p| p.pid);
                v
            }
        }
    }

    /// Blocking: SIGKILL every process of the scenario; how many were hit.
    pub fn kill(&self) -> usize {
        match &self.cgroup {
            Some(cg) => self.held(cg, |cg| cg.kill()),
            None => self.signal_fallback(libc::SIGKILL),
        }
    }

    /// Whether `pid` may be signalled: it started at or after the
    /// scenario's first agent (descendants always do). Before an agent was
    /// recorded (a spawn that failed half-way) the containment alone decides.
    fn is_ours(&self, pid: i32) -> bool {
        match (self.spawned(), super::tree::stat(pid)) {
            (Some(at), Some((_, start))) => start >= at,
            // Gone (or a zombie): nothing to signal, nothing to protect.
            (Some(_), None) => true,
            (None, _) => true,
        }
    }

    fn spawned(&self) -> Option<u64> {
        *self.spawned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Move every process in the cgroup that is not ours (see the module
    /// doc) out to chaosrun's own cgroup, and remember it. Whether the
    /// cgroup now holds none (a move can fail).
    fn evict_adopted(&self, cg: &Cgroup) -> bool {
        if self.spawned().is_none() {
            return true;
        }
        let foreign: Vec<i32> = cg
            .pids()
            .into_iter()
            .filter(|&p| !self.is_ours(p))
            .collect();
        if foreign.is_empty() {
            return true;
        }
        let home = cgroup::base().ok();
        let mut all_out = true;
        for pid in foreign {
            let info = scan::info(pid);
            let moved = home
                .as_ref()
                .is_some_and(|h| std::fs::write(h.join("cgroup.procs"), pid.to_string()).is_ok());
            all_out &= moved;
            let mut g = self.adopted.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = info.filter(|i| !g.iter().any(|a| a.pid == i.pid)) {
                g.push(i);
            }
        }
        all_out
    }

    /// Run `act` (a kill) on the cgroup with no adopted process in it:
    /// frozen first (so the agent cannot move one in meanwhile), adopted ones
    /// moved out, then `act`, then thawed. Where a move failed, `act` is
    /// replaced by a per-process SIGKILL of only our own processes (pidfd,
    /// start time rechecked). An empty cgroup is left as it is.
    fn held(&self, cg: &Cgroup, act: impl FnOnce(&Cgroup) -> usize) -> usize {
        if !cg.populated() {
            return 0;
        }
        cg.freeze(true, Duration::from_secs(2));
        let n = if self.evict_adopted(cg) {
            act(cg)
        } else {
            cg.pids()
                .into_iter()
                .filter(|&p| kill::pidfd_signal_if(p, libc::SIGKILL, |p| self.is_ours(p)))
                .count()
        };
        cg.freeze(false, Duration::from_secs(2));
        n
    }

    /// Blocking: stop (`true`) or continue every process of the scenario:
    /// `cgroup.freeze` (atomic), or SIGSTOP/SIGCONT in the fallback. How many
    /// were hit (0 when a freeze did not settle within 2 s, or a spawn in
    /// flight did not exec in time: then nothing was stopped). A stop waits
    /// for the spawns in flight to exec, and spawns wait for the continue.
    pub fn freeze(&self, stop: bool) -> usize {
        if stop && !self.gate.freezing(FREEZE_WAITS_FOR_EXEC) {
            return 0;
        }
        let n = self.freeze_now(stop);
        if !stop {
            self.gate.thawed();
        }
        n
    }

    fn freeze_now(&self, stop: bool) -> usize {
        match &self.cgroup {
            Some(cg) => {
                let n = cg.freeze(stop, FREEZE_SETTLE);
                if stop && !self.evict_adopted(cg) {
                    // An adopted process that could not be moved out is
                    // thawed on its own: never stopped by chaosrun.
                    return n;
                }
                n.min(cg.pids().len())
            }
            None => self.signal_fallback(if stop { libc::SIGSTOP } else { libc::SIGCONT }),
        }
    }

    fn signal_fallback(&self, sig: i32) -> usize {
        let tagged = |pid: i32| scan::has_env(pid, TAG_VAR, &self.tag) && self.is_ours(pid);
        let mut n = scan::tagged(&self.tag)
            .iter()
            .filter(|p| kill::pidfd_signal_if(p.pid, sig, tagged))
            .count();
        for p in self.tree.members() {
            if scan::has_env(p.pid, TAG_VAR, &self.tag) {
                continue; // signalled by tag above
            }
            let tree = &self.tree;
            let same = |pid: i32| {
                super::tree::stat(pid).is_some_and(|(_, s)| tree.knows(pid, s)) && self.is_ours(pid)
            };
            n += usize::from(kill::pidfd_signal_if(p.pid, sig, same));
        }
        n
    }

    /// After the agent exited: wait up to `within` for every process of the
    /// scenario to be gone; those still alive at the deadline.
    pub async fn survivors(self: &Arc<Self>, within: Duration) -> Vec<ProcInfo> {
        if let Some(cg) = &self.cgroup {
            let deadline = tokio::time::Instant::now() + within;
            loop {
                let (me, c) = (self.clone(), cg.clone());
                let _ = tokio::task::spawn_blocking(move || me.evict_adopted(&c)).await;
                if !cg.populated() {
                    return Vec::new();
                }
                if tokio::time::Instant::now() >= deadline {
                    return self.members_async().await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            super::reap_orphans();
            let left = self.members_async().await;
            if left.is_empty() || tokio::time::Instant::now() >= deadline {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn members_async(self: &Arc<Self>) -> Vec<ProcInfo> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.members())
            .await
            .unwrap_or_default()
    }

    /// Blocking: kill until nothing of the scenario is left (or 10 s), then
    /// remove its cgroup.
    pub fn sweep(&self) {
        match &self.cgroup {
            Some(cg) => {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while cg.populated() && std::time::Instant::now() < deadline {
                    self.held(cg, |cg| cg.kill());
                    std::thread::sleep(Duration::from_millis(10));
                }
                if self.evict_adopted(cg) {
                    cg.remove(Duration::from_secs(5));
                }
            }
            None => {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while self.signal_fallback(libc::SIGKILL) > 0
                    && std::time::Instant::now() < deadline
                {
                    super::reap_orphans();
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    /// The fallback only: untagged orphans of chaosrun that no scenario's
    /// tree has seen.
    pub fn unattributed(&self) -> Vec<ProcInfo> {
        if self.cgroup.is_some() {
            return Vec::new();
        }
        let trees = self.trees.refresh();
        let (_gate, owned) = crate::children::reaping();
        orphans(&self.run_id, &owned)
            .into_iter()
            .filter(|p| {
                let start = super::tree::stat(p.pid).map(|(_, s)| s);
                !trees
                    .iter()
                    .any(|t| start.is_some_and(|s| t.knows(p.pid, s)))
            })
            .collect()
    }

    /// What the observation records.
    pub fn record(&self, unattributed: Vec<ProcInfo>) -> Containment {
        Containment {
            kind: self.kind(),
            reason: self.reason.clone(),
            unattributed,
            adopted: self
                .adopted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(cg) = &self.cgroup {
            // Normally already swept and removed; bounded either way. The
            // removal's retries write cgroup.kill: never with an adopted
            // process still inside.
            if self.evict_adopted(cg) {
                cg.remove(Duration::from_secs(2));
            }
        }
    }
}
