//! Kills that can only hit our own processes: open a pidfd first, then confirm
//! through /proc that the process behind it still carries our marker, then
//! signal through the pidfd. A pid reused between the scan and the kill is
//! either a different process (the marker check fails) or the pidfd refers to
//! the dead one (the signal fails with ESRCH); it is never signalled.

use std::time::{Duration, Instant};

use super::scan::{has_env, marked};

/// A pidfd for `pid` (nix 0.29 has no pidfd calls, hence the raw syscall).
pub fn pidfd_open(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: raw syscall with (pid, flags=0); returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative return is a new fd that we own.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Send `sig` through a pidfd; whether it was delivered.
pub fn pidfd_send(fd: &std::os::fd::OwnedFd, sig: i32) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_send_signal(fd, sig, info=NULL, flags=0).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    rc == 0
}

/// Open a pidfd for `pid`, then send `sig` only if `ours(pid)` still holds
/// (checked after the pidfd pins the process).
pub fn pidfd_signal_if(pid: i32, sig: i32, ours: impl Fn(i32) -> bool) -> bool {
    match pidfd_open(pid) {
        Some(fd) => ours(pid) && pidfd_send(&fd, sig),
        None => false,
    }
}

/// SIGKILL `pid` only if it carries `var=value`. Returns whether a signal was sent.
pub fn pidfd_kill_if_marked(pid: i32, var: &str, value: &str) -> bool {
    pidfd_signal_if_marked(pid, libc::SIGKILL, var, value)
}

/// Send `sig` to `pid` only if it carries `var=value`.
pub fn pidfd_signal_if_marked(pid: i32, sig: i32, var: &str, value: &str) -> bool {
    pidfd_signal_if(pid, sig, |p| has_env(p, var, value))
}

/// One pass: SIGKILL every live process carrying `var=value`. Returns how many
/// were signalled.
pub fn kill_marked(var: &str, value: &str) -> usize {
    signal_marked(libc::SIGKILL, var, value)
}

/// One pass: send `sig` to every live process carrying `var=value`.
pub fn signal_marked(sig: i32, var: &str, value: &str) -> usize {
    marked(var, value)
        .iter()
        .filter(|p| pidfd_signal_if_marked(p.pid, sig, var, value))
        .count()
}

/// Kill passes until none carry the marker (a dying job may spawn more), or
/// `timeout`. Returns how many processes were signalled in all.
pub fn sweep_marked(var: &str, value: &str, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    let mut total = 0;
    loop {
        total += kill_marked(var, value);
        super::reap_orphans();
        if marked(var, value).is_empty() || Instant::now() >= deadline {
            return total;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc_hygiene::TAG_VAR;
    use std::process::Command;

    #[test]
    fn kills_only_processes_with_the_marker() {
        let tag = format!("kill-test-{}", std::process::id());
        // Owned from the start, as the runner's children are, so the
        // sweep's orphan reaping leaves their exit status to us.
        let start = |cmd: &mut Command| crate::children::spawn_owned(cmd).unwrap();
        let mut ours = start(Command::new("sleep").arg("30").env(TAG_VAR, &tag));
        let mut other = start(
            Command::new("sleep")
                .arg("30")
                .env(TAG_VAR, format!("{tag}-other")),
        );
        // Until `exec` the child's environ is still ours (no tag): the sweep
        // must start once both carry their markers, or it may see none.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(has_env(ours.id() as i32, TAG_VAR, &tag)
            && has_env(other.id() as i32, TAG_VAR, &format!("{tag}-other")))
        {
            assert!(Instant::now() < deadline, "the children never exec'd");
            std::thread::yield_now();
        }
        assert!(!pidfd_kill_if_marked(other.id() as i32, TAG_VAR, &tag));
        // The sweep repeats passes until none carry the tag: in all, exactly
        // our one process is signalled.
        assert_eq!(sweep_marked(TAG_VAR, &tag, Duration::from_secs(5)), 1);
        let status = ours.wait().unwrap();
        crate::proc_hygiene::disown(ours.id() as i32);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(
            other.try_wait().unwrap().is_none(),
            "the other tag's process lives"
        );
        other.kill().unwrap();
        other.wait().unwrap();
        crate::proc_hygiene::disown(other.id() as i32);
    }
}
