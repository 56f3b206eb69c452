//! A memory limit on a scenario's agent, so the kernel OOM-kills it (the
//! process-fault action `oom`, issue 35.2's "a row that sets a cgroup
//! `memory.max`").
//!
//! Two kinds of memory cgroup can hold the limit:
//!
//! * **v2**: the scenario's own cgroup, where its hierarchy has the memory
//!   controller (the run cgroup asks for `+memory`, best effort): the limit is
//!   `memory.max`, the usage `memory.current`, the OOM kills the `oom_kill`
//!   line of `memory.events`. Every agent process is already a member.
//! * **v1**: where the v2 cgroup has no memory controller (a hybrid host: v2
//!   at /sys/fs/cgroup/unified with no controllers, memory on v1), a v1
//!   memory cgroup of the scenario's own, made under chaosrun's own v1 memory
//!   cgroup and removed by chaosrun: the limit is `memory.limit_in_bytes`,
//!   the usage `memory.usage_in_bytes`, the OOM kills the `oom_kill` line of
//!   `memory.oom_control`. The scenario's live processes are moved in when
//!   the limit is set, pass after pass until none is left outside (a child
//!   forked while its parent was being moved is caught by the next pass; one
//!   forked after is born inside); their charges are moved with them where
//!   the kernel still can (`move_charge_at_immigrate`, best effort), and the
//!   limit counts from the usage read after the move. The cgroup is named
//!   after the run (`chaosrun-oom-RUN-NAME`) and owned: dropping the
//!   [`MemoryLimit`] (a cancelled or panicking run) removes it like
//!   [`MemoryLimit::remove`], and the run's guard removes what a killed
//!   chaosrun left ([`sweep_run`]).
//!
//! Neither: [`available`] says why, and the row is not applicable (never a
//! pass). The limit is always relative (the usage when it is set plus a
//! headroom), so it does not depend on the agent's footprint at boot.

use std::fs;
use std::path::{Path, PathBuf};

/// Which memory cgroup holds the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    V2,
    V1,
}

impl Via {
    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Via::V2 => "cgroup v2 memory.max",
            Via::V1 => "cgroup v1 memory.limit_in_bytes",
        }
    }
}

/// A memory cgroup the scenario's agent runs under while the limit holds;
/// its owner: dropped, it lifts the limit and (v1) removes the cgroup.
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    via: Via,
    /// Lifted and removed already ([`MemoryLimit::remove`]).
    done: bool,
}

/// At most this many passes move the scope's processes in
/// ([`MemoryLimit::gather`]).
const MOVE_PASSES: usize = 100;

/// The prefix of every v1 memory cgroup of run `run`.
fn run_prefix(run: &str) -> String {
    format!("chaosrun-oom-{run}-")
}

/// Where the v1 memory controller is mounted, from `/proc/self/mountinfo`.
fn v1_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        let mut f = post.split_whitespace();
        if f.next()? != "cgroup" {
            return None;
        }
        let opts = f.nth(1)?;
        if !opts.split(',').any(|o| o == "memory") {
            return None;
        }
        pre.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// This process's own v1 memory cgroup, relative to the mount.
fn v1_own_path() -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',')
            .any(|c| c == "memory")
            .then(|| path.trim_start_matches('/').to_string())
    })
}

/// chaosrun's own v1 memory cgroup (where a scenario's is made).
fn v1_base() -> Result<PathBuf, String> {
    let mount = v1_mount().ok_or("no cgroup v1 memory controller is mounted")?;
    let own = v1_own_path().ok_or("/proc/self/cgroup names no v1 memory cgroup")?;
    let base = mount.join(own);
    if !base.join("memory.limit_in_bytes").exists() {
        return Err(format!("{} is not a v1 memory cgroup", base.display()));
    }
    Ok(base)
}

