//! Process hygiene: containment per scenario (a cgroup v2, or the fallback of
//! tag, descendant tree and orphans; see [`contain`]), the tag every agent
//! process carries, /proc scans that find
//! tagged processes wherever they re-parented, pidfd kills that can only ever hit
//! a process still carrying our tag, the child-subreaper setting, and the guard
//! process that cleans up when chaosrun itself is killed.
//!
//! Two environment variables mark what chaosrun started: [`TAG_VAR`] names one
//! scenario run (what the oracle checks), [`RUN_VAR`] names the whole chaosrun
//! invocation (what the interrupt handler and the guard sweep).

pub mod cgroup;
mod contain;
mod descendants;
mod freeze_gate;
mod guard;
mod kill;
pub mod memory_limit;
pub mod oom_events;
mod pseudo;
mod scan;
pub mod stat;
mod tree;
mod zombies;

pub use contain::{Containment, Kind, RunContainment, Scope, NO_CGROUP_VAR};
pub use descendants::{descendant_pidfds, kill_pidfds};
pub use freeze_gate::{Spawning, FREEZE_SETTLE, FREEZE_WAITS_FOR_EXEC};
pub use guard::{run_guard, Guard};
pub use kill::{
    kill_marked, pidfd_kill_if_marked, pidfd_open, pidfd_send, pidfd_signal_if,
    pidfd_signal_if_marked, signal_marked, sweep_marked,
};
pub use scan::{by_value, count_tagged_matching, is_zombie, marked, tagged, ProcInfo};
pub use zombies::{zombie_children, Zombie, ZOMBIES_KEEP};

/// Env var naming one scenario run; inherited by every descendant.
pub const TAG_VAR: &str = "CHAOS_TAG";
/// Env var naming one chaosrun invocation; inherited by every descendant.
pub const RUN_VAR: &str = "CHAOS_RUN";

/// Make this process a child subreaper: orphaned descendants re-parent to us
/// instead of init, so they stay visible and reapable.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub use crate::children::{disown, own, spawn_owned, start_owned};

/// Reap zombies that re-parented to us (we are a subreaper), leaving alone the
/// children registered with [`own`]. Every other child of ours is waited for
/// without blocking: a zombie is reaped, a live one is left running. Where
/// the kernel lists each thread's children, nothing else is read (no
/// `/proc/PID/stat` per child, which made the cost of a pass grow with the
/// agents running).
pub fn reap_orphans() {
    let (gate, owned) = crate::children::reaping();
    reap_with(gate, owned);
}

/// [`reap_orphans`] unless a child is starting right now (the pass would
/// wait for its exec); whether the pass was made.
pub fn try_reap_orphans() -> bool {
    match crate::children::try_reaping() {
        Some((gate, owned)) => {
            reap_with(gate, owned);
            true
        }
        None => false,
    }
}

