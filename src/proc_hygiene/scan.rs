//! /proc scans: which live (non-zombie) processes carry a marker variable in
//! their environment, and what their command lines are.

use std::fs;

use serde::{Deserialize, Serialize};

use super::TAG_VAR;

/// A process as seen in /proc.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    /// Single-letter state from /proc/PID/stat (`R`, `S`, `Z`, ...).
    pub state: char,
    /// argv joined by spaces, bounded to [`CMDLINE_KEEP`] bytes.
    pub cmdline: String,
}

impl std::fmt::Display for ProcInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}]: {}", self.pid, self.state, self.cmdline)
    }
}

fn read_stat(pid: i32) -> Option<(i32, char)> {
    super::stat::read(pid).map(|s| (s.ppid, s.state))
}

/// Bytes of a command line kept. Agents wrap a tool's command in a long
/// prefix (Claude Code: `/bin/bash -c source <shell snapshot> && … eval
/// '<command>'`, about 400 bytes before the command), so a needle such as
/// `trap` must be looked for well past the first few hundred bytes.
pub const CMDLINE_KEEP: usize = 4096;

fn read_cmdline(pid: i32) -> String {
    let raw =
        super::pseudo::read(format!("/proc/{pid}/cmdline"), CMDLINE_KEEP + 4).unwrap_or_default();
    let mut s: String = String::from_utf8_lossy(&raw)
        .trim_end_matches('\0')
        .replace('\0', " ");
    if s.len() > CMDLINE_KEEP {
        let cut = (0..=CMDLINE_KEEP)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(cut);
    }
    s
}

/// Every pid in /proc.
fn pids() -> impl Iterator<Item = i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
}

/// A process's stat and command line, if it still exists.
pub(super) fn info(pid: i32) -> Option<ProcInfo> {
    let (ppid, state) = read_stat(pid)?;
    Some(ProcInfo {
        pid,
        ppid,
        state,
        cmdline: read_cmdline(pid),
    })
}

/// The value of `var` in a process's environment (environ is read first, so
/// scans touch stat and cmdline only of the processes that carry a marker).
fn env_value(pid: i32, var: &str) -> Option<String> {
    let env = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{var}=");
    env.split(|&b| b == 0)
        .find_map(|e| e.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Zombies whose parent is `parent` (stat only: no cmdline reads).
pub(super) fn zombie_children(parent: i32) -> Vec<i32> {
    let candidates = if parent == std::process::id() as i32 {
        own_children()
    } else {
        None
    };
    let is_zombie_child = |&pid: &i32| read_stat(pid) == Some((parent, 'Z'));
    match candidates {
        Some(c) => c.into_iter().filter(is_zombie_child).collect(),
        None => pids().filter(is_zombie_child).collect(),
    }
}

/// Our children, from each of our threads' `/proc/self/task/TID/children`
/// (a few small files instead of every process's stat); None where the
/// kernel has no such file. A child forked while it is read may be missed:
/// the next call finds it.
pub(super) fn own_children() -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for task in fs::read_dir("/proc/self/task").ok()?.flatten() {
        match fs::read_to_string(task.path().join("children")) {
            Ok(text) => out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            ),
            // A thread that ended while we read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && task.path().exists() => {
                return None
            }
            Err(_) => {}
        }
    }
    Some(out)
}

fn live(p: &ProcInfo) -> bool {
    p.state != 'Z' && p.state != 'X'
}

/// A process's stat and command line, if it exists and is not a zombie.
pub(super) fn live_info(pid: i32) -> Option<ProcInfo> {
    info(pid).filter(live)
}

/// Whether `pid` is a zombie (exited, not yet reaped) or gone.
pub fn is_zombie(pid: i32) -> bool {
    read_stat(pid).is_none_or(|(_, st)| st == 'Z' || st == 'X')
}

/// Live (non-zombie) children of `parent`.
pub(super) fn children(parent: i32) -> Vec<ProcInfo> {
    pids()
        .filter(|&pid| {
            read_stat(pid).is_some_and(|(pp, st)| pp == parent && st != 'Z' && st != 'X')
        })
        .filter_map(live_info)
        .collect()
}

/// Whether `/proc/PID/environ` has the exact entry `var=value`.
pub(super) fn has_env(pid: i32, var: &str, value: &str) -> bool {
    let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let needle = format!("{var}={value}");
    env.split(|&b| b == 0).any(|e| e == needle.as_bytes())
}

