//! Hostile files and inputs (issue 18, items 1, 6, 7, 8, 11, 12), each met
//! with the real thing: FIFOs an exec-mode agent leaves wherever chaosrun
//! reads (tests/fixtures/agents/fifo_cli.py), SIGTERM while the agent's
//! FIFOs are in place, `/dev/zero` and FIFOs as inputs, a file created at
//! explore's `--out` while it runs, a read-only history, terminal escapes in
//! scenario ids and version output, and a libpq key=value DSN. Every wait on
//! chaosrun has a deadline; survivors are looked for by the test's marker.

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const FIFO_PROFILE: &str = "tests/fixtures/agents/fifo_cli.yaml";

const ONE_ROW: &str =
    "scenarios:\n  - id: fifo\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: ended\n";

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// Wait for `child`'s output, at most `limit`; on timeout kill it and fail
/// (a hang is exactly what these tests catch).
fn output_within(child: Child, limit: Duration, what: &str) -> Output {
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("{what}: chaosrun did not exit within {limit:?}");
        }
    }
}

#[test]
fn fifos_wherever_chaosrun_reads_never_block_a_run() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE_ROW).unwrap();
    let json = d.path().join("r.json");
    let art = d.path().join("art");
    let mark = new_mark("fifo");
    let child = command(
        &mark,
        &[
            table.to_str().unwrap(),
            "--agent",
            FIFO_PROFILE,
            "--json",
            json.to_str().unwrap(),
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
            "--no-progress",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let out = output_within(child, Duration::from_secs(120), "FIFOs in the store glob");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a verdict:\n{stdout}");
    let report = read_json(&json);
    let store = scenario(&report, "fifo")["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "integrity_check")
        .unwrap()
        .clone();
    assert_eq!(store["status"], "not_checked", "{store}");
    let why = store["reason"].as_str().unwrap();
    // The FIFO the glob matches, and the one behind a symlink inside HOME.
    assert!(
        why.contains("s/b.jsonl is a fifo, not a regular file"),
        "{why}"
    );
    assert!(
        why.contains("pipes/p is a fifo, not a regular file"),
        "{why}"
    );
    let obs = read_json(&art.join("fifo/observation.json"));
    assert_eq!(obs["store"]["read"]["records"], 1, "a.jsonl is still read");
    assert!(
        obs["stderr_tail"].as_str().unwrap().contains("is a fifo"),
        "{}",
        obs["stderr_tail"]
    );
    for (_, tail) in obs["log_tails"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (&t[0], &t[1]))
    {
        assert!(
            tail.as_str().unwrap().contains("agent.log is a fifo"),
            "{tail}"
        );
    }
}

#[test]
fn sigterm_with_the_agents_fifos_in_place_exits_143_promptly() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE_ROW).unwrap();
    let ready = d.path().join("ready");
    mkfifo(&ready);
    let mark = new_mark("fifo-term");
    let mut child = command(
        &mark,
        &[
            table.to_str().unwrap(),
            "--agent",
            FIFO_PROFILE,
            "--pass-env",
            "FIFO_READY",
            "--no-progress",
        ],
    )
    .env("FIFO_MODE", "--mode=hang")
    .env("FIFO_READY", &ready)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The agent opens our FIFO once its own are planted: a blocking open for
    // reading returns exactly then.
    let (tx, rx) = mpsc::channel();
    let r = ready.clone();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(&r));
    });
    let planted = rx.recv_timeout(Duration::from_secs(60));
    if planted.is_err() {
        let _ = child.kill();
        // Release our reader thread.
        drop(std::fs::OpenOptions::new().write(true).open(&ready));
        kill_marked(&mark);
        panic!("the agent never planted its FIFOs");
    }
    assert_eq!(planted.unwrap().unwrap(), "planted\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = output_within(child, Duration::from_secs(30), "SIGTERM");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
}

/// `chaosrun ARGS` run to its end within 30 s (a hang fails the test).
fn chaosrun_within(args: &[&str]) -> Output {
    let child = Command::new(bin())
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    output_within(child, Duration::from_secs(30), &format!("{args:?}"))
}

