//! The fallback's descendant tree (no cgroup could be made): every process
//! seen below a scenario's agent processes, walked from /proc ppid links and
//! remembered by (pid, start time), so it is still found after it re-parents
//! and a reused pid is never taken for it. It sees what the tag cannot (a
//! process with a cleared environment) as long as it was below the agent at
//! one of the scans; what left the tree between two scans is out of its sight,
//! which is why the report says the run had only this containment.

use std::collections::HashMap;
use std::fs;
use std::sync::Mutex;

use super::scan::{info, ProcInfo};

/// (ppid, start time in clock ticks) of a live (non-zombie) process.
pub(super) fn stat(pid: i32) -> Option<(i32, u64)> {
    let s = super::stat::read(pid)?;
    (!s.gone()).then_some((s.ppid, s.start))
}

/// pid → (ppid, start) of every live process.
pub(super) fn table() -> HashMap<i32, (i32, u64)> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect()
}

/// The processes seen below a set of roots.
#[derive(Default)]
pub struct Tree {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    roots: Vec<i32>,
    known: HashMap<i32, u64>,
}

impl Tree {
    /// Follow `pid` (an agent process chaosrun started) and what it starts.
    pub fn add_root(&self, pid: i32) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.roots.push(pid);
    }

    /// One /proc scan: remember every live descendant of a root or of a
    /// process already known (the roots themselves are not members).
    pub fn refresh(&self) {
        self.refresh_from(&table());
    }

    /// [`Tree::refresh`] from a scan already made (one for every tree).
    pub(super) fn refresh_from(&self, t: &HashMap<i32, (i32, u64)>) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Inner { roots, known } = &mut *g;
        known.retain(|pid, start| t.get(pid).is_some_and(|(_, s)| s == start));
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for (&pid, &(ppid, _)) in t {
            children.entry(ppid).or_default().push(pid);
        }
        let mut stack: Vec<i32> = roots.iter().chain(known.keys()).copied().collect();
        while let Some(p) = stack.pop() {
            for &c in children.get(&p).into_iter().flatten() {
                if roots.contains(&c) || known.contains_key(&c) {
                    continue;
                }
                known.insert(c, t[&c].1);
                stack.push(c);
            }
        }
    }

    /// Whether `pid` with start time `start` was seen in this tree.
    pub fn knows(&self, pid: i32, start: u64) -> bool {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.known.get(&pid) == Some(&start)
    }

    /// Live members after a fresh scan (the agent processes excluded).
    pub fn members(&self) -> Vec<ProcInfo> {
        self.refresh();
        let known: Vec<(i32, u64)> = {
            let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            g.known.iter().map(|(&p, &s)| (p, s)).collect()
        };
        let mut out: Vec<ProcInfo> = known
            .into_iter()
            .filter(|&(pid, start)| stat(pid).is_some_and(|(_, s)| s == start))
            .filter_map(|(pid, _)| info(pid))
            .collect();
        out.sort_by_key(|p| p.pid);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn follows_a_grandchild_with_a_cleared_environment_after_it_reparents() {
        // sh starts an env-less sleeper in the background, then waits for a
        // line on stdin: the tree sees the sleeper while sh is its parent.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "env -i sleep 30 & echo $!; read x"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut sh = crate::children::spawn_owned(&mut cmd).unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(sh.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let sleeper: i32 = line.trim().parse().unwrap();
        let tree = Tree::default();
        tree.add_root(sh.id() as i32);
        assert!(tree.members().iter().any(|p| p.pid == sleeper));
        drop(sh.stdin.take());
        sh.wait().unwrap();
        crate::proc_hygiene::disown(sh.id() as i32);
        // Its parent is gone; the tree still knows it.
        assert!(tree.members().iter().any(|p| p.pid == sleeper));
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(sleeper),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
