//! The agent folders in the user's cache, reached without following a link:
//! `CACHE/agents` and `CACHE/agents/NAME[@VERSION]` are opened one component
//! at a time with `O_NOFOLLOW` (a symlink there is refused, naming it and
//! the fix), and the files chaosrun writes into a folder ([`Folder::write_out`])
//! or reads from it ([`Folder::read`]) are reached the same way from the
//! folder's handle, so a planted link never sends a write or a read out of
//! the cache. The cache root itself is the user's choice and may be a link.
//! Whether chaosrun made a folder is [`super::seal`]'s.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::Mode;

use super::embedded;
use super::entry::Entry;

/// The name of an agent's folder under `CACHE/agents`: `NAME` for the pin,
/// `NAME@VERSION` for any other version.
pub fn folder_name(entry: &Entry, version: &str) -> String {
    if entry.matches(version) {
        entry.name.to_string()
    } else {
        format!("{}@{version}", entry.name)
    }
}

/// The command that makes the folder again, for refusals.
fn fix(folder: &str) -> String {
    format!("chaosrun agents setup {folder}")
}

/// The refusal of a folder chaosrun will not use: its path, why, and what
/// to do (delete it, then `agents setup`).
pub fn refusal(path: &Path, why: &str, folder: &str) -> String {
    format!(
        "{} {why}; chaosrun uses only cache folders it made itself: delete it (`rm -rf {}`) \
         and run `{}`",
        path.display(),
        path.display(),
        fix(folder)
    )
}

/// One agent folder of the cache, open: its path (for messages and for the
/// processes that run in it) and a handle reached without following a link.
pub struct Folder {
    pub path: PathBuf,
    /// `NAME` or `NAME@VERSION`.
    pub name: String,
    fd: OwnedFd,
}

const DIR: OFlag = OFlag::O_DIRECTORY
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC)
    .union(OFlag::O_RDONLY);

fn io_err(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn own(fd: i32) -> OwnedFd {
    // SAFETY: a descriptor openat just returned, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Open `name` in `parent` as a folder without following a link; with
/// `make`, create it (0700) first when it is not there. `Ok(None)`: absent.
fn open_sub(parent: &OwnedFd, name: &OsStr, make: bool) -> io::Result<Option<OwnedFd>> {
    if make {
        match nix::sys::stat::mkdirat(
            Some(parent.as_raw_fd()),
            name,
            Mode::from_bits_truncate(0o700),
        ) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    match openat(Some(parent.as_raw_fd()), name, DIR, Mode::empty()) {
        Ok(fd) => Ok(Some(own(fd))),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(io_err(e)),
    }
}

/// Why `path` (which did not open as a folder) is refused: a symlink (and
/// where it points), or something else than a folder.
fn what_is(path: &Path, e: &io::Error) -> String {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            let to = std::fs::read_link(path)
                .map(|t| format!(" (to {})", t.display()))
                .unwrap_or_default();
            format!("is a symlink{to}: chaosrun never follows a link out of its cache")
        }
        Ok(m) if !m.is_dir() => format!("is {}, not a folder", crate::input::kind(&m)),
        _ => format!("cannot be opened ({e})"),
    }
}

/// Open `CACHE/agents/FOLDER`; with `make`, create what is missing (the
/// cache root as the user named it, then `agents` and the folder, 0700).
/// `Ok(None)`: not there (without `make`). A symlink at `agents` or at the
/// folder, or anything but a folder, is refused.
pub fn open(cache: &Path, folder: &str, make: bool) -> Result<Option<Folder>, String> {
    if make {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(cache)
            .map_err(|e| format!("cannot create the cache {}: {e}", cache.display()))?;
    }
    // The root is the user's own choice: followed.
    let root = match openat(
        None,
        cache,
        OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    ) {
        Ok(fd) => own(fd),
        Err(Errno::ENOENT) => return Ok(None),
        Err(e) => return Err(format!("the cache {}: {}", cache.display(), io_err(e))),
    };
    let agents = cache.join("agents");
    let refuse = |path: &Path, e: io::Error| refusal(path, &what_is(path, &e), folder);
    let Some(parent) =
        open_sub(&root, OsStr::new("agents"), make).map_err(|e| refuse(&agents, e))?
    else {
        return Ok(None);
    };
    let path = agents.join(folder);
    let Some(fd) = open_sub(&parent, OsStr::new(folder), make).map_err(|e| refuse(&path, e))?
    else {
        return Ok(None);
    };
    Ok(Some(Folder {
        path,
        name: folder.to_string(),
        fd,
    }))
}

/// The names in `CACHE/agents` (none when it is missing or a symlink).
pub fn list(cache: &Path) -> Vec<String> {
    let Ok(root) = openat(
        None,
        cache,
        OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    ) else {
        return Vec::new();
    };
    // Checked as a folder, not a link, then listed by path (a read only).
    let Ok(Some(_)) = open_sub(&own(root), OsStr::new("agents"), false) else {
        return Vec::new();
    };
    let Ok(list) = std::fs::read_dir(cache.join("agents")) else {
        return Vec::new();
    };
    list.flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect()
}

/// `rel`'s parts, each a plain name (never `..`, `/` or `.`).
fn parts(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(io::Error::other(format!(
                "{} is not a path inside the folder",
                rel.display()
            ))),
        })
        .collect()
}

