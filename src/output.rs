//! Every file chaosrun writes, written safely.
//!
//! * **Outputs the user names** (`--json`, `--junit`, `--html`, `merge
//!   --json`) are checked before anything runs ([`check_outputs`]): the
//!   directory must exist and be writable; an existing target must be a
//!   regular file (not `/dev/full`, a directory, a fifo or a symlink); no
//!   target may be an input of the run (the table, the profile, every file the
//!   profile names, the chaosrun binary), compared by device and inode, so a
//!   hard link or a `..` spelling is caught too; and no two outputs share a
//!   path. Each write ([`write_atomic`]) is a new temp file created
//!   exclusively (`O_EXCL`) beside the target, then renamed over it. A write
//!   that fails is remembered ([`write_failed`]) so the run cannot exit 0.
//! * **Files inside a run folder** the agent could tamper with (artifacts,
//!   resume specs) go through [`write_beneath`]: every directory below a
//!   trusted base is opened with `O_NOFOLLOW`, the temp file is created
//!   exclusively in it and renamed by directory handle, so a symlink the agent
//!   planted (`observation.json -> ../../scenarios.yaml`) is replaced, never
//!   followed.
//! * [`read_beneath`] reads a file the same way, refusing symlinks.
//! * [`write_new`]: a file that must not exist yet (`explore --out`), moved
//!   into place without replacing anything; [`write_sibling`] the fallback.
//! * [`ArtifactsDir`]: `--artifacts` made absolute and locked.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{openat, renameat, OFlag};

use crate::input::kind;
use nix::sys::stat::Mode;

static FAILED: AtomicBool = AtomicBool::new(false);

/// Whether any output write failed during this process.
pub fn write_failed() -> bool {
    FAILED.load(Ordering::SeqCst)
}

fn note<T>(r: io::Result<T>) -> io::Result<T> {
    if r.is_err() {
        FAILED.store(true, Ordering::SeqCst);
    }
    r
}

/// `p` made absolute against the current directory (not resolved: the file
/// need not exist).
pub fn absolute(p: &Path) -> io::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(p))
    }
}

/// The identity of an existing file (device, inode), following symlinks.
fn identity(p: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Check one output target; returns it with its directory resolved.
pub fn check_target(flag: &str, path: &Path, inputs: &[PathBuf]) -> Result<PathBuf, String> {
    let shown = path.display();
    let abs = absolute(path).map_err(|e| format!("{flag} {shown}: {e}"))?;
    let name = match abs.file_name() {
        Some(n) if n != OsStr::new("..") => n.to_owned(),
        _ => return Err(format!("{flag} {shown}: not a file name")),
    };
    let dir = abs.parent().unwrap_or(Path::new("/"));
    let dir = std::fs::canonicalize(dir).map_err(|e| {
        format!(
            "{flag} {shown}: its directory {} does not exist ({e}); create it first",
            dir.display()
        )
    })?;
    if !dir.is_dir() {
        return Err(format!(
            "{flag} {shown}: {} is not a directory",
            dir.display()
        ));
    }
    let target = dir.join(&name);
    if let Ok(m) = std::fs::symlink_metadata(&target) {
        if !m.file_type().is_file() {
            return Err(format!(
                "{flag} {shown} is {}; chaosrun writes only regular files: pick another path",
                kind(&m)
            ));
        }
        let id = (m.dev(), m.ino());
        if let Some(input) = inputs.iter().find(|i| identity(i) == Some(id)) {
            return Err(format!(
                "{flag} {shown} would overwrite {}, an input of this run; pick another file",
                input.display()
            ));
        }
    }
    // Writable: create (and drop) a temp file exactly as the real write will.
    tempfile::Builder::new()
        .prefix(".chaosrun-check-")
        .tempfile_in(&dir)
        .map_err(|e| format!("{flag} {shown}: cannot write in {}: {e}", dir.display()))?;
    Ok(target)
}

/// Whether `target` (as [`check_target`] returned it) and `other` (as the
/// user wrote it, existing or not) name the same place.
pub fn same_place(target: &Path, other: &Path) -> bool {
    let Ok(abs) = absolute(other) else {
        return false;
    };
    let resolved = match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or(abs.clone()),
        _ => abs.clone(),
    };
    resolved == target || std::fs::canonicalize(&abs).is_ok_and(|c| c == target)
}

