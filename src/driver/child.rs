//! Starting one contained process without copying chaosrun's address space,
//! and the [`Child`] it gives: piped stdio, a pidfd, an async wait.
//!
//! `fork` copies the page tables of a parent with dozens of threads and tens
//! of MB, and every page the parent writes afterwards faults once
//! (copy-on-write): that was about 45% of chaosrun's own CPU per row
//! (`cargo bench --bench rows_cpu`). std's `Command` uses `posix_spawn`
//! (`clone(CLONE_VM | CLONE_VFORK)`: no copy) only without a `pre_exec`
//! hook, and joining the scenario's cgroup and network namespace before exec
//! needs one. [`start`] does what `posix_spawn` does, with those two steps:
//! the child runs on a small stack of its own inside chaosrun's memory, with
//! every signal blocked, makes only plain system calls (signal dispositions
//! back to default, join the cgroup, join the network and mount namespaces,
//! stdio, a process group of its own, cwd, the open-file limit chaosrun
//! started with, give up privileges ([`super::harden`]), the seccomp
//! program ([`super::seccomp`]), an empty signal mask) and execs; the calling thread
//! resumes once it has (or has failed, the error passed back in shared
//! memory). Everything the child reads is prepared before the clone: it never
//! allocates nor takes a lock.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

use tokio::io::unix::AsyncFd;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

/// The child's standard input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    /// A pipe chaosrun writes ([`Child::stdin`]).
    Piped,
    /// `/dev/null`.
    Null,
}

/// What to start. stdout and stderr are always piped.
pub struct Command<'a> {
    pub argv: &'a [String],
    /// Exactly the environment the process gets (its `PATH` finds a bare
    /// program name, as `execvp` would).
    pub env: &'a BTreeMap<String, String>,
    pub cwd: &'a Path,
    pub stdin: Stdin,
    /// `cgroup.procs` of the cgroup to join before exec, open for writing.
    pub cgroup: Option<BorrowedFd<'a>>,
    /// A network namespace to join before exec.
    pub netns: Option<BorrowedFd<'a>>,
    /// A mount namespace to join before exec ([`super::mountns`]).
    pub mntns: Option<BorrowedFd<'a>>,
    /// What the seccomp program refuses ([`super::seccomp`]): namespace
    /// creation on a `namespaces: denied` row, `setns` unless allowed.
    pub seccomp: super::seccomp::Policy,
    /// `tty: true`: the pseudo-terminal the child takes as its controlling
    /// terminal (in a session of its own), and which of its stdio it is
    /// ([`super::pty`]); what the terminal carries is read from
    /// [`Child::stdout`] ([`TtyStdio::Output`]) or [`Child::stderr`].
    pub tty: Option<(&'a super::pty::Pty, TtyStdio)>,
}

pub use super::pty::TtyStdio;

