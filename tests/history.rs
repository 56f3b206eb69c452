//! Run history with a real SQLite file: real runs of the bundled reference
//! agent (with and without `--bug=retry_400`) recorded by `--history` and read
//! back by `chaosrun history`; scripted sequences written through the library
//! give the expected NEW FAIL / FIXED / FLAKY labels; `--fail-on new` is red
//! only for a regression; a truncated, foreign or text file is exit 2 with a
//! message; a failed write still prints the verdict and exits 2; `merge
//! --history` records one run from shard reports.
//!
//! Ignored by default (scripts/test.sh installs their prerequisites and runs
//! them): ten concurrent writers to PostgreSQL (`CHAOS_PG_DSN`, from
//! scripts/postgres.sh) produce exactly ten runs; the HTML history page renders
//! in headless Chromium, screenshot kept under target/test-artifacts/.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use chaosrun::history::{CheckRecord, RunRecord, ScenarioRecord, Store};
use serde_json::Value;

const FAST: &str = "provider_400_forever";

fn chaosrun(args: &[&str]) -> Output {
    Command::new(common::bin())
        .args(args)
        .current_dir(common::repo())
        .env_remove("CHAOSRUN_COMMIT")
        .output()
        .expect("chaosrun runs")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `chaosrun history DB --json EXTRA…`: exit code and the parsed answer.
fn history_json(db: &Path, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec!["history", db.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let o = chaosrun(&args);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("history --json does not parse ({e}): {}", text(&o)));
    (o.status.code(), v)
}

fn scenario<'a>(answer: &'a Value, id: &str) -> &'a Value {
    answer["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {answer:#}"))
}

/// Whether a scenario's latest run failed the check `name`.
fn fails_check(scenario: &Value, name: &str) -> bool {
    scenario["failing"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == name && c["status"] == "fail")
}