/// Check every output: each alone ([`check_target`]), then no two on one path.
pub fn check_outputs(
    outputs: &[(&str, &Path)],
    inputs: &[PathBuf],
) -> Result<Vec<PathBuf>, String> {
    let mut seen: Vec<(&str, PathBuf)> = Vec::new();
    for (flag, path) in outputs {
        let target = check_target(flag, path, inputs)?;
        if let Some((other, _)) = seen.iter().find(|(_, t)| *t == target) {
            return Err(format!(
                "{other} and {flag} both write {}; give each output its own file",
                path.display()
            ));
        }
        seen.push((flag, target));
    }
    Ok(seen.into_iter().map(|(_, t)| t).collect())
}

/// Write `bytes` to `path`: a temp file created exclusively beside it, then
/// renamed over it. An existing target that is not a regular file is refused.
/// A failure is remembered (see [`write_failed`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    note(write_atomic_inner(path, &crate::redact::bytes(bytes)))
}

fn write_atomic_inner(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let abs = absolute(path)?;
    let dir = abs.parent().unwrap_or(Path::new("/"));
    if let Ok(m) = std::fs::symlink_metadata(&abs) {
        if !m.file_type().is_file() {
            return Err(io::Error::other(format!(
                "{} is {}; not replaced",
                path.display(),
                kind(&m)
            )));
        }
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".chaosrun-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_data()?;
    set_mode(tmp.as_file(), 0o644)?;
    tmp.persist(&abs).map_err(|e| e.error)?;
    Ok(())
}

/// Write `bytes` to `path`, which must not exist: a temp file created beside
/// it, then moved into place without replacing anything (`RENAME_NOREPLACE`
/// or a hard link). Something that appeared at `path` meanwhile is an
/// `AlreadyExists` error and is left as it is.
pub fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let abs = absolute(path)?;
    let dir = abs.parent().unwrap_or(Path::new("/"));
    let mut tmp = tempfile::Builder::new()
        .prefix(".chaosrun-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_data()?;
    set_mode(tmp.as_file(), 0o644)?;
    tmp.persist_noclobber(&abs).map_err(|e| e.error)?;
    Ok(())
}

/// [`write_new`] to the first free sibling of `path`: `NAME.1.EXT`,
/// `NAME.2.EXT`, … (at most 100 tries); the path written.
pub fn write_sibling(path: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    for n in 1..=100 {
        let sibling = path.with_file_name(format!("{stem}.{n}{ext}"));
        match write_new(&sibling, bytes) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            r => return r.map(|()| sibling),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{}.1{ext} … {stem}.100{ext} all exist", stem),
    ))
}

fn set_mode(f: &File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Open `base` (trusted: chaosrun made it) and each directory of `rel` below
/// it without following a symlink.
pub fn open_dir_beneath(base: &Path, rel: &Path) -> io::Result<OwnedFd> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
    let fd = openat(None, base, flags, Mode::empty()).map_err(errno)?;
    // SAFETY: openat returned a fresh descriptor we now own.
    let mut dir = unsafe { OwnedFd::from_raw_fd(fd) };
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(io::Error::other(format!(
                "{} leaves {}",
                rel.display(),
                base.display()
            )));
        };
        let fd = openat(Some(raw(&dir)), name, flags, Mode::empty()).map_err(errno)?;
        // SAFETY: as above.
        dir = unsafe { OwnedFd::from_raw_fd(fd) };
    }
    Ok(dir)
}

