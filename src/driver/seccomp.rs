//! The seccomp program every agent process gets, installed between its
//! clone and its exec (`driver::child`), so it holds for the agent's whole
//! tree. It fails closed:
//!
//! * a call through another ABI than chaosrun's own (the i386 entry,
//!   `int $0x80` from a 64-bit process, has its own numbers: `unshare` is
//!   310 there, not 272) gets ENOSYS, whatever the call;
//! * an x32 number (bit `0x40000000` set) gets ENOSYS;
//! * `setns` gets EPERM, unless the profile says `allow_setns: true` (the
//!   agent would otherwise join any namespace whose file it can open);
//! * with the row's `agent_sandbox: {namespaces: denied}`
//!   ([`super::deny_namespaces`]): `unshare` with any namespace flag
//!   (`CLONE_NEWTIME` included) and `clone` with a `CLONE_NEW*` flag get
//!   EPERM, `clone3` gets ENOSYS (libc then falls back to `clone`, whose
//!   flags a filter can read), as a container runtime's profile does.
//!
//! Classic BPF, assembled here from a few labelled steps. Not `seccompiler`
//! (Firecracker's): its rules match exact system call numbers, so it cannot
//! say "every number with the x32 bit", and its architecture check kills
//! the process where this one refuses the call; the whole program is at
//! most 19 instructions, and `tests` runs it through an interpreter on
//! every case.

/// Where a jump lands: one of the program's three endings.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    Allow,
    Eperm,
    Enosys,
}

/// One step before the endings.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Load a 32-bit word of `struct seccomp_data` at this offset.
    Load(u32),
    /// If the accumulator equals k, go to the end; else fall through.
    IfEq(u32, End),
    /// If the accumulator is not k, go to the end; else fall through.
    IfNe(u32, End),
    /// If the accumulator is >= k, go to the end.
    IfGe(u32, End),
    /// If the accumulator has any bit of k, go to the end.
    IfAny(u32, End),
    /// If the accumulator equals k, jump forward this many steps.
    Skip(u32, u8),
    /// Go to the end.
    Go(End),
}

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const JA: u16 = 0x05; // BPF_JMP | BPF_JA
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// Offsets into `struct seccomp_data`: nr, arch, args[0]'s low 32 bits
/// (little-endian).
const NR: u32 = 0;
const ARCH_AT: u32 = 4;
const ARG0_LOW: u32 = 16;

/// The x32 ABI's bit in a system call number (`__X32_SYSCALL_BIT`).
const X32_BIT: u32 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// `CLONE_NEWTIME`: a namespace flag for `unshare`, but in `clone`'s flags
/// the same bit is part of the exit signal, so only `unshare` refuses it.
const CLONE_NEWTIME: u32 = 0x80;

/// The `CLONE_NEW*` flags `clone` and `unshare` share.
const NEW_NAMESPACE: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// What the program refuses beyond the always-refused (foreign ABIs, x32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// `setns` is allowed (the profile's `allow_setns: true`).
    pub allow_setns: bool,
    /// Namespace creation is refused (the row's `namespaces: denied`).
    pub deny_namespaces: bool,
}

/// The steps of `policy`'s program, before the three endings.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn steps(policy: Policy) -> Vec<Step> {
    let mut s = vec![
        Step::Load(ARCH_AT),
        Step::IfNe(ARCH, End::Enosys),
        Step::Load(NR),
        Step::IfGe(X32_BIT, End::Enosys),
    ];
    if !policy.allow_setns {
        s.push(Step::IfEq(libc::SYS_setns as u32, End::Eperm));
    }
    if policy.deny_namespaces {
        s.extend([
            Step::IfEq(libc::SYS_clone3 as u32, End::Enosys),
            Step::Skip(libc::SYS_unshare as u32, 2), // to the unshare check
            Step::Skip(libc::SYS_clone as u32, 4),   // to the clone check
            Step::Go(End::Allow),
            // unshare: any namespace flag, CLONE_NEWTIME included.
            Step::Load(ARG0_LOW),
            Step::IfAny(NEW_NAMESPACE | CLONE_NEWTIME, End::Eperm),
            Step::Go(End::Allow),
            // clone: the namespace flags without 0x80 (the exit signal's).
            Step::Load(ARG0_LOW),
            Step::IfAny(NEW_NAMESPACE, End::Eperm),
        ]);
    }
    s.push(Step::Go(End::Allow));
    s
}

/// Assemble `steps` followed by the endings ALLOW, EPERM, ENOSYS.
fn assemble(steps: &[Step]) -> Vec<libc::sock_filter> {
    let n = steps.len();
    // Distance from step i (the next instruction is i + 1) to an ending.
    let to = |i: usize, end: End| -> u8 {
        let at = n + end as usize;
        (at - i - 1) as u8
    };
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut prog: Vec<libc::sock_filter> = steps
        .iter()
        .enumerate()
        .map(|(i, st)| match *st {
            Step::Load(at) => op(LD_W_ABS, 0, 0, at),
            Step::IfEq(k, end) => op(JEQ_K, to(i, end), 0, k),
            Step::IfNe(k, end) => op(JEQ_K, 0, to(i, end), k),
            Step::IfGe(k, end) => op(JGE_K, to(i, end), 0, k),
            Step::IfAny(k, end) => op(JSET_K, to(i, end), 0, k),
            Step::Skip(k, by) => op(JEQ_K, by, 0, k),
            Step::Go(end) => op(JA, 0, 0, u32::from(to(i, end))),
        })
        .collect();
    prog.extend([
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]);
    prog
}