/// A started process: chaosrun's child until [`Child::wait`] reaps it;
/// dropped unreaped, it is killed (its zombie is left to the orphan reaper).
#[derive(Debug)]
pub struct Child {
    pid: i32,
    /// Readable once the process has exited; `None` where the kernel has no
    /// pidfds (then the wait polls).
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// The exec path: `argv[0]` as given when it names a path (relative to
/// `cwd`, as after the child's `chdir`), else the first executable regular
/// file of that name in `PATH` (`/bin:/usr/bin` without one).
fn resolve(program: &str, env: &BTreeMap<String, String>, cwd: &Path) -> io::Result<PathBuf> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = env.get("PATH").map_or("/bin:/usr/bin", String::as_str);
    path.split(':')
        .map(|dir| {
            let dir = if dir.is_empty() { "." } else { dir };
            cwd.join(dir).join(program)
        })
        .find(|p| is_executable_file(p))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

fn is_executable_file(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access(2) on a NUL-terminated path.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

/// A NULL-terminated pointer array over `strings` (which must outlive it).
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A pipe whose ends are both close-on-exec and numbered 3 or above (so a
/// `dup2` onto 0–2 never clobbers another end): (read, write).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((above_stdio(r)?, above_stdio(w)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd we own (or -1).
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn dev_null() -> io::Result<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    above_stdio(f.into())
}

/// Everything the child reads, prepared by the parent; `err` is the one
/// thing it writes (errno of the step that failed).
struct Shared {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// `/bin/sh` and its argv: a file without a `#!` line (ENOEXEC) runs
    /// through the shell, as `execvp` does.
    sh: *const libc::c_char,
    sh_argv: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdio: [RawFd; 3],
    cgroup: RawFd,
    netns: RawFd,
    mntns: RawFd,
    /// The controlling terminal to take (-1: none; the child then makes a
    /// process group of its own, not a session).
    ctty: RawFd,
    /// [`super::harden::apply`]'s arguments: the Landlock ruleset (-1: none)
    /// and the last capability to drop (-1: none, not root).
    ruleset: RawFd,
    last_cap: i64,
    /// The seccomp program to install before exec (null: none).
    seccomp: *const libc::sock_fprog,
    /// The open-file limit chaosrun started with, when it raised its own
    /// ([`crate::fd_limit`]): set again before exec.
    nofile: Option<libc::rlimit>,
    err: AtomicI32,
    /// Where the child says its pid, for the hand-off's watchdog.
    pid: *const AtomicI32,
    /// Tests only: a flag the child raises once it is in the scenario's
    /// cgroup, and how long it then waits before its exec (the window a
    /// freeze must never land in).
    #[cfg(test)]
    pause: Option<(*const std::sync::atomic::AtomicBool, libc::timespec)>,
}

#[cfg(test)]
thread_local! {
    /// Tests only: the hand-off of the last start on this thread.
    static LAST_SLOT: std::cell::RefCell<Option<std::sync::Arc<super::handoff::Slot>>> =
        const { std::cell::RefCell::new(None) };
    /// Tests only: [`Shared::pause`] for the next start on this thread.
    pub(crate) static PAUSE_BEFORE_EXEC: std::cell::Cell<Option<(*const std::sync::atomic::AtomicBool, std::time::Duration)>> =
        const { std::cell::Cell::new(None) };
}

/// Pass errno back to the parent and end the child.
unsafe fn fail(s: &Shared) -> ! {
    s.err.store(*libc::__errno_location(), Ordering::SeqCst);
    libc::_exit(127)
}

/// The child's side: raw system calls only, on its own stack, in the
/// parent's memory. Never returns: exec, or `_exit(127)` with `err` set.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `Shared`, alive until the parent resumes
    // (after this child's exec or exit: CLONE_VFORK). Every call below is a
    // plain system call wrapper on prepared data: no allocation, no lock.
    unsafe {
        let s = &*(arg as *const Shared);
        (*s.pid).store(libc::syscall(libc::SYS_gettid) as i32, Ordering::SeqCst);
        // Handlers are chaosrun's code: none may run in the child. Ignored
        // signals stay ignored across exec, except SIGPIPE (Rust ignores it).
        for sig in 1..=libc::SIGRTMAX() {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
                && old.sa_sigaction != libc::SIG_DFL
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        if s.cgroup >= 0 && libc::write(s.cgroup, b"0".as_ptr().cast(), 1) != 1 {
            fail(s);
        }
        #[cfg(test)]
        if let Some((flag, wait)) = s.pause {
            (*flag).store(true, Ordering::SeqCst);
            libc::nanosleep(&wait, std::ptr::null_mut());
        }
        if s.netns >= 0 && libc::setns(s.netns, libc::CLONE_NEWNET) != 0 {
            fail(s);
        }
        // Before the chdir: joining a mount namespace resets the cwd.
        if s.mntns >= 0 && libc::setns(s.mntns, libc::CLONE_NEWNS) != 0 {
            fail(s);
        }
        for (to, &from) in s.stdio.iter().enumerate() {
            if libc::dup2(from, to as c_int) < 0 {
                fail(s);
            }
        }
        if s.ctty >= 0 {
            // A session of its own (its process group too) whose
            // controlling terminal is the pty, as a terminal's shell has.
            if libc::setsid() < 0 || libc::ioctl(s.ctty, libc::TIOCSCTTY, 0) != 0 {
                fail(s);
            }
        } else if libc::setpgid(0, 0) != 0 {
            fail(s);
        }
        if libc::chdir(s.cwd) != 0 {
            fail(s);
        }
        if let Some(limit) = &s.nofile {
            if libc::setrlimit(libc::RLIMIT_NOFILE, limit) != 0 {
                fail(s);
            }
        }
        if !super::harden::apply(s.ruleset, s.last_cap) {
            fail(s);
        }
        if !s.seccomp.is_null() && !super::seccomp::install(s.seccomp) {
            fail(s);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(s.program, s.argv, s.envp);
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(s.sh, s.sh_argv, s.envp);
        }
        fail(s)
    }
}

/// The child's stack (it runs only until exec); 64 KiB is far more than
/// `child_main` needs.
const STACK: usize = 64 * 1024;

/// `clone(CLONE_VM | CLONE_VFORK)` running `child_main` with every signal
/// blocked in the calling thread meanwhile; the child's pid, or the errno
/// of the step it failed at (the child then reaped). A child that has not
/// exec'd within [`super::handoff::DEADLINE`] is killed and reaped, and the
/// start fails.
fn clone_and_exec(shared: &mut Shared) -> io::Result<i32> {
    let slot = super::handoff::watch(super::handoff::DEADLINE);
    shared.pid = &slot.pid;
    #[cfg(test)]
    LAST_SLOT.with(|l| l.replace(Some(slot.clone())));
    let cloned = clone_vfork(shared);
    // Settled on every path, and before any reaping: a slot left open
    // (a failed exec) would have its pid, reused, killed at the deadline.
    let in_time = slot.settle();
    let (pid, err) = cloned?;
    if err != 0 || !in_time {
        // SAFETY: waitpid on our own child, which exited (its exec failed)
        // or was just SIGKILLed by the watchdog.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    if err != 0 {
        return Err(io::Error::from_raw_os_error(err));
    }
    if !in_time {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the process had not exec'd {} s after its clone (its cgroup frozen by something other than chaosrun?); killed",
                super::handoff::DEADLINE.as_secs()
            ),
        ));
    }
    Ok(pid)
}

