//! A scenario's mount namespace: the shared places where services leave
//! their Unix sockets (`/tmp`, `/var/tmp`, `/run`, `/dev/shm`) are fresh and
//! empty for the agent, and the run's artifacts folder shows only this
//! scenario's own folder, so no socket outside the scenario (a host
//! service's, another run's or another scenario's MCP socket) is reachable
//! by path. Abstract sockets need no mount: they belong to the network
//! namespace ([`super::netns`]), and the agent's Landlock domain
//! ([`super::harden`]) is scoped to its own.
//!
//! What the agent needs from those places is bound back at the same path:
//! the scenario's folder, and the first folder below `/tmp` (or the
//! artifacts folder, …) of every path the agent is given (its program and
//! arguments, absolute paths in its environment and `PATH`, the profile's
//! folder, chaosrun's own binary). Everything else there is gone.
//!
//! Made once per scenario on a short-lived thread of its own, which
//! unshares its file system context and a mount namespace (mounts made there
//! are slaves of the host's: nothing propagates back), mounts, and keeps an
//! fd to the namespace; every agent process of the scenario joins it before
//! exec (`driver::child`). Needs CAP_SYS_ADMIN: where it cannot be made,
//! [`Mounts`] says why and the run is reported as not mount-contained.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The shared places the agent gets empty (those that exist, are folders
/// and not links).
pub const PRIVATE: &[&str] = &["/tmp", "/var/tmp", "/run", "/dev/shm"];

/// The size of each fresh place (tmpfs pages count against the scenario's
/// memory cgroup, so this is a ceiling, not a reservation).
const TMPFS_OPTIONS: &str = "mode=1777,size=1g";

/// A mount namespace held open by an fd, with an open fd of each fresh
/// private place in it (the disk watch reads what the agent left there
/// through `/proc/self/fd/N`: chaosrun's own mount namespace cannot see it).
#[derive(Debug)]
pub struct MntNs {
    fd: OwnedFd,
    private: Vec<(PathBuf, OwnedFd)>,
}

/// Whether a scenario's agent has private mounts, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mounts {
    Private,
    Shared(String),
}

/// What the namespace must keep visible.
#[derive(Debug, Default, Clone)]
pub struct Reach {
    /// The scenario's own folder: bound back exactly.
    pub scenario: PathBuf,
    /// A folder shown only with `scenario` in it (the run's `--artifacts`).
    pub artifacts: Option<PathBuf>,
    /// Paths the agent is given: the first folder below a hidden place
    /// that holds each is bound back.
    pub paths: Vec<PathBuf>,
}

/// Whether a scenario must have its own mounts: chaosrun runs as root (a
/// non-root chaosrun cannot make them, and its agent has no root to abuse).
pub fn required() -> bool {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() }) == 0
}

/// The run header's line: what every agent of the run gives up and where
/// it cannot reach ([`super::harden`], [`super::seccomp`], this module).
pub fn describe() -> String {
    let h = super::harden::Hardening::prepare().offered();
    let mut parts = vec![];
    parts.push(if h.capabilities_dropped {
        "no capabilities (but CAP_SETFCAP, for its own user namespaces), no_new_privs"
    } else {
        "no_new_privs (not root: no capabilities to drop)"
    });
    parts.push(if h.landlock {
        "a Landlock domain of its own (no other process's /proc/PID/ns, root or mem)"
    } else {
        "NO Landlock domain (the kernel has no Landlock ABI 6)"
    });
    parts.push("seccomp: setns, other ABIs and x32 refused");
    parts.push(if required() {
        "its own /tmp, /var/tmp, /run, /dev/shm"
    } else {
        "the host's /tmp and /run (not root)"
    });
    format!("sandbox: each agent with {}", parts.join("; "))
}

