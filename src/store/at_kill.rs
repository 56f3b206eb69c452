//! Copies of the store for a kill aimed at a store write ([`super::writes`]):
//! the store's files (a SQLite database with its `-wal`, `-journal` and
//! `-shm`, or the JSONL transcripts the profile's glob matches), copied when
//! the trigger arms (the reference: before the write the kill is aimed at,
//! the agent waiting on a held model reply) and again once the killed agent
//! is gone and before it is started again; both read after the run beside
//! the final store (`store_kept_across_kill`). Every file is opened below
//! HOME with no symlink followed anywhere on the way (the agent may be
//! alive).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The most bytes copied of one store file; a larger store is not copied
/// (the check is then not made, saying why).
pub const MAX_COPY_BYTES: u64 = 1 << 30;

/// The files SQLite writes for the database at `db`: the database, its
/// write-ahead log, its rollback journal and its shared-memory index.
pub(super) fn siblings(db: &Path) -> [PathBuf; 4] {
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

/// Copy the store's files into `into` (see [`copy_sqlite`] and
/// [`copy_jsonl`]).
pub fn copy(files: &super::writes::StoreFiles, into: &Path) -> Result<Option<PathBuf>, String> {
    match files {
        super::writes::StoreFiles::Sqlite { home, db } => copy_sqlite(home, db, into),
        super::writes::StoreFiles::Jsonl { home, pattern } => copy_jsonl(home, pattern, into),
    }
}

/// Copy the JSONL transcripts `pattern` matches inside `home` (each inside
/// HOME, never through a symlink) to the same places under `into`, which
/// then stands for HOME; `into` (`None`: no transcript yet), or why not.
pub fn copy_jsonl(home: &Path, pattern: &Path, into: &Path) -> Result<Option<PathBuf>, String> {
    let (found, capped) = super::glob::find(home, pattern)?;
    if capped {
        return Err(format!(
            "more than {} entries under the transcripts' folder; not copied",
            super::glob::MAX_ENTRIES
        ));
    }
    let mut copied = false;
    for src in found {
        let rel = below(home, &src)?;
        let (file, meta) = crate::output::open_regular_beneath(home, rel)
            .map_err(|e| format!("{}: {e}", src.display()))?;
        if meta.len() > MAX_COPY_BYTES {
            return Err(format!(
                "{} holds {} bytes, more than the {MAX_COPY_BYTES} copied",
                src.display(),
                meta.len()
            ));
        }
        let dst = into.join(rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        copy_file(file, &dst)?;
        copied = true;
    }
    Ok(copied.then(|| into.to_path_buf()))
}

/// `path` relative to `home` (lexically: the open below it follows no link).
fn below<'p>(home: &Path, path: &'p Path) -> Result<&'p Path, String> {
    path.strip_prefix(home)
        .map_err(|_| format!("{} is not inside HOME", path.display()))
}

/// Copy the SQLite store at `db` (inside `home`; never through a symlink)
/// and the files beside it that exist into `into`; the copied database's
/// path (`None`: there was no store), or why it could not be copied. The
/// originals are only read; an agent writing them meanwhile (the copy when
/// the trigger arms) leaves a copy SQLite reads as after a crash at that
/// moment.
pub fn copy_sqlite(home: &Path, db: &Path, into: &Path) -> Result<Option<PathBuf>, String> {
    if db.symlink_metadata().is_err() {
        return Ok(None);
    }
    below(home, db)?;
    std::fs::create_dir_all(into).map_err(|e| format!("{}: {e}", into.display()))?;
    let mut copied = None;
    for (k, src) in siblings(db).iter().enumerate() {
        let (file, meta) = match crate::output::open_regular_beneath(home, below(home, src)?) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
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
        assert!(err.contains("link.db"), "{err}");
        assert!(!home.path().join("copy2/link.db").exists());
        // A link on the way to the store (a folder the agent swapped) is
        // refused too.
        std::fs::create_dir(outside.path().join("d")).unwrap();
        std::fs::write(outside.path().join("d/state.db"), b"secret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("d"), home.path().join("d")).unwrap();
        let via = home.path().join("d/state.db");
        assert!(copy_sqlite(home.path(), &via, &home.path().join("copy4")).is_err());
        assert!(!home.path().join("copy4/state.db").exists());
        let none = copy_sqlite(
            home.path(),
            &home.path().join("none.db"),
            &home.path().join("c3"),
        );
        assert_eq!(none, Ok(None));
    }
}
