//! The SQLite backend: a file in WAL mode with a busy timeout, checked before
//! SQLite reads it (a regular file, header, length), stamped with an
//! application id, migrated under `BEGIN IMMEDIATE`, and one `BEGIN IMMEDIATE`
//! transaction per run. Reading ([`open_read`]) opens it read-only and never
//! migrates nor switches its journal mode.

use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::schema::{latest_version, APP, MIGRATIONS};
use super::{
    attach_failing, counts, foreign, latest_row_ids, newer, Filter, RunRow, ScenarioRow, Window,
};
use crate::history::{CheckRecord, RunRecord};

/// SQLite `PRAGMA application_id` of a history file ("chrh").
const SQLITE_APP_ID: i32 = 0x6368_7268;
/// How long a writer waits for another's lock.
const BUSY: Duration = Duration::from_secs(10);

pub fn open(path: &Path, create: bool) -> Result<Connection, String> {
    let shown = path.display();
    let fail = |what: String| format!("history {shown}: {what}");
    let len = vet(path, create).map_err(fail)?;
    if len > 0 {
        check_sqlite_file(path, len).map_err(fail)?;
    }
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let mut conn =
        Connection::open_with_flags(path, flags).map_err(|e| fail(format!("cannot open: {e}")))?;
    conn.busy_timeout(BUSY)
        .map_err(|e| fail(format!("cannot set a busy timeout: {e}")))?;
    let sqlite_err = |e: rusqlite::Error| fail(message(e));
    // Another application's database is refused before anything is written
    // to it (the journal-mode switch included).
    schema_version(&conn).map_err(sqlite_err)?.map_err(fail)?;
    wal_mode(&conn).map_err(sqlite_err)?;
    // In WAL mode NORMAL never corrupts; a power cut may lose the last run.
    conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
        .map_err(sqlite_err)?;
    migrate(&mut conn).map_err(fail)?;
    Ok(conn)
}

/// Open an existing history for reading only: `SQLITE_OPEN_READ_ONLY`, no
/// journal-mode switch, no migration, so a read-only file in a read-only
/// directory reads fine. Where SQLite cannot use the WAL index read-only
/// (no `-shm` and no way to make one), it is opened `immutable`: nothing can
/// be writing a file nobody may write.
pub fn open_read(path: &Path) -> Result<Connection, String> {
    let shown = path.display();
    let fail = |what: String| format!("history {shown}: {what}");
    let len = vet(path, false).map_err(fail)?;
    if len > 0 {
        check_sqlite_file(path, len).map_err(fail)?;
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let read = |uri: String| -> rusqlite::Result<(Connection, Result<Option<i64>, String>)> {
        let conn = Connection::open_with_flags(uri, flags)?;
        conn.busy_timeout(BUSY)?;
        let version = schema_version(&conn)?;
        Ok((conn, version))
    };
    let (conn, version) = match read(uri(path, "mode=ro")) {
        Err(e) if read_only_wal(&e) => read(uri(path, "immutable=1")),
        r => r,
    }
    .map_err(|e| fail(message(e)))?;
    match version {
        Ok(None) => Err(fail(
            "an empty database: no run is recorded in it (runs are recorded with \
             `chaosrun TABLE --history FILE`)"
                .into(),
        )),
        Ok(Some(v)) if v > latest_version() => Err(fail(newer(v))),
        Ok(Some(v)) if v < latest_version() => Err(fail(format!(
            "written by an older chaosrun (history schema v{v}); record a run with this \
             chaosrun to upgrade it"
        ))),
        Ok(_) => Ok(conn),
        Err(e) => Err(fail(e)),
    }
}

/// A `file:` URI for `path` with `query` (the path percent-encoded).
fn uri(path: &Path, query: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let abs = crate::output::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = String::from("file:");
    for &b in abs.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out.push('?');
    out.push_str(query);
    out
}

/// Whether `e` is SQLite unable to open a WAL database read-only.
fn read_only_wal(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
    )
}

