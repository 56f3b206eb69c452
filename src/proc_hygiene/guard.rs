//! The guard: a small process chaosrun starts at launch (`chaosrun __guard RUN`)
//! that holds the read end of a pipe. When chaosrun exits for any reason,
//! SIGKILL included, the pipe reaches EOF and the guard sweeps every process
//! carrying `CHAOS_RUN=RUN`, kills and removes the run's cgroup tree and the
//! v1 memory cgroups of its OOM rows (`memory_limit::sweep_run`), removes
//! the run's temp folders (`$TMPDIR/chaosrun-RUN-*` and the folders named with
//! `--remove`, e.g. the bundled agent's), then exits. It runs in its own
//! process group so a terminal's Ctrl+C does not take it down before it has
//! swept.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{sweep_marked, RUN_VAR};

/// The running guard; dropping it (or chaosrun dying) triggers the sweep.
pub struct Guard {
    child: Child,
}

impl Guard {
    /// Start `exe __guard RUN [--remove DIR]...` with a pipe on its stdin.
    pub fn spawn(exe: &Path, run: &str, remove: &[&Path]) -> std::io::Result<Guard> {
        let mut cmd = Command::new(exe);
        cmd.arg("__guard").arg(run);
        for dir in remove {
            cmd.arg("--remove").arg(dir);
        }
        cmd.env_remove(RUN_VAR)
            .env_remove(super::TAG_VAR)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0);
        // Waited for by `finish`: the orphan reaper leaves it alone, and the
        // fallback does not take it for an orphaned agent process.
        let child = super::spawn_owned(&mut cmd)?;
        Ok(Guard { child })
    }

    /// Close the pipe and wait for the guard's sweep to finish.
    pub fn finish(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        super::disown(self.child.id() as i32);
    }
}

/// Body of `chaosrun __guard RUN`: wait for EOF on stdin, then sweep and
/// remove the run's cgroups and temp folders.
pub fn run_guard(run: &str, remove: &[PathBuf]) -> i32 {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    super::cgroup::end_run(run);
    sweep_marked(RUN_VAR, run, Duration::from_secs(15));
    super::cgroup::end_run(run);
    super::memory_limit::sweep_run(run);
    remove_temp(run, remove);
    0
}

/// Remove `$TMPDIR/chaosrun-RUN-*` and the `remove` folders; only folders
/// whose name starts with `chaosrun-` (these are chaosrun's own).
fn remove_temp(run: &str, remove: &[PathBuf]) {
    let prefix = format!("chaosrun-{run}-");
    let tmp = std::env::temp_dir();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&tmp)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    dirs.extend(remove.iter().cloned());
    for d in dirs {
        let ours = d
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("chaosrun-"));
        if ours && std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}
