//! Helpers shared by the CLI integration tests: run the real binary with a
//! unique marker in its environment, passed on to every agent and tool it
//! starts with `--pass-env CHAOSRUN_TEST_MARK` (the agent's environment is an
//! allowlist), and find processes still carrying that marker afterwards.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const MARK_VAR: &str = "CHAOSRUN_TEST_MARK";

/// Whether to run the whole matrix (`CHAOSRUN_FULL=1`): every case on every
/// wire. CI runs a bounded subset that still covers every case and every
/// wire once; the README says how to run the rest.
#[allow(dead_code)]
pub fn full_matrix() -> bool {
    std::env::var_os("CHAOSRUN_FULL").is_some_and(|v| v != "0" && !v.is_empty())
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_chaosrun"))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A marker unique to one test.
pub fn new_mark(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish() & 0xffff_ffff
}

/// The flag that hands the marker to the agent (runs only: `merge` and
/// `serve` take no `--pass-env`).
pub const PASS_MARK: [&str; 2] = ["--pass-env", MARK_VAR];

/// `chaosrun ARGS` with the marker set (and passed to the agent), not run.
pub fn command(mark: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(args).env(MARK_VAR, mark).current_dir(repo());
    let subcommand = matches!(
        args.first(),
        Some(&("merge" | "serve" | "__guard" | "agents" | "tables"))
    );
    if !subcommand {
        cmd.args(PASS_MARK);
    }
    cmd
}

/// `chaosrun ARGS` with the marker set, run to completion.
pub fn chaosrun(mark: &str, args: &[&str]) -> Output {
    command(mark, args).output().expect("chaosrun runs")
}

/// Live (non-zombie) processes whose environment carries `MARK_VAR=mark`.
pub fn marked(mark: &str) -> Vec<String> {
    let needle = format!("{MARK_VAR}={mark}");
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let dir = entry.path();
        let Ok(env) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        if !env.split(|&b| b == 0).any(|e| e == needle.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        if state == Some("Z") || state.is_none() {
            continue;
        }
        let cmd = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        out.push(format!(
            "{pid}: {}",
            String::from_utf8_lossy(&cmd).replace('\0', " ")
        ));
    }
    out
}

/// Poll until no marked process remains or `timeout` passes; the survivors.
pub fn wait_unmarked(mark: &str, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = marked(mark);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGKILL every marked process (test cleanup after a failed assertion).
pub fn kill_marked(mark: &str) {
    for p in marked(mark) {
        if let Some(pid) = p.split(':').next().and_then(|s| s.parse::<i32>().ok()) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// One chaosrun run of `args` on `wire` under a fresh mark named `name`,
/// with a `--json` report in a temp folder: the report, stdout and the exit
/// code; asserts nothing of the run was left running (5 s grace).
pub fn run_report(
    name: &str,
    wire: &str,
    args: &[&str],
) -> (serde_json::Value, String, Option<i32>) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mark = new_mark(name);
    let mut all = args.to_vec();
    all.extend_from_slice(&["--wire", wire, "--json", json.to_str().unwrap()]);
    let out = chaosrun(&mark, &all);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let left = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(left.is_empty(), "{wire}: left behind: {left:?}");
    (read_json(&json), stdout, out.status.code())
}

/// Parse a `--json` report.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).expect("the JSON report exists");
    serde_json::from_str(&text).expect("the JSON report parses")
}

/// A scenario's entry in a JSON report.
pub fn scenario<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("scenario {id} in the report"))
}

