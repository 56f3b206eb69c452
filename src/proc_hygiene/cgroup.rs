//! cgroup v2 containment through the cgroup filesystem: find the unified
//! mount, make a run's parent cgroup (`chaosrun-RUN`) and one child per
//! scenario, put a process into a child before it execs, and list, kill,
//! freeze, thaw, await and remove a subtree. Every wait here has a deadline.
//!
//! Direct cgroupfs, not `cgroups-rs`: the handful of files used here
//! (`cgroup.procs`, `cgroup.kill`, `cgroup.freeze`, `cgroup.events`) are one
//! line each, while the crate's model is v1-first controller management and
//! has no `cgroup.kill`.

use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where cgroup2 is mounted, from `/proc/self/mountinfo`.
pub fn v2_mount() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        if post.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        pre.split_whitespace()
            .nth(4)
            .map(|m| PathBuf::from(unescape(m)))
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |n, c| n.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's own v2 cgroup, relative to the mount (`0::PATH`).
fn own_path() -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_start_matches('/').to_string())
}

/// Where a run's parent cgroup goes: under chaosrun's own cgroup (a
/// delegated scope on a systemd host), in the v2 hierarchy.
pub fn base() -> Result<PathBuf, String> {
    let mount = v2_mount().ok_or("no cgroup2 filesystem is mounted")?;
    let own = own_path().ok_or("/proc/self/cgroup names no cgroup v2 path")?;
    let base = mount.join(own);
    if !base.join("cgroup.kill").exists() && !base.join("cgroup.procs").exists() {
        return Err(format!("{} is not a cgroup v2 directory", base.display()));
    }
    Ok(base)
}

/// A directory handle (`O_PATH`: for `openat` and `fstat` only).
fn open_dir(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(path)?;
    Ok(dir.into())
}

/// Whether the cgroup directory at `path` has child cgroups (its link
/// count is 2 plus their number); a directory that is gone has none.
fn has_children(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).is_ok_and(|m| m.nlink() != 2)
}

/// The pids in every cgroup below `top` (which has child cgroups).
fn nested_pids(top: &Path, out: &mut Vec<i32>) {
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if dir != top && !has_children(&dir) {
            continue;
        }
        for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let procs = e.path().join("cgroup.procs");
                parse_pids(super::pseudo::read(procs, PROCS_MAX), out);
                stack.push(e.path());
            }
        }
    }
}

/// The run's parent cgroup path (whether or not it exists).
pub fn run_path(run_id: &str) -> Option<PathBuf> {
    base().ok().map(|b| b.join(format!("chaosrun-{run_id}")))
}

/// One cgroup directory. Where the open-file limit leaves room
/// ([`crate::fd_limit::roomy`]), one made or opened here keeps a handle on
/// its directory: its files are then opened relative to it, and whether it
/// has child cgroups is one `fstat`, instead of a walk of the whole
/// cgroupfs path each time. One opened with [`Cgroup::open`] also keeps its
/// `cgroup.procs` open and lists its members by reading it again from
/// offset 0 (a seq_file starts over there): the sampler lists every running
/// scenario twice a second. A handle on a cgroup that is removed (and maybe
/// made again) opens and lists nothing: it is gone.
#[derive(Debug, Clone)]
pub struct Cgroup {
    pub path: PathBuf,
    dir: Option<Arc<OwnedFd>>,
    procs: Option<Arc<std::sync::Mutex<fs::File>>>,
}

/// Longest `cgroup.procs` read: a pid per line, 4M pids at most.
const PROCS_MAX: usize = 32 << 20;

impl Cgroup {
    /// Make `path` (its parent must exist). An existing one is reused.
    pub fn create(path: PathBuf) -> std::io::Result<Cgroup> {
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let cg = Cgroup::handled(path)?;
        // cgroup.kill (Linux 5.14) is what makes the kill atomic: without it
        // this is no containment worth the name.
        if !cg.path.join("cgroup.kill").exists() {
            let _ = fs::remove_dir(&cg.path);
            return Err(std::io::Error::other("this kernel has no cgroup.kill"));
        }
        Ok(cg)
    }