#[test]
fn every_input_must_be_a_regular_file_within_its_cap() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("input.yaml");
    mkfifo(&fifo);
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE_ROW).unwrap();
    // Over each cap, sparse: a reader that read whole before checking would
    // allocate it all.
    let over = |name: &str, mib: u64| {
        let p = d.path().join(name);
        std::fs::File::create(&p)
            .unwrap()
            .set_len(mib * 1024 * 1024 + 1)
            .unwrap();
        p
    };
    let (big_table, big_profile, big_report) = (
        over("big.yaml", 8),
        over("bigp.yaml", 1),
        over("big.json", 64),
    );
    let t = table.to_str().unwrap();
    // (the input's argv with the path as PATH, its cap as printed)
    let inputs: &[(&[&str], &str, &Path)] = &[
        (&["PATH", "--list"], "8 MiB", &big_table),
        (
            &[t, "--agent", "PATH", "--only", "fifo"],
            "1 MiB",
            &big_profile,
        ),
        (&["merge", "PATH"], "64 MiB", &big_report),
        (
            &["explore", "--config", "PATH", "--dry-run"],
            "1 MiB",
            &big_profile,
        ),
        (&["serve", "--script", "PATH"], "8 MiB", &big_table),
        (&["serve", "--mcp", "PATH"], "8 MiB", &big_table),
    ];
    for (argv, cap, big) in inputs {
        let dir = d.path().join("a-directory.yaml");
        std::fs::create_dir_all(&dir).unwrap();
        for (path, what) in [
            (fifo.as_path(), "is a fifo"),
            (Path::new("/dev/zero"), "is a device"),
            (dir.as_path(), "is a directory"),
            (*big, "larger than"),
        ] {
            if argv.contains(&"--agent") && !path.to_string_lossy().ends_with(".yaml") {
                continue; // not a profile path (it would be an agent command)
            }
            let shown = path.to_str().unwrap();
            let args: Vec<&str> = argv
                .iter()
                .map(|a| if *a == "PATH" { shown } else { a })
                .collect();
            let out = chaosrun_within(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("{shown}: {what}")) && err.contains(cap),
                "{args:?}: {err}"
            );
        }
    }
}

/// Raw terminal controls (ESC, BEL) in printed bytes.
fn raw_controls(bytes: &[u8]) -> bool {
    bytes.iter().any(|b| *b == 0x1b || *b == 0x07)
}

