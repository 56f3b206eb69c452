//! The pseudo-terminal an agent runs under with the profile's `tty: true`:
//! opening one (its master for chaosrun, its slave for the agent's
//! controlling terminal, [`super::child`]) and hanging it up.
//!
//! The line discipline is set so the bytes the agent writes reach the master
//! unchanged (no `\n` → `\r\n`, no echo of what chaosrun writes): the output
//! selectors read the agent's own lines.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::termios::{self, LocalFlags, OutputFlags, SetArg};

/// What of the agent's stdio the terminal carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TtyStdio {
    /// stdout and stderr, and stdin unless chaosrun writes it a message
    /// (exec mode and the driver protocol's stderr: a user's terminal).
    Output,
    /// stderr only (the ACP drive: stdin and stdout are JSON-RPC pipes).
    Stderr,
}

/// An open pseudo-terminal.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    /// The slave's path (`/dev/pts/N`).
    pub path: PathBuf,
}

/// Open a pseudo-terminal, both ends close-on-exec (the child's `dup2` of
/// the slave onto its stdio is what it keeps), the output passed as is.
pub fn open() -> io::Result<Pty> {
    let pair = nix::pty::openpty(None, None).map_err(io::Error::from)?;
    let mut t = termios::tcgetattr(pair.slave.as_fd()).map_err(io::Error::from)?;
    t.output_flags.remove(OutputFlags::OPOST);
    t.local_flags
        .remove(LocalFlags::ECHO | LocalFlags::ECHONL | LocalFlags::ICANON);
    termios::tcsetattr(pair.slave.as_fd(), SetArg::TCSANOW, &t).map_err(io::Error::from)?;
    let path = std::fs::read_link(format!("/proc/self/fd/{}", pair.slave.as_raw_fd()))?;
    let (master, slave) = (above_stdio(pair.master)?, above_stdio(pair.slave)?);
    Ok(Pty {
        master,
        slave,
        path,
    })
}

/// `fd` close-on-exec, numbered 3 or above.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd we own (or -1).
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh fd.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(new) })
}

/// The terminal at `path` closes, as when its window is closed: the
/// kernel's hangup (`TIOCVHANGUP`, what closing the master does), which
/// sends SIGHUP and SIGCONT to the session leader and SIGHUP to the
/// foreground process group, and makes every later read of the terminal
/// end (EOF) and every write fail (EIO).
pub fn hangup(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    // SAFETY: an ioctl without argument on an fd we own.
    if unsafe { libc::ioctl(f.as_raw_fd(), libc::TIOCVHANGUP, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Close the terminal of process `pid`: its controlling terminal, when
/// that is a pseudo-terminal (`tty_nr` of `/proc/PID/stat`, the kernel's
/// own record), is hung up ([`hangup`]); a process without one gets SIGHUP
/// to its process group (chaosrun makes every agent process a group
/// leader), as its terminal's closing would send. Whether either was done.
pub fn hang_up(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match controlling_pts(pid) {
        Some(path) => hangup(&path).is_ok(),
        None => nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGHUP,
        )
        .is_ok(),
    }
}

/// `/dev/pts/N` when `pid`'s controlling terminal is a pseudo-terminal's
/// slave (majors 136 to 143).
fn controlling_pts(pid: i32) -> Option<PathBuf> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 7 (tty_nr) is the 5th after the command name.
    let nr: u32 = rest.split_whitespace().nth(4)?.parse().ok()?;
    let major = (nr >> 8) & 0xfff;
    let minor = (nr & 0xff) | ((nr >> 12) & 0xfff00);
    (136..=143)
        .contains(&major)
        .then(|| PathBuf::from(format!("/dev/pts/{}", (major - 136) * 256 + minor)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process whose controlling terminal is the pty exits of SIGHUP when
    /// the terminal is hung up; its stat names the pty (`controlling_pts`).
    #[test]
    fn a_hangup_sends_sighup_to_the_terminals_session() {
        let pty = open().unwrap();
        let slave = pty.slave.try_clone().unwrap();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30").stdin(std::process::Stdio::from(slave));
        // SAFETY: setsid and an ioctl on fd 0 between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while controlling_pts(pid).is_none() {
            assert!(std::time::Instant::now() < deadline, "no terminal");
            std::thread::yield_now();
        }
        assert_eq!(controlling_pts(pid), Some(pty.path.clone()));
        // The master stays open: the hangup, not its closing, ends `sleep`.
        assert!(hang_up(pid));
        let status = child.wait().unwrap();
        drop(pty);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGHUP), "{status:?}");
    }
}