    /// The existing cgroup at `path`, its `cgroup.procs` kept open (and its
    /// directory, where there is room).
    pub fn open(path: PathBuf) -> std::io::Result<Cgroup> {
        let mut cg = Cgroup::handled(path)?;
        let procs = cg.file("cgroup.procs", false)?;
        cg.procs = Some(Arc::new(std::sync::Mutex::new(procs)));
        Ok(cg)
    }

    /// The existing cgroup at `path`, with a handle on its directory where
    /// there is room ([`crate::fd_limit::roomy`]), else by its path.
    fn handled(path: PathBuf) -> std::io::Result<Cgroup> {
        let mut cg = Cgroup::at(path);
        if crate::fd_limit::roomy() {
            cg.dir = Some(Arc::new(open_dir(&cg.path)?));
        }
        Ok(cg)
    }

    /// The cgroup at `path` by its path alone (it may not exist).
    pub fn at(path: PathBuf) -> Cgroup {
        Cgroup {
            path,
            dir: None,
            procs: None,
        }
    }

    /// One of the cgroup's own files, for reading or for writing.
    fn file(&self, name: &str, write: bool) -> std::io::Result<fs::File> {
        let Some(dir) = &self.dir else {
            return fs::OpenOptions::new()
                .read(!write)
                .write(write)
                .open(self.path.join(name));
        };
        let name = std::ffi::CString::new(name)?;
        let mode = if write {
            libc::O_WRONLY
        } else {
            libc::O_RDONLY
        };
        // SAFETY: openat(2) of a NUL-terminated name relative to a directory
        // fd we hold; the fd it returns is ours alone.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), mode | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh fd owned by nothing else.
        Ok(unsafe { fs::File::from_raw_fd(fd) })
    }