#[test]
fn terminal_escapes_in_ids_answers_and_version_output_are_printed_escaped() {
    let d = tempfile::tempdir().unwrap();
    // The reference agent, whose version_cmd prints OSC (retitle) and CSI
    // (clear screen) sequences.
    let profile = std::fs::read_to_string(repo().join("examples/reference/agent.yaml"))
        .unwrap()
        .replace(
            "{{profile_dir}}/agent.py",
            repo().join("examples/reference/agent.py").to_str().unwrap(),
        )
        + "version_cmd: [\"printf\", \"v1\\\\033]0;pwn\\\\007\\\\033[2J\"]\n";
    let p = d.path().join("p.yaml");
    std::fs::write(&p, profile).unwrap();
    let table = d.path().join("e.yaml");
    std::fs::write(
        &table,
        "scenarios:\n  - id: esc\n    responder:\n      - reply: {kind: text, text: \"\\e]0;pwn\\a answer \\e[2J\"}\n    expect: error\n",
    )
    .unwrap();
    let (db, json) = (d.path().join("h.db"), d.path().join("e.json"));
    let (db_s, json_s) = (db.to_str().unwrap(), json.to_str().unwrap());
    let mark = new_mark("escapes");
    let run = chaosrun(
        &mark,
        &[
            table.to_str().unwrap(),
            "--agent",
            p.to_str().unwrap(),
            "--history",
            db_s,
            "--json",
            json_s,
            "--no-progress",
        ],
    );
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(
        !raw_controls(&run.stdout) && !raw_controls(&run.stderr),
        "{run:?}"
    );
    // `history` shows the latest run's agent version.
    let text = chaosrun_within(&["history", db_s]);
    let shown = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.status.code(), Some(0), "{text:?}");
    assert!(!raw_controls(&text.stdout), "{shown}");
    assert!(
        shown.contains("v1\\u001b]0;pwn\\u0007\\u001b[2J"),
        "{shown}"
    );
    // A report whose scenario id was crafted after the run.
    let crafted = std::fs::read_to_string(&json)
        .unwrap()
        .replace("\"esc\"", "\"esc\\u001b]0;pwn\\u0007\\u001b[2J\"");
    let crafted_path = d.path().join("crafted.json");
    std::fs::write(&crafted_path, crafted).unwrap();
    let merged = chaosrun_within(&["merge", crafted_path.to_str().unwrap(), "--history", db_s]);
    assert_eq!(merged.status.code(), Some(1), "{merged:?}");
    let out = String::from_utf8_lossy(&merged.stdout);
    assert!(
        !raw_controls(&merged.stdout) && !raw_controls(&merged.stderr),
        "{out}"
    );
    assert!(out.contains("esc\\u001b]0;pwn\\u0007\\u001b[2J"), "{out}");
    // `history` prints the crafted id.
    let text = chaosrun_within(&["history", db_s]);
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(!raw_controls(&text.stdout), "{shown}");
    assert!(
        shown.contains("esc\\u001b]0;pwn\\u0007\\u001b[2J"),
        "{shown}"
    );
    // JSON stays JSON and keeps the data: the escape decodes to the raw text.
    let js = chaosrun_within(&["history", db_s, "--json"]);
    assert!(!raw_controls(&js.stdout));
    let doc: serde_json::Value = serde_json::from_slice(&js.stdout).unwrap();
    assert!(doc.to_string().contains("\\u001b]0;pwn\\u0007"), "{doc}");
    assert!(wait_unmarked(&mark, Duration::from_secs(10)).is_empty());
}

