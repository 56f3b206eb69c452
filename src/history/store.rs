//! The history database: a SQLite file (WAL, busy timeout) or, for a URL
//! `postgres://…`, a PostgreSQL database that CI shards share.
//!
//! The schema is versioned (table `schema_version`: the app name and the
//! version) and brought up to date by [`MIGRATIONS`] on open, under a lock so
//! concurrent first writers agree. A file that is not SQLite, a truncated or
//! corrupt one, another application's database or a newer schema is an `Err`
//! with a sentence saying so (the CLI exits 2), never a panic. One run is
//! written in one transaction, keyed by a random uid, so concurrent writers
//! never lose or duplicate a run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::{CheckRecord, RunRecord};

/// The `app` value in `schema_version`: what says "this is a chaosrun history".
pub const APP: &str = "chaosrun-history";
/// SQLite `PRAGMA application_id` of a history file ("chrh").
const SQLITE_APP_ID: i32 = 0x6368_7268;
/// How long a writer waits for another's lock.
const BUSY: Duration = Duration::from_secs(10);

/// Schema migrations per backend; migration `i` brings the schema to version
/// `i + 1`. Never edit a released one: append.
pub const MIGRATIONS: &[Migration] = &[Migration {
    sqlite: "
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  uid TEXT NOT NULL UNIQUE,
  chaosrun_version TEXT NOT NULL,
  table_path TEXT, table_sha256 TEXT,
  agent TEXT NOT NULL, agent_version TEXT,
  seed TEXT, shard TEXT,
  started_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL,
  ci_commit TEXT, ci_branch TEXT, ci_run_url TEXT,
  passed INTEGER NOT NULL, failed INTEGER NOT NULL);
CREATE INDEX runs_by_time ON runs(started_ms, id);
CREATE INDEX runs_by_agent_time ON runs(agent, started_ms, id);
CREATE TABLE scenario_runs (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  scenario TEXT NOT NULL, attempt INTEGER NOT NULL,
  verdict TEXT NOT NULL, seconds REAL NOT NULL, main_calls INTEGER NOT NULL,
  run_started_ms INTEGER NOT NULL,
  UNIQUE (run_id, scenario, attempt));
CREATE INDEX scenario_runs_by_scenario_time ON scenario_runs(scenario, run_started_ms);
CREATE TABLE checks (
  scenario_run_id INTEGER NOT NULL REFERENCES scenario_runs(id),
  invariant TEXT NOT NULL, name TEXT NOT NULL,
  status TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX checks_by_scenario_run ON checks(scenario_run_id);",
    postgres: "
CREATE TABLE runs (
  id BIGSERIAL PRIMARY KEY,
  uid TEXT NOT NULL UNIQUE,
  chaosrun_version TEXT NOT NULL,
  table_path TEXT, table_sha256 TEXT,
  agent TEXT NOT NULL, agent_version TEXT,
  seed TEXT, shard TEXT,
  started_ms BIGINT NOT NULL, finished_ms BIGINT NOT NULL,
  ci_commit TEXT, ci_branch TEXT, ci_run_url TEXT,
  passed INTEGER NOT NULL, failed INTEGER NOT NULL);
CREATE INDEX runs_by_time ON runs(started_ms, id);
CREATE INDEX runs_by_agent_time ON runs(agent, started_ms, id);
CREATE TABLE scenario_runs (
  id BIGSERIAL PRIMARY KEY,
  run_id BIGINT NOT NULL REFERENCES runs(id),
  scenario TEXT NOT NULL, attempt INTEGER NOT NULL,
  verdict TEXT NOT NULL, seconds DOUBLE PRECISION NOT NULL, main_calls BIGINT NOT NULL,
  run_started_ms BIGINT NOT NULL,
  UNIQUE (run_id, scenario, attempt));
CREATE INDEX scenario_runs_by_scenario_time ON scenario_runs(scenario, run_started_ms);
CREATE TABLE checks (
  scenario_run_id BIGINT NOT NULL REFERENCES scenario_runs(id),
  invariant TEXT NOT NULL, name TEXT NOT NULL,
  status TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX checks_by_scenario_run ON checks(scenario_run_id);",
}];

/// One schema step, in each backend's dialect.
pub struct Migration {
    pub sqlite: &'static str,
    pub postgres: &'static str,
}

/// The schema version this chaosrun writes and reads.
pub fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// A recorded run, as the history window lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: i64,
    pub started_ms: i64,
    pub agent: String,
    pub agent_version: Option<String>,
    pub commit: Option<String>,
    pub run_url: Option<String>,
}