    /// Whether the cgroup has child cgroups: a cgroup directory's link
    /// count is 2 plus its child cgroups (one stat instead of listing the
    /// ~40 control files).
    fn nested(&self) -> bool {
        let Some(dir) = &self.dir else {
            return has_children(&self.path);
        };
        // SAFETY: fstat(2) into a zeroed stat of a directory fd we hold
        // (an O_PATH fd can be stat'ed).
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(dir.as_raw_fd(), &mut st) == 0 && st.st_nlink != 2
        }
    }

    /// A child cgroup named `name`.
    pub fn child(&self, name: &str) -> std::io::Result<Cgroup> {
        Cgroup::create(self.path.join(name))
    }

    /// `cgroup.procs` opened for writing: a process that writes `0` to it
    /// moves itself in (the agent does, before exec: `driver::child`).
    pub fn procs_file(&self) -> std::io::Result<fs::File> {
        self.file("cgroup.procs", true)
    }

    fn write(&self, file: &str, value: &str) -> std::io::Result<()> {
        self.file(file, true)?.write_all(value.as_bytes())
    }

    /// A `KEY VALUE` line of `cgroup.events`.
    fn event(&self, key: &str) -> Option<bool> {
        let f = self.file("cgroup.events", false).ok()?;
        let raw = super::pseudo::reread(&f, 4096).ok()?;
        let text = String::from_utf8_lossy(&raw);
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .map(|v| v.trim() == "1")
    }

    /// Best effort: account memory for the sub-cgroups (`+memory` in
    /// `cgroup.subtree_control`), so each scenario's has a `memory.peak`.
    /// Refused where this cgroup's parent does not delegate the controller
    /// (a hybrid host's v2 hierarchy has none): the samples' RSS stands in.
    pub fn account_memory(&self) {
        let _ = self.write("cgroup.subtree_control", "+memory");
    }

    /// The subtree's peak memory use in bytes (`memory.peak`), where the
    /// memory controller is enabled for it (a hybrid host's v2 hierarchy has
    /// none: `None`).
    pub fn memory_peak(&self) -> Option<u64> {
        let f = self.file("memory.peak", false).ok()?;
        let raw = super::pseudo::reread(&f, 64).ok()?;
        String::from_utf8_lossy(&raw).trim().parse().ok()
    }

    /// Whether any live process is in this subtree (`populated`); a cgroup
    /// that is gone is not populated.
    pub fn populated(&self) -> bool {
        self.event("populated").unwrap_or(false)
    }

    /// Every pid in this cgroup and its sub-cgroups (the agent may make its
    /// own), sorted.
    pub fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        let top = match &self.procs {
            Some(kept) => {
                let f = kept.lock().unwrap_or_else(|e| e.into_inner());
                super::pseudo::reread(&f, PROCS_MAX)
            }
            None => self
                .file("cgroup.procs", false)
                .and_then(|f| super::pseudo::reread(&f, PROCS_MAX)),
        };
        parse_pids(top, &mut out);
        if self.nested() {
            nested_pids(&self.path, &mut out);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// SIGKILL every process in the subtree at once (`cgroup.kill`); returns
    /// how many were in it just before.
    pub fn kill(&self) -> usize {
        let n = self.pids().len();
        if n == 0 {
            return 0;
        }
        match self.write("cgroup.kill", "1") {
            Ok(()) => n,
            Err(_) => 0,
        }
    }

    /// Freeze (`true`) or thaw the subtree, waiting up to `within` for
    /// `frozen` to say so. Returns how many processes it holds, or 0 when the
    /// write failed or the state never settled.
    pub fn freeze(&self, frozen: bool, within: Duration) -> usize {
        if self
            .write("cgroup.freeze", if frozen { "1" } else { "0" })
            .is_err()
        {
            return 0;
        }
        let deadline = Instant::now() + within;
        loop {
            if self.event("frozen") == Some(frozen) {
                return self.pids().len();
            }
            if Instant::now() >= deadline {
                return 0;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Wait up to `within` for `populated 0`; whether it came.
    pub async fn wait_empty(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if !self.populated() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Blocking: kill the subtree until it is empty or `within` passes;
    /// whether it emptied.
    pub fn kill_until_empty(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if !self.populated() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            let _ = self.write("cgroup.kill", "1");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Remove the subtree, deepest first, retrying while it is busy (a
    /// killed process leaves its cgroup a moment after the signal), up to
    /// `within`. Whether it is gone.
    pub fn remove(&self, within: Duration) -> bool {
        remove_tree(&self.path, Instant::now() + within)
    }
}

/// The pids of one `cgroup.procs` text (nothing, when it could not be read).
fn parse_pids(raw: std::io::Result<Vec<u8>>, out: &mut Vec<i32>) {
    if let Ok(raw) = raw {
        let text = String::from_utf8_lossy(&raw);
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
}

fn remove_tree(dir: &Path, deadline: Instant) -> bool {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path(), deadline);
        }
    }
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(_) if Instant::now() < deadline => {
                let _ = fs::write(dir.join("cgroup.kill"), "1");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => return false,
        }
    }
}

impl Cgroup {
    /// Move out, to chaosrun's own cgroup, every process in the subtree that
    /// started before this process (chaosrun, or its guard, which starts
    /// with the run): it was moved in from outside and is not the run's to
    /// kill. The per-scenario rule (before the scenario's agent) is
    /// `Scope`'s; this is the run-wide backstop.
    fn evict_older_than_self(&self) {
        let Some((_, me)) = super::tree::stat(std::process::id() as i32) else {
            return;
        };
        let Ok(home) = base() else { return };
        for pid in self.pids() {
            if super::tree::stat(pid).is_some_and(|(_, start)| start < me) {
                let _ = fs::write(home.join("cgroup.procs"), pid.to_string());
            }
        }
    }
}

/// Kill everything in the run's cgroup tree and remove it (the interrupt
/// handler, the end of a run, and the guard after a SIGKILL of chaosrun).
/// Returns how many processes were in it.
pub fn end_run(run_id: &str) -> usize {
    let Some(path) = run_path(run_id) else {
        return 0;
    };
    if !path.exists() {
        return 0;
    }
    let cg = Cgroup::at(path);
    cg.evict_older_than_self();
    let n = cg.kill();
    cg.kill_until_empty(Duration::from_secs(5));
    cg.remove(Duration::from_secs(5));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `memory.peak` read as bytes; a cgroup without one (no memory
    /// controller) has none.
    #[test]
    fn memory_peak_is_read_where_the_kernel_keeps_one() {
        let dir = tempfile::tempdir().unwrap();
        let cg = Cgroup::at(dir.path().to_path_buf());
        assert_eq!(cg.memory_peak(), None);
        std::fs::write(dir.path().join("memory.peak"), "123456789\n").unwrap();
        assert_eq!(cg.memory_peak(), Some(123_456_789));
    }

    /// A cgroup under chaosrun's base, with a directory handle where the
    /// raised open-file limit leaves room (as in a run); the test fails where
    /// none can be made (it is `#[ignore]`d by default and run by
    /// scripts/test.sh).
    fn test_cgroup(name: &str) -> Cgroup {
        crate::fd_limit::raise();
        let cg = base()
            .and_then(|b| {
                Cgroup::create(b.join(format!("chaosrun-test-{name}-{}", std::process::id())))
                    .map_err(|e| e.to_string())
            })
            .unwrap_or_else(|e| panic!("missing prerequisite: root and cgroup v2 ({e})"));
        assert_eq!(cg.dir.is_some(), crate::fd_limit::roomy());
        cg
    }

    #[test]
    #[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
    fn a_child_entered_before_exec_is_listed_frozen_killed_and_removed() {
        use std::os::fd::{AsRawFd, BorrowedFd};
        use std::os::unix::process::CommandExt;
        let cg = test_cgroup("ops");
        // A handle opened while the cgroup is empty lists, through its kept
        // cgroup.procs, what joins and leaves later, and reads nothing once
        // the cgroup is removed.
        let kept = Cgroup::open(cg.path.clone()).unwrap();
        assert!(kept.pids().is_empty());
        let procs = cg.procs_file().unwrap();
        let fd = procs.as_raw_fd();
        let mut cmd = std::process::Command::new("sh");
        // A shell whose background job double-forks into a new session.
        cmd.args(["-c", "setsid sh -c 'sleep 30 &' ; sleep 30"]);
        // SAFETY: only write(2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                nix::unistd::write(BorrowedFd::borrow_raw(fd), b"0")
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = crate::children::spawn_owned(&mut cmd).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        // sh and its sleep; the escaped sleep (setsid's sh exits at once).
        while cg.pids().len() < 3 {
            assert!(Instant::now() < deadline, "members: {:?}", cg.pids());
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(cg.pids().contains(&(child.id() as i32)));
        assert_eq!(kept.pids(), cg.pids());
        // By its path alone, the same.
        let by_path = Cgroup::at(cg.path.clone());
        assert_eq!(by_path.pids(), cg.pids());
        assert!(cg.populated() && by_path.populated());
        assert_eq!(cg.freeze(true, Duration::from_secs(2)), 3);
        assert_eq!(cg.event("frozen"), Some(true));
        assert_eq!(cg.freeze(false, Duration::from_secs(2)), 3);
        assert_eq!(cg.kill(), 3);
        child.wait().unwrap();
        crate::proc_hygiene::disown(child.id() as i32);
        assert!(cg.kill_until_empty(Duration::from_secs(5)));
        assert_eq!(cg.kill(), 0, "an empty cgroup: nothing hit");
        assert!(kept.pids().is_empty());
        assert!(cg.remove(Duration::from_secs(5)));
        assert!(!cg.path.exists());
        assert!(kept.pids().is_empty());
        assert!(!cg.populated());
    }

    /// `pids` lists a cgroup's sub-cgroups only when its link count says
    /// it has some: a process the agent moved into a cgroup of its own
    /// making is still a member.
    #[test]
    #[ignore = "needs root and cgroup v2 (scripts/test.sh runs it)"]
    fn a_process_in_a_nested_cgroup_is_a_member() {
        let cg = test_cgroup("nested");
        assert!(cg.pids().is_empty());
        let inner = cg.child("inner").unwrap();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        let mut child = crate::children::spawn_owned(&mut cmd).unwrap();
        let pid = child.id() as i32;
        inner.write("cgroup.procs", &pid.to_string()).unwrap();
        assert_eq!(cg.pids(), vec![pid], "found through the nested cgroup");
        let by_path = Cgroup::at(cg.path.clone());
        assert_eq!(by_path.pids(), vec![pid], "by its path alone, the same");
        assert_eq!(inner.pids(), vec![pid]);
        assert_eq!(cg.kill(), 1);
        child.wait().unwrap();
        crate::proc_hygiene::disown(pid);
        assert!(inner.remove(Duration::from_secs(5)));
        assert!(cg.pids().is_empty());
        assert!(cg.remove(Duration::from_secs(5)));
    }

    #[test]
    fn unescapes_mountinfo_paths() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
        assert_eq!(unescape(r"/x\\"), r"/x\\");
    }
}