/// A run of the fast scenario against the bundled agent, failing with the bug.
fn real_run(db: &Path, buggy: bool, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(common::bin());
    cmd.current_dir(common::repo())
        .args([
            "scenarios.yaml",
            "--only",
            FAST,
            "--no-progress",
            "--history",
        ])
        .arg(db)
        .env_remove("CHAOSRUN_COMMIT");
    if buggy {
        cmd.arg("--agent-arg=--bug=retry_400");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("chaosrun runs")
}

#[test]
fn real_runs_are_recorded_and_a_regression_alone_turns_fail_on_new_red() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("nightly.db");

    let first = real_run(&db, false, &[("CHAOSRUN_COMMIT", "c0ffee")]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let second = real_run(&db, true, &[]);
    assert_eq!(second.status.code(), Some(1), "{}", text(&second));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("recorded run #2"),
        "{}",
        text(&second)
    );

    let (code, answer) = history_json(&db, &[]);
    assert_eq!(
        code,
        Some(0),
        "without --fail-on, a printed history exits 0"
    );
    let s = scenario(&answer, FAST);
    assert_eq!(s["label"], "NEW FAIL", "{answer:#}");
    assert_eq!(
        (s["runs"].as_u64(), s["passed"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(s["changed_in"], answer["runs"][1]["id"]);
    assert!(fails_check(s, "call_bound"), "{answer:#}");
    assert_eq!(answer["runs"][0]["commit"], "c0ffee");
    assert_eq!(answer["new_failures"], 1);

    let red = chaosrun(&["history", db.to_str().unwrap(), "--fail-on", "new"]);
    assert_eq!(red.status.code(), Some(1), "{}", text(&red));
    assert!(String::from_utf8_lossy(&red.stdout).contains("NEW FAIL"));

    // A known failure (failing since last night) is reported, not red.
    let third = real_run(&db, true, &[]);
    assert_eq!(third.status.code(), Some(1), "{}", text(&third));
    let (code, answer) = history_json(&db, &["--fail-on", "new"]);
    assert_eq!(code, Some(0), "{answer:#}");
    assert_eq!(scenario(&answer, FAST)["label"], "FAIL");

    // What the run row holds: the table's hash, the agent, the seed.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (sha, agent, seed, runs): (String, String, String, i64) = conn
        .query_row(
            "SELECT table_sha256, agent, seed, (SELECT count(*) FROM runs) FROM runs WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    let table = std::fs::read(common::repo().join("scenarios.yaml")).unwrap();
    assert_eq!(sha, chaosrun::history::meta::sha256_hex(&table));
    assert_eq!((agent.as_str(), runs), ("bundled", 3));
    assert!(seed.parse::<u64>().is_ok(), "{seed}");
    let checks: i64 = conn
        .query_row(
            "SELECT count(*) FROM checks c JOIN scenario_runs s ON s.id = c.scenario_run_id
             WHERE s.run_id = 2 AND c.status = 'fail' AND c.message LIKE '%provider calls%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(checks, 1, "the failing check and its message are stored");
}

fn record(id: &str, verdict: &str, seconds: f64) -> ScenarioRecord {
    ScenarioRecord {
        id: id.into(),
        attempt: 1,
        verdict: verdict.into(),
        seconds,
        main_calls: 2,
        checks: vec![CheckRecord {
            invariant: "termination".into(),
            name: "ended_in_time".into(),
            status: if verdict == "pass" { "pass" } else { "fail" }.into(),
            message: if verdict == "pass" {
                String::new()
            } else {
                format!("{id} hung")
            },
        }],
    }
}

/// Write runs through the library: `seqs` maps a scenario to its outcomes
/// (P pass, F fail, E error, - not run), one character per run.
fn scripted(db: &Path, agent: &str, start_ms: i64, seqs: &[(&str, &str)]) {
    let mut store = Store::open(db.to_str().unwrap(), true).unwrap();
    let n = seqs.iter().map(|(_, s)| s.len()).max().unwrap();
    for i in 0..n {
        let scenarios = seqs
            .iter()
            .filter_map(|(id, s)| {
                let v = match s.as_bytes()[i] {
                    b'P' => "pass",
                    b'F' => "fail",
                    b'E' => "error",
                    _ => return None,
                };
                Some(record(id, v, 1.0 + i as f64 * 0.1))
            })
            .collect();
        store
            .record(&RunRecord {
                chaosrun_version: "test".into(),
                agent: agent.into(),
                started_ms: start_ms + i as i64 * 86_400_000,
                finished_ms: start_ms + i as i64 * 86_400_000 + 1000,
                scenarios,
                ..RunRecord::default()
            })
            .unwrap();
    }
}

/// 2026-11-01 00:00 UTC.
const NOV_1: i64 = 1_793_491_200_000;

#[test]
fn scripted_sequences_get_new_fail_fixed_and_flaky() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    scripted(
        &db,
        "agent-a",
        NOV_1,
        &[
            ("regressed", "PPPPF"),
            ("fixed", "FFFFP"),
            ("flaky", "PPFPF"),
            ("known", "PPFFF"),
            ("steady", "PPPPP"),
            ("errored", "PPPPE"),
            ("sometimes_run", "P-P-F"),
        ],
    );
    let (code, a) = history_json(&db, &[]);
    assert_eq!(code, Some(0));
    let label = |id: &str| scenario(&a, id)["label"].as_str().unwrap().to_string();
    assert_eq!(label("regressed"), "NEW FAIL");
    assert_eq!(label("errored"), "NEW FAIL");
    assert_eq!(label("sometimes_run"), "NEW FAIL");
    assert_eq!(label("fixed"), "FIXED");
    assert_eq!(label("flaky"), "FLAKY");
    assert_eq!(label("known"), "FAIL");
    assert_eq!(label("steady"), "PASS");
    assert_eq!(a["new_failures"], 3);
    assert_eq!(scenario(&a, "flaky")["pass_rate"], 0.6);
    let run_ids: Vec<&Value> = a["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(scenario(&a, "known")["changed_in"], *run_ids[2]);
    assert_eq!(
        scenario(&a, "sometimes_run")["outcomes"][1]["verdict"],
        Value::Null
    );

    // A window of the last 2 runs only sees "flaky" change once: a new failure.
    let (_, last2) = history_json(&db, &["--last", "2"]);
    assert_eq!(scenario(&last2, "flaky")["label"], "NEW FAIL");
    assert_eq!(last2["runs"].as_array().unwrap().len(), 2);

    // --since drops the first three nights: "known" has failed all along.
    let (_, since) = history_json(&db, &["--since", "2026-11-04"]);
    assert_eq!(since["runs"].as_array().unwrap().len(), 2);
    assert_eq!(scenario(&since, "known")["label"], "FAIL");

    // --agent: another agent's runs are not mixed in.
    scripted(
        &db,
        "agent-b",
        NOV_1 + 10 * 86_400_000,
        &[("regressed", "PP")],
    );
    let (_, only_a) = history_json(&db, &["--agent", "agent-a"]);
    assert_eq!(scenario(&only_a, "regressed")["label"], "NEW FAIL");
    let (code, only_b) = history_json(&db, &["--agent", "agent-b", "--fail-on", "new"]);
    assert_eq!(code, Some(0));
    assert_eq!(scenario(&only_b, "regressed")["label"], "PASS");

    let mixed = chaosrun(&["history", db.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&mixed.stdout)
            .contains("these runs are of 2 agents (agent-a, agent-b); pick one with --agent"),
        "{}",
        text(&mixed)
    );

    // The text form: labels, the strip, and the failing check of a regression.
    let o = chaosrun(&["history", db.to_str().unwrap(), "--agent", "agent-a"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("++++x") && out.contains("regressed hung"),
        "{out}"
    );
    assert!(
        out.contains("3 new failures, 1 fixed, 1 flaky, 1 failing (known), 1 passing"),
        "{out}"
    );
}

#[test]
fn duration_trend_compares_the_last_five_runs_with_the_five_before() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let mut store = Store::open(db.to_str().unwrap(), true).unwrap();
    for i in 0..10 {
        store
            .record(&RunRecord {
                agent: "a".into(),
                started_ms: NOV_1 + i,
                finished_ms: NOV_1 + i,
                scenarios: vec![record("slowing", "pass", if i < 5 { 2.0 } else { 3.0 })],
                ..RunRecord::default()
            })
            .unwrap();
    }
    let (_, a) = history_json(&db, &[]);
    let s = scenario(&a, "slowing");
    assert_eq!(s["duration_trend"], 0.5, "{s:#}");
    let o = chaosrun(&["history", db.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("+50%"),
        "{}",
        text(&o)
    );
}

#[test]
fn truncated_foreign_and_text_files_are_exit_2_with_a_message() {
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("good.db");
    scripted(
        &good,
        "a",
        NOV_1,
        &[("x", "PPPPPPPPPPPPPPPPPPPPPPPPPPPPPP")],
    );
    let full = std::fs::read(&good).unwrap();

    let truncated = d.path().join("truncated.db");
    std::fs::write(&truncated, &full[..full.len() / 2]).unwrap();
    let header_only = d.path().join("header.db");
    std::fs::write(&header_only, &full[..60]).unwrap();
    let text_file = d.path().join("notes.txt");
    std::fs::write(&text_file, "not a database\n").unwrap();
    let foreign = d.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE invoices (id INTEGER, total REAL);")
        .unwrap();
    let missing = d.path().join("missing.db");

    for (file, says) in [
        (&truncated, "truncated"),
        (&header_only, "truncated"),
        (&text_file, "not a SQLite database"),
        (&foreign, "another application (tables: invoices)"),
        (&missing, "no such file"),
    ] {
        let o = chaosrun(&["history", file.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}: {}", file.display(), text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(says) && err.contains(file.to_str().unwrap()),
            "{}",
            text(&o)
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!missing.exists(), "reading a history never creates one");

    // A run refuses a bad DB before any agent runs, and leaves it as it was.
    for file in [&truncated, &text_file, &foreign] {
        let before = std::fs::read(file).unwrap();
        let o = real_run(file, false, &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            !String::from_utf8_lossy(&o.stdout).contains("PASS"),
            "{}",
            text(&o)
        );
        assert_eq!(std::fs::read(file).unwrap(), before);
    }

    let o = chaosrun(&["history", good.to_str().unwrap(), "--since", "last week"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("YYYY-MM-DD"));
}

#[test]
fn a_run_whose_history_write_fails_prints_its_verdict_then_exits_2() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let mut child = Command::new(common::bin())
        .current_dir(common::repo())
        .args([
            "scenarios.yaml",
            "--only",
            FAST,
            "--no-progress",
            "--history",
        ])
        .arg(&db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut header = String::new();
    stdout.read_line(&mut header).unwrap();
    // The header is printed after the history is opened: break it now.
    assert!(header.starts_with("chaosrun: 1 scenario"), "{header}");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("DROP TABLE checks; DROP TABLE scenario_runs; DROP TABLE runs;")
        .unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        rest.contains("1 passed, 0 failed"),
        "the verdict is printed: {rest}"
    );
    assert_eq!(status.code(), Some(2), "{rest}\n{err}");
    assert!(err.contains("cannot record the run"), "{err}");
}

/// A real shard of two fast scenarios (provider_400_forever fails with the bug).
fn shard_report(dir: &Path, k: u32) -> PathBuf {
    let json = dir.join(format!("shard-{k}.json"));
    let o = chaosrun(&[
        "scenarios.yaml",
        "--only",
        "provider_500_forever",
        "--only",
        FAST,
        "--agent-arg=--bug=retry_400",
        "--no-progress",
        "--shard",
        &format!("{k}/2"),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", text(&o));
    json
}

#[test]
fn merge_records_one_run_from_shard_reports() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let (a, b) = (shard_report(d.path(), 1), shard_report(d.path(), 2));
    let o = chaosrun(&[
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--history",
        db.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let (_, h) = history_json(&db, &[]);
    assert_eq!(h["runs"].as_array().unwrap().len(), 1, "{h:#}");
    assert_eq!(h["runs"][0]["agent"], "bundled");
    assert_eq!(h["scenarios"].as_array().unwrap().len(), 2);
    assert_eq!(scenario(&h, FAST)["latest"], "fail");
    assert!(fails_check(scenario(&h, FAST), "call_bound"), "{h:#}");
    assert_eq!(scenario(&h, "provider_500_forever")["latest"], "pass");

    // A bad history is refused before merging: exit 2, no output file; a
    // report being merged is never taken as the history.
    let out = d.path().join("merged.json");
    let notes = d.path().join("notes.txt");
    std::fs::write(&notes, "not a database\n").unwrap();
    for (db, says) in [
        (&notes, "not a SQLite database"),
        (&a, "an input of this run"),
    ] {
        let o = chaosrun(&[
            "merge",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--json",
            out.to_str().unwrap(),
            "--history",
            db.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{}",
            text(&o)
        );
        assert!(!out.exists());
    }
}

#[test]
fn the_html_page_is_self_contained_with_a_strip_per_scenario() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    scripted(
        &db,
        "a",
        NOV_1,
        &[("regressed", "PPPPF"), ("<b>odd</b>", "PFPFP")],
    );
    let page = d.path().join("history.html");
    let o = chaosrun(&[
        "history",
        db.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains("<b>odd</b>"), "ids are escaped");
    assert_eq!(html.matches("<svg class=\"strip\"").count(), 2);
    assert_eq!(html.matches("<svg class=\"trend\"").count(), 2);
    assert_eq!(html.matches("class=\"cell fail\"").count(), 3);

    // --html onto the DB itself is refused.
    let o = chaosrun(&[
        "history",
        db.to_str().unwrap(),
        "--html",
        db.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
#[ignore = "needs chromium (scripts/test.sh installs it)"]
fn history_strip_renders_in_chromium() {
    common::require_chromium();
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let thirty = |s: &str| s.repeat(30 / s.len() + 1)[..30].to_string();
    let (pass, flaky) = (thirty("P"), thirty("PPF"));
    let regressed = format!("{}F", &thirty("P")[..29]);
    scripted(
        &db,
        "a",
        NOV_1,
        &[
            ("steady", &pass),
            ("flaky", &flaky),
            ("regressed", &regressed),
        ],
    );
    let page = d.path().join("history.html");
    let o = chaosrun(&[
        "history",
        db.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let url = format!("file://{}", page.display());

    let profile = tempfile::tempdir().unwrap();
    let mut dump = common::chromium(profile.path());
    dump.arg("--dump-dom").arg(&url);
    let (ok, dom, err) = common::run_bounded(dump, Duration::from_secs(120));
    assert!(ok, "chromium --dump-dom failed: {err}");
    assert_eq!(dom.matches("<svg class=\"strip\"").count(), 3, "{dom}");
    assert_eq!(dom.matches("class=\"cell fail\"").count(), 11, "{dom}");
    assert_eq!(dom.matches("class=\"cell pass\"").count(), 79, "{dom}");
    assert!(
        dom.contains("NEW FAIL") && dom.contains("<polyline"),
        "{dom}"
    );

    let shots = common::target_dir().join("test-artifacts");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("chaosrun-history.png");
    let _ = std::fs::remove_file(&png);
    let profile = tempfile::tempdir().unwrap();
    let mut shot = common::chromium(profile.path());
    shot.arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1300,420")
        .arg(&url);
    let (ok, _, err) = common::run_bounded(shot, Duration::from_secs(120));
    assert!(ok, "chromium --screenshot failed: {err}");
    let bytes = std::fs::read(&png).expect("the screenshot was written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    println!("screenshot: {}", png.display());
}

#[test]
#[ignore = "needs PostgreSQL: scripts/postgres.sh"]
fn ten_concurrent_postgres_writers_record_exactly_ten_runs() {
    let dsn = std::env::var("CHAOS_PG_DSN").unwrap_or_default();
    common::require(
        "CHAOS_PG_DSN (a local PostgreSQL)",
        !dsn.is_empty(),
        "run scripts/postgres.sh and export the CHAOS_PG_DSN it prints",
    );
    // A fresh schema, so the ten writers also race to create the tables.
    let schema = format!("chaosrun_history_test_{}", std::process::id());
    let admin = |sql: String| {
        let dsn = dsn.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (c, conn) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls)
                    .await
                    .expect("CHAOS_PG_DSN answers");
                tokio::spawn(conn);
                c.batch_execute(&sql).await.unwrap();
            })
        })
        .join()
        .unwrap()
    };
    admin(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
    ));
    let scoped = format!("{dsn} options='-c search_path={schema}'");
    let writers: Vec<_> = (0..10)
        .map(|i| {
            let scoped = scoped.clone();
            std::thread::spawn(move || {
                let mut store = Store::open_postgres(&scoped).expect("open");
                let scenarios = (0..20)
                    .map(|s| {
                        record(
                            &format!("s{s}"),
                            if (i + s) % 3 == 0 { "fail" } else { "pass" },
                            1.0,
                        )
                    })
                    .collect();
                store
                    .record(&RunRecord {
                        agent: "pg-test".into(),
                        seed: Some(i.to_string()),
                        started_ms: NOV_1 + i,
                        finished_ms: NOV_1 + i,
                        scenarios,
                        ..RunRecord::default()
                    })
                    .expect("record")
            })
        })
        .collect();
    let mut ids: Vec<i64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 10, "ten distinct runs");
    let mut store = Store::open_postgres(&scoped).unwrap();
    assert_eq!(store.count_runs().unwrap(), 10);
    let w = store
        .window(&chaosrun::history::store::Filter {
            last: 30,
            agent: None,
            since_ms: None,
        })
        .unwrap();
    assert_eq!((w.runs.len(), w.rows.len()), (10, 200));

    // The command line reads it through a postgres:// URL.
    let url =
        format!("postgres://chaosrun@127.0.0.1:55432/chaosrun?options=-csearch_path%3D{schema}");
    let o = chaosrun(&["history", &url, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let a: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(a["runs"].as_array().unwrap().len(), 10);
    admin(format!("DROP SCHEMA {schema} CASCADE;"));

    // Another application's tables are refused, not written into.
    let other = format!("{schema}_other");
    admin(format!(
        "DROP SCHEMA IF EXISTS {other} CASCADE; CREATE SCHEMA {other}; CREATE TABLE {other}.runs (x int);"
    ));
    let e = Store::open_postgres(&format!("{dsn} options='-c search_path={other}'"))
        .err()
        .expect("a foreign schema is refused");
    assert!(e.contains("another application (tables: runs)"), "{e}");
    admin(format!("DROP SCHEMA {other} CASCADE;"));
}

#[test]
fn concurrent_sqlite_writers_lose_and_duplicate_nothing() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    let writers: Vec<_> = (0..6)
        .map(|i| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut store = Store::open(db.to_str().unwrap(), true).expect("open");
                let scenarios = (0..30)
                    .map(|s| record(&format!("s{s}"), "pass", 1.0))
                    .collect();
                store
                    .record(&RunRecord {
                        agent: "sqlite-test".into(),
                        started_ms: NOV_1 + i,
                        finished_ms: NOV_1 + i,
                        scenarios,
                        ..RunRecord::default()
                    })
                    .expect("record")
            })
        })
        .collect();
    let mut ids: Vec<i64> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let counts: (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM scenario_runs)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(counts, (6, 180));
}

#[test]
fn the_history_db_cannot_also_be_a_report_file() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("out.json");
    let o = chaosrun(&[
        "scenarios.yaml",
        "--only",
        FAST,
        "--json",
        f.to_str().unwrap(),
        "--history",
        f.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!f.exists());
}

#[test]
fn a_runs_html_report_gains_the_history_strip() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    scripted(&db, "bundled", NOV_1, &[(FAST, "PPP")]);
    scripted(&db, "another agent", NOV_1, &[(FAST, "FFFFFF")]);
    let page = d.path().join("report.html");
    let o = chaosrun(&[
        "scenarios.yaml",
        "--only",
        FAST,
        "--no-progress",
        "--agent-arg=--bug=retry_400",
        "--history",
        db.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    let at = html
        .find("<section class=\"chaos-history\">")
        .unwrap_or_else(|| panic!("no history section: {}", text(&o)));
    let section = &html[at..];
    assert!(section.contains("NEW FAIL"), "{section}");
    // This agent's three earlier runs and this one; the other agent's left out.
    assert_eq!(
        section.matches("class=\"cell pass\"").count(),
        3,
        "{section}"
    );
    assert_eq!(
        section.matches("class=\"cell fail\"").count(),
        1,
        "{section}"
    );
    assert!(html.trim_end().ends_with("</html>"));
}