fn raw(fd: &OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// Write `base/rel` (rel's last component is the file name) without following
/// any symlink below `base`: temp file created exclusively, renamed over the
/// target by directory handle (a planted symlink is replaced, not followed).
/// For outputs (artifacts): a failure is remembered (see [`write_failed`]).
pub fn write_beneath(base: &Path, rel: &Path, bytes: &[u8]) -> io::Result<()> {
    note(write_run_file(base, rel, &crate::redact::bytes(bytes)))
}

/// [`write_beneath`] for chaosrun's own working files (a resume spec): the
/// same care, but a failure is the caller's to report.
pub fn write_run_file(base: &Path, rel: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} is not a file name", rel.display())))?;
    let dir = open_dir_beneath(base, rel.parent().unwrap_or(Path::new("")))?;
    let tmp = format!(
        ".{}.{:016x}.tmp",
        name.to_string_lossy(),
        rand::random::<u64>()
    );
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(
        Some(raw(&dir)),
        tmp.as_str(),
        flags,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(errno)?;
    // SAFETY: openat returned a fresh descriptor we now own.
    let mut file = unsafe { File::from_raw_fd(fd) };
    let written = file.write_all(bytes).and_then(|()| {
        renameat(Some(raw(&dir)), tmp.as_str(), Some(raw(&dir)), name).map_err(errno)
    });
    if written.is_err() {
        let _ = nix::unistd::unlinkat(
            Some(raw(&dir)),
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
    }
    written
}

/// Read at most `limit` bytes of `base/rel`, refusing a symlink anywhere
/// below `base` and anything but a regular file.
pub fn read_beneath(base: &Path, rel: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} is not a file name", rel.display())))?;
    let dir = open_dir_beneath(base, rel.parent().unwrap_or(Path::new("")))?;
    read_regular_at(&dir, name, rel, limit)
}

/// Read at most `limit` bytes of the regular file `name` in the folder
/// `dir`, the name itself not followed if it is a link (`shown` names it in
/// the error).
pub fn read_regular_at(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    shown: &Path,
    limit: u64,
) -> io::Result<Vec<u8>> {
    let (file, _) = open_regular_at(dir, name, shown)?;
    let mut out = Vec::new();
    file.take(limit).read_to_end(&mut out)?;
    Ok(out)
}

/// Open the regular file `name` in the folder `dir` for reading, the name
/// not followed if it is a link and the open never blocking (`shown` names
/// it in the error); the file and its metadata, taken on the descriptor.
pub fn open_regular_at(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    shown: &Path,
) -> io::Result<(File, std::fs::Metadata)> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = openat(Some(raw(dir)), name, flags, Mode::empty()).map_err(errno)?;
    // SAFETY: openat returned a fresh descriptor we now own.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            shown.display()
        )));
    }
    Ok((file, meta))
}

/// [`open_regular_at`] for `base/rel`, refusing a symlink anywhere below
/// `base` (a file a live agent may swap while it is read).
pub fn open_regular_beneath(base: &Path, rel: &Path) -> io::Result<(File, std::fs::Metadata)> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::other(format!("{} is not a file name", rel.display())))?;
    let dir = open_dir_beneath(base, rel.parent().unwrap_or(Path::new("")))?;
    open_regular_at(&dir, name, rel)
}

/// Open a log in a run folder the agent can write to, for appending: a
/// symlink there is refused (`O_NOFOLLOW`), the open never blocks
/// (`O_NONBLOCK`: a FIFO with no reader is an error, not a wait) and anything
/// but a regular file is refused.
pub fn append_log(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let m = file.metadata()?;
    if !m.file_type().is_file() {
        return Err(io::Error::other(format!(
            "{} is {}, not a regular file; not written",
            path.display(),
            kind(&m)
        )));
    }
    Ok(file)
}

/// The `--artifacts` directory of one run: absolute (the agent is handed
/// paths inside it, whatever the caller's working directory), empty when the
/// run starts, and locked by `.chaosrun.lock` (created exclusively, holding
/// chaosrun's pid) so a second run given the same directory is refused. The
/// lock is removed when this value is dropped.
#[derive(Debug)]
pub struct ArtifactsDir {
    pub path: PathBuf,
    lock: PathBuf,
}

/// The lock file's name inside an artifacts directory.
pub const LOCK_NAME: &str = ".chaosrun.lock";

impl ArtifactsDir {
    /// Create (or take, when empty) and lock `dir`.
    pub fn take(dir: &Path) -> Result<ArtifactsDir, String> {
        let shown = dir.display();
        let abs = absolute(dir).map_err(|e| format!("--artifacts {shown}: {e}"))?;
        if let Ok(m) = std::fs::symlink_metadata(&abs) {
            let a_dir = m.is_dir() || (m.file_type().is_symlink() && abs.is_dir());
            if !a_dir {
                let what = if m.is_file() { "a file" } else { kind(&m) };
                return Err(format!(
                    "--artifacts {shown} is {what}; give a new or empty directory"
                ));
            }
        }
        std::fs::create_dir_all(&abs).map_err(|e| format!("cannot create {shown}: {e}"))?;
        let path = std::fs::canonicalize(&abs).map_err(|e| format!("--artifacts {shown}: {e}"))?;
        let lock = path.join(LOCK_NAME);
        let mut file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Never a blocking read (an agent of that run may have put
                // a FIFO there): a regular file, its first bytes.
                let holder = crate::input::open_regular(&lock, crate::input::Follow::No)
                    .ok()
                    .map(|(f, _)| {
                        let mut text = String::new();
                        let _ = f.take(32).read_to_string(&mut text);
                        text
                    })
                    .unwrap_or_default();
                return Err(format!(
                    "--artifacts {shown} is locked by another chaosrun run (pid {}); two runs \
                     cannot share a directory: pick a new one (or remove {} if that run is gone)",
                    holder.trim(),
                    lock.display()
                ));
            }
            Err(e) => return Err(format!("--artifacts {shown}: cannot lock it: {e}")),
        };
        let _ = writeln!(file, "{}", std::process::id());
        let taken = ArtifactsDir { path, lock };
        let others = std::fs::read_dir(&taken.path)
            .map_err(|e| format!("--artifacts {shown}: {e}"))?
            .flatten()
            .any(|e| e.file_name() != LOCK_NAME);
        if others {
            return Err(format!(
                "--artifacts {shown} is not empty; chaosrun never overwrites: pick a new directory"
            ));
        }
        Ok(taken)
    }
}

