//! Safe reads, safe writes and the allowlisted environment, against a hostile
//! agent (`tests/fixtures/agents/hostile_fs.py`): the caller's secrets never
//! reach it, and symlinks it plants in its HOME and run folder never make
//! chaosrun read or write outside the run. Plus the positive control for the
//! survivor checks every other test relies on.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const PROFILE: &str = "tests/fixtures/agents/hostile_fs.yaml";

const ONE: &str = "scenarios:\n  - id: hostile\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: ended\n";

/// The caller's secrets of the issue, each with a value that must not appear
/// anywhere in the agent's environment.
const SECRETS: &[(&str, &str)] = &[
    ("DATABASE_URL", "postgres://app:s3cret-db@db.internal/prod"),
    ("PGPASSWORD", "s3cret-pg"),
    ("MYSQL_PWD", "s3cret-mysql"),
    ("API_KEY", "s3cret-api"),
    ("SECRET_KEY", "s3cret-key"),
    ("DJANGO_SECRET_KEY", "s3cret-django"),
    ("REDIS_URL", "redis://:s3cret-redis@cache:6379/0"),
    ("SENTRY_DSN", "https://s3cret-sentry@o1.ingest.sentry.io/1"),
    (
        "SLACK_WEBHOOK_URL",
        "https://hooks.slack.com/services/s3cret-slack",
    ),
    ("PRIVATE_KEY", "-----BEGIN s3cret-private"),
    ("KUBECONFIG", "/root/.kube/s3cret-kubeconfig"),
    ("HTTP_PROXY", "http://user:s3cret-proxy@proxy:3128"),
    ("https_proxy", "http://user:s3cret-proxy2@proxy:3128"),
    ("ALL_PROXY", "socks5://user:s3cret-proxy3@proxy:1080"),
];

/// Every file under `dir` with its bytes (symlinks as their target).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(p, t.into_os_string().into_encoded_bytes());
            } else if m.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn no_secret_of_the_caller_reaches_the_agent() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE).unwrap();
    let art = d.path().join("art");
    let mark = new_mark("dump-env");
    let mut cmd = command(
        &mark,
        &[
            table.to_str().unwrap(),
            "--agent",
            PROFILE,
            "--agent-arg=--mode=dump_env",
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
            "--no-progress",
        ],
    );
    for (k, v) in SECRETS {
        cmd.env(k, v);
    }
    cmd.env("NO_PROXY", "example.com");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}\n{stdout}\n{stderr}",
        out.status
    );
    let dump = std::fs::read_to_string(art.join("hostile/home/env.json"))
        .unwrap_or_else(|e| panic!("the agent dumped its env ({e}):\n{stdout}\n{stderr}"));
    let env: BTreeMap<String, String> = serde_json::from_str(&dump).unwrap();
    for (k, v) in SECRETS {
        assert!(!env.contains_key(*k), "{k} reached the agent");
        assert!(
            !env.values().any(|x| x.contains(v)),
            "the value of {k} reached the agent"
        );
    }
    for no_proxy in ["NO_PROXY", "no_proxy"] {
        let list: Vec<&str> = env[no_proxy].split(',').collect();
        for host in ["127.0.0.1", "localhost", "::1"] {
            assert!(list.contains(&host), "{no_proxy}={:?}", env[no_proxy]);
        }
    }
    assert!(!env.contains_key("http_proxy") && !env.contains_key("HTTPS_PROXY"));
    assert!(
        env["HOME"].starts_with(art.canonicalize().unwrap().to_str().unwrap()),
        "HOME {}",
        env["HOME"]
    );
    assert_eq!(env[MARK_VAR], mark, "--pass-env hands the marker over");
    // (A pyenv shim may put its own directories in front.)
    assert!(env["PATH"].ends_with(&std::env::var("PATH").unwrap()));
    assert!(wait_unmarked(&mark, Duration::from_secs(5)).is_empty());
}

