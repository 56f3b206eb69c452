//! The history database: a SQLite file (WAL, busy timeout) or, for a URL
//! `postgres://…`, a PostgreSQL database that CI shards share.
//!
//! The schema is versioned (table `schema_version`: the app name and the
//! version) and brought up to date by [`schema::MIGRATIONS`] on open, under a lock so
//! concurrent first writers agree. A file that is not SQLite, a truncated or
//! corrupt one, another application's database or a newer schema is an `Err`
//! with a sentence saying so (the CLI exits 2), never a panic. One run is
//! written in one transaction, keyed by a random uid, so concurrent writers
//! never lose or duplicate a run.

pub mod postgres;
pub mod schema;
pub mod sqlite;

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::{CheckRecord, RunRecord};

pub use schema::{latest_version, APP, MIGRATIONS};

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
    Postgres(Box<postgres::Pg>),
}

/// The keywords of a libpq connection string (`host=… dbname=… password=…`).
const LIBPQ_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "keepalives",
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "target_session_attrs",
    "load_balance_hosts",
    "channel_binding",
    "service",
];

/// Is `target` a Postgres database (else a SQLite file path): a
/// `postgres://` URL, or a libpq key=value string (some word of it is
/// `KEYWORD=…`, as in `host=db port=5432 password=…`), never a file named
/// after it.
pub fn is_postgres(target: &str) -> bool {
    target.starts_with("postgres://")
        || target.starts_with("postgresql://")
        || target.split_whitespace().any(|word| {
            word.split_once('=')
                .is_some_and(|(k, _)| LIBPQ_KEYS.contains(&k.trim()))
        })
}

/// `target` with any password replaced by `***`, for messages: in a URL's
/// user info or `password` query parameter, and in a key=value string
/// (a quoted value included).
pub fn redact(target: &str) -> String {
    if let Some((scheme, rest)) = target.split_once("://") {
        let mut rest = rest.to_string();
        if let Some((auth, host)) = rest.split_once('@') {
            if let Some((user, _)) = auth.split_once(':') {
                rest = format!("{user}:***@{host}");
            }
        }
        if let Some((base, query)) = rest.split_once('?') {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            rest = format!("{base}?{}", query.join("&"));
        }
        return format!("{scheme}://{rest}");
    }
    redact_keywords(target)
}