/// Blocking: whether a memory limit can be set for a scenario whose v2
/// cgroup is `scope` (None: no scenario cgroup): `Err` says why not.
pub fn available(scope: Option<&Path>) -> Result<Via, String> {
    if scope.is_some_and(|s| s.join("memory.max").exists()) {
        return Ok(Via::V2);
    }
    let base = v1_base().map_err(|e| {
        format!(
            "no memory cgroup controller to set a limit with: the scenario's cgroup v2 has no memory.max ({}) and {e}",
            if scope.is_some() { "no memory controller in its hierarchy" } else { "no scenario cgroup" }
        )
    })?;
    let probe = base.join(format!("chaosrun-oom-probe-{}", std::process::id()));
    match fs::create_dir(&probe) {
        Ok(()) => {
            let _ = fs::remove_dir(&probe);
            Ok(Via::V1)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Via::V1),
        Err(e) => Err(format!(
            "cannot make a v1 memory cgroup under {}: {e}",
            base.display()
        )),
    }
}

/// Blocking: why no scenario of this run could get a memory limit, if so
/// (the run cgroups' v2 hierarchy has no memory controller and no v1 memory
/// cgroup can be made). Read before the row runs, to make it N/A.
pub fn host_gap() -> Option<String> {
    let v2 = super::cgroup::base().ok().is_some_and(|b| {
        fs::read_to_string(b.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
    });
    if v2 {
        return None;
    }
    available(None).err()
}

fn read_u64(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The value of `key` in a flat keyed file (`oom_kill 3`).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Blocking: remove every v1 memory cgroup run `run` left (a chaosrun
/// killed before its [`MemoryLimit`] was dropped), moving what is left in
/// one out first; the guard calls it once the run's processes are killed.
/// Returns how many were removed.
pub fn sweep_run(run: &str) -> usize {
    let Ok(base) = v1_base() else { return 0 };
    let prefix = run_prefix(run);
    let left: Vec<PathBuf> = fs::read_dir(&base)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    left.into_iter()
        .filter(|dir| {
            MemoryLimit {
                dir: dir.clone(),
                via: Via::V1,
                done: false,
            }
            .remove()
        })
        .count()
}

impl MemoryLimit {
    /// Blocking: the memory cgroup for the scenario whose v2 cgroup is
    /// `scope`: that cgroup itself (v2), or a new v1 memory cgroup of run
    /// `run` named after `name`, holding every process `members` lists
    /// (moved in until none is left outside: [`MemoryLimit::gather`]).
    pub fn open(
        scope: Option<&Path>,
        (run, name): (&str, &str),
        members: &dyn Fn() -> Vec<i32>,
    ) -> Result<MemoryLimit, String> {
        match available(scope)? {
            Via::V2 => Ok(MemoryLimit {
                dir: scope.expect("v2 needs the scope's cgroup").to_path_buf(),
                via: Via::V2,
                done: false,
            }),
            Via::V1 => {
                let dir = v1_base()?.join(format!("{}{name}", run_prefix(run)));
                fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
                let cg = MemoryLimit {
                    dir,
                    via: Via::V1,
                    done: false,
                };
                // Refused by newer kernels (deprecated): then the charges
                // stay behind and the usage counts from the move.
                let _ = fs::write(cg.dir.join("memory.move_charge_at_immigrate"), "3");
                if cg.gather(members) == 0 {
                    return Err(format!(
                        "no process of the scenario could be moved into {}",
                        cg.dir.display()
                    ));
                }
                Ok(cg)
            }
        }
    }

    /// Move every process `members` lists in, pass after pass, until a pass
    /// finds none outside that could be moved (bounded by [`MOVE_PASSES`]):
    /// a process forked while the others were moved was listed by no
    /// earlier pass, and is caught by the next; one forked after its parent
    /// moved is born inside. Returns how many processes are inside.
    fn gather(&self, members: &dyn Fn() -> Vec<i32>) -> usize {
        let mut refused = std::collections::BTreeSet::new();
        for _ in 0..MOVE_PASSES {
            let inside = self.pids();
            let outside: Vec<i32> = members()
                .into_iter()
                .filter(|p| !inside.contains(p) && !refused.contains(p))
                .collect();
            if outside.is_empty() {
                return inside.len();
            }
            for p in outside {
                if !self.join(p) {
                    refused.insert(p);
                }
            }
        }
        self.pids().len()
    }

    /// The processes in the cgroup now (v1).
    fn pids(&self) -> Vec<i32> {
        let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        procs
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Which memory cgroup holds the limit.
    pub fn via(&self) -> Via {
        self.via
    }

    /// Move `pid` in (v1; a v2 scope's processes are members already).
    fn join(&self, pid: i32) -> bool {
        self.via == Via::V2 || fs::write(self.dir.join("cgroup.procs"), pid.to_string()).is_ok()
    }

    /// The memory charged to the cgroup now, in bytes.
    pub fn usage(&self) -> Option<u64> {
        match self.via {
            Via::V2 => read_u64(&self.dir.join("memory.current")),
            Via::V1 => read_u64(&self.dir.join("memory.usage_in_bytes")),
        }
    }

    /// The kernel's OOM events in this cgroup from now on, as they happen
    /// (inside a tokio runtime; see [`super::oom_events`]).
    pub fn events(&self) -> Result<super::oom_events::OomEvents, String> {
        super::oom_events::OomEvents::open(&self.dir, self.via)
    }

    /// The OOM kills the kernel made in the cgroup so far.
    pub fn oom_kills(&self) -> Option<u64> {
        match self.via {
            Via::V2 => keyed(&self.dir.join("memory.events"), "oom_kill"),
            Via::V1 => keyed(&self.dir.join("memory.oom_control"), "oom_kill"),
        }
    }

    /// Set the limit to `bytes`.
    pub fn set(&self, bytes: u64) -> std::io::Result<()> {
        match self.via {
            Via::V2 => fs::write(self.dir.join("memory.max"), bytes.to_string()),
            Via::V1 => fs::write(self.dir.join("memory.limit_in_bytes"), bytes.to_string()),
        }
    }

    /// Lift the limit (best effort: a v1 cgroup is removed next anyway).
    pub fn lift(&self) {
        let _ = match self.via {
            Via::V2 => fs::write(self.dir.join("memory.max"), "max"),
            Via::V1 => fs::write(self.dir.join("memory.limit_in_bytes"), "-1"),
        };
    }

    /// Lift the limit and, for a v1 cgroup of chaosrun's making, move what
    /// is left in it back to chaosrun's own v1 memory cgroup (it stays in
    /// the scenario's containment) and remove it. Returns whether it is gone
    /// (always true for v2: the scenario's cgroup is not this module's).
    pub fn remove(mut self) -> bool {
        self.release()
    }

    /// [`MemoryLimit::remove`], once.
    fn release(&mut self) -> bool {
        if std::mem::replace(&mut self.done, true) {
            return true;
        }
        self.lift();
        if self.via == Via::V2 {
            return true;
        }
        let parent = self.dir.parent().map(Path::to_path_buf);
        for _ in 0..50 {
            let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            if let Some(p) = &parent {
                for pid in procs.split_whitespace() {
                    let _ = fs::write(p.join("cgroup.procs"), pid);
                }
            }
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return true;
            }
            // The kernel drops a moved process's membership asynchronously;
            // bounded retries, not a synchronisation of the test suite.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }
}

impl Drop for MemoryLimit {
    /// A limit nobody removed (a cancelled or panicking row): removed now.
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keyed counters are read by key, whatever the other lines say.
    #[test]
    fn the_oom_kill_counter_is_read_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("memory.oom_control");
        fs::write(&f, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
        assert_eq!(keyed(&f, "oom_kill"), Some(2));
        assert_eq!(keyed(&f, "oom_kill_disable"), Some(0));
        assert_eq!(keyed(&f, "oom"), None);
    }

    /// A v2 scope with a `memory.max` is used as it is.
    #[test]
    fn a_scope_with_memory_max_is_v2() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("memory.max"), "max\n").unwrap();
        assert_eq!(available(Some(dir.path())), Ok(Via::V2));
        let cg = MemoryLimit::open(Some(dir.path()), ("run", "t"), &Vec::new).unwrap();
        cg.set(100 << 20).unwrap();
        assert_eq!(read_u64(&dir.path().join("memory.max")), Some(100 << 20));
        assert!(cg.remove());
        assert_eq!(
            fs::read_to_string(dir.path().join("memory.max")).unwrap(),
            "max"
        );
    }

    /// The kernel OOM-kills a process that outgrows the limit, and the
    /// counter says so (needs a memory controller: v1 on a hybrid host).
    #[test]
    #[ignore = "needs a memory cgroup controller (scripts/test.sh runs it)"]
    fn the_kernel_oom_kills_past_the_limit_and_counts_it() {
        use std::os::unix::process::ExitStatusExt;
        // Owned: another test's orphan reaper in this process must not take
        // its exit status (`wait` would fail with ECHILD).
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", "import sys; sys.stdin.readline(); b=[bytearray(10<<20) for _ in range(40)]; print('survived')"])
            .stdin(std::process::Stdio::piped());
        let mut child = crate::children::spawn_owned(&mut cmd).unwrap();
        let pid = child.id() as i32;
        let name = format!("oom-{pid}");
        let cg = match MemoryLimit::open(None, ("test", &name), &|| vec![pid]) {
            Ok(cg) => cg,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                crate::children::disown(child.id() as i32);
                panic!("missing prerequisite: a memory cgroup controller ({e})");
            }
        };
        let before = cg.oom_kills().unwrap();
        let usage = cg.usage().unwrap();
        cg.set(usage + (64 << 20)).unwrap();
        drop(child.stdin.take());
        let status = child.wait().unwrap();
        crate::children::disown(child.id() as i32);
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert_eq!(cg.oom_kills().unwrap(), before + 1);
        assert!(cg.remove());
    }

    /// `pid` and its children (read from /proc, not through the cgroup).
    fn family(pid: i32) -> Vec<i32> {
        let mut out = vec![pid];
        for e in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(") ")
                .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<i32>().ok());
            if ppid == Some(pid) {
                out.push(p);
            }
        }
        out
    }

    /// A shell forking children all the while: every child it has once the
    /// limit is open is inside (one forked while the others were moved was
    /// caught by a later pass); dropping the limit unowned (a cancelled
    /// row) moves them out and removes the cgroup.
    #[test]
    #[ignore = "needs root and a memory cgroup"]
    fn forks_are_caught_and_a_dropped_limit_removes_its_cgroup() {
        let mut cmd = std::process::Command::new("sh");
        cmd.args([
            "-c",
            "i=0; while [ $i -lt 400 ]; do sleep 30 & i=$((i+1)); done; wait",
        ]);
        let mut child = crate::children::spawn_owned(&mut cmd).unwrap();
        let pid = child.id() as i32;
        let name = format!("fork-{pid}");
        let opened = MemoryLimit::open(None, ("test", &name), &|| family(pid));
        let end = |child: &mut std::process::Child| {
            for p in family(pid) {
                // SAFETY: kill(2) on the test's own shell and its children.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            let _ = child.wait();
            crate::children::disown(pid);
        };
        let cg = match opened {
            Ok(cg) => cg,
            Err(e) => {
                end(&mut child);
                panic!("missing prerequisite: a v1 memory cgroup controller ({e})");
            }
        };
        // The family first, then the cgroup: a child the shell forks between
        // the two reads is in the cgroup (it inherits it) but in neither
        // snapshot, so it is not miscounted as outside; one that exited
        // between them is not counted either.
        let seen = family(pid);
        let inside = cg.pids();
        let outside: Vec<i32> = seen
            .into_iter()
            .filter(|p| !inside.contains(p) && Path::new(&format!("/proc/{p}")).exists())
            .collect();
        let dir = cg.dir.clone();
        assert!(dir.exists());
        drop(cg);
        let gone = !dir.exists();
        end(&mut child);
        assert!(outside.is_empty(), "forked outside the limit: {outside:?}");
        assert!(gone, "{} left behind", dir.display());
    }
}