/// The clone: the child's pid and the errno of the step it failed at (0:
/// it exec'd, or was killed first). The child is not reaped here.
fn clone_vfork(shared: &Shared) -> io::Result<(i32, i32)> {
    let mut stack = vec![0u8; STACK];
    // SAFETY: the top of our buffer, 16-byte aligned, as clone(2) wants.
    let top = unsafe { stack.as_mut_ptr().add(STACK) } as usize & !15;
    // SAFETY: sigset operations on local values; clone(2) through glibc's
    // wrapper with a valid function, stack and argument, all alive until the
    // call returns (CLONE_VFORK: after the child's exec or exit).
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            child_main,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            shared as *const Shared as *mut c_void,
        );
        let clone_err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_err);
        }
        Ok((pid, shared.err.load(Ordering::SeqCst)))
    }
}

/// The child's stdout and stderr (read end, write end each). Under a
/// terminal the write ends are its slave and the read end of the stream it
/// carries is its master; the other read end (exec: stderr, all of which
/// the terminal carried) is a pipe that ends at once.
fn stdio_out(
    tty: Option<(&super::pty::Pty, TtyStdio)>,
) -> io::Result<(OwnedFd, OwnedFd, OwnedFd, OwnedFd)> {
    let Some((pty, on)) = tty else {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        return Ok((out_r, out_w, err_r, err_w));
    };
    let (master, slave) = (pty.master.try_clone()?, pty.slave.try_clone()?);
    Ok(match on {
        TtyStdio::Output => {
            // Its write end closed here: the stream ends at once.
            let (empty, _) = pipe()?;
            (master, slave.try_clone()?, empty, slave)
        }
        TtyStdio::Stderr => {
            let (out_r, out_w) = pipe()?;
            (out_r, out_w, master, slave)
        }
    })
}