/// The program for `policy`, or why this build has none. The vector must
/// outlive the child's exec ([`install`] reads it).
pub fn program(policy: Policy) -> Result<Vec<libc::sock_filter>, String> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        Ok(assemble(&steps(policy)))
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = policy;
        Err("the agent's seccomp program is implemented for x86_64 and aarch64 only".into())
    }
}

/// Install `prog` on the calling thread (and so on what it execs). Plain
/// system calls on prepared data: safe between a clone and an exec. The
/// caller has set `no_new_privs` ([`super::harden`]), so no capability is
/// needed.
///
/// # Safety
/// `prog` must point at a valid program that outlives the call.
pub unsafe fn install(prog: *const libc::sock_fprog) -> bool {
    libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, prog) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the program returns for a call: a classic BPF interpreter for
    /// the five opcodes it uses, over a `struct seccomp_data`.
    fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
        let word = |at: u32| match at {
            NR => nr,
            ARCH_AT => arch,
            ARG0_LOW => arg0 as u32,
            20 => (arg0 >> 32) as u32,
            _ => panic!("load at {at}"),
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            let jump = |taken: bool| if taken { i.jt } else { i.jf } as usize;
            pc += 1 + match i.code {
                LD_W_ABS => {
                    acc = word(i.k);
                    0
                }
                JEQ_K => jump(acc == i.k),
                JGE_K => jump(acc >= i.k),
                JSET_K => jump(acc & i.k != 0),
                JA => i.k as usize,
                RET_K => return i.k,
                c => panic!("opcode {c:#x}"),
            };
        }
    }

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    const I386: u32 = 0x4000_0003; // AUDIT_ARCH_I386
    const NR_UNSHARE: u32 = libc::SYS_unshare as u32;
    const NR_CLONE: u32 = libc::SYS_clone as u32;
    const NR_SETNS: u32 = libc::SYS_setns as u32;

    fn denying() -> Vec<libc::sock_filter> {
        program(Policy {
            allow_setns: false,
            deny_namespaces: true,
        })
        .unwrap()
    }

    #[test]
    fn every_call_through_another_abi_is_refused() {
        for prog in [denying(), program(Policy::default()).unwrap()] {
            // i386 unshare (310) with a new user and network namespace, and
            // a harmless i386 getpid (20): both refused.
            let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNET) as u64;
            assert_eq!(run(&prog, I386, 310, flags), ENOSYS);
            assert_eq!(run(&prog, I386, 20, 0), ENOSYS);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_numbers_are_refused() {
        for prog in [denying(), program(Policy::default()).unwrap()] {
            let flags = libc::CLONE_NEWUSER as u64;
            assert_eq!(run(&prog, ARCH, X32_BIT | NR_UNSHARE, flags), ENOSYS);
            assert_eq!(run(&prog, ARCH, X32_BIT | 39, 0), ENOSYS);
        }
    }

    #[test]
    fn setns_is_refused_unless_allowed() {
        assert_eq!(run(&denying(), ARCH, NR_SETNS, 0), EPERM);
        assert_eq!(
            run(&program(Policy::default()).unwrap(), ARCH, NR_SETNS, 0),
            EPERM
        );
        let allowing = program(Policy {
            allow_setns: true,
            deny_namespaces: false,
        })
        .unwrap();
        assert_eq!(run(&allowing, ARCH, NR_SETNS, 0), ALLOW);
    }

    #[test]
    fn unshare_with_any_namespace_flag_is_refused_newtime_included() {
        let prog = denying();
        for flag in [
            libc::CLONE_NEWNS,
            libc::CLONE_NEWCGROUP,
            libc::CLONE_NEWUTS,
            libc::CLONE_NEWIPC,
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWPID,
            libc::CLONE_NEWNET,
            CLONE_NEWTIME as i32,
        ] {
            assert_eq!(
                run(&prog, ARCH, NR_UNSHARE, flag as u64),
                EPERM,
                "{flag:#x}"
            );
        }
        // unshare(CLONE_FILES) makes no namespace.
        assert_eq!(
            run(&prog, ARCH, NR_UNSHARE, libc::CLONE_FILES as u64),
            ALLOW
        );
    }

    #[test]
    fn clone_is_refused_only_with_a_new_namespace_and_its_exit_signal_kept() {
        let prog = denying();
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        // fork: SIGCHLD (17) as the exit signal; 0x80 in the signal's bits.
        assert_eq!(run(&prog, ARCH, NR_CLONE, libc::SIGCHLD as u64), ALLOW);
        assert_eq!(run(&prog, ARCH, NR_CLONE, thread), ALLOW);
        assert_eq!(run(&prog, ARCH, NR_CLONE, 0x80 | 17), ALLOW);
        let new_net = libc::CLONE_NEWNET as u64 | libc::SIGCHLD as u64;
        assert_eq!(run(&prog, ARCH, NR_CLONE, new_net), EPERM);
        assert_eq!(run(&prog, ARCH, libc::SYS_clone3 as u32, 0), ENOSYS);
    }

    #[test]
    fn without_the_row_namespaces_and_ordinary_calls_are_allowed() {
        let prog = program(Policy::default()).unwrap();
        let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNET) as u64;
        assert_eq!(run(&prog, ARCH, NR_UNSHARE, flags), ALLOW);
        assert_eq!(run(&prog, ARCH, libc::SYS_clone3 as u32, 0), ALLOW);
        assert_eq!(run(&prog, ARCH, libc::SYS_getpid as u32, 0), ALLOW);
        assert_eq!(run(&denying(), ARCH, libc::SYS_getpid as u32, 0), ALLOW);
    }
}