/// One scenario run of a run in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioRow {
    pub run_id: i64,
    pub scenario: String,
    pub attempt: u32,
    pub verdict: String,
    pub seconds: f64,
    pub main_calls: u64,
    /// Its checks that did not pass (filled for each scenario's latest run only).
    pub failing: Vec<CheckRecord>,
    pub(crate) row_id: i64,
}

/// The last runs (oldest first) and their scenario runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    pub runs: Vec<RunRow>,
    pub rows: Vec<ScenarioRow>,
}

/// Which runs `window` reads.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub last: usize,
    pub agent: Option<String>,
    /// Unix milliseconds: runs started at or after.
    pub since_ms: Option<i64>,
}

/// An open history database.
pub enum Store {
    Sqlite { conn: Connection, path: PathBuf },
    Postgres(Box<Pg>),
}

/// A Postgres connection with its own small runtime, usable from any thread
/// (inside or outside another runtime).
pub struct Pg {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    shown: String,
}

impl Pg {
    fn block<T: Send>(&self, f: impl std::future::Future<Output = T> + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| self.rt.block_on(f))
                .join()
                .expect("postgres worker thread")
        })
    }
}

/// Is `target` a Postgres URL (else a SQLite file path)?
pub fn is_postgres(target: &str) -> bool {
    target.starts_with("postgres://") || target.starts_with("postgresql://")
}