impl MntNs {
    /// The namespace's fd, for `setns` before exec.
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Each private place the agent got fresh (`/tmp`, …), with a path that
    /// reaches its root from chaosrun's own namespace (`/proc/self/fd/N`:
    /// valid while this namespace is held).
    pub fn private_places(&self) -> Vec<(PathBuf, PathBuf)> {
        self.private
            .iter()
            .map(|(p, fd)| {
                (
                    p.clone(),
                    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
                )
            })
            .collect()
    }

    /// Make the scenario's namespace (None where it cannot be made, and why).
    pub fn for_scenario(reach: &Reach) -> (Option<std::sync::Arc<MntNs>>, Mounts) {
        if !required() {
            let why = "not root: the agent sees the host's /tmp and /run".to_string();
            return (None, Mounts::Shared(why));
        }
        let reach = reach.clone();
        let made = std::thread::Builder::new()
            .name("chaosrun-mntns".into())
            .spawn(move || make(&reach))
            .map_err(|e| e.to_string())
            .and_then(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("the thread panicked".into()))
            });
        match made {
            Ok(ns) => (Some(std::sync::Arc::new(ns)), Mounts::Private),
            Err(e) => (
                None,
                Mounts::Shared(format!("no mount namespace could be made: {e}")),
            ),
        }
    }
}

/// A path's bytes as a C string.
fn c(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{} holds a NUL", p.display()))
}

/// mount(2), its error naming the target.
fn mount(
    src: &Path,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let (s, t) = (c(src)?, c(target)?);
    let fs = fstype.map(|f| CString::new(f).unwrap_or_default());
    let d = data.map(|d| CString::new(d).unwrap_or_default());
    // SAFETY: NUL-terminated strings alive across the call.
    let r = unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            fs.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
            flags,
            d.as_ref().map_or(std::ptr::null(), |d| d.as_ptr().cast()),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "mount {}: {}",
            target.display(),
            std::io::Error::last_os_error()
        ))
    }
}

/// A folder to hide, and what to bind back into it: (path below it, host fd).
struct Mask {
    dir: PathBuf,
    keep: Vec<(PathBuf, OwnedFd)>,
}

/// Open `p` as a bind source (O_PATH, no link followed at the last step).
fn source(p: &Path) -> Option<OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(p)
        .ok()?;
    Some(f.into())
}

/// The masks for `reach`: each hidden place (and the artifacts folder)
/// with fds of what is bound back, opened before anything is mounted.
fn masks(reach: &Reach) -> Vec<Mask> {
    let scenario = std::fs::canonicalize(&reach.scenario).unwrap_or(reach.scenario.clone());
    let mut dirs: Vec<PathBuf> = PRIVATE
        .iter()
        .map(PathBuf::from)
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .collect();
    if let Some(a) = reach
        .artifacts
        .as_ref()
        .and_then(|a| std::fs::canonicalize(a).ok())
    {
        if !dirs.contains(&a) && scenario.starts_with(&a) {
            dirs.push(a);
        }
    }
    let paths: Vec<PathBuf> = reach
        .paths
        .iter()
        .filter(|p| p.is_absolute())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    dirs.iter()
        .map(|dir| {
            let mut kept: Vec<PathBuf> = Vec::new();
            if scenario.starts_with(dir) && scenario != *dir {
                kept.push(scenario.clone());
            }
            for p in &paths {
                let Ok(rest) = p.strip_prefix(dir) else {
                    continue;
                };
                let Some(first) = rest.components().next() else {
                    continue;
                };
                let top = dir.join(first);
                let covered = kept.iter().any(|k| top.starts_with(k));
                let socket =
                    std::fs::symlink_metadata(&top).is_ok_and(|m| m.file_type().is_socket());
                if !covered && !socket {
                    kept.push(top);
                }
            }
            // A folder before what is bound inside it.
            kept.sort_by_key(|k| k.components().count());
            let keep = kept
                .into_iter()
                .filter_map(|k| source(&k).map(|fd| (k, fd)))
                .collect();
            Mask {
                dir: dir.clone(),
                keep,
            }
        })
        .collect()
}

