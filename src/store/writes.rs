//! Writes to the agent's store as inotify reports them (never found by
//! sleeping), which a `store_write_after_calls` trigger aims a fault at: for
//! a SQLite store, a write to the database, its `-wal` or its `-journal` (or
//! a rename onto one) in the store's folder; for JSONL transcripts, a write
//! to (or a rename onto) a file the profile's glob matches, in the glob's
//! folder and every folder below it, folders the agent creates included (a
//! folder that does not exist yet is watched from its nearest existing
//! parent inside HOME).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use tokio::io::unix::AsyncFd;

/// The most folders one watch follows (a HOME that grows past it is
/// watched in part).
pub const MAX_DIRS: usize = 10_000;

/// What counts as a write to the store.
enum Target {
    /// The database's file names in its one folder.
    Sqlite(Vec<OsString>),
    /// The glob's components relative to HOME; every watched folder by its
    /// descriptor.
    Glob {
        home: PathBuf,
        pattern: Vec<String>,
        dirs: HashMap<WatchDescriptor, PathBuf>,
    },
}

/// The files of an agent's store on disk, as a fault aimed at its writes
/// watches and copies them.
#[derive(Debug, Clone)]
pub enum StoreFiles {
    /// A SQLite database (absolute, inside `home`).
    Sqlite { home: PathBuf, db: PathBuf },
    /// JSONL transcripts: the glob, absolute, inside `home`.
    Jsonl { home: PathBuf, pattern: PathBuf },
}

/// Writes to one store, from the moment the watch is made.
pub struct StoreWrites {
    fd: AsyncFd<Watch>,
    target: Target,
}

/// An inotify instance as tokio's readiness source.
struct Watch(Inotify);

impl AsRawFd for Watch {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

const FILE_EVENTS: AddWatchFlags = AddWatchFlags::IN_MODIFY.union(AddWatchFlags::IN_MOVED_TO);

fn inotify() -> Result<Inotify, String> {
    Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
        .map_err(|e| format!("inotify: {e}"))
}

fn register(fd: Inotify, target: Target) -> Result<StoreWrites, String> {
    // SAFETY: the inotify descriptor is owned by the `Watch` the AsyncFd
    // owns: it stays open, the same descriptor, as long as the AsyncFd.
    let fd = unsafe { AsyncFd::register_with_interest(Watch(fd), tokio::io::Interest::READABLE) }
        .map_err(|e| format!("inotify: {}", e.into_parts().1))?;
    Ok(StoreWrites { fd, target })
}

impl StoreWrites {
    /// Watch `files` (inside a tokio runtime).
    pub fn of(files: &StoreFiles) -> Result<StoreWrites, String> {
        match files {
            StoreFiles::Sqlite { db, .. } => StoreWrites::sqlite(db),
            StoreFiles::Jsonl { home, pattern } => StoreWrites::glob(home, pattern),
        }
    }

