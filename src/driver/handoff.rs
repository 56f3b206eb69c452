//! The deadline on a spawn's clone-to-exec hand-off. [`super::child::start`]'s
//! calling thread waits in the kernel (`CLONE_VFORK`) until its child has
//! exec'd or exited; a child frozen before its exec (a `cgroup.freeze`
//! chaosrun did not make: its own freezes wait for the exec, see
//! `proc_hygiene::freeze_gate`) would hold that thread for ever. One
//! watchdog thread serves the whole process: a hand-off still open at its
//! deadline has its child SIGKILLed (a fatal signal ends even a frozen
//! task), which ends the wait, and the spawn fails saying why. The child is
//! not reaped while its parent waits, so the pid the watchdog kills is the
//! child's. Whoever settles a hand-off first wins (one compare-and-swap): a
//! child the watchdog fired on is never handed out as started.

use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a child may take from its clone to its exec.
pub const DEADLINE: Duration = Duration::from_secs(10);

const OPEN: u8 = 0;
const DONE: u8 = 1;
const FIRED: u8 = 2;

/// One hand-off: the child stores its pid in [`Slot::pid`] first thing.
pub struct Slot {
    pub pid: AtomicI32,
    state: AtomicU8,
    deadline: Instant,
}

impl Slot {
    /// The parent resumed: whether the hand-off made it in time (`false`:
    /// the watchdog killed the child).
    pub fn settle(&self) -> bool {
        self.state
            .compare_exchange(OPEN, DONE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The watchdog's side: kill the child of an open hand-off past its
    /// deadline. Whether the slot is finished with (settled, or fired).
    fn fire_if_due(&self, now: Instant) -> bool {
        if self.state.load(Ordering::SeqCst) != OPEN {
            return true;
        }
        let pid = self.pid.load(Ordering::SeqCst);
        if now < self.deadline || pid <= 0 {
            return false;
        }
        if self
            .state
            .compare_exchange(OPEN, FIRED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            // SAFETY: kill(2) on our own unreaped child (its parent thread
            // is still in clone, so nobody can have reaped it).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        true
    }
}

/// Open a hand-off with `within` to reach the exec.
pub fn watch(within: Duration) -> Arc<Slot> {
    let slot = Arc::new(Slot {
        pid: AtomicI32::new(0),
        state: AtomicU8::new(OPEN),
        deadline: Instant::now() + within,
    });
    let _ = watchdog().lock().map(|tx| tx.send(slot.clone()));
    slot
}

fn watchdog() -> &'static Mutex<Sender<Arc<Slot>>> {
    static TX: OnceLock<Mutex<Sender<Arc<Slot>>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = channel::<Arc<Slot>>();
        std::thread::Builder::new()
            .name("chaosrun-exec-watchdog".into())
            .spawn(move || {
                let mut open: Vec<Arc<Slot>> = Vec::new();
                loop {
                    let now = Instant::now();
                    open.retain(|s| !s.fire_if_due(now));
                    // A due slot whose child has not said its pid yet is
                    // looked at again shortly.
                    let next = open
                        .iter()
                        .map(|s| s.deadline.max(now + Duration::from_millis(20)))
                        .min();
                    let got = match next {
                        Some(at) => rx.recv_timeout(at - now),
                        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match got {
                        Ok(s) => open.push(s),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .expect("the exec watchdog thread starts");
        Mutex::new(tx)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A settled hand-off is never fired on; an open one past its deadline
    /// is, once, and then cannot be settled.
    #[test]
    fn the_first_to_settle_a_hand_off_wins() {
        let s = watch(Duration::from_secs(3600));
        assert!(s.settle());
        assert!(s.fire_if_due(Instant::now() + Duration::from_secs(7200)));
        assert_eq!(s.state.load(Ordering::SeqCst), DONE);
        let s = Slot {
            pid: AtomicI32::new(0),
            state: AtomicU8::new(OPEN),
            deadline: Instant::now(),
        };
        // No pid yet: nothing to kill, still open.
        assert!(!s.fire_if_due(Instant::now()));
        // A real child of ours, past its deadline: killed.
        let mut child =
            crate::children::spawn_owned(std::process::Command::new("sleep").arg("30")).unwrap();
        s.pid.store(child.id() as i32, Ordering::SeqCst);
        assert!(s.fire_if_due(Instant::now()));
        assert!(!s.settle());
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
        crate::children::disown(child.id() as i32);
    }
}
