//! The guard: a small process chaosrun starts at launch (`chaosrun __guard RUN`)
//! that holds the read end of a pipe. When chaosrun exits for any reason,
//! SIGKILL included, the pipe reaches EOF and the guard sweeps every process
//! carrying `CHAOS_RUN=RUN`, then exits. It runs in its own process group so a
//! terminal's Ctrl+C does not take it down before it has swept.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{sweep_marked, RUN_VAR};

/// The running guard; dropping it (or chaosrun dying) triggers the sweep.
pub struct Guard {
    child: Child,
}

impl Guard {
    /// Start `exe __guard RUN` with a pipe on its stdin.
    pub fn spawn(exe: &std::path::Path, run: &str) -> std::io::Result<Guard> {
        let child = Command::new(exe)
            .arg("__guard")
            .arg(run)
            .env_remove(RUN_VAR)
            .env_remove(super::TAG_VAR)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Guard { child })
    }

    /// Close the pipe and wait for the guard's sweep to finish.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Body of `chaosrun __guard RUN`: wait for EOF on stdin, then sweep.
pub fn run_guard(run: &str) -> i32 {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    sweep_marked(RUN_VAR, run, Duration::from_secs(15));
    0
}