impl Folder {
    /// The folder holding `rel` (its last part the file), reached from the
    /// folder's handle without following a link; created with `make`.
    fn parent_of<'a>(&self, rel: &'a Path, make: bool) -> io::Result<(OwnedFd, &'a OsStr)> {
        let mut names = parts(rel)?;
        let file = names
            .pop()
            .ok_or_else(|| io::Error::other("an empty path"))?;
        let mut dir = self.fd.try_clone()?;
        for name in names {
            dir = open_sub(&dir, name, make)?
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        }
        Ok((dir, file))
    }

    /// Read `rel` (at most `limit` bytes): a regular file, no link followed
    /// on the way.
    pub fn read(&self, rel: &Path, limit: u64) -> io::Result<Vec<u8>> {
        let (dir, name) = self.parent_of(rel, false)?;
        crate::output::read_regular_at(&dir, name, rel, limit)
    }

    /// Does the folder hold nothing?
    pub fn is_empty(&self) -> bool {
        std::fs::read_dir(&self.path).is_ok_and(|mut l| l.next().is_none())
    }

    /// Write `bytes` as `rel` with `mode`: left alone when its content and
    /// mode are already right, else a temp file created exclusively beside
    /// it and renamed over it by handle (a link there is replaced, never
    /// followed; a link on the way is refused).
    pub fn write(&self, rel: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
        let (dir, name) = self.parent_of(rel, true)?;
        let at = Some(dir.as_raw_fd());
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        if let Ok(fd) = openat(at, name, flags, Mode::empty()) {
            let mut file = File::from(own(fd));
            let same = file.metadata().is_ok_and(|m| {
                m.is_file()
                    && m.permissions().mode() & 0o777 == mode
                    && m.len() == bytes.len() as u64
            }) && {
                let mut have = Vec::new();
                file.read_to_end(&mut have).is_ok() && have == bytes
            };
            if same {
                return Ok(());
            }
        }
        let tmp = format!(
            ".{}.{:016x}.tmp",
            name.to_string_lossy(),
            rand::random::<u64>()
        );
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd =
            openat(at, tmp.as_str(), flags, Mode::from_bits_truncate(0o600)).map_err(io_err)?;
        let mut file = File::from(own(fd));
        let done = file
            .write_all(bytes)
            .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(mode)))
            .and_then(|()| renameat(at, tmp.as_str(), at, name).map_err(io_err));
        if done.is_err() {
            let _ =
                nix::unistd::unlinkat(at, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        }
        done
    }

    /// Write the agent's files (as this chaosrun ships them) into the
    /// folder; files not among them (an install: `prefix/`, `.venv/`) are
    /// kept. The seal's name is never written from a catalog folder.
    pub fn write_out(&self, files: &[embedded::File]) -> io::Result<()> {
        for (rel, bytes, mode) in files {
            if *rel == super::seal::NAME {
                continue;
            }
            self.write(Path::new(rel), bytes, *mode)
                .map_err(|e| io::Error::new(e.kind(), format!("{rel}: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<embedded::File> {
        vec![
            ("a.yaml", b"a: 1\n", 0o644),
            ("npm/package.json", b"{}\n", 0o644),
            ("setup.sh", b"#!/bin/sh\n", 0o755),
        ]
    }

    /// The folder is written with each file's mode; a link planted on the
    /// way (a subfolder) is refused and nothing lands where it points; a
    /// link planted at a file's name is replaced, not followed.
    #[test]
    fn writes_never_follow_a_link() {
        let cache = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let dir = open(cache.path(), "x", true).unwrap().unwrap();
        dir.write_out(&files()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path.join("setup.sh")), 0o755);
        assert_eq!(mode(&cache.path().join("agents")), 0o700);
        std::fs::remove_dir_all(dir.path.join("npm")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path.join("npm")).unwrap();
        let err = dir.write_out(&files()).unwrap_err();
        assert!(err.to_string().contains("npm/package.json"), "{err}");
        std::fs::remove_file(dir.path.join("npm")).unwrap();
        std::fs::remove_file(dir.path.join("a.yaml")).unwrap();
        let target = outside.path().join("target");
        std::fs::write(&target, "mine").unwrap();
        std::os::unix::fs::symlink(&target, dir.path.join("a.yaml")).unwrap();
        dir.write_out(&files()).unwrap();
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
        assert_eq!(std::fs::read(dir.path.join("a.yaml")).unwrap(), b"a: 1\n");
        assert!(dir.read(Path::new("a.yaml"), 100).is_ok());
        assert!(dir.read(Path::new("../x"), 100).is_err());
    }

    /// A symlinked `agents` folder or agent folder is refused, naming it.
    #[test]
    fn symlinked_folders_are_refused() {
        let cache = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(cache.path().join("agents")).unwrap();
        std::os::unix::fs::symlink(outside.path(), cache.path().join("agents/x@2")).unwrap();
        let err = open(cache.path(), "x@2", true).err().unwrap();
        assert!(err.contains("agents/x@2 is a symlink"), "{err}");
        assert!(err.contains("chaosrun agents setup x@2"), "{err}");
        assert!(open(cache.path(), "y", false).unwrap().is_none());
        std::fs::remove_dir_all(cache.path().join("agents")).unwrap();
        std::os::unix::fs::symlink(outside.path(), cache.path().join("agents")).unwrap();
        let err = open(cache.path(), "y", false).err().unwrap();
        assert!(err.contains("agents is a symlink"), "{err}");
        assert!(list(cache.path()).is_empty());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
