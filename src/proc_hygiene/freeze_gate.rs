//! The hand-off between a scenario's spawns and its freezes: no process is
//! ever started into a scope chaosrun froze, and no freeze of chaosrun's
//! lands between a spawn's clone and its exec.
//!
//! A child joins the scenario's cgroup before its exec, and the thread that
//! cloned it (`CLONE_VFORK`, in `driver::child`) resumes only once it
//! has exec'd. A chaos stop that froze the cgroup inside that window froze
//! the child before its exec and the spawning thread with it, which held the
//! start gate the orphan reaper waits for: the run never ended. Here a spawn
//! holds a [`Spawning`] guard from before its clone until its exec returned;
//! a freeze first waits (bounded) for the spawns in flight and marks the
//! scope frozen; a spawn first waits (bounded) for the thaw. Both waits are
//! on a condition variable, never a poll.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long a spawn waits for chaosrun's thaw of its scope before it gives
/// up (a chaos stop lasts at most its row's `stop_for`, bounded far below).
pub const SPAWN_WAITS_FOR_THAW: Duration = Duration::from_secs(60);
/// How long a freeze waits for the spawns in flight to exec (a clone-to-exec
/// hand-off takes microseconds; the exec deadline of
/// `driver::child` is longer, and then the freeze does not land).
pub const FREEZE_WAITS_FOR_EXEC: Duration = Duration::from_secs(5);
/// How long a freeze or a thaw waits for the kernel to say it settled.
pub const FREEZE_SETTLE: Duration = Duration::from_secs(2);

#[derive(Default)]
struct State {
    frozen: bool,
    spawning: usize,
}

/// One scope's gate.
#[derive(Default)]
pub struct FreezeGate {
    state: Mutex<State>,
    changed: Condvar,
}

/// Held by a spawn from before its clone until its exec returned.
#[must_use]
pub struct Spawning<'a> {
    gate: &'a FreezeGate,
}

impl FreezeGate {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait up to `within` for the scope to be thawed, then count a spawn in
    /// flight. `Err` (nothing started) when it stayed frozen.
    pub fn spawning(&self, within: Duration) -> std::io::Result<Spawning<'_>> {
        let (mut s, _) = self
            .changed
            .wait_timeout_while(self.lock(), within, |s| s.frozen)
            .unwrap_or_else(|e| e.into_inner());
        if s.frozen {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the scenario's processes stayed frozen for {} s: chaosrun starts no process into a frozen scope",
                    within.as_secs()
                ),
            ));
        }
        s.spawning += 1;
        Ok(Spawning { gate: self })
    }

    /// Wait up to `within` for every spawn in flight to have exec'd, then
    /// mark the scope frozen (spawns wait for [`Self::thawed`]). `false`
    /// when one was still in flight: nothing is marked, and the caller must
    /// not freeze.
    pub fn freezing(&self, within: Duration) -> bool {
        let (mut s, _) = self
            .changed
            .wait_timeout_while(self.lock(), within, |s| s.spawning > 0)
            .unwrap_or_else(|e| e.into_inner());
        if s.spawning > 0 {
            return false;
        }
        s.frozen = true;
        true
    }

    /// The scope was thawed: waiting spawns go on.
    pub fn thawed(&self) {
        self.lock().frozen = false;
        self.changed.notify_all();
    }
}

impl Drop for Spawning<'_> {
    fn drop(&mut self) {
        self.gate.lock().spawning -= 1;
        self.gate.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;

    /// A freeze waits for the spawn in flight, and a spawn waits for the
    /// thaw; each goes on on the other's event, not on a timer.
    #[test]
    fn a_freeze_waits_for_the_spawn_in_flight_and_a_spawn_for_the_thaw() {
        let gate = Arc::new(FreezeGate::default());
        let spawning = gate.spawning(Duration::ZERO).expect("not frozen");
        let (tx, rx) = mpsc::channel();
        let g = gate.clone();
        let freezer = std::thread::spawn(move || tx.send(g.freezing(Duration::from_secs(30))));
        // Still waiting for the spawn in flight.
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        drop(spawning);
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(true));
        freezer.join().unwrap().unwrap();
        // Frozen: a spawn waits, and fails once its wait is over.
        let e = gate.spawning(Duration::from_millis(10)).err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("frozen"), "{e}");
        let (tx, rx) = mpsc::channel();
        let g = gate.clone();
        let spawner = std::thread::spawn(move || {
            let ok = g.spawning(Duration::from_secs(30)).is_ok();
            tx.send(ok).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        gate.thawed();
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(true));
        spawner.join().unwrap();
        assert_eq!(gate.lock().spawning, 0);
    }

    /// A spawn that never exec'd within the freeze's wait: the freeze does
    /// not land and marks nothing.
    #[test]
    fn a_freeze_does_not_land_over_a_spawn_that_never_execs() {
        let gate = FreezeGate::default();
        let _spawning = gate.spawning(Duration::ZERO).unwrap();
        assert!(!gate.freezing(Duration::from_millis(20)));
        assert!(!gate.lock().frozen);
    }
}
