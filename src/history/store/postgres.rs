//! The PostgreSQL backend, for CI shards writing at once: its own small
//! runtime (usable from inside or outside another one), the schema migrated
//! under an advisory lock, one transaction per run. No TLS: loopback or a
//! private network.

use std::time::Duration;

use super::schema::{latest_version, APP, MIGRATIONS};
use super::{
    attach_failing, counts, foreign, latest_row_ids, newer, redact, Filter, RunRow, ScenarioRow,
    Window,
};
use crate::history::{CheckRecord, RunRecord};

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

/// Connect and bring the schema up to date (recording).
pub fn open(url: &str) -> Result<Pg, String> {
    connect(url, true)
}

/// Connect for reading: the schema is checked, never migrated.
pub fn open_read(url: &str) -> Result<Pg, String> {
    connect(url, false)
}

fn connect(url: &str, migrating: bool) -> Result<Pg, String> {
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
        s.spawn(|| {
            if migrating {
                rt.block_on(migrate(client))
            } else {
                rt.block_on(check_version(client))
            }
        })
        .join()
        .expect("postgres migrate thread")
    })
    .map_err(fail)?;
    Ok(pg)
}

pub fn message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

/// For reading: a chaosrun history of this chaosrun's schema, or why not.
async fn check_version(client: &mut tokio_postgres::Client) -> Result<(), String> {
    let row = client
        .query_opt("SELECT app, version FROM schema_version", &[])
        .await
        .map_err(|e| {
            format!(
                "not a chaosrun history (no schema_version: {})",
                message(&e)
            )
        })?;
    let version = match row {
        Some(r) if r.get::<_, String>(0) == APP => r.get::<_, i32>(1) as i64,
        _ => return Err("not a chaosrun history (schema_version names another app)".into()),
    };
    if version > latest_version() {
        return Err(newer(version));
    }
    if version < latest_version() {
        return Err(format!(
            "written by an older chaosrun (history schema v{version}); record a run with this chaosrun to upgrade it"
        ));
    }
    Ok(())
}

async fn migrate(client: &mut tokio_postgres::Client) -> Result<(), String> {
    let e = |e: tokio_postgres::Error| message(&e);
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
            .map_err(|err| format!("migration to schema v{}: {}", i + 1, message(&err)))?;
        tx.execute("UPDATE schema_version SET version = $1", &[&(i as i32 + 1)])
            .await
            .map_err(e)?;
    }
    tx.commit().await.map_err(e)
}

async fn record(
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

async fn window(
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

impl Pg {
    /// A human name (password hidden).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    pub fn version(&self) -> Result<i64, String> {
        self.block(async {
            let row = self
                .client
                .query_one("SELECT version FROM schema_version", &[])
                .await?;
            Ok::<i64, tokio_postgres::Error>(row.get::<_, i32>(0) as i64)
        })
        .map_err(|e| message(&e))
    }

    pub fn count_runs(&self) -> Result<i64, String> {
        self.block(async {
            let row = self
                .client
                .query_one("SELECT count(*) FROM runs", &[])
                .await?;
            Ok::<i64, tokio_postgres::Error>(row.get(0))
        })
        .map_err(|e| message(&e))
    }

    pub fn record(&mut self, run: &RunRecord, uid: &str) -> Result<i64, String> {
        let Pg { rt, client, .. } = self;
        std::thread::scope(|s| {
            s.spawn(|| rt.block_on(record(client, run, uid)))
                .join()
                .expect("postgres record thread")
        })
        .map_err(|e| message(&e))
    }

    pub fn window(&self, filter: &Filter) -> Result<Window, String> {
        self.block(window(&self.client, filter))
            .map_err(|e| message(&e))
    }
}