impl Drop for ArtifactsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_devices_dirs_symlinks_and_inputs() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("table.yaml");
        std::fs::write(&input, "x").unwrap();
        let link = d.path().join("link.json");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let hard = d.path().join("hard.json");
        std::fs::hard_link(&input, &hard).unwrap();
        let inputs = vec![input.clone()];
        for (p, why) in [
            (Path::new("/dev/full"), "a device"),
            (d.path(), "a directory"),
            (link.as_path(), "a symbolic link"),
            (hard.as_path(), "an input of this run"),
            (input.as_path(), "an input of this run"),
            (Path::new("/proc/nope/x.json"), "does not exist"),
        ] {
            let e = check_target("--json", p, &inputs).unwrap_err();
            assert!(e.contains(why), "{p:?}: {e}");
        }
        let ok = d.path().join("out.json");
        assert_eq!(check_target("--json", &ok, &inputs).unwrap(), ok);
        let dup = check_outputs(
            &[("--json", ok.as_path()), ("--junit", ok.as_path())],
            &inputs,
        )
        .unwrap_err();
        assert!(dup.contains("--json and --junit"), "{dup}");
        // Nothing was left behind by the checks.
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn atomic_write_replaces_a_file_and_refuses_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let link = d.path().join("link.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(write_atomic(&link, b"x").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn a_new_file_never_replaces_one_that_appeared_and_the_sibling_is_free() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("found.yaml");
        write_new(&p, b"one").unwrap();
        let e = write_new(&p, b"two").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        std::fs::write(d.path().join("found.1.yaml"), "taken").unwrap();
        let kept = write_sibling(&p, b"rows").unwrap();
        assert_eq!(kept, d.path().join("found.2.yaml"));
        assert_eq!(std::fs::read(&kept).unwrap(), b"rows");
        assert_eq!(
            std::fs::read(d.path().join("found.1.yaml")).unwrap(),
            b"taken"
        );
        // No temp file is left behind.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 3);
    }

    #[test]
    fn beneath_replaces_planted_symlinks_and_refuses_symlinked_dirs() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("art");
        std::fs::create_dir_all(base.join("s1")).unwrap();
        let victim = d.path().join("table.yaml");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, base.join("s1/observation.json")).unwrap();
        write_beneath(&base, Path::new("s1/observation.json"), b"obs").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(
            std::fs::read(base.join("s1/observation.json")).unwrap(),
            b"obs"
        );
        std::os::unix::fs::symlink(d.path(), base.join("s2")).unwrap();
        assert!(write_beneath(&base, Path::new("s2/table.yaml"), b"x").is_err());
        assert!(write_beneath(&base, Path::new("../table.yaml"), b"x").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(read_beneath(&base, Path::new("s2/table.yaml"), 10).is_err());
        std::os::unix::fs::symlink(&victim, base.join("s1/log")).unwrap();
        assert!(read_beneath(&base, Path::new("s1/log"), 10).is_err());
        assert_eq!(
            read_beneath(&base, Path::new("s1/observation.json"), 2).unwrap(),
            b"ob"
        );
    }

    #[test]
    fn artifacts_dir_is_absolute_locked_and_must_be_empty() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("art");
        let a = ArtifactsDir::take(&dir).unwrap();
        assert!(a.path.is_absolute() && a.path.join(LOCK_NAME).is_file());
        let e = ArtifactsDir::take(&dir).unwrap_err();
        assert!(e.contains("locked by another chaosrun run"), "{e}");
        drop(a);
        assert!(!dir.join(LOCK_NAME).exists());
        std::fs::write(dir.join("x"), "").unwrap();
        let e = ArtifactsDir::take(&dir).unwrap_err();
        assert!(e.contains("not empty"), "{e}");
        // The refused run did not leave its lock behind.
        assert!(!dir.join(LOCK_NAME).exists());
        let e = ArtifactsDir::take(&dir.join("x")).unwrap_err();
        assert!(e.contains("is a file"), "{e}");
    }
}