/// Every violation of a scenario, from a JSON report.
pub fn violations(report: &serde_json::Value, id: &str) -> Vec<String> {
    scenario(report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .flat_map(|c| c["violations"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Every check a report left "not checked", as `id: check`, except those of
/// the invariant classes in `allowed`.
/// The reference agent's profile with its MCP transports reversed
/// (`[http, stdio]`), written into `dir`: rows that pin no transport run
/// over streamable HTTP. Its path.
pub fn reference_profile_http_first(dir: &Path) -> PathBuf {
    let agent = repo().join("examples/reference/agent.py");
    let yaml = std::fs::read_to_string(repo().join("examples/reference/agent.yaml")).unwrap();
    let http_first = yaml
        .replace("{{profile_dir}}/agent.py", agent.to_str().unwrap())
        .replace(
            "transports: [stdio, http, sse]",
            "transports: [http, stdio, sse]",
        );
    assert!(
        http_first.contains("transports: [http, stdio, sse]"),
        "{yaml}"
    );
    let profile = dir.join("agent-http.yaml");
    std::fs::write(&profile, http_first).unwrap();
    profile
}

/// The count of `kind` (`main`, `probe`, `aux`) in `serve`'s summary
/// ("requests: 6 (main 0, probe 6, aux 0)").
pub fn upstream_count(summary: &str, kind: &str) -> Option<u64> {
    summary
        .split(&format!("{kind} "))
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
}

/// Proxy mode: whether the upstream's summary (`serve`'s "probe N,") agrees
/// with the probes a proxied report counts. Every probe goes upstream but
/// for a credential row's probe sent with the refused key before chaosrun
/// rewrote it (an agent that starts its next turn at once; the refresh
/// follows the faulted turn's `turn_end`): chaosrun answers that one with
/// the wire's 401 itself, and the agent's retry with the new key is relayed.
/// So the upstream saw at least the report's probes minus the credential
/// rows', and at most all of them. Why not, when it does not agree.
pub fn relayed_probes_agree(report: &serde_json::Value, summary: &str) -> Result<(), String> {
    let probes_of = |credential: bool| -> u64 {
        report["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["id"].as_str().unwrap().starts_with("credential_") == credential)
            .map(|s| s["calls"]["probe"].as_u64().unwrap_or(0))
            .sum()
    };
    let (local_at_most, probes) = (probes_of(true), probes_of(false) + probes_of(true));
    let upstream = upstream_count(summary, "probe")
        .ok_or_else(|| format!("no probe count in the upstream summary {summary}"))?;
    if probes > 0 && upstream <= probes && upstream + local_at_most >= probes {
        Ok(())
    } else {
        Err(format!(
            "upstream {summary}, proxied probes {probes} ({local_at_most} in credential rows)"
        ))
    }
}

pub fn skipped_checks(report: &serde_json::Value, allowed: &[&str]) -> Vec<String> {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            s["checks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["status"] == "not_checked")
                .filter(|c| !allowed.iter().any(|a| c["invariant"] == *a))
                .map(move |c| format!("{}: {c}", s["id"]))
        })
        .collect()
}

/// The status (`pass`, `fail`, `not_checked`) of check `name` on scenario
/// `id` of a JSON report, or `missing` when the check was not made.
pub fn check_status(report: &serde_json::Value, id: &str, name: &str) -> String {
    scenario(report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map_or("missing".into(), |c| c["status"].as_str().unwrap().into())
}

/// The names of the checks a scenario failed, from a JSON report.
pub fn failed_checks(report: &serde_json::Value, id: &str) -> Vec<String> {
    scenario(report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

/// The invariants a scenario failed, from a JSON report.
pub fn failed_invariants(report: &serde_json::Value, id: &str) -> Vec<String> {
    let s = scenario(report, id);
    let mut inv: Vec<String> = s["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["invariant"].as_str().unwrap().to_string())
        .collect();
    inv.sort();
    inv.dedup();
    inv
}

/// A prerequisite of a test that is `#[ignore = "needs …"]` by default and run
/// by scripts/test.sh (which installs it): when it is missing the test fails
/// with what to do, never passes quietly.
pub fn require(what: &str, present: bool, how: &str) {
    assert!(
        present,
        "missing prerequisite: {what}; {how}{}",
        if std::env::var_os("CI").is_some() {
            " (CI must install it: see scripts/test.sh)"
        } else {
            ""
        }
    );
}

/// Where headless Chromium is (scripts/test.sh installs it from Debian).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Fail, saying what to install, when Chromium is missing (the browser
/// tests are `#[ignore]`d by default and run by scripts/test.sh).
pub fn require_chromium() {
    require(
        CHROMIUM,
        Path::new(CHROMIUM).exists(),
        "install it (apt-get install chromium, as root) or run scripts/test.sh",
    );
}

/// Headless Chromium with a throwaway profile and no background traffic.
pub fn chromium(profile: &Path) -> Command {
    let mut c = Command::new(CHROMIUM);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Cargo's target directory (screenshots go to `target/test-artifacts/`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { repo().join(p) })
        .unwrap_or_else(|| repo().join("target"))
}

/// Run `cmd` to completion within `limit` (killed past it, and the test
/// fails): whether it succeeded, its stdout and its stderr.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> (bool, String, String) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("command starts");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out_reader.join().unwrap(), err_reader.join().unwrap());
    match status {
        Some(s) => (s.success(), out, err),
        None => panic!("{cmd:?} did not finish within {limit:?}\nstderr: {err}"),
    }
}

/// One real agent's bounded CI lane: a few rows of `scenarios.yaml` whose
/// verdicts the agent's full-table runs recorded (its README).
pub struct Subset<'a> {
    /// The agent and version, for messages ("Codex CLI 0.169.0").
    pub agent: &'a str,
    /// A file that exists once the agent is installed (its binary or venv python).
    pub installed: &'a str,
    /// The script that installs it (`.ci/codex_subset.sh`).
    pub install: &'a str,
    /// The `--agent` value.
    pub profile: &'a str,
    /// Rows that must pass with no failed invariant.
    pub passing: &'a [&'a str],
    /// (row, the invariants it fails, a phrase of one violation).
    pub failing: &'a [(&'a str, &'a [&'a str], &'a str)],
    /// Store checks that must be made (status `pass`, not `not checked`) on
    /// every passing row of `store_rows`.
    pub store_checks: &'a [&'a str],
    pub store_rows: &'a [&'a str],
    /// The run's seed.
    pub seed: &'a str,
}

/// Run `s`'s rows (two at a time) and check each verdict, the failing rows'
/// invariants and violations, the store checks, and that nothing carrying the
/// run's marker is left once chaosrun exited (a failing row's survivors are
/// swept by chaosrun after its check). Returns the JSON report.
pub fn run_subset(s: &Subset) -> serde_json::Value {
    run_subset_with(s, &[])
}

/// [`run_subset`] with extra chaosrun arguments (e.g. `--deadline-scale 3`
/// for an agent whose start-up, inside an exec turn's deadline, is long).
pub fn run_subset_with(s: &Subset, extra: &[&str]) -> serde_json::Value {
    let installed = repo().join(s.installed);
    require(
        s.agent,
        installed.exists(),
        &format!("{} does not exist; run {}", installed.display(), s.install),
    );
    let mark = new_mark(&format!("subset-{}", s.agent.replace(' ', "-")));
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let json_arg = json.to_string_lossy().to_string();
    let mut args: Vec<&str> = vec!["--agent", s.profile, "scenarios.yaml"];
    for id in s
        .passing
        .iter()
        .chain(s.failing.iter().map(|(id, _, _)| id))
    {
        args.extend(["--only", id]);
    }
    // Two at a time: an agent's own client-side work per request counts
    // against its 3 s stale timeout, and more agents at once on two cores
    // would push a tool-call reply past it.
    args.extend([
        "--jobs",
        "2",
        "--seed",
        s.seed,
        "--no-progress",
        "--json",
        &json_arg,
    ]);
    args.extend(extra);
    let started = std::time::Instant::now();
    let out = chaosrun(&mark, &args);
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    if !left.is_empty() {
        kill_marked(&mark);
    }
    println!("chaosrun took {:.1} s\n{stdout}", took.as_secs_f64());
    let want = if s.failing.is_empty() { 0 } else { 1 };
    assert_eq!(
        out.status.code(),
        Some(want),
        "{} failing row(s), so chaosrun exits {want}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        s.failing.len()
    );
    let report = read_json(&json);
    assert_eq!(report["passed"], s.passing.len() as u64, "{stdout}");
    assert_eq!(report["failed"], s.failing.len() as u64, "{stdout}");
    for id in s.passing {
        assert_eq!(
            scenario(&report, id)["passed"],
            true,
            "{id} should pass on {}\n{stdout}",
            s.agent
        );
        assert!(failed_invariants(&report, id).is_empty(), "{id}\n{stdout}");
    }
    for id in s.store_rows {
        for name in s.store_checks {
            let status = scenario(&report, id)["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == *name)
                .map(|c| c["status"].clone());
            assert_eq!(
                status,
                Some("pass".into()),
                "{id}: {name} must be made on the agent's store\n{stdout}"
            );
        }
    }
    for (id, invariants, says) in s.failing {
        assert_eq!(
            scenario(&report, id)["passed"],
            false,
            "{id} should fail on {}\n{stdout}",
            s.agent
        );
        assert_eq!(
            failed_invariants(&report, id),
            invariants.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{id}: failed invariants\n{stdout}"
        );
        let v = violations(&report, id);
        assert!(
            v.iter().any(|v| v.contains(says)),
            "{id}: no violation says {says:?}: {v:?}"
        );
    }
    assert!(
        left.is_empty(),
        "processes left behind after chaosrun exited: {left:?}"
    );
    report
}

/// Every path under `dir` (recursively, links not followed) with its size:
/// what "nothing was written there" compares.
pub fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                todo.push(e.path());
            }
            out.push((e.path(), m.len()));
        }
    }
    out.sort();
    out
}

/// A `setup.sh` that would leave `marker` behind (outside the cache) if it ran.
pub fn planted_setup(dir: &Path, marker: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let script = dir.join("setup.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}