    /// Watch the SQLite store at `db` (inside a tokio runtime); why not when
    /// its folder cannot be watched (it does not exist yet, or inotify is
    /// unavailable).
    pub fn sqlite(db: &Path) -> Result<StoreWrites, String> {
        let dir = db
            .parent()
            .ok_or_else(|| format!("{}: the store has no folder to watch", db.display()))?;
        let names = super::at_kill::siblings(db)[..3]
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_owned()))
            .collect();
        let fd = inotify()?;
        fd.add_watch(dir, FILE_EVENTS)
            .map_err(|e| format!("{}: cannot watch the store's folder: {e}", dir.display()))?;
        register(fd, Target::Sqlite(names))
    }

    /// Watch the JSONL transcripts `pattern` (absolute, inside `home`)
    /// matches, from the glob's fixed folder or its nearest existing parent.
    pub fn glob(home: &Path, pattern: &Path) -> Result<StoreWrites, String> {
        let parts = super::glob::parts_below(home, pattern)?;
        let mut root = home.to_path_buf();
        for c in parts.iter().take(parts.len().saturating_sub(1)) {
            if super::glob::wild(c) || !root.join(c).is_dir() {
                break;
            }
            root.push(c);
        }
        let fd = inotify()?;
        let mut target = Target::Glob {
            home: home.to_path_buf(),
            pattern: parts,
            dirs: HashMap::new(),
        };
        add_tree(&fd, &mut target, &root);
        if matches!(&target, Target::Glob { dirs, .. } if dirs.is_empty()) {
            return Err(format!(
                "{}: cannot watch the transcripts' folder",
                root.display()
            ));
        }
        register(fd, target)
    }

    /// Forget the writes reported so far, without waiting (a folder one of
    /// them made is watched from now on): the next write [`Self::next`]
    /// resolves at is one made after this call.
    pub fn drain(&mut self) {
        let StoreWrites { fd, target } = self;
        let inotify = &fd.get_ref().0;
        while let Ok(events) = inotify.read_events() {
            if events.is_empty() {
                break;
            }
            for e in &events {
                target.written(inotify, e);
            }
        }
    }

    /// Resolves at the next write to one of the store's files.
    pub async fn next(&mut self) -> Result<(), String> {
        let StoreWrites { fd, target } = self;
        loop {
            let mut ready = fd.readable().await.map_err(|e| format!("inotify: {e}"))?;
            let inotify = &ready.get_inner().0;
            match inotify.read_events() {
                Ok(events) => {
                    // Every event is seen (new folders get their watch)
                    // before the answer.
                    let hits = events.iter().filter(|e| target.written(inotify, e)).count();
                    if hits > 0 {
                        return Ok(());
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                Err(e) => return Err(format!("inotify: {e}")),
            }
        }
    }
}

impl Target {
    /// Whether `e` is a write to the store; a folder created under a
    /// watched one is watched from now on (and a transcript already written
    /// in it counts as a write).
    fn written(&mut self, fd: &Inotify, e: &InotifyEvent) -> bool {
        let Some(name) = &e.name else { return false };
        match self {
            Target::Sqlite(names) => names.contains(name),
            Target::Glob { dirs, .. } => {
                let Some(path) = dirs.get(&e.wd).map(|d| d.join(name)) else {
                    return false;
                };
                if e.mask.contains(AddWatchFlags::IN_ISDIR) {
                    return add_tree(fd, self, &path);
                }
                e.mask.intersects(FILE_EVENTS) && self.matches(&path)
            }
        }
    }

    /// Whether `path` is one of the glob's transcripts.
    fn matches(&self, path: &Path) -> bool {
        let Target::Glob { home, pattern, .. } = self else {
            return false;
        };
        let Ok(comps) = super::glob::parts_below(home, path) else {
            return false;
        };
        let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
        let pat: Vec<&str> = pattern.iter().map(String::as_str).collect();
        super::glob::matches(&pat, &comps)
    }
}

/// Watch `root` and every folder below it (never through a symlink; at most
/// [`MAX_DIRS`] in all); whether a non-empty transcript is already there.
fn add_tree(fd: &Inotify, target: &mut Target, root: &Path) -> bool {
    let mut found = false;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Target::Glob { dirs, .. } = target else {
            return false;
        };
        if dirs.len() >= MAX_DIRS {
            break;
        }
        let flags = FILE_EVENTS | AddWatchFlags::IN_CREATE | AddWatchFlags::IN_ONLYDIR;
        let Ok(wd) = fd.add_watch(&dir, flags) else {
            continue;
        };
        dirs.insert(wd, dir.clone());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => {
                    let written = e.metadata().is_ok_and(|m| m.len() > 0);
                    found |= written && target.matches(&e.path());
                }
                _ => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_write_to_the_wal_resolves_and_a_foreign_file_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        std::fs::write(&db, b"x").unwrap();
        let mut writes = StoreWrites::sqlite(&db).unwrap();
        std::fs::write(dir.path().join("state.db.bak"), b"y").unwrap();
        let next = writes.next();
        tokio::pin!(next);
        assert!(
            (&mut next).now_or_never().is_none(),
            "a foreign file resolved the watch"
        );
        std::fs::write(dir.path().join("state.db-wal"), b"z").unwrap();
        assert_eq!(next.await, Ok(()));
    }

    #[tokio::test]
    async fn a_drained_write_does_not_resolve_the_next_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        std::fs::write(&db, b"x").unwrap();
        let mut writes = StoreWrites::sqlite(&db).unwrap();
        std::fs::write(dir.path().join("state.db-wal"), b"before").unwrap();
        writes.drain();
        {
            let next = writes.next();
            tokio::pin!(next);
            assert!(
                (&mut next).now_or_never().is_none(),
                "a drained write resolved the watch"
            );
        }
        std::fs::write(dir.path().join("state.db-wal"), b"after").unwrap();
        assert_eq!(writes.next().await, Ok(()));
    }

    #[tokio::test]
    async fn a_store_folder_that_does_not_exist_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = StoreWrites::sqlite(&dir.path().join("no/such/state.db"))
            .err()
            .unwrap();
        assert!(err.contains("cannot watch the store's folder"), "{err}");
    }

    #[tokio::test]
    async fn a_transcript_in_a_folder_made_after_the_watch_resolves_it() {
        let home = tempfile::tempdir().unwrap();
        let pattern = home.path().join(".claude/projects/**/*.jsonl");
        let mut writes = StoreWrites::glob(home.path(), &pattern).unwrap();
        // Folders the agent makes, and a file the glob does not match.
        let project = home.path().join(".claude/projects/p1");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(home.path().join(".claude/settings.json"), b"{}").unwrap();
        let next = writes.next();
        tokio::pin!(next);
        assert!(
            (&mut next).now_or_never().is_none(),
            "a foreign file resolved the watch"
        );
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(project.join("s.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"{}\n").unwrap();
        assert_eq!(next.await, Ok(()));
    }
}