/// A reaping pass; `_gate` held throughout: no child is between its start
/// and its registration while we look.
fn reap_with(_gate: std::sync::RwLockWriteGuard<'static, ()>, mut owned: Vec<i32>) {
    let me = std::process::id() as i32;
    owned.sort_unstable();
    // Peek at one waitable zombie at a time: one it does not own is reaped;
    // none at all ends the pass without reading /proc. An owned zombie (its
    // waiter has not reaped it yet) hides the others: then the full pass
    // (so does one that would not go, never to spin).
    for _ in 0..1024 {
        match waitable_zombie(None) {
            None => return,
            Some(p) if owned.binary_search(&p).is_ok() => break,
            // SAFETY: waitpid on a specific zombie child of ours.
            Some(p) => unsafe {
                libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG);
            },
        }
    }
    let candidates = scan::own_children().unwrap_or_else(|| scan::zombie_children(me));
    for p in candidates {
        if owned.binary_search(&p).is_err() {
            // SAFETY: waitpid on a specific child of ours, non-blocking.
            unsafe {
                libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}

/// A zombie child of ours (any one, or `pid`), left unreaped (`waitid`
/// with `WNOWAIT`).
fn waitable_zombie(pid: Option<i32>) -> Option<i32> {
    let (idtype, id) = match pid {
        Some(p) => (libc::P_PID, p as libc::id_t),
        None => (libc::P_ALL, 0),
    };
    // SAFETY: waitid(2) into a zeroed siginfo; WNOWAIT leaves the child
    // waitable, WNOHANG returns at once (si_pid 0: none has exited).
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        if libc::waitid(idtype, id, &mut info, flags) != 0 {
            return None;
        }
        let pid = info.si_pid();
        (pid > 0).then_some(pid)
    }
}

/// A run's orphan reaper: a pass at once, then one after each SIGCHLD (a
/// burst within 50 ms makes one pass) and at least every 5 s; every 250 ms
/// where no SIGCHLD stream can be had. A pass per exit instead of four a
/// second for the whole run: with many agents running, polling was a large
/// part of chaosrun's own CPU. It never waits for the start gate on the
/// runtime's thread: while a child is starting, the pass is tried again
/// 50 ms later.
pub async fn reap_orphans_forever() {
    use std::time::Duration;
    use tokio::signal::unix::{signal, SignalKind};
    let mut chld = signal(SignalKind::child()).ok();
    loop {
        if !try_reap_orphans() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        match chld.as_mut() {
            Some(s) => {
                let _ = tokio::time::timeout(Duration::from_secs(5), s.recv()).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            None => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A new random tag body (hex), unique enough for concurrent runs.
pub fn new_id(rng: &mut impl rand::Rng) -> String {
    format!("{:012x}", rng.gen::<u64>() & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// With the orphan reaper running flat out on another thread, every
    /// child started with [`start_owned`] is still ours to wait for: none
    /// exits into an unregistered zombie the reaper takes (its `wait` would
    /// fail with ECHILD, as `agents setup`'s did in CI).
    #[test]
    fn the_reaper_never_takes_a_child_started_owned() {
        let stop = Arc::new(AtomicBool::new(false));
        let reaper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    reap_orphans();
                    std::thread::yield_now();
                }
            })
        };
        for _ in 0..200 {
            let mut cmd = std::process::Command::new("true");
            let mut child = spawn_owned(&mut cmd).unwrap();
            let status = child.wait();
            disown(child.id() as i32);
            assert!(status.expect("waited for").success());
        }
        stop.store(true, Ordering::Relaxed);
        reaper.join().unwrap();
    }

    /// Block until `pid` (our child) has exited, through its pidfd; false
    /// when it is gone already (another test's reaper took it).
    fn exited(pid: i32) -> bool {
        use std::os::fd::AsRawFd;
        let Some(fd) = pidfd_open(pid) else {
            return false;
        };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one valid pollfd.
        assert_eq!(
            unsafe { libc::poll(&mut p, 1, 10_000) },
            1,
            "{pid} never exited"
        );
        true
    }

    /// Whether `pid` is a zombie child of ours, still waitable.
    fn waitable(pid: i32) -> bool {
        waitable_zombie(Some(pid)) == Some(pid)
    }

    /// A zombie nobody owns is reaped whether it is the first one `waitid`
    /// shows or hides behind an owned zombie (then the full pass runs); the
    /// owned one stays ours to wait for.
    #[test]
    fn an_unowned_zombie_is_reaped_and_an_owned_one_is_left() {
        for owned_first in [false, true] {
            let mut owned = None;
            if owned_first {
                let child = spawn_owned(&mut std::process::Command::new("true")).unwrap();
                assert!(exited(child.id() as i32), "an owned child is never taken");
                owned = Some(child);
            }
            // Started unowned on purpose: an orphan's stand-in. Another
            // test's reaper may take it first: then try again.
            let stray = (0..20)
                .find_map(|_| {
                    let pid = std::process::Command::new("true").spawn().unwrap().id() as i32;
                    (exited(pid) && waitable(pid)).then_some(pid)
                })
                .expect("a stray zombie to reap");
            reap_orphans();
            assert!(
                !waitable(stray),
                "the stray was reaped (owned first: {owned_first})"
            );
            if let Some(mut child) = owned {
                assert!(waitable(child.id() as i32), "the owned zombie was left");
                assert!(child.wait().unwrap().success());
                disown(child.id() as i32);
            }
        }
    }
}