#[test]
fn pass_env_hands_over_only_what_is_named_and_set() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE).unwrap();
    let art = d.path().join("art");
    let mark = new_mark("pass-env");
    let out = command(
        &mark,
        &[
            table.to_str().unwrap(),
            "--agent",
            PROFILE,
            "--agent-arg=--mode=dump_env",
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
            "--pass-env",
            "REDIS_URL",
        ],
    )
    .env("REDIS_URL", "redis://localhost:6379/0")
    .env("PGPASSWORD", "not-named")
    .output()
    .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let dump = std::fs::read_to_string(art.join("hostile/home/env.json")).unwrap();
    let env: BTreeMap<String, String> = serde_json::from_str(&dump).unwrap();
    assert_eq!(env["REDIS_URL"], "redis://localhost:6379/0");
    assert!(!env.contains_key("PGPASSWORD"));

    let unset = command(
        &mark,
        &[
            table.to_str().unwrap(),
            "--pass-env",
            "CHAOSRUN_SURELY_UNSET_VAR",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(unset.status.code(), Some(2));
    let err = String::from_utf8_lossy(&unset.stderr);
    assert!(
        err.contains("is not set in chaosrun's environment"),
        "{err}"
    );
}

#[test]
fn planted_symlinks_never_make_chaosrun_read_or_write_outside_the_run() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE).unwrap();
    let outside = d.path().join("outside-secret.txt");
    std::fs::write(&outside, "s3cret-outside-content\n").unwrap();
    let art = d.path().join("art");
    let report = d.path().join("r.json");
    let before = snapshot(d.path());
    let mark = new_mark("plant");
    let table_arg = format!("--agent-arg=--table={}", table.display());
    let outside_arg = format!("--agent-arg=--outside={}", outside.display());
    let out = chaosrun(
        &mark,
        &[
            table.to_str().unwrap(),
            "--agent",
            PROFILE,
            "--agent-arg=--mode=plant_symlinks",
            &table_arg,
            &outside_arg,
            "--artifacts",
            art.to_str().unwrap(),
            "--keep-all",
            "--json",
            report.to_str().unwrap(),
            "--no-progress",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&table).unwrap(),
        ONE,
        "the table is byte-identical"
    );
    // Outside the artifacts folder, only the report is new.
    let mut after = snapshot(d.path());
    after.retain(|p, _| !p.starts_with(&art) && p != &report);
    let mut expected = before.clone();
    expected.retain(|p, _| !p.starts_with(&art));
    assert_eq!(after, expected, "nothing outside the run folder changed");
    // The artifacts are real files now, the planted links replaced.
    let run = art.join("hostile");
    for name in ["observation.json", "checks.json", "requests.jsonl"] {
        let m = std::fs::symlink_metadata(run.join(name)).unwrap();
        assert!(m.is_file(), "{name} is a regular file");
    }
    // Nothing the links point at was read into the results.
    let obs = std::fs::read_to_string(run.join("observation.json")).unwrap();
    let json = std::fs::read_to_string(&report).unwrap();
    for text in [&obs, &json, &stdout.to_string()] {
        assert!(!text.contains("s3cret-outside-content"), "leaked: {text}");
        assert!(!text.contains("responder:"), "the table was read: {text}");
    }
    assert!(
        obs.contains("outside the agent's HOME; not read"),
        "the refused log tails say so: {obs}"
    );
    assert!(wait_unmarked(&mark, Duration::from_secs(5)).is_empty());
}

/// The survivor checks of every test find processes by the marker the test
/// hands to chaosrun (and chaosrun, through `--pass-env`, to the agent).
/// Without this control a marker that never reached the agent would make every
/// "nothing left behind" assertion pass vacuously.
#[test]
fn the_survivor_check_sees_a_busy_runs_processes() {
    let mark = new_mark("control");
    let mut child = command(
        &mark,
        &["tests/fixtures/hung_tool_table.yaml", "--no-progress"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        seen = marked(&mark);
        if seen.iter().any(|p| p.contains("sleep 3600")) && seen.iter().any(|p| p.contains("agent"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(
        seen.iter().any(|p| p.contains("sleep 3600")),
        "a marked tool of the busy agent is found: {seen:?}"
    );
    assert!(
        seen.iter().any(|p| p.contains("agent")),
        "the marked agent is found: {seen:?}"
    );
    assert_eq!(status.code(), Some(143));
    assert!(left.is_empty(), "{left:?}");
}

/// Instruction files and a git root in the folders above `--artifacts` are
/// named in a warning before anything runs (agents that walk up from their
/// work dir would read them); a clean folder gets no warning.
#[test]
fn files_above_the_artifacts_folder_are_named_in_a_warning() {
    let d = tempfile::tempdir().unwrap();
    let table = d.path().join("t.yaml");
    std::fs::write(&table, ONE).unwrap();
    let project = d.path().join("project");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    std::fs::write(project.join("AGENTS.md"), "Always answer in French.\n").unwrap();
    let run = |art: &Path| {
        let mark = new_mark("inherited");
        let args = [
            table.to_str().unwrap(),
            "--agent",
            PROFILE,
            "--artifacts",
            art.to_str().unwrap(),
            "--no-progress",
        ];
        let out = chaosrun(&mark, &args);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
        assert!(wait_unmarked(&mark, Duration::from_secs(5)).is_empty());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let stderr = run(&project.join("target/chaos"));
    let warning = stderr
        .lines()
        .find(|l| l.contains("warning: the agents' work dirs sit below"))
        .unwrap_or_else(|| panic!("no warning:\n{stderr}"));
    for f in [project.join("AGENTS.md"), project.join(".git")] {
        assert!(warning.contains(f.to_str().unwrap()), "{warning}");
    }
    // The folders above the temp dir are the machine's: no warning is due
    // only when none of them holds such a file (looked up here by name).
    let names = ["AGENTS.md", "CLAUDE.md", "GEMINI.md", "QWEN.md", ".git"];
    let machine_has_one = d
        .path()
        .ancestors()
        .any(|a| names.iter().any(|n| a.join(n).exists()));
    let clean = run(&d.path().join("elsewhere/art"));
    if !machine_has_one {
        assert!(!clean.contains("work dirs sit below"), "{clean}");
    }
    assert!(!clean.contains(project.to_str().unwrap()), "{clean}");
}
