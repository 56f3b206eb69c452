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
    /// The slave's path (`/dev/pts/N`), for [`hangup`].
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