/// Live (non-zombie) processes other than ourselves whose environment has
/// `var=value`.
pub fn marked(var: &str, value: &str) -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    let mut found: Vec<ProcInfo> = pids()
        .filter(|&pid| pid != me && has_env(pid, var, value))
        .filter_map(info)
        .filter(live)
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// Every live process carrying `var`, grouped by its value: one /proc scan for
/// all tags at once (the per-run process sampler uses it).
pub fn by_value(var: &str) -> std::collections::HashMap<String, Vec<ProcInfo>> {
    let me = std::process::id() as i32;
    let mut out: std::collections::HashMap<String, Vec<ProcInfo>> = Default::default();
    for pid in pids().filter(|&pid| pid != me) {
        let Some(value) = env_value(pid, var) else {
            continue;
        };
        if let Some(p) = info(pid).filter(live) {
            out.entry(value).or_default().push(p);
        }
    }
    out
}

/// Live processes carrying `CHAOS_TAG=tag`.
pub fn tagged(tag: &str) -> Vec<ProcInfo> {
    marked(TAG_VAR, tag)
}

/// How many live processes carrying `CHAOS_TAG=tag` have `needle` in their
/// command line.
pub fn count_tagged_matching(tag: &str, needle: &str) -> usize {
    tagged(tag)
        .iter()
        .filter(|p| p.cmdline.contains(needle))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};

    /// Started and owned before a concurrent orphan reaping (another test's
    /// sweep) can see it, so its exit status is left to the test.
    fn start(cmd: &mut Command) -> Child {
        crate::children::spawn_owned(cmd).unwrap()
    }

    #[test]
    fn finds_a_tagged_child_by_environment_and_not_an_untagged_one() {
        let tag = format!("scan-test-{}", std::process::id());
        let mut tagged_child = start(
            Command::new("sleep")
                .arg("30")
                .env(TAG_VAR, &tag)
                .stdin(Stdio::null()),
        );
        let mut plain = start(Command::new("sleep").arg("31").env_remove(TAG_VAR));
        let found = tagged(&tag);
        let pids: Vec<i32> = found.iter().map(|p| p.pid).collect();
        assert_eq!(pids, vec![tagged_child.id() as i32]);
        assert_eq!(found[0].cmdline, "sleep 30");
        assert_eq!(count_tagged_matching(&tag, "sleep 30"), 1);
        assert_eq!(count_tagged_matching(&tag, "sleep 31"), 0);
        // A tag that is a prefix of ours must not match.
        assert!(tagged(&tag[..tag.len() - 1]).is_empty());
        tagged_child.kill().unwrap();
        tagged_child.wait().unwrap();
        plain.kill().unwrap();
        plain.wait().unwrap();
        assert!(tagged(&tag).is_empty(), "a reaped child is gone");
    }

    #[test]
    fn a_needle_past_a_long_wrapper_prefix_is_seen() {
        let tag = format!("long-cmdline-test-{}", std::process::id());
        let pad = "x".repeat(600);
        let mut child = start(
            Command::new("python3")
                .args([
                    "-c",
                    "import time; time.sleep(30)",
                    &pad,
                    "needle-after-pad",
                ])
                .env(TAG_VAR, &tag),
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while count_tagged_matching(&tag, "needle-after-pad") == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the needle 600 bytes into argv was never seen: {:?}",
                tagged(&tag)
            );
            std::thread::yield_now();
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn zombies_are_not_counted() {
        let tag = format!("zombie-test-{}", std::process::id());
        let mut child = start(Command::new("true").env(TAG_VAR, &tag));
        // Wait until it has exited but is not yet reaped (a zombie).
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while read_stat(pid).map(|s| s.1) != Some('Z') {
            assert!(
                std::time::Instant::now() < deadline,
                "child never became a zombie"
            );
            std::thread::yield_now();
        }
        assert!(tagged(&tag).is_empty());
        child.wait().unwrap();
    }

    #[test]
    fn our_zombie_child_is_found_from_the_children_files() {
        let mut child = start(&mut Command::new("true"));
        let pid = child.id() as i32;
        // Block until it exited, leaving it a zombie (WNOWAIT: not reaped).
        // SAFETY: waitid on our own child with a zeroed siginfo out-parameter.
        let rc = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(rc, 0);
        let me = std::process::id() as i32;
        // A read may miss a child that moves between threads' lists while
        // it runs (a test thread that exits hands its children to another):
        // the documented contract is "seen by a later read", so a few reads.
        let seen = |f: &dyn Fn() -> bool| (0..100).any(|_| f());
        assert!(seen(&|| own_children()
            .expect("children files")
            .contains(&pid)));
        assert!(seen(&|| zombie_children(me).contains(&pid)));
        child.wait().unwrap();
        crate::children::disown(pid);
        assert!(!zombie_children(me).contains(&pid));
    }
}
