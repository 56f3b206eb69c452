//! The zombie children of a set of live processes (a scenario's members):
//! each parent's children, read from every one of its threads'
//! `/proc/PID/task/TID/children`, and each child's `/proc/PID/stat` state.
//! A zombie is in neither membership chaosrun reads (the sampler's members
//! are live processes; a zombie's environment, where the tag is, cannot be
//! read), so only its parent's list of children finds it. Costs a read per
//! thread of each parent and one per child: never a scan of every process.

use serde::{Deserialize, Serialize};

/// Zombies kept per sample.
pub const ZOMBIES_KEEP: usize = 16;

/// Characters kept of a zombie's parent's command line.
const PARENT_KEEP: usize = 200;

/// A child process that exited and was not reaped by its parent (state `Z`
/// in `/proc/PID/stat`), its parent one of the processes looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Zombie {
    pub pid: i32,
    pub ppid: i32,
    /// Start time, in clock ticks since boot (with `pid`, the process's
    /// identity: a pid reused is another process).
    pub start: u64,
    /// Its command name (`/proc/PID/comm`: a zombie's command line is gone).
    pub name: String,
    /// The parent's command line, bounded.
    #[serde(default)]
    pub parent: String,
}

/// Blocking: the zombie children of `parents` (pid, command line), at most
/// [`ZOMBIES_KEEP`], in the parents' order.
pub fn zombie_children(parents: &[(i32, &str)]) -> Vec<Zombie> {
    let mut out = Vec::new();
    for (ppid, cmdline) in parents {
        for pid in children_of(*ppid) {
            if out.len() >= ZOMBIES_KEEP {
                return out;
            }
            let Some(st) = super::stat::read(pid).filter(|s| s.state == 'Z') else {
                continue;
            };
            // A child reaped and its pid reused since the list was read has
            // another parent.
            if st.ppid != *ppid {
                continue;
            }
            let comm = super::pseudo::read(format!("/proc/{pid}/comm"), 64).unwrap_or_default();
            out.push(Zombie {
                pid,
                ppid: *ppid,
                start: st.start,
                name: String::from_utf8_lossy(&comm).trim_end().to_string(),
                parent: cmdline.chars().take(PARENT_KEEP).collect(),
            });
        }
    }
    out
}

/// The children of `pid`, from each of its threads' `children` file.
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let path = t.path().join("children");
        let Ok(raw) = super::pseudo::read(path, 1 << 16) else {
            continue;
        };
        let text = String::from_utf8_lossy(&raw);
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A shell that starts a child and never reaps it (it `exec`s into a
    /// sleep that does not wait): the child is named, its parent the shell;
    /// a child that is reaped is not.
    #[test]
    fn an_unreaped_child_is_found_and_a_reaped_one_is_not() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "/bin/true & exec sleep 30"])
            .stdout(Stdio::null());
        let mut parent = crate::children::spawn_owned(&mut cmd).unwrap();
        let ppid = parent.id() as i32;
        // Wait (bounded) until the shell became `sleep` and its child exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let found = loop {
            let z = zombie_children(&[(ppid, "sleep 30")]);
            if !z.is_empty() {
                break z;
            }
            assert!(std::time::Instant::now() < deadline, "no zombie seen");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].ppid, found[0].name.as_str()), (ppid, "true"));
        assert_eq!(found[0].parent, "sleep 30");
        assert!(found[0].start > 0);
        let _ = parent.kill();
        let _ = parent.wait();
        assert!(
            zombie_children(&[(ppid, "")]).is_empty(),
            "a gone parent has none"
        );
    }
}