/// The schema version (None: an empty database), or why this is not a
/// chaosrun history; it writes nothing.
fn schema_version(conn: &Connection) -> rusqlite::Result<Result<Option<i64>, String>> {
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    if tables.is_empty() {
        return Ok(Ok(None));
    }
    let app_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    if !tables.iter().any(|t| t == "schema_version") || app_id != SQLITE_APP_ID {
        return Ok(Err(foreign(&tables)));
    }
    let row: Option<(String, i64)> = conn
        .query_row("SELECT app, version FROM schema_version", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    Ok(match row {
        Some((app, v)) if app == APP => Ok(Some(v)),
        _ => Err(foreign(&tables)),
    })
}

/// The history file's length, after making sure it is a regular file (opened
/// without blocking: a FIFO there never hangs chaosrun). Missing: 0 when
/// `create`, else an error.
fn vet(path: &Path, create: bool) -> Result<u64, String> {
    use crate::input::{open_regular, Follow, OpenError};
    match open_regular(path, Follow::Yes) {
        Ok((_, m)) => Ok(m.len()),
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound && create => Ok(0),
        Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Err("no such file (runs are recorded with `chaosrun TABLE --history FILE`)".into())
        }
        Err(OpenError::NotRegular {
            what: "a directory",
        }) => Err("is a directory, not a history file".into()),
        Err(e @ OpenError::NotRegular { .. }) => Err(format!("{e}; a history is a SQLite file")),
        Err(OpenError::Io(e)) => Err(format!("cannot open: {e}")),
    }
}

/// Switch to WAL. Several chaosrun runs may open a new history at once, and
/// the switch needs the file to itself: SQLite answers BUSY at once when two
/// connections would deadlock, without its busy handler, so retry within
/// [`BUSY`].
fn wal_mode(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + BUSY;
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => return Ok(()),
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Before SQLite reads it: the file must start with the SQLite header and be
/// as long as its header says (a truncated copy is not).
fn check_sqlite_file(path: &Path, len: u64) -> Result<(), String> {
    use std::io::Read;
    let mut head = [0u8; 100];
    let (file, _) = crate::input::open_regular(path, crate::input::Follow::Yes)
        .map_err(|e| format!("cannot read: {e}"))?;
    let n = file
        .take(100)
        .read(&mut head)
        .map_err(|e| format!("cannot read: {e}"))?;
    if n < 16 || &head[..16] != b"SQLite format 3\0" {
        return Err(
            "not a SQLite database (a chaosrun history is a SQLite file); pick another file".into(),
        );
    }
    if n < 100 {
        return Err(format!(
            "the SQLite file is truncated ({len} bytes, shorter than its header)"
        ));
    }
    let be32 = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    let page_size = match u16::from_be_bytes([head[16], head[17]]) {
        1 => 65536,
        p => u64::from(p),
    };
    // The in-header page count is valid when "version-valid-for" matches the
    // change counter (SQLite file format, offsets 28, 24 and 92).
    // While a WAL exists a checkpoint may be extending the file right now, so
    // only a file at rest is judged here (SQLite itself reports a corrupt one).
    let pages = u64::from(be32(28));
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let at_rest = std::fs::metadata(&wal).map_or(true, |m| m.len() == 0);
    if at_rest && be32(92) == be32(24) && pages > 0 && len < pages * page_size {
        return Err(format!(
            "the SQLite file is truncated ({len} bytes; its header says {} bytes); \
             restore it from a copy or start a new history file",
            pages * page_size
        ));
    }
    Ok(())
}

pub fn message(e: rusqlite::Error) -> String {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseCorrupt) | Some(rusqlite::ErrorCode::NotADatabase) => {
            format!(
                "the database is corrupt ({e}); restore it from a copy or start a new history file"
            )
        }
        Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked) => {
            format!(
                "the database stayed locked by another writer for {} s ({e})",
                BUSY.as_secs()
            )
        }
        _ => e.to_string(),
    }
}

/// Read `(app, version)` and bring the schema to [`latest_version`].
fn migrate(conn: &mut Connection) -> Result<(), String> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(message)?;
    let tables: Vec<String> = tx
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(message)?;
    let mut version = 0;
    if !tables.is_empty() {
        let app_id: i32 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(message)?;
        if !tables.iter().any(|t| t == "schema_version") || app_id != SQLITE_APP_ID {
            return Err(foreign(&tables));
        }
        let row: Option<(String, i64)> = tx
            .query_row("SELECT app, version FROM schema_version", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(|_| foreign(&tables))?;
        match row {
            Some((app, v)) if app == APP => version = v,
            _ => return Err(foreign(&tables)),
        }
    } else {
        tx.execute_batch(&format!(
            "PRAGMA application_id = {SQLITE_APP_ID};
             CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL);
             INSERT INTO schema_version VALUES ('{APP}', 0);"
        ))
        .map_err(message)?;
    }
    if version > latest_version() {
        return Err(newer(version));
    }
    for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(m.sqlite)
            .and_then(|()| tx.execute("UPDATE schema_version SET version = ?1", [i as i64 + 1]))
            .map_err(|e| format!("migration to schema v{}: {}", i + 1, message(e)))?;
    }
    tx.commit().map_err(message)
}

