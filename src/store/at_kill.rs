//! The store as a kill left it: the agent's next write to its SQLite store
//! (the database, its `-wal` or its `-journal`, reported by inotify on the
//! store's folder, never found by sleeping), which a `store_write_after_calls`
//! trigger aims a kill at; and the copy of the store's files taken once the
//! killed agent is gone and before it is started again, read after the run
//! beside the final store (`store_kept_across_kill`).

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;

/// The most bytes copied of one store file; a larger store is not copied
/// (the check is then not made, saying why).
pub const MAX_COPY_BYTES: u64 = 1 << 30;

/// The files SQLite writes for the database at `db`: the database, its
/// write-ahead log, its rollback journal and its shared-memory index.
fn siblings(db: &Path) -> [PathBuf; 4] {
    let with = |suffix: &str| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [
        db.to_path_buf(),
        with("-wal"),
        with("-journal"),
        with("-shm"),
    ]
}

/// Writes to the SQLite store at `db` and its `-wal`/`-journal` (a write,
/// or a rename onto one), as inotify reports them on the store's folder from
/// the moment [`StoreWrites::watch`] returns.
pub struct StoreWrites {
    fd: AsyncFd<Watch>,
    names: Vec<std::ffi::OsString>,
}

impl StoreWrites {
    /// Start watching (inside a tokio runtime); why not when the folder
    /// cannot be watched (it does not exist yet, or inotify is unavailable).
    pub fn watch(db: &Path) -> Result<StoreWrites, String> {
        let dir = db
            .parent()
            .ok_or_else(|| format!("{}: the store has no folder to watch", db.display()))?;
        let names = siblings(db)[..3]
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_owned()))
            .collect();
        let fd = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| format!("inotify: {e}"))?;
        fd.add_watch(dir, AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_MOVED_TO)
            .map_err(|e| format!("{}: cannot watch the store's folder: {e}", dir.display()))?;
        // SAFETY: the inotify descriptor is owned by the `Watch` the AsyncFd
        // owns: it stays open, the same descriptor, as long as the AsyncFd.
        let fd =
            unsafe { AsyncFd::register_with_interest(Watch(fd), tokio::io::Interest::READABLE) }
                .map_err(|e| format!("inotify: {}", e.into_parts().1))?;
        Ok(StoreWrites { fd, names })
    }

    /// Resolves at the next write to one of the store's files.
    pub async fn next(&mut self) -> Result<(), String> {
        loop {
            let mut ready = self
                .fd
                .readable()
                .await
                .map_err(|e| format!("inotify: {e}"))?;
            match ready.get_inner().0.read_events() {
                Ok(events) => {
                    let ours = |e: &nix::sys::inotify::InotifyEvent| {
                        e.name.as_ref().is_some_and(|n| self.names.contains(n))
                    };
                    if events.iter().any(ours) {
                        return Ok(());
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                Err(e) => return Err(format!("inotify: {e}")),
            }
        }
    }
}

/// An inotify instance as tokio's readiness source.
struct Watch(Inotify);

impl std::os::fd::AsRawFd for Watch {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// Copy the SQLite store at `db` (inside `home`; never through a symlink)
/// and the files beside it that exist into `into`; the copied database's
/// path (`None`: there was no store), or why it could not be copied. The agent must be dead (nothing
/// writes the files while they are copied); the originals are only read.
pub fn copy_sqlite(home: &Path, db: &Path, into: &Path) -> Result<Option<PathBuf>, String> {
    if db.symlink_metadata().is_err() {
        return Ok(None);
    }
    let real = crate::safe_path::resolve_inside(home, db)?;
    std::fs::create_dir_all(into).map_err(|e| format!("{}: {e}", into.display()))?;
    let mut copied = None;
    for (k, src) in siblings(&real).iter().enumerate() {
        let (file, meta) = match crate::input::open_regular(src, crate::input::Follow::No) {
            Ok(f) => f,
            Err(crate::input::OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                continue
            }
            Err(e) => return Err(format!("{}: {e}", src.display())),
        };
        if meta.len() > MAX_COPY_BYTES {
            return Err(format!(
                "{} holds {} bytes, more than the {} copied",
                src.display(),
                meta.len(),
                MAX_COPY_BYTES
            ));
        }
        let name = src.file_name().unwrap_or_default();
        let dst = into.join(name);
        copy_file(file, &dst)?;
        if k == 0 {
            copied = Some(dst);
        }
    }
    Ok(copied)
}

fn copy_file(file: std::fs::File, dst: &Path) -> Result<(), String> {
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)
        .map_err(|e| format!("{}: {e}", dst.display()))?;
    std::io::copy(&mut file.take(MAX_COPY_BYTES), &mut out)
        .and_then(|_| out.flush())
        .map_err(|e| format!("{}: {e}", dst.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_to_the_wal_resolves_and_a_foreign_file_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        std::fs::write(&db, b"x").unwrap();
        let mut writes = StoreWrites::watch(&db).unwrap();
        std::fs::write(dir.path().join("state.db.bak"), b"y").unwrap();
        let next = writes.next();
        tokio::pin!(next);
        use futures_util::FutureExt;
        let early = (&mut next).now_or_never();
        assert!(early.is_none(), "a foreign file resolved the watch");
        std::fs::write(dir.path().join("state.db-wal"), b"z").unwrap();
        assert_eq!(next.await, Ok(()));
    }

    #[tokio::test]
    async fn a_store_folder_that_does_not_exist_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = StoreWrites::watch(&dir.path().join("no/such/state.db"))
            .err()
            .unwrap();
        assert!(err.contains("cannot watch the store's folder"), "{err}");
    }

    #[test]
    fn the_copy_takes_the_database_and_its_wal_and_refuses_a_symlink() {
        let home = tempfile::tempdir().unwrap();
        let db = home.path().join("state.db");
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (7);")
            .unwrap();
        let into = home.path().join("copy");
        let copy = copy_sqlite(home.path(), &db, &into).unwrap().unwrap();
        assert!(into.join("state.db-wal").exists());
        let read = rusqlite::Connection::open(&copy).unwrap();
        let x: i64 = read.query_row("SELECT x FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(x, 7);
        drop(conn);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("real.db"), b"secret").unwrap();
        let link = home.path().join("link.db");
        std::os::unix::fs::symlink(outside.path().join("real.db"), &link).unwrap();
        let err = copy_sqlite(home.path(), &link, &home.path().join("copy2")).unwrap_err();
        assert!(err.contains("outside the agent's HOME"), "{err}");
        let none = copy_sqlite(
            home.path(),
            &home.path().join("none.db"),
            &home.path().join("c3"),
        );
        assert_eq!(none, Ok(None));
    }
}