/// Hide `m.dir` under a fresh tmpfs and bind back what it keeps.
fn apply(m: &Mask) -> Result<(), String> {
    let flags = (libc::MS_NOSUID | libc::MS_NODEV) as libc::c_ulong;
    mount(
        Path::new("tmpfs"),
        &m.dir,
        Some("tmpfs"),
        flags,
        Some(TMPFS_OPTIONS),
    )?;
    for (path, fd) in &m.keep {
        let is_dir = std::fs::metadata(format!("/proc/thread-self/fd/{}", fd.as_raw_fd()))
            .is_ok_and(|md| md.is_dir());
        if is_dir {
            std::fs::create_dir_all(path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        } else {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            std::fs::write(path, b"").map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let src = PathBuf::from(format!("/proc/thread-self/fd/{}", fd.as_raw_fd()));
        let bind = (libc::MS_BIND | libc::MS_REC) as libc::c_ulong;
        mount(&src, path, None, bind, None)?;
    }
    Ok(())
}

/// On the calling (fresh) thread: a mount namespace of its own, slave to the
/// host's, with `reach`'s masks; the namespace's fd.
fn make(reach: &Reach) -> Result<MntNs, String> {
    // SAFETY: unshare(2) of this thread's file system context and mounts.
    if unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) } != 0 {
        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
    }
    let slave = (libc::MS_REC | libc::MS_SLAVE) as libc::c_ulong;
    mount(Path::new("none"), Path::new("/"), None, slave, None)?;
    // The sources are opened here, in the new namespace before anything is
    // hidden: a bind's source must be a mount of the namespace it goes to.
    let masks = masks(reach);
    let mut private = Vec::new();
    for m in &masks {
        apply(m)?;
        if PRIVATE.iter().any(|p| Path::new(p) == m.dir) {
            let root = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(&m.dir)
                .map_err(|e| format!("open {}: {e}", m.dir.display()))?;
            private.push((m.dir.clone(), root.into()));
        }
    }
    let fd =
        std::fs::File::open("/proc/thread-self/ns/mnt").map_err(|e| format!("open ns/mnt: {e}"))?;
    Ok(MntNs {
        fd: fd.into(),
        private,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_root_is_reported_as_shared() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return;
        }
        let (ns, mounts) = MntNs::for_scenario(&Reach::default());
        assert!(ns.is_none());
        assert!(matches!(mounts, Mounts::Shared(why) if why.contains("not root")));
    }

    #[test]
    fn masks_keep_the_scenario_and_the_first_folder_of_each_path_only() {
        let base = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let tool = base.path().join("bin/tool.sh");
        std::fs::create_dir_all(tool.parent().unwrap()).unwrap();
        std::fs::write(&tool, b"").unwrap();
        let art = tempfile::tempdir_in("/tmp").unwrap();
        let scenario = art.path().join("row");
        std::fs::create_dir_all(&scenario).unwrap();
        let reach = Reach {
            scenario: scenario.clone(),
            artifacts: Some(art.path().to_path_buf()),
            paths: vec![
                tool.clone(),
                PathBuf::from("/tmp"),
                PathBuf::from("relative"),
            ],
        };
        let masks = masks(&reach);
        let tmp = masks.iter().find(|m| m.dir == Path::new("/tmp")).unwrap();
        let kept: Vec<&PathBuf> = tmp.keep.iter().map(|(p, _)| p).collect();
        let base = std::fs::canonicalize(base.path()).unwrap();
        let scenario = std::fs::canonicalize(&scenario).unwrap();
        assert!(kept.contains(&&base), "{kept:?}");
        assert!(kept.contains(&&scenario), "{kept:?}");
        assert_eq!(kept.len(), 2, "/tmp itself is never kept whole: {kept:?}");
        let a = masks
            .iter()
            .find(|m| m.dir == std::fs::canonicalize(art.path()).unwrap());
        let kept: Vec<&PathBuf> = a.unwrap().keep.iter().map(|(p, _)| p).collect();
        assert_eq!(kept, vec![&scenario]);
    }
}