/// `target` with any password in a URL replaced by `***`, for messages.
pub fn redact(target: &str) -> String {
    if let Some((scheme, rest)) = target.split_once("://") {
        if let Some((auth, host)) = rest.split_once('@') {
            if let Some((user, _)) = auth.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
    }
    target.to_string()
}

impl Store {
    /// Open the history at `target` (a SQLite path, or a `postgres://` URL),
    /// creating a SQLite file only when `create`, and migrate its schema.
    pub fn open(target: &str, create: bool) -> Result<Store, String> {
        if is_postgres(target) {
            Store::open_postgres(target)
        } else {
            Store::open_sqlite(Path::new(target), create)
        }
    }

    /// A human name of the database, for messages.
    pub fn shown(&self) -> String {
        match self {
            Store::Sqlite { path, .. } => path.display().to_string(),
            Store::Postgres(pg) => pg.shown.clone(),
        }
    }

    pub fn open_sqlite(path: &Path, create: bool) -> Result<Store, String> {
        let shown = path.display();
        let fail = |what: String| format!("history {shown}: {what}");
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => return Err(fail("is a directory, not a history file".into())),
            Ok(m) if m.len() > 0 => check_sqlite_file(path, m.len()).map_err(fail)?,
            Ok(_) => {}
            Err(_) if !create => {
                return Err(fail(
                    "no such file (runs are recorded with `chaosrun TABLE --history FILE`)".into(),
                ))
            }
            Err(_) => {}
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let mut conn = Connection::open_with_flags(path, flags)
            .map_err(|e| fail(format!("cannot open: {e}")))?;
        conn.busy_timeout(BUSY)
            .map_err(|e| fail(format!("cannot set a busy timeout: {e}")))?;
        let sqlite_err = |e: rusqlite::Error| fail(sqlite_message(e));
        conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
            .map_err(sqlite_err)?;
        // In WAL mode NORMAL never corrupts; a power cut may lose the last run.
        conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(sqlite_err)?;
        migrate_sqlite(&mut conn).map_err(fail)?;
        Ok(Store::Sqlite {
            conn,
            path: path.to_path_buf(),
        })
    }

    pub fn open_postgres(url: &str) -> Result<Store, String> {
        let shown = redact(url);
        let fail = |what: String| format!("history {shown}: {what}");
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| fail(format!("not a Postgres connection string: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(format!("no runtime: {e}")))?;
        let client = std::thread::scope(|s| {
            s.spawn(|| {
                rt.block_on(async {
                    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                    tokio::spawn(connection);
                    Ok::<_, tokio_postgres::Error>(client)
                })
            })
            .join()
            .expect("postgres connect thread")
        })
        .map_err(|e| fail(format!("cannot connect: {e}")))?;
        let mut pg = Pg {
            rt,
            client,
            shown: shown.clone(),
        };
        let Pg { rt, client, .. } = &mut pg;
        std::thread::scope(|s| {
            s.spawn(|| rt.block_on(migrate_postgres(client)))
                .join()
                .expect("postgres migrate thread")
        })
        .map_err(fail)?;
        Ok(Store::Postgres(Box::new(pg)))
    }

    /// The schema version of the open database.
    pub fn version(&mut self) -> Result<i64, String> {
        match self {
            Store::Sqlite { conn, .. } => conn
                .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
                .map_err(sqlite_message),
            Store::Postgres(pg) => pg
                .block(async {
                    let row = pg
                        .client
                        .query_one("SELECT version FROM schema_version", &[])
                        .await?;
                    Ok::<i64, tokio_postgres::Error>(row.get::<_, i32>(0) as i64)
                })
                .map_err(|e| e.to_string()),
        }
    }

    /// Write one run in one transaction; its row id.
    pub fn record(&mut self, run: &RunRecord) -> Result<i64, String> {
        let uid = format!("{:032x}", rand::random::<u128>());
        let shown = self.shown();
        let r = match self {
            Store::Sqlite { conn, .. } => record_sqlite(conn, run, &uid).map_err(sqlite_message),
            Store::Postgres(pg) => {
                let Pg { rt, client, .. } = &mut **pg;
                std::thread::scope(|s| {
                    s.spawn(|| rt.block_on(record_postgres(client, run, &uid)))
                        .join()
                        .expect("postgres record thread")
                })
                .map_err(|e| pg_message(&e))
            }
        };
        r.map_err(|e| format!("history {shown}: cannot record the run: {e}"))
    }

    /// The runs `filter` selects (the last `filter.last`, oldest first) and
    /// their scenario runs; each scenario's latest run has its failing checks.
    pub fn window(&mut self, filter: &Filter) -> Result<Window, String> {
        let shown = self.shown();
        let r = match self {
            Store::Sqlite { conn, .. } => window_sqlite(conn, filter).map_err(sqlite_message),
            Store::Postgres(pg) => pg
                .block(window_postgres(&pg.client, filter))
                .map_err(|e| pg_message(&e)),
        };
        r.map_err(|e| format!("history {shown}: cannot read: {e}"))
    }

    /// How many runs are recorded (all agents, all time).
    pub fn count_runs(&mut self) -> Result<i64, String> {
        match self {
            Store::Sqlite { conn, .. } => conn
                .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
                .map_err(sqlite_message),
            Store::Postgres(pg) => pg
                .block(async {
                    let row = pg
                        .client
                        .query_one("SELECT count(*) FROM runs", &[])
                        .await?;
                    Ok::<i64, tokio_postgres::Error>(row.get(0))
                })
                .map_err(|e| pg_message(&e)),
        }
    }
}

/// Before SQLite reads it: the file must start with the SQLite header and be
/// as long as its header says (a truncated copy is not).
fn check_sqlite_file(path: &Path, len: u64) -> Result<(), String> {
    use std::io::Read;
    let mut head = [0u8; 100];
    let n = std::fs::File::open(path)
        .and_then(|f| f.take(100).read(&mut head))
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

fn sqlite_message(e: rusqlite::Error) -> String {
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

fn pg_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

fn foreign(tables: &[String]) -> String {
    let mut shown: Vec<&str> = tables.iter().map(String::as_str).take(5).collect();
    if tables.len() > 5 {
        shown.push("…");
    }
    format!(
        "a database of another application (tables: {}), not a chaosrun history; pick another file or database",
        shown.join(", ")
    )
}

fn newer(v: i64) -> String {
    format!(
        "written by a newer chaosrun (history schema v{v}; this chaosrun knows up to v{}); upgrade chaosrun",
        latest_version()
    )
}

/// Read `(app, version)` and bring the schema to [`latest_version`].
fn migrate_sqlite(conn: &mut Connection) -> Result<(), String> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sqlite_message)?;
    let tables: Vec<String> = tx
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(sqlite_message)?;
    let mut version = 0;
    if !tables.is_empty() {
        let app_id: i32 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(sqlite_message)?;
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
        .map_err(sqlite_message)?;
    }
    if version > latest_version() {
        return Err(newer(version));
    }
    for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(m.sqlite)
            .and_then(|()| tx.execute("UPDATE schema_version SET version = ?1", [i as i64 + 1]))
            .map_err(|e| format!("migration to schema v{}: {}", i + 1, sqlite_message(e)))?;
    }
    tx.commit().map_err(sqlite_message)
}

async fn migrate_postgres(client: &mut tokio_postgres::Client) -> Result<(), String> {
    let e = |e: tokio_postgres::Error| pg_message(&e);
    let tx = client.transaction().await.map_err(e)?;
    // Concurrent first writers: one migrates, the others wait and then see it.
    tx.execute("SELECT pg_advisory_xact_lock(7146359263510537)", &[])
        .await
        .map_err(e)?;
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY 1",
            &[],
        )
        .await
        .map_err(e)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut version = 0i64;
    if tables.iter().any(|t| t == "schema_version") {
        let row = tx
            .query_opt("SELECT app, version FROM schema_version", &[])
            .await
            .map_err(|_| foreign(&tables))?;
        match row {
            Some(r) if r.get::<_, String>(0) == APP => version = r.get::<_, i32>(1) as i64,
            _ => return Err(foreign(&tables)),
        }
    } else if tables
        .iter()
        .any(|t| t == "runs" || t == "scenario_runs" || t == "checks")
    {
        return Err(foreign(&tables));
    } else {
        tx.batch_execute(&format!(
            "CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL);
             INSERT INTO schema_version VALUES ('{APP}', 0);"
        ))
        .await
        .map_err(e)?;
    }
    if version > latest_version() {
        return Err(newer(version));
    }
    for (i, m) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(m.postgres)
            .await
            .map_err(|err| format!("migration to schema v{}: {}", i + 1, pg_message(&err)))?;
        tx.execute("UPDATE schema_version SET version = $1", &[&(i as i32 + 1)])
            .await
            .map_err(e)?;
    }
    tx.commit().await.map_err(e)
}