/// Start `cmd`. Call it inside [`crate::children::start_owned`], so the
/// orphan reaper never takes the child before it is registered.
pub fn start(cmd: &Command<'_>) -> io::Result<Child> {
    let program = resolve(&cmd.argv[0], cmd.env, cmd.cwd)?;
    let program = cstring(program.as_os_str().as_bytes())?;
    let args = cmd
        .argv
        .iter()
        .map(|a| cstring(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let env = cmd
        .env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}").as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let sh = cstring(b"/bin/sh")?;
    let mut sh_args = vec![sh.clone(), program.clone()];
    sh_args.extend(args.iter().skip(1).cloned());
    let cwd = cstring(cmd.cwd.as_os_str().as_bytes())?;
    let (argv, envp, sh_argv) = (pointers(&args), pointers(&env), pointers(&sh_args));
    let (stdin_r, stdin_w) = match (cmd.stdin, cmd.tty) {
        (Stdin::Piped, _) => {
            let (r, w) = pipe()?;
            (r, Some(w))
        }
        (Stdin::Null, Some((pty, TtyStdio::Output))) => (pty.slave.try_clone()?, None),
        (Stdin::Null, _) => (dev_null()?, None),
    };
    let (out_r, out_w, err_r, err_w) = stdio_out(cmd.tty)?;
    let filter = match super::seccomp::program(cmd.seccomp) {
        Ok(p) => Some(p),
        // This build has no program: only a row that denies namespaces needs one.
        Err(e) if cmd.seccomp.deny_namespaces => return Err(io::Error::other(e)),
        Err(_) => None,
    };
    let seccomp = filter.as_ref().map(|f| libc::sock_fprog {
        len: f.len() as u16,
        filter: f.as_ptr().cast_mut(),
    });
    let hardening = super::harden::Hardening::prepare();
    let mut shared = Shared {
        program: program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        sh: sh.as_ptr(),
        sh_argv: sh_argv.as_ptr(),
        cwd: cwd.as_ptr(),
        stdio: [stdin_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()],
        cgroup: cmd.cgroup.map_or(-1, |f| f.as_raw_fd()),
        netns: cmd.netns.map_or(-1, |f| f.as_raw_fd()),
        mntns: cmd.mntns.map_or(-1, |f| f.as_raw_fd()),
        ctty: cmd.tty.map_or(-1, |(p, _)| p.slave.as_raw_fd()),
        ruleset: hardening.ruleset_fd(),
        last_cap: hardening.last_cap(),
        seccomp: seccomp
            .as_ref()
            .map_or(std::ptr::null(), |p| p as *const libc::sock_fprog),
        nofile: crate::fd_limit::for_children(),
        err: AtomicI32::new(0),
        pid: std::ptr::null(),
        #[cfg(test)]
        pause: PAUSE_BEFORE_EXEC.with(|p| p.take()).map(|(flag, wait)| {
            let ts = libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            };
            (flag, ts)
        }),
    };
    let pid = clone_and_exec(&mut shared)?;
    drop((stdin_r, out_w, err_w, hardening, filter));
    let pidfd = crate::proc_hygiene::pidfd_open(pid).and_then(|fd| {
        // SAFETY: the OwnedFd stays open, the same fd, as long as the AsyncFd.
        unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
    });
    // From here on a failure drops the child, which kills it.
    let mut child = Child {
        pid,
        pidfd,
        status: None,
        stdin: None,
        stdout: None,
        stderr: None,
    };
    child.stdin = stdin_w
        .map(|w| ChildStdin::from_std(std::process::ChildStdin::from(w)))
        .transpose()?;
    child.stdout = Some(ChildStdout::from_std(std::process::ChildStdout::from(
        out_r,
    ))?);
    child.stderr = Some(ChildStderr::from_std(std::process::ChildStderr::from(
        err_r,
    ))?);
    Ok(child)
}

