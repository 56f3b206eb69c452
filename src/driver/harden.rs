//! What the agent process gives up before its exec (`driver::child`), so
//! that an agent running as root cannot leave its scenario:
//!
//! * **`no_new_privs`**: no setuid program or file capability gives it back
//!   what it gave up.
//! * **A Landlock domain of its own** (scoped to abstract Unix sockets where
//!   the kernel has Landlock ABI 6): a process in a domain cannot open
//!   `/proc/PID/ns/*`, `/proc/PID/root`, `/proc/PID/mem` or ptrace any
//!   process outside it: not chaosrun, not another scenario's agent, not the
//!   host's. The domain handles no file system access, so the agent's own
//!   sandboxes (bubblewrap, `unshare`, Landlock rulesets) still work inside.
//! * **No capabilities but one** (when chaosrun runs as root): the bounding,
//!   ambient, inheritable, permitted and effective sets emptied but for
//!   `CAP_SETFCAP`, so uid 0 gains nothing else at exec; `setns` into a
//!   namespace the host owns, `mount`, module loads, `CAP_NET_ADMIN` on the
//!   scenario's network all fail. The agent keeps uid 0 (its files, HOME and
//!   install stay its own) and may still make user namespaces of its own,
//!   which is all a tool sandbox needs: since Linux 5.12 mapping uid 0 into
//!   one (`unshare --map-root-user`, bubblewrap) takes `CAP_SETFCAP` in the
//!   parent namespace, which is why that one is kept. Under `no_new_privs`
//!   a file capability it sets grants nothing to anything it runs.
//!
//! [`Hardening::prepare`] does everything that allocates or opens a file in
//! the parent; [`Hardening::apply`] is plain system calls, safe between a
//! clone and an exec.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Landlock's system calls (the same numbers on x86_64 and aarch64).
const SYS_LANDLOCK_CREATE_RULESET: libc::c_long = 444;
const SYS_LANDLOCK_RESTRICT_SELF: libc::c_long = 446;
const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
/// `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET` (ABI 6).
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1;

/// `struct landlock_ruleset_attr` (ABI 6 layout).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `_LINUX_CAPABILITY_VERSION_3` and its two-word data.
const CAP_VERSION_3: u32 = 0x2008_0522;
/// The one capability kept (see the module's doc).
pub const CAP_SETFCAP: u32 = 31;
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// What one agent process gives up, prepared by the parent.
#[derive(Debug)]
pub struct Hardening {
    /// A Landlock ruleset to restrict the child to (None: the kernel has no
    /// Landlock ABI 6).
    ruleset: Option<OwnedFd>,
    /// The highest capability number to drop from the bounding set; None
    /// when chaosrun is not root (it then has none to give away).
    last_cap: Option<u32>,
}

/// What the agent runs without, for the run header and the docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    pub landlock: bool,
    pub capabilities_dropped: bool,
}

impl Hardening {
    /// Prepare the hardening for one process: a fresh Landlock ruleset, and
    /// the capability numbers when chaosrun is root.
    pub fn prepare() -> Hardening {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        Hardening {
            ruleset: ruleset(),
            last_cap: root.then(last_cap),
        }
    }

    /// What this hardening gives the agent.
    pub fn offered(&self) -> Offered {
        Offered {
            landlock: self.ruleset.is_some(),
            capabilities_dropped: self.last_cap.is_some(),
        }
    }

    /// The ruleset's fd (-1: none), for [`apply`].
    pub fn ruleset_fd(&self) -> RawFd {
        self.ruleset.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// The bounding set's last capability, or -1 (not root), for [`apply`].
    pub fn last_cap(&self) -> i64 {
        self.last_cap.map_or(-1, i64::from)
    }
}

/// The kernel's highest capability number (`/proc/sys/kernel/cap_last_cap`;
/// 40 where it cannot be read, and then the drops past it fail harmlessly).
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40)
}

/// The kernel's Landlock ABI version (negative: no Landlock).
fn landlock_abi() -> libc::c_long {
    // SAFETY: the version query takes no attribute.
    unsafe {
        libc::syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    }
}

/// A ruleset scoped to abstract Unix sockets, handling no file system or
/// network access; None where the kernel's Landlock is older than ABI 6 or
/// absent.
fn ruleset() -> Option<OwnedFd> {
    let abi = landlock_abi();
    if abi < 6 {
        return None;
    }
    let attr = RulesetAttr {
        handled_access_fs: 0,
        handled_access_net: 0,
        scoped: SCOPE_ABSTRACT_UNIX_SOCKET,
    };
    // SAFETY: a valid attribute of the size given; the result is a new fd.
    let fd = unsafe {
        libc::syscall(
            SYS_LANDLOCK_CREATE_RULESET,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    // SAFETY: a fresh fd we own (close-on-exec: Landlock makes it so).
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Give up what the hardening says, on the calling thread: `no_new_privs`,
/// the Landlock domain (`ruleset` >= 0), then, when `last_cap` >= 0, every
/// capability but [`CAP_SETFCAP`]. Plain system calls: safe between a clone and an exec.
/// False when a step failed (errno says which).
///
/// # Safety
/// `ruleset` is -1 or a Landlock ruleset fd open in the calling process.
pub unsafe fn apply(ruleset: RawFd, last_cap: i64) -> bool {
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
        return false;
    }
    if ruleset >= 0 && libc::syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0u32) != 0 {
        return false;
    }
    if last_cap < 0 {
        return true;
    }
    for cap in (0..=last_cap).filter(|&c| c != i64::from(CAP_SETFCAP)) {
        // EINVAL past the kernel's last capability: nothing to drop.
        if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
            && *libc::__errno_location() != libc::EINVAL
        {
            return false;
        }
    }
    let clear_ambient = libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong;
    if libc::prctl(libc::PR_CAP_AMBIENT, clear_ambient, 0, 0, 0) != 0 {
        return false;
    }
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    // CAP_SETFCAP only, in the first of the two words.
    let setfcap = CapData {
        effective: 1 << CAP_SETFCAP,
        permitted: 1 << CAP_SETFCAP,
        inheritable: 0,
    };
    let none = CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let data = [setfcap, none];
    libc::syscall(
        libc::SYS_capset,
        &mut header as *mut CapHeader,
        data.as_ptr(),
    ) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ruleset_is_made_where_the_kernel_has_landlock_6() {
        let abi = landlock_abi();
        let h = Hardening::prepare();
        assert_eq!(h.offered().landlock, abi >= 6, "ABI {abi}");
        assert_eq!(h.ruleset_fd() >= 0, abi >= 6);
    }
}