pub fn record(conn: &mut Connection, run: &RunRecord, uid: &str) -> rusqlite::Result<i64> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (passed, failed) = counts(run);
    tx.execute(
        "INSERT INTO runs (uid, chaosrun_version, table_path, table_sha256, agent, agent_version,
           seed, shard, started_ms, finished_ms, ci_commit, ci_branch, ci_run_url, passed, failed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        params![
            uid,
            run.chaosrun_version,
            run.table_path,
            run.table_sha256,
            run.agent,
            run.agent_version,
            run.seed,
            run.shard,
            run.started_ms,
            run.finished_ms,
            run.ci.commit,
            run.ci.branch,
            run.ci.run_url,
            passed,
            failed
        ],
    )?;
    let run_id = tx.last_insert_rowid();
    {
        let mut scen = tx.prepare(
            "INSERT INTO scenario_runs (run_id, scenario, attempt, verdict, seconds, main_calls, run_started_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        let mut check = tx.prepare(
            "INSERT INTO checks (scenario_run_id, invariant, name, status, message)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for s in &run.scenarios {
            scen.execute(params![
                run_id,
                s.id,
                s.attempt,
                s.verdict,
                s.seconds,
                s.main_calls as i64,
                run.started_ms
            ])?;
            let sid = tx.last_insert_rowid();
            for c in &s.checks {
                check.execute(params![sid, c.invariant, c.name, c.status, c.message])?;
            }
        }
    }
    tx.commit()?;
    Ok(run_id)
}

fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

pub fn window(conn: &Connection, f: &Filter) -> rusqlite::Result<Window> {
    let mut runs: Vec<RunRow> = conn
        .prepare_cached(
            "SELECT id, started_ms, agent, agent_version, ci_commit, ci_run_url FROM runs
             WHERE (?1 IS NULL OR agent = ?1) AND started_ms >= ?2
             ORDER BY started_ms DESC, id DESC LIMIT ?3",
        )?
        .query_map(
            params![f.agent, f.since_ms.unwrap_or(i64::MIN), f.last as i64],
            |r| {
                Ok(RunRow {
                    id: r.get(0)?,
                    started_ms: r.get(1)?,
                    agent: r.get(2)?,
                    agent_version: r.get(3)?,
                    commit: r.get(4)?,
                    run_url: r.get(5)?,
                })
            },
        )?
        .collect::<Result<_, _>>()?;
    runs.reverse();
    if runs.is_empty() {
        return Ok(Window::default());
    }
    let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
    // Integers only: the list is built from ids, never from input text.
    let mut rows: Vec<ScenarioRow> = conn
        .prepare(&format!(
            "SELECT run_id, scenario, attempt, verdict, seconds, main_calls, id
             FROM scenario_runs WHERE run_id IN ({}) ORDER BY run_id, id",
            id_list(&ids)
        ))?
        .query_map([], |r| {
            Ok(ScenarioRow {
                run_id: r.get(0)?,
                scenario: r.get(1)?,
                attempt: r.get::<_, i64>(2)? as u32,
                verdict: r.get(3)?,
                seconds: r.get(4)?,
                main_calls: r.get::<_, i64>(5)? as u64,
                failing: Vec::new(),
                row_id: r.get(6)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let latest = latest_row_ids(&rows);
    let failing: Vec<(i64, CheckRecord)> = conn
        .prepare(&format!(
            "SELECT scenario_run_id, invariant, name, status, message FROM checks
             WHERE scenario_run_id IN ({}) AND status <> 'pass' ORDER BY rowid",
            id_list(&latest)
        ))?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                CheckRecord {
                    invariant: r.get(1)?,
                    name: r.get(2)?,
                    status: r.get(3)?,
                    message: r.get(4)?,
                },
            ))
        })?
        .collect::<Result<_, _>>()?;
    attach_failing(&mut rows, failing);
    Ok(Window { runs, rows })
}
