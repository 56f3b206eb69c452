//! Process fault `agent_sandbox: {namespaces: denied}`: namespace creation
//! fails for the agent and every process it starts, the way a container
//! runtime's default seccomp profile makes it fail (Docker's: `unshare` and
//! `clone` with a `CLONE_NEW*` flag get EPERM, `clone3` gets ENOSYS so that
//! libc falls back to `clone`, whose flags a filter can read). A sandbox
//! built on namespaces (bubblewrap, `unshare`, a container) then cannot
//! start inside the scenario; one that needs none (Landlock, seccomp) can.
//!
//! The filter is a classic BPF program installed by the agent's child
//! between its clone and its exec (`driver::child`), so it holds for the
//! agent's whole tree and only for it. Hand-written with libc's types: no
//! seccomp crate (seccompiler, libseccomp-rs) is in this build's offline
//! registry, and eleven instructions do not need one.

/// The `CLONE_NEW*` flags a container's profile refuses (`CLONE_NEWTIME`,
/// 0x80, is left out: in `clone`'s flags that bit is the exit signal's).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const NEW_NAMESPACE: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

// Offsets into `struct seccomp_data`: nr, arch, args[0]'s low 32 bits
// (little-endian).
const NR: u32 = 0;
const ARCH_AT: u32 = 4;
const ARG0_LOW: u32 = 16;

const fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The program: allow everything but a namespace's creation.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub const PROGRAM: [libc::sock_filter; 12] = [
    op(LD_W_ABS, 0, 0, ARCH_AT),
    // Another ABI's calls are not looked at.
    op(JEQ_K, 0, 7, ARCH),
    op(LD_W_ABS, 0, 0, NR),
    op(JEQ_K, 7, 0, libc::SYS_clone3 as u32),
    op(JEQ_K, 2, 0, libc::SYS_unshare as u32),
    op(JEQ_K, 1, 0, libc::SYS_clone as u32),
    op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    op(LD_W_ABS, 0, 0, ARG0_LOW),
    op(JSET_K, 1, 0, NEW_NAMESPACE),
    op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
];

/// The program for `prctl(PR_SET_SECCOMP)`, or why this build has none.
pub fn program() -> Result<libc::sock_fprog, String> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        Ok(libc::sock_fprog {
            len: PROGRAM.len() as u16,
            filter: PROGRAM.as_ptr().cast_mut(),
        })
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Err("denying namespaces is implemented for x86_64 and aarch64 only".into())
    }
}

/// Install the filter on the calling thread (and so on what it execs).
/// Plain system calls on static data: safe between a clone and an exec.
/// Without CAP_SYS_ADMIN the kernel wants `no_new_privs` first; it is set
/// only then (a root agent keeps its setuid programs, as in a container).
///
/// # Safety
/// `prog` must point at a valid program that outlives the call.
pub unsafe fn install(prog: *const libc::sock_fprog) -> bool {
    let set = || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, prog) == 0;
    set() || (libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) == 0 && set())
}
