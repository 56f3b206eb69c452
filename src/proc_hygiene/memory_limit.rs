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
//!   the limit is set (their children follow on fork); their charges are
//!   moved with them where the kernel still can (`move_charge_at_immigrate`,
//!   best effort), and the limit counts from the usage read after the move.
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

/// A memory cgroup the scenario's agent runs under while the limit holds.
#[derive(Debug)]
pub struct MemoryLimit {
    dir: PathBuf,
    via: Via,
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

impl MemoryLimit {
    /// Blocking: the memory cgroup for the scenario whose v2 cgroup is
    /// `scope`: that cgroup itself (v2), or a new v1 memory cgroup named
    /// after `name`, holding `pids` (moved in).
    pub fn open(scope: Option<&Path>, name: &str, pids: &[i32]) -> Result<MemoryLimit, String> {
        match available(scope)? {
            Via::V2 => Ok(MemoryLimit {
                dir: scope.expect("v2 needs the scope's cgroup").to_path_buf(),
                via: Via::V2,
            }),
            Via::V1 => {
                let dir = v1_base()?.join(format!("chaosrun-oom-{name}-{}", std::process::id()));
                fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
                let cg = MemoryLimit { dir, via: Via::V1 };
                // Refused by newer kernels (deprecated): then the charges
                // stay behind and the usage counts from the move.
                let _ = fs::write(cg.dir.join("memory.move_charge_at_immigrate"), "3");
                let joined = pids.iter().filter(|p| cg.join(**p)).count();
                if joined == 0 {
                    let moved = Err(format!(
                        "no process of the scenario could be moved into {}",
                        cg.dir.display()
                    ));
                    cg.remove();
                    return moved;
                }
                Ok(cg)
            }
        }
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
    pub fn remove(self) -> bool {
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
        let cg = MemoryLimit::open(Some(dir.path()), "t", &[]).unwrap();
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
        let cg = match MemoryLimit::open(None, "test", &[child.id() as i32]) {
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
}
