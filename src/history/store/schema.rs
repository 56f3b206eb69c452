//! The history schema: its version table's app name and the migrations, in
//! each backend's dialect. Migration `i` brings the schema to version `i + 1`.

/// The `app` value in `schema_version`: what says "this is a chaosrun history".
pub const APP: &str = "chaosrun-history";

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