/// A libpq key=value string with the `password` value (bare or quoted,
/// `\'` escapes included) replaced by `***`.
fn redact_keywords(dsn: &str) -> String {
    let chars: Vec<char> = dsn.chars().collect();
    let mut out = String::with_capacity(dsn.len());
    let mut i = 0;
    while i < chars.len() {
        let word_start = i == 0 || chars[i - 1].is_whitespace();
        let rest: String = chars[i..].iter().take(8).collect();
        if !(word_start && rest.eq_ignore_ascii_case("password")) {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let mut j = i + 8;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if chars.get(j) != Some(&'=') {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        j += 1;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if chars.get(j) == Some(&'\'') {
            j += 1;
            while j < chars.len() && chars[j] != '\'' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            j += 1;
        } else {
            while j < chars.len() && !chars[j].is_whitespace() {
                j += 1;
            }
        }
        out.push_str("password=***");
        i = j.min(chars.len());
    }
    out
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

    /// Open the history at `target` for reading only: a SQLite file opened
    /// read-only (a read-only file in a read-only directory reads fine), or a
    /// Postgres database; the schema is checked, never migrated, and the
    /// journal mode is left as it is.
    pub fn open_read(target: &str) -> Result<Store, String> {
        if is_postgres(target) {
            Ok(Store::Postgres(Box::new(postgres::open_read(target)?)))
        } else {
            let path = Path::new(target);
            Ok(Store::Sqlite {
                conn: sqlite::open_read(path)?,
                path: path.to_path_buf(),
            })
        }
    }

    pub fn open_sqlite(path: &Path, create: bool) -> Result<Store, String> {
        Ok(Store::Sqlite {
            conn: sqlite::open(path, create)?,
            path: path.to_path_buf(),
        })
    }

    /// A Postgres URL or libpq key=value string.
    pub fn open_postgres(conninfo: &str) -> Result<Store, String> {
        Ok(Store::Postgres(Box::new(postgres::open(conninfo)?)))
    }

    /// A human name of the database, for messages (a password hidden).
    pub fn shown(&self) -> String {
        match self {
            Store::Sqlite { path, .. } => path.display().to_string(),
            Store::Postgres(pg) => pg.shown().to_string(),
        }
    }

    /// The schema version of the open database.
    pub fn version(&mut self) -> Result<i64, String> {
        match self {
            Store::Sqlite { conn, .. } => conn
                .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
                .map_err(sqlite::message),
            Store::Postgres(pg) => pg.version(),
        }
    }

    /// Write one run in one transaction, under a fresh random uid; its row id.
    pub fn record(&mut self, run: &RunRecord) -> Result<i64, String> {
        let run = &run.redacted();
        let uid = format!("{:032x}", rand::random::<u128>());
        let shown = self.shown();
        let r = match self {
            Store::Sqlite { conn, .. } => sqlite::record(conn, run, &uid).map_err(sqlite::message),
            Store::Postgres(pg) => pg.record(run, &uid),
        };
        r.map_err(|e| format!("history {shown}: cannot record the run: {e}"))
    }

    /// The runs `filter` selects (the last `filter.last`, oldest first) and
    /// their scenario runs; each scenario's latest run has its failing checks.
    pub fn window(&mut self, filter: &Filter) -> Result<Window, String> {
        let shown = self.shown();
        let r = match self {
            Store::Sqlite { conn, .. } => sqlite::window(conn, filter).map_err(sqlite::message),
            Store::Postgres(pg) => pg.window(filter),
        };
        r.map_err(|e| format!("history {shown}: cannot read: {e}"))
    }

    /// How many runs are recorded (all agents, all time).
    pub fn count_runs(&mut self) -> Result<i64, String> {
        match self {
            Store::Sqlite { conn, .. } => conn
                .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
                .map_err(sqlite::message),
            Store::Postgres(pg) => pg.count_runs(),
        }
    }
}

pub(crate) fn foreign(tables: &[String]) -> String {
    let mut shown: Vec<&str> = tables.iter().map(String::as_str).take(5).collect();
    if tables.len() > 5 {
        shown.push("…");
    }
    format!(
        "a database of another application (tables: {}), not a chaosrun history; pick another file or database",
        shown.join(", ")
    )
}

pub(crate) fn newer(v: i64) -> String {
    format!(
        "written by a newer chaosrun (history schema v{v}; this chaosrun knows up to v{}); upgrade chaosrun",
        latest_version()
    )
}

pub(crate) fn counts(run: &RunRecord) -> (i64, i64) {
    let passed = run.scenarios.iter().filter(|s| s.verdict == "pass").count() as i64;
    (passed, run.scenarios.len() as i64 - passed)
}

/// Ids of each scenario's latest scenario runs in `rows` (all attempts).
pub(crate) fn latest_row_ids(rows: &[ScenarioRow]) -> Vec<i64> {
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

pub(crate) fn attach_failing(rows: &mut [ScenarioRow], failing: Vec<(i64, CheckRecord)>) {
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
        assert_eq!(
            redact("postgresql://u@h/db?sslmode=disable&password=hunter2"),
            "postgresql://u@h/db?sslmode=disable&password=***"
        );
        assert_eq!(
            redact("host=h password=hunter2 user=u"),
            "host=h password=*** user=u"
        );
        assert_eq!(
            redact("host=h password = 'hunter 2 \\' x' dbname=d"),
            "host=h password=*** dbname=d"
        );
        assert_eq!(redact("host=h PASSWORD=hunter2"), "host=h password=***");
    }

    #[test]
    fn a_libpq_keyword_string_is_postgres_never_a_file() {
        for dsn in [
            "postgres://u@h/db",
            "host=127.0.0.1 port=5432 password=x",
            "dbname=chaos",
            "user=u  password='a b'",
        ] {
            assert!(is_postgres(dsn), "{dsn}");
        }
        for path in ["h.db", "runs/host.db", "./a=b.db", "my history.db"] {
            assert!(!is_postgres(path), "{path}");
        }
    }
}