/// A history at `path` holding one recorded run (scenario `x`, passed).
fn recorded_history(path: &Path) {
    use chaosrun::history::{RunRecord, ScenarioRecord, Store};
    let mut store = Store::open(path.to_str().unwrap(), true).unwrap();
    store
        .record(&RunRecord {
            chaosrun_version: "t".into(),
            agent: "a".into(),
            started_ms: 1_000,
            finished_ms: 2_000,
            scenarios: vec![ScenarioRecord {
                id: "x".into(),
                attempt: 1,
                verdict: "pass".into(),
                seconds: 1.0,
                main_calls: 1,
                checks: Vec::new(),
            }],
            ..RunRecord::default()
        })
        .unwrap();
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `chaosrun ARGS` as a user who cannot write `dir`'s files: uid 65534 when
/// the test runs as root (root ignores file modes), else the test's own.
fn as_reader(args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if is_root() {
        cmd.uid(65534).gid(65534);
    }
    output_within(cmd.spawn().unwrap(), Duration::from_secs(30), "history")
}

#[test]
fn history_reads_a_read_only_file_in_a_read_only_directory() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = d.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("h.db");
    recorded_history(&db);
    let bytes = std::fs::read(&db).unwrap();
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    // The reader really cannot write there (the control).
    let denied = {
        use std::os::unix::process::CommandExt;
        let mut sh = Command::new("sh");
        sh.args([
            "-c",
            "echo x >> \"$1\" || exit 9",
            "sh",
            db.to_str().unwrap(),
        ]);
        if is_root() {
            sh.uid(65534).gid(65534);
        }
        sh.stderr(Stdio::null()).status().unwrap()
    };
    assert_eq!(denied.code(), Some(9), "the history file is writable");
    let out = as_reader(&["history", db.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 run") && stdout.contains("\nx "),
        "{stdout}"
    );
    let json = as_reader(&["history", db.to_str().unwrap(), "--json"]);
    assert_eq!(json.status.code(), Some(0), "{json:?}");
    // Nothing was written: no WAL index, no journal, the same bytes.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["h.db"]);
    assert_eq!(std::fs::read(&db).unwrap(), bytes);
}

#[test]
fn reading_never_migrates_nor_switches_journal_mode_and_recording_migrates() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("h.db");
    recorded_history(&db);
    let journal_mode = |db: &Path| -> String {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap()
    };
    // A history left in rollback-journal mode: reading it keeps it so.
    rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get::<_, String>(0))
        .unwrap();
    let out = chaosrun_within(&["history", db.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(journal_mode(&db), "delete");
    // A history of an older schema (v0): reading refuses and leaves it v0.
    let old = d.path().join("old.db");
    {
        let c = rusqlite::Connection::open(&old).unwrap();
        c.execute_batch(
            "PRAGMA application_id = 1667789416;
             CREATE TABLE schema_version (app TEXT NOT NULL, version INTEGER NOT NULL);
             INSERT INTO schema_version VALUES ('chaosrun-history', 0);",
        )
        .unwrap();
    }
    let version = |db: &Path| -> i64 {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
            .unwrap()
    };
    let out = chaosrun_within(&["history", old.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("older chaosrun (history schema v0)"), "{err}");
    assert_eq!(version(&old), 0);
    // Recording migrates it.
    drop(chaosrun::history::Store::open(old.to_str().unwrap(), true).unwrap());
    assert_eq!(version(&old), chaosrun::history::store::latest_version());
}

#[test]
fn a_libpq_keyword_dsn_is_postgres_never_a_file_and_its_password_is_never_printed() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE_ROW).unwrap();
    // Port 1 on loopback: nothing listens, so the connection is refused.
    let dsn = "host=127.0.0.1 port=1 dbname=chaos user=chaos password=hunter2 connect_timeout=5";
    let t = table.to_str().unwrap();
    let mark = new_mark("dsn");
    for args in [
        vec!["history", dsn],
        vec![t, "--history", dsn, "--no-progress"],
        vec!["merge", t, "--history", dsn],
    ] {
        let mut cmd = if args[0] == t {
            command(&mark, &args)
        } else {
            let mut c = Command::new(bin());
            c.args(&args);
            c
        };
        let child = cmd
            .current_dir(d.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = output_within(child, Duration::from_secs(60), "a DSN history");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {all}");
        assert!(
            !all.contains("hunter2"),
            "{args:?} printed the password: {all}"
        );
        assert!(
            all.contains("history host=127.0.0.1 port=1") && all.contains("password=***"),
            "{args:?}: {all}"
        );
        assert!(all.contains("cannot connect"), "{args:?}: {all}");
        // Nothing was created in the working directory.
        let names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["t.yaml"], "{args:?}");
    }
    assert!(wait_unmarked(&mark, Duration::from_secs(5)).is_empty());
}

#[test]
fn explore_never_replaces_a_file_that_appeared_at_out_during_the_search() {
    use std::io::BufRead;
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("found.yaml");
    let mark = new_mark("explore-out");
    // A bug explore finds from this seed within its first wave (tests/explore.rs).
    let mut child = command(
        &mark,
        &[
            "explore",
            "--seed",
            "9",
            "--budget",
            "60s",
            "--jobs",
            "2",
            "--agent-arg=--bug=sticky_backoff_interrupt",
            "--out",
            out.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    // The search has begun (its first trial is announced): someone creates
    // the file at --out now.
    let began = loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) if line.contains("trial 0 seed") => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    if !began {
        let _ = child.kill();
        kill_marked(&mark);
        panic!("explore never announced its first trial");
    }
    std::fs::write(&out, "mine\n").unwrap();
    let done = output_within(child, Duration::from_secs(300), "explore");
    let stderr = reader.join().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert_eq!(done.status.code(), Some(2), "refused:\n{stdout}\n{stderr}");
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        stdout.contains("breaks reusability"),
        "no finding:\n{stdout}\n{stderr}"
    );
    // Refused: the file that appeared is untouched, the rows are beside it.
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine\n");
    let kept = d.path().join("found.1.yaml");
    assert!(
        stderr.contains("a file appeared there during the search")
            && stderr.contains(&format!("are in {} instead", kept.display())),
        "{stderr}"
    );
    let rows = std::fs::read_to_string(&kept).unwrap();
    assert!(rows.contains("scenarios:"), "{rows}");
}
