//! The kernel's word that a memory cgroup ran out of memory, as an event
//! (never found by polling the counter): on cgroup v2 the kernel notifies
//! `memory.events` on every change of its counters, `oom` and `oom_kill`
//! among them (watched through inotify); on v1 an eventfd registered on
//! `memory.oom_control` through `cgroup.event_control` is signalled when the
//! cgroup goes out of memory, just before the OOM killer picks its victim.
//! The `oom_kill` counter itself is [`super::memory_limit::MemoryLimit`]'s.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

use super::memory_limit::Via;

/// What the kernel signals.
enum Source {
    /// v2: an inotify watch on `memory.events`.
    Inotify(Inotify),
    /// v1: an eventfd registered on `memory.oom_control`.
    EventFd(OwnedFd),
}

impl AsRawFd for Source {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Source::Inotify(i) => i.as_fd().as_raw_fd(),
            Source::EventFd(f) => f.as_raw_fd(),
        }
    }
}

/// A memory cgroup's OOM events, from the moment it is opened.
pub struct OomEvents {
    fd: AsyncFd<Source>,
}

impl OomEvents {
    /// Watch the memory cgroup at `dir` (of kind `via`), inside a tokio
    /// runtime; why not when the kernel refuses.
    pub fn open(dir: &Path, via: Via) -> Result<OomEvents, String> {
        let source = match via {
            Via::V2 => {
                let i = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                    .map_err(|e| format!("inotify: {e}"))?;
                let file = dir.join("memory.events");
                i.add_watch(&file, AddWatchFlags::IN_MODIFY)
                    .map_err(|e| format!("cannot watch {}: {e}", file.display()))?;
                Source::Inotify(i)
            }
            Via::V1 => Source::EventFd(v1_register(dir)?),
        };
        // SAFETY: the descriptor is owned by the `Source` the AsyncFd owns:
        // it stays open, the same descriptor, as long as the AsyncFd.
        let fd = unsafe { AsyncFd::register_with_interest(source, tokio::io::Interest::READABLE) }
            .map_err(|e| format!("cannot wait on the OOM events: {}", e.into_parts().1))?;
        Ok(OomEvents { fd })
    }

    /// Resolves at the kernel's next word (what it wrote is drained).
    pub async fn next(&mut self) -> Result<(), String> {
        loop {
            let mut ready = self.fd.readable().await.map_err(|e| e.to_string())?;
            let drained = match ready.get_inner() {
                Source::Inotify(i) => i.read_events().map(|_| ()).map_err(std::io::Error::from),
                Source::EventFd(f) => {
                    let mut n = [0u8; 8];
                    nix::unistd::read(f.as_raw_fd(), &mut n)
                        .map(|_| ())
                        .map_err(std::io::Error::from)
                }
            };
            match drained {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => ready.clear_ready(),
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// v1: an eventfd, registered on `dir`'s `memory.oom_control` (the kernel
/// keeps the registration until the eventfd is closed or the cgroup goes).
fn v1_register(dir: &Path) -> Result<OwnedFd, String> {
    // SAFETY: eventfd(2) returns a new descriptor or -1; it is owned at once.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if raw < 0 {
        return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a valid descriptor nothing else owns.
    let efd = unsafe { OwnedFd::from_raw_fd(raw) };
    let control = dir.join("memory.oom_control");
    let ofd = std::fs::File::open(&control)
        .map_err(|e| format!("cannot open {}: {e}", control.display()))?;
    let line = format!("{} {}", efd.as_raw_fd(), ofd.as_raw_fd());
    std::fs::write(dir.join("cgroup.event_control"), line)
        .map_err(|e| format!("cannot register for OOM events in {}: {e}", dir.display()))?;
    Ok(efd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 watch on a `memory.events` file wakes when the file is written
    /// (the kernel notifies the same way), not before.
    #[tokio::test]
    async fn a_v2_watch_wakes_when_memory_events_changes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("memory.events");
        std::fs::write(&f, "oom 0\noom_kill 0\n").unwrap();
        let mut ev = OomEvents::open(dir.path(), Via::V2).unwrap();
        let quiet = tokio::time::timeout(std::time::Duration::from_millis(50), ev.next()).await;
        assert!(quiet.is_err(), "woke with nothing written");
        std::fs::write(&f, "oom 1\noom_kill 1\n").unwrap();
        ev.next().await.unwrap();
    }
}
