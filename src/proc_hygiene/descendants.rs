//! A process's live descendants, each held by a pidfd opened while its
//! parent link still held (a pid reused later is never signalled), and
//! their kill: what a kill of one exec-mode turn takes with it.

use std::collections::BTreeMap;

/// The parent pid from /proc/PID/stat.
fn ppid_of(pid: i32) -> Option<i32> {
    super::stat::read(pid).map(|s| s.ppid)
}

/// Every live descendant of `root` (not `root`), from one /proc scan, each
/// held by a pidfd opened while its parent link still held (so a pid reused
/// later is never signalled).
pub fn descendant_pidfds(root: i32) -> Vec<std::os::fd::OwnedFd> {
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
                if let Some(fd) = super::pidfd_open(c) {
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
pub fn kill_pidfds(fds: &[std::os::fd::OwnedFd]) {
    for fd in fds {
        super::pidfd_send(fd, libc::SIGKILL);
    }
}
