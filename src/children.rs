//! The children whose exit status chaosrun waits for itself, the gate
//! that keeps the orphan reaper off a child while it starts, and a child
//! chaosrun or an agent's setup.sh run with SIGINT/SIGTERM passed on
//! ([`run_forwarding_signals`]).
//!
//! chaosrun is a child subreaper: zombies that re-parent to it are reaped by
//! `proc_hygiene::reap_orphans`, which must never take a child someone else
//! waits for (its `wait` would fail with ECHILD, and its pid could be reused
//! while still signalled). A child is registered with [`own`] — but between
//! `spawn` returning and `own` running, a child that exits at once is an
//! unregistered zombie. [`start_owned`] closes that window: it starts and
//! registers the child while holding the gate, and the reaper takes the
//! gate ([`reaping`]) before it looks.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, RwLock, RwLockWriteGuard};

static OWNED: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Held (shared) while a child starts and is registered; held (exclusive)
/// while the reaper scans and reaps.
static GATE: RwLock<()> = RwLock::new(());

/// Register a child whose exit status someone else waits for, so the orphan
/// reaper never steals it. Prefer [`start_owned`], which leaves no window.
pub fn own(pid: i32) {
    OWNED.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
}

/// Undo [`own`] once the child has been waited for.
pub fn disown(pid: i32) {
    OWNED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != pid);
}

/// Start a child with `start` and register it (its pid from `pid`) before
/// the orphan reaper can see it.
pub fn start_owned<C>(
    start: impl FnOnce() -> std::io::Result<C>,
    pid: impl FnOnce(&C) -> Option<u32>,
) -> std::io::Result<C> {
    let _starting = GATE.read().unwrap_or_else(|e| e.into_inner());
    let child = start()?;
    if let Some(p) = pid(&child) {
        own(p as i32);
    }
    Ok(child)
}

/// [`start_owned`] for a `std` command: spawned (with the open-file limit
/// chaosrun started with: [`crate::fd_limit`]) and registered.
pub fn spawn_owned(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    crate::fd_limit::restore_in(cmd);
    start_owned(|| cmd.spawn(), |c| Some(c.id()))
}

/// For the reaper: no child is starting while the guard is held, and the
/// registered children at that moment.
pub fn reaping() -> (RwLockWriteGuard<'static, ()>, Vec<i32>) {
    let gate = GATE.write().unwrap_or_else(|e| e.into_inner());
    let owned = OWNED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    (gate, owned)
}

/// [`reaping`] without waiting: `None` while a child is starting (a start
/// holds the gate until its child has exec'd). For the reaper on the async
/// runtime, which must never block a worker thread on it.
pub fn try_reaping() -> Option<(RwLockWriteGuard<'static, ()>, Vec<i32>)> {
    let gate = match GATE.try_write() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    let owned = OWNED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Some((gate, owned))
}

/// Whom the forwarder signals: the running child (negative: its process
/// group), 0 when none runs.
static CHILD: AtomicI32 = AtomicI32::new(0);

/// The last signal forwarded (0: none): chaosrun was asked to stop.
static FORWARDED: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    FORWARDED.store(sig, Ordering::SeqCst);
    let pid = CHILD.load(Ordering::SeqCst);
    if pid != 0 {
        // SAFETY: kill(2) is async-signal-safe; the pid (or group) is our
        // own child's.
        unsafe { libc::kill(pid, sig) };
    }
}

/// The signal (SIGINT, SIGTERM) a [`run_forwarding_signals`] passed on, if
/// one came: the caller stops and exits 128 + it.
pub fn stop_signal() -> Option<i32> {
    match FORWARDED.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// Whom [`run_forwarding_signals`] passes a signal to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// The child alone: a child chaosrun, which stops what it started itself.
    Child,
    /// The child's own process group (the child leads it): a script whose
    /// commands (npm, pip) would outlive a shell that is signalled alone.
    Group,
}

/// Start `cmd` (owned, see [`spawn_owned`]), forward SIGINT and SIGTERM
/// to it (or its group, see [`Forward`]) until it exits, and return its exit
/// code (128 + the signal that ended it). For a child chaosrun (`agents
/// check`, `bisect`): the signal makes it stop everything it started before
/// it exits 130/143; for an agent's `setup.sh`: its installs end with it.
pub fn run_forwarding_signals(cmd: &mut std::process::Command, to: Forward) -> std::io::Result<u8> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    use std::os::unix::process::CommandExt as _;
    let on = SigAction::new(
        SigHandler::Handler(forward),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    if to == Forward::Group {
        cmd.process_group(0);
    }
    let signals = [Signal::SIGINT, Signal::SIGTERM];
    let mut before = Vec::new();
    for sig in signals {
        // SAFETY: the handler only touches atomics and calls kill(2).
        before.push(unsafe { sigaction(sig, &on) }.map_err(std::io::Error::from)?);
    }
    let status = spawn_owned(cmd).and_then(|mut child| {
        let pid = child.id() as i32;
        CHILD.store(
            if to == Forward::Group { -pid } else { pid },
            Ordering::SeqCst,
        );
        // A signal that came while the child was starting is passed on now.
        if let Some(sig) = stop_signal() {
            // SAFETY: as in `forward`.
            unsafe { libc::kill(CHILD.load(Ordering::SeqCst), sig) };
        }
        let status = child.wait();
        CHILD.store(0, Ordering::SeqCst);
        disown(pid);
        status
    });
    for (sig, old) in signals.into_iter().zip(&before) {
        // SAFETY: puts back the disposition this process had.
        let _ = unsafe { sigaction(sig, old) };
    }
    let status = status?;
    use std::os::unix::process::ExitStatusExt as _;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        (None, None) => 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that exits at once is registered before `start_owned`
    /// returns, and the reaper's view (taken after) lists it.
    #[test]
    fn a_started_child_is_owned_before_the_gate_opens() {
        let mut child = spawn_owned(&mut std::process::Command::new("true")).unwrap();
        let pid = child.id() as i32;
        let (gate, owned) = reaping();
        assert!(owned.contains(&pid));
        drop(gate);
        assert!(child.wait().unwrap().success());
        disown(pid);
        assert!(!reaping().1.contains(&pid));
    }
}