fn counts(run: &RunRecord) -> (i64, i64) {
    let passed = run.scenarios.iter().filter(|s| s.verdict == "pass").count() as i64;
    (passed, run.scenarios.len() as i64 - passed)
}

fn record_sqlite(conn: &mut Connection, run: &RunRecord, uid: &str) -> rusqlite::Result<i64> {
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

async fn record_postgres(
    client: &mut tokio_postgres::Client,
    run: &RunRecord,
    uid: &str,
) -> Result<i64, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let (passed, failed) = counts(run);
    let (passed, failed) = (passed as i32, failed as i32);
    let row = tx
        .query_one(
            "INSERT INTO runs (uid, chaosrun_version, table_path, table_sha256, agent, agent_version,
               seed, shard, started_ms, finished_ms, ci_commit, ci_branch, ci_run_url, passed, failed)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING id",
            &[
                &uid,
                &run.chaosrun_version,
                &run.table_path,
                &run.table_sha256,
                &run.agent,
                &run.agent_version,
                &run.seed,
                &run.shard,
                &run.started_ms,
                &run.finished_ms,
                &run.ci.commit,
                &run.ci.branch,
                &run.ci.run_url,
                &passed,
                &failed,
            ],
        )
        .await?;
    let run_id: i64 = row.get(0);
    let scen = tx
        .prepare(
            "INSERT INTO scenario_runs (run_id, scenario, attempt, verdict, seconds, main_calls, run_started_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .await?;
    let check = tx
        .prepare(
            "INSERT INTO checks (scenario_run_id, invariant, name, status, message)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .await?;
    for s in &run.scenarios {
        let sid: i64 = tx
            .query_one(
                &scen,
                &[
                    &run_id,
                    &s.id,
                    &(s.attempt as i32),
                    &s.verdict,
                    &s.seconds,
                    &(s.main_calls as i64),
                    &run.started_ms,
                ],
            )
            .await?
            .get(0);
        for c in &s.checks {
            tx.execute(
                &check,
                &[&sid, &c.invariant, &c.name, &c.status, &c.message],
            )
            .await?;
        }
    }
    tx.commit().await?;
    Ok(run_id)
}

/// Ids of each scenario's latest scenario runs in `rows` (all attempts).
fn latest_row_ids(rows: &[ScenarioRow]) -> Vec<i64> {
    let mut last: std::collections::HashMap<&str, i64> = Default::default();
    for r in rows {
        let e = last.entry(&r.scenario).or_insert(r.run_id);
        *e = (*e).max(r.run_id);
    }
    rows.iter()
        .filter(|r| last.get(r.scenario.as_str()) == Some(&r.run_id))
        .map(|r| r.row_id)
        .collect()
}

fn attach_failing(rows: &mut [ScenarioRow], failing: Vec<(i64, CheckRecord)>) {
    let index: std::collections::HashMap<i64, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.row_id, i))
        .collect();
    for (sid, c) in failing {
        if let Some(&i) = index.get(&sid) {
            rows[i].failing.push(c);
        }
    }
}

fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

fn window_sqlite(conn: &Connection, f: &Filter) -> rusqlite::Result<Window> {
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

async fn window_postgres(
    client: &tokio_postgres::Client,
    f: &Filter,
) -> Result<Window, tokio_postgres::Error> {
    let mut runs: Vec<RunRow> = client
        .query(
            "SELECT id, started_ms, agent, agent_version, ci_commit, ci_run_url FROM runs
             WHERE ($1::text IS NULL OR agent = $1) AND started_ms >= $2
             ORDER BY started_ms DESC, id DESC LIMIT $3",
            &[&f.agent, &f.since_ms.unwrap_or(i64::MIN), &(f.last as i64)],
        )
        .await?
        .iter()
        .map(|r| RunRow {
            id: r.get(0),
            started_ms: r.get(1),
            agent: r.get(2),
            agent_version: r.get(3),
            commit: r.get(4),
            run_url: r.get(5),
        })
        .collect();
    runs.reverse();
    if runs.is_empty() {
        return Ok(Window::default());
    }
    let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
    let mut rows: Vec<ScenarioRow> = client
        .query(
            "SELECT run_id, scenario, attempt, verdict, seconds, main_calls, id
             FROM scenario_runs WHERE run_id = ANY($1) ORDER BY run_id, id",
            &[&ids],
        )
        .await?
        .iter()
        .map(|r| ScenarioRow {
            run_id: r.get(0),
            scenario: r.get(1),
            attempt: r.get::<_, i32>(2) as u32,
            verdict: r.get(3),
            seconds: r.get(4),
            main_calls: r.get::<_, i64>(5) as u64,
            failing: Vec::new(),
            row_id: r.get(6),
        })
        .collect();
    let latest = latest_row_ids(&rows);
    let failing: Vec<(i64, CheckRecord)> = client
        .query(
            "SELECT scenario_run_id, invariant, name, status, message FROM checks
             WHERE scenario_run_id = ANY($1) AND status <> 'pass'",
            &[&latest],
        )
        .await?
        .iter()
        .map(|r| {
            (
                r.get(0),
                CheckRecord {
                    invariant: r.get(1),
                    name: r.get(2),
                    status: r.get(3),
                    message: r.get(4),
                },
            )
        })
        .collect();
    attach_failing(&mut rows, failing);
    Ok(Window { runs, rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::ScenarioRecord;

    pub(crate) fn run(agent: &str, started_ms: i64, verdicts: &[(&str, &str)]) -> RunRecord {
        RunRecord {
            chaosrun_version: "t".into(),
            agent: agent.into(),
            started_ms,
            finished_ms: started_ms + 1000,
            scenarios: verdicts
                .iter()
                .map(|(id, v)| ScenarioRecord {
                    id: id.to_string(),
                    attempt: 1,
                    verdict: v.to_string(),
                    seconds: 1.0,
                    main_calls: 2,
                    checks: vec![CheckRecord {
                        invariant: "termination".into(),
                        name: "ended".into(),
                        status: if *v == "pass" { "pass" } else { "fail" }.into(),
                        message: if *v == "pass" { "" } else { "it hung" }.into(),
                    }],
                })
                .collect(),
            ..RunRecord::default()
        }
    }

    #[test]
    fn records_and_reads_the_window_of_the_last_runs() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.db");
        let mut s = Store::open_sqlite(&p, true).unwrap();
        for i in 0..5 {
            let v = if i == 4 { "fail" } else { "pass" };
            s.record(&run(
                if i == 2 { "other" } else { "a" },
                i * 1000,
                &[("x", v), ("y", "pass")],
            ))
            .unwrap();
        }
        drop(s);
        let mut s = Store::open_sqlite(&p, false).unwrap();
        assert_eq!(s.version().unwrap(), latest_version());
        let w = s
            .window(&Filter {
                last: 3,
                agent: Some("a".into()),
                since_ms: None,
            })
            .unwrap();
        assert_eq!(
            w.runs.iter().map(|r| r.started_ms).collect::<Vec<_>>(),
            [1000, 3000, 4000]
        );
        assert_eq!(w.rows.len(), 6);
        let last_x = w.rows.iter().rfind(|r| r.scenario == "x").unwrap();
        assert_eq!(last_x.failing.len(), 1);
        assert_eq!(last_x.failing[0].message, "it hung");
        let since = s
            .window(&Filter {
                last: 30,
                agent: None,
                since_ms: Some(3000),
            })
            .unwrap();
        assert_eq!(since.runs.len(), 2);
    }

    #[test]
    fn refuses_what_is_not_a_chaosrun_history() {
        let d = tempfile::tempdir().unwrap();
        let text = d.path().join("notes.txt");
        std::fs::write(&text, "hello, this is not a database\n").unwrap();
        let e = Store::open_sqlite(&text, true).err().unwrap();
        assert!(e.contains("not a SQLite database"), "{e}");

        let other = d.path().join("other.db");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE users (id INTEGER); CREATE TABLE runs (x TEXT);")
            .unwrap();
        let e = Store::open_sqlite(&other, true).err().unwrap();
        assert!(
            e.contains("another application (tables: runs, users)"),
            "{e}"
        );

        let missing = d.path().join("none.db");
        assert!(Store::open_sqlite(&missing, false)
            .err()
            .unwrap()
            .contains("no such file"));
        assert!(!missing.exists());

        let newer_db = d.path().join("newer.db");
        drop(Store::open_sqlite(&newer_db, true).unwrap());
        Connection::open(&newer_db)
            .unwrap()
            .execute("UPDATE schema_version SET version = 99", [])
            .unwrap();
        let e = Store::open_sqlite(&newer_db, true).err().unwrap();
        assert!(e.contains("newer chaosrun") && e.contains("v99"), "{e}");
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redact("postgres://u:secret@h:5/db"),
            "postgres://u:***@h:5/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