impl Child {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Reap the process if it has exited.
    fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            let mut st = 0;
            // SAFETY: waitpid(2) on our own, not yet reaped child.
            match unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) } {
                0 => {}
                p if p == self.pid => self.status = Some(ExitStatus::from_raw(st)),
                _ => return Err(io::Error::last_os_error()),
            }
        }
        Ok(self.status)
    }

    /// Close stdin, then wait for the exit and reap (cancel-safe).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        drop(self.stdin.take());
        loop {
            if let Some(s) = self.try_reap()? {
                return Ok(s);
            }
            match &self.pidfd {
                Some(fd) => fd.readable().await?.clear_ready(),
                None => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if matches!(self.try_reap(), Ok(None)) {
            if let Some(fd) = &self.pidfd {
                crate::proc_hygiene::pidfd_send(fd.get_ref(), libc::SIGKILL);
            }
            // Its zombie is the orphan reaper's now.
            crate::children::disown(self.pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn env(path: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("PATH".to_string(), path.to_string())])
    }

    async fn run(argv: &[&str], stdin: Stdin, input: &[u8]) -> (String, String, ExitStatus, i32) {
        run_denying(argv, stdin, input, false).await
    }

    async fn run_denying(
        argv: &[&str],
        stdin: Stdin,
        input: &[u8],
        deny_namespaces: bool,
    ) -> (String, String, ExitStatus, i32) {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env = env("/usr/bin:/bin");
        let cwd = std::env::temp_dir();
        let mut child = crate::children::start_owned(
            || {
                start(&Command {
                    argv: &argv,
                    env: &env,
                    cwd: &cwd,
                    stdin,
                    cgroup: None,
                    netns: None,
                    mntns: None,
                    tty: None,
                    seccomp: super::super::seccomp::Policy {
                        allow_setns: false,
                        deny_namespaces,
                    },
                })
            },
            |c| Some(c.id()),
        )
        .expect("start");
        if let Some(mut w) = child.stdin.take() {
            w.write_all(input).await.unwrap();
        }
        let (mut out, mut err) = (String::new(), String::new());
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        so.read_to_string(&mut out).await.unwrap();
        se.read_to_string(&mut err).await.unwrap();
        let st = child.wait().await.unwrap();
        crate::children::disown(child.id() as i32);
        (out, err, st, child.id() as i32)
    }

    #[tokio::test]
    async fn runs_with_exactly_the_given_environment_cwd_and_stdio() {
        let (out, err, st, _) = run(
            &[
                "sh",
                "-c",
                "read x; echo \"$x $PATH $(pwd)\"; echo e >&2; exit 3",
            ],
            Stdin::Piped,
            b"hi\n",
        )
        .await;
        let tmp = std::env::temp_dir().canonicalize().unwrap();
        assert_eq!(out.trim(), format!("hi /usr/bin:/bin {}", tmp.display()));
        assert_eq!(err.trim(), "e");
        assert_eq!(st.code(), Some(3));
    }

    /// Read by the exec'd program itself (a shell would show its own mask,
    /// which it changes while it waits for a child).
    #[tokio::test]
    async fn its_own_process_group_default_signals_and_an_empty_mask() {
        // SIGPIPE is ignored in chaosrun (Rust's runtime) and must not be in
        // the child; nothing is blocked.
        let (out, _, st, _) = run(
            &["grep", "-E", "^(SigBlk|SigIgn)", "/proc/self/status"],
            Stdin::Null,
            b"",
        )
        .await;
        assert!(st.success(), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        let mask = |l: &str| u64::from_str_radix(l.split_whitespace().nth(1).unwrap(), 16).unwrap();
        assert_eq!(mask(lines[0]), 0, "nothing blocked: {out}");
        assert_eq!(
            mask(lines[1]) & (1 << (libc::SIGPIPE - 1)),
            0,
            "SIGPIPE not ignored: {out}"
        );
        // Field 5 of /proc/self/stat (after the parenthesised name) is the pgid.
        let (out, _, st, pid) = run(&["cat", "/proc/self/stat"], Stdin::Null, b"").await;
        assert!(st.success());
        let after_name = out.rsplit_once(") ").unwrap().1;
        let pgid: i32 = after_name
            .split_whitespace()
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(pgid, pid, "a process group of its own: {out}");
    }

    /// What the child gave up, read back from the kernel's view of it (its
    /// /proc status) and by the attack itself: no_new_privs, no capability
    /// but CAP_SETFCAP when chaosrun is root, and (with Landlock) no other
    /// process's namespace file opens, init's included.
    #[tokio::test]
    async fn a_child_gives_up_privileges_and_cannot_open_other_namespaces() {
        let script = "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; \
                      if (exec 3</proc/1/ns/net) 2>/dev/null; then echo OPENED; else echo REFUSED; fi";
        let (out, err, st, _) = run(&["sh", "-c", script], Stdin::Null, b"").await;
        assert!(st.success(), "{out} {err}");
        assert!(out.contains("NoNewPrivs:\t1"), "{out}");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert!(out.contains("CapEff:\t0000000080000000"), "{out}");
            assert!(out.contains("CapBnd:\t0000000080000000"), "{out}");
        }
        if super::super::harden::Hardening::prepare()
            .offered()
            .landlock
        {
            assert!(
                out.contains("REFUSED") && !out.contains("OPENED"),
                "{out} {err}"
            );
        }
    }

    /// The namespace fault, found by a method that does not share the
    /// filter's assumptions: util-linux's `unshare` run first without it
    /// (the host allows a user and network namespace) and then started by
    /// [`start`] with it, judged by its exit and message; a python thread
    /// (glibc's clone3, refused with ENOSYS, then clone) still starts.
    #[tokio::test]
    async fn a_child_denied_namespaces_cannot_unshare_but_still_runs() {
        let unshare = ["unshare", "--user", "--map-root-user", "--net", "true"];
        let (_, err, free, _) = run(&unshare, Stdin::Null, b"").await;
        assert!(
            free.success(),
            "missing prerequisite: unshare on this host ({err})"
        );
        let (_, err, denied, _) = run_denying(&unshare, Stdin::Null, b"", true).await;
        assert!(!denied.success(), "unshare ran under the filter");
        assert!(err.contains("Operation not permitted"), "{err}");
        let thread = "import threading; t = threading.Thread(target=print, args=('thread-ran',)); t.start(); t.join()";
        let (out, err, st, _) =
            run_denying(&["python3", "-c", thread], Stdin::Null, b"", true).await;
        assert!(st.success() && out.contains("thread-ran"), "{out} {err}");
    }

    fn start_error(program: &str) -> io::Error {
        let argv = vec![program.to_string()];
        start(&Command {
            argv: &argv,
            env: &env("/usr/bin:/bin"),
            cwd: Path::new("/"),
            stdin: Stdin::Null,
            cgroup: None,
            netns: None,
            mntns: None,
            tty: None,
            seccomp: super::super::seccomp::Policy::default(),
        })
        .unwrap_err()
    }

    /// Not found in PATH: refused before any clone. Found but not
    /// executable: the child's exec fails and its errno comes back.
    #[tokio::test]
    async fn a_missing_or_unexecutable_program_is_an_error_with_its_errno() {
        let e = start_error("chaosrun-no-such-program");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = start_error("/");
        assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
        // The failed exec's hand-off is settled: its watchdog never fires
        // on the dead child's pid (which another process may have by then).
        let slot = LAST_SLOT.with(|l| l.borrow().clone()).expect("a hand-off");
        assert!(slot.pid.load(Ordering::SeqCst) > 0);
        assert!(!slot.settle(), "left open after the failed start");
    }

    #[tokio::test]
    async fn a_script_without_a_shebang_runs_through_sh() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("plain");
        // Written by another process: a write descriptor of this one could be
        // inherited by a concurrent test's fork and make the exec ETXTBSY.
        // Owned, so another test's orphan reaper cannot take its status.
        let mut write = std::process::Command::new("sh");
        write
            .arg("-c")
            .arg("printf 'echo plain-ran\\n' > \"$1\" && chmod 755 \"$1\"")
            .arg("sh")
            .arg(&script);
        let mut writer = crate::children::spawn_owned(&mut write).unwrap();
        let made = writer.wait().unwrap();
        crate::children::disown(writer.id() as i32);
        assert!(made.success());
        let (out, _, st, _) = run(&[script.to_str().unwrap()], Stdin::Null, b"").await;
        assert!(st.success());
        assert_eq!(out.trim(), "plain-ran");
    }
}
