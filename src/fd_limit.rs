//! chaosrun's own open-file limit. A run raises its soft `RLIMIT_NOFILE` to
//! the hard limit ([`raise`]), as Go's runtime does, so that it can keep a
//! few handles open per running scenario (its cgroup directory, the
//! sampler's `cgroup.procs`) at any `--jobs`. Every child gets the limit
//! chaosrun started with back before it execs ([`for_children`]): the agent
//! sees the caller's limit, never chaosrun's.

use std::sync::OnceLock;

/// The soft and hard limits chaosrun started with, once [`raise`] ran.
static STARTED_WITH: OnceLock<libc::rlimit> = OnceLock::new();

/// Soft limit at or above which handles are kept per running scenario:
/// 256 rows at once (the `--jobs` cap) keep about 6 fds each.
pub const ROOMY: u64 = 8192;

fn current() -> Option<libc::rlimit> {
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) into a local struct.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) } == 0).then_some(now)
}

/// Raise the soft limit to the hard one (once; later calls do nothing).
/// Returns the soft limit in force afterwards.
pub fn raise() -> u64 {
    let Some(start) = current() else {
        return 0;
    };
    if STARTED_WITH.set(start).is_ok() && start.rlim_cur < start.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: start.rlim_max,
            rlim_max: start.rlim_max,
        };
        // SAFETY: setrlimit(2) from a local struct; raising the soft limit
        // up to the hard one needs no privilege. On failure it stays.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) };
    }
    soft()
}

/// The soft limit in force now.
pub fn soft() -> u64 {
    current().map_or(0, |l| l.rlim_cur)
}

/// Whether there is room to keep handles open per running scenario.
pub fn roomy() -> bool {
    soft() >= ROOMY
}

/// The limit a child must get back before exec, when [`raise`] changed
/// chaosrun's own (None: nothing to restore).
pub fn for_children() -> Option<libc::rlimit> {
    let start = *STARTED_WITH.get()?;
    let now = current()?;
    (now.rlim_cur != start.rlim_cur).then_some(start)
}

/// Have a `std` command's child set [`for_children`] before it execs.
pub fn restore_in(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let Some(start) = for_children() else {
        return;
    };
    // SAFETY: the hook runs in the forked child before exec and makes one
    // system call (async-signal-safe) on a value copied in beforehand.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &start) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
