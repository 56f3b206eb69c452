//! Agents at any version, offline: a fixture registry (the reference agent
//! packaged as the wheel `chaosrun-fixture-agent` 1.0.0 to 1.3.0, where 1.2.0
//! and later retry a 500 in a hot loop, built by
//! tests/fixtures/registry/build.py) that pip reads from a local folder
//! (PIP_NO_INDEX, PIP_FIND_LINKS), and a local catalog entry installing it
//! (CHAOSRUN_CATALOG). Through the real binary: `agents setup NAME@VERSION`
//! and `@latest` side by side in a temp cache, `--agent NAME@VERSION` (not
//! installed, outside the profile's range), `agents check NAME@VERSION`, and
//! `bisect` naming 1.2.0 with
//! both reports. Survivors are looked for by the fixture folder's path in
//! every process's argv, not by anything chaosrun tags.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/registry/build.py");
        let status = Command::new("python3")
            .arg(script)
            .arg(dir.path())
            .args(["1.0.0", "1.1.0", "1.2.0:retry_storm", "1.3.0:retry_storm"])
            .status()
            .expect("python3 (the fixture registry is built with it)");
        assert!(status.success());
        Fixture { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// `chaosrun ARGS` against the fixture registry and a cache of its own.
    fn command(&self, args: &[&str]) -> Command {
        std::fs::create_dir_all(self.path("work")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_chaosrun"));
        cmd.args(args)
            .current_dir(self.path("work"))
            .env("CHAOSRUN_CACHE", self.path("cache"))
            .env("CHAOSRUN_CATALOG", self.path("catalog"))
            .env("PIP_NO_INDEX", "1")
            .env("PIP_FIND_LINKS", self.path("wheels"))
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("PIP_ROOT_USER_ACTION", "ignore");
        cmd
    }

    /// [`Fixture::command`], run to its end.
    fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = self.command(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    }

    /// Processes whose argv names the fixture's folder.
    fn survivors(&self) -> Vec<String> {
        with_argv(&self.dir.path().to_string_lossy())
    }
}

/// Every process (but this one's reader) whose argv holds `marker`.
fn with_argv(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(argv) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let argv = String::from_utf8_lossy(&argv).replace('\0', " ");
        if argv.contains(marker) && e.file_name() != "self" {
            found.push(format!("{}: {argv}", e.file_name().to_string_lossy()));
        }
    }
    found
}

/// Wait up to `secs` for `done`. For processes that are not our children,
/// which cannot be awaited: bounded polling. Whether it held in time.
fn within(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !done() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// SIGTERM to `child` alone (not its process group).
fn sigterm(child: &std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

fn versions_listed(f: &Fixture) -> Vec<String> {
    let (code, out, err) = f.run(&["agents", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "fixture-agent")
        .expect("the local entry is listed")
        .clone();
    assert_eq!(row["known"], ">=1.0.0, <1.3.0");
    serde_json::from_value(row["versions"].clone()).unwrap()
}

#[test]
fn versions_install_side_by_side_and_run_by_name() {
    let f = Fixture::new();
    let (code, out, err) = f.run(&["agents", "setup", "fixture-agent@1.2.0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("fixture-agent 1.2.0 is ready"), "{out}");
    assert!(f.path("cache/agents/fixture-agent@1.2.0/.venv").is_dir());
    let (code, out, err) = f.run(&["agents", "setup", "fixture-agent@latest"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("fixture-agent@latest is 1.3.0"), "{err}");
    assert!(out.contains("--agent fixture-agent@1.3.0"), "{out}");
    assert_eq!(versions_listed(&f), ["1.2.0", "1.3.0"]);

    // A version the registry does not have: the setup fails, saying so.
    let (code, _, err) = f.run(&["agents", "setup", "fixture-agent@9.9.9"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("setup.sh failed"), "{err}");
    // Not installed: exit 2 with the command that installs it.
    let (code, _, err) = f.run(&[
        "--agent",
        "fixture-agent@1.1.0",
        "--only",
        "provider_500_forever",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("chaosrun agents setup fixture-agent@1.1.0"),
        "{err}"
    );
    // Each installed version runs as itself: 1.2.0 has the bug, and 1.3.0
    // (outside the profile's range) warns before it runs.
    let row = ["--only", "provider_500_forever", "--no-progress"];
    let (code, out, err) = f.run(&[&["--agent", "fixture-agent@1.2.0"][..], &row].concat());
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(out.contains("call_bound"), "{out}");
    assert!(!err.contains("outside the versions"), "{err}");
    let (code, _, err) = f.run(&[&["--agent", "fixture-agent@1.3.0"][..], &row].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("1.3.0 is outside the versions its profile is known to drive"),
        "{err}"
    );
    assert_eq!(f.survivors(), Vec::<String>::new());
}

#[test]
fn bisect_names_the_first_release_that_changed_the_verdict() {
    let f = Fixture::new();
    let reports = f.path("reports");
    let reports_arg = reports.to_str().unwrap();
    let args = [
        "bisect",
        "--agent",
        "fixture-agent",
        "--good",
        "1.0.0",
        "--bad",
        "latest",
        "--only",
        "provider_500_forever",
        "--repeat",
        "2",
        "--reports",
        reports_arg,
    ];
    let (code, out, err) = f.run(&args);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("first version with the new verdict: fixture-agent 1.2.0"),
        "{out}"
    );
    assert!(
        out.contains("last version with the old verdict: fixture-agent 1.1.0"),
        "{out}"
    );
    for (v, failed) in [("1.1.0", 0), ("1.2.0", 2)] {
        let report = reports.join(format!("fixture-agent@{v}.json"));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(doc["failed"], failed, "{v}: {doc}");
        let agent = doc["agent"].as_str().unwrap();
        assert!(agent.contains(&format!("fixture-agent@{v}")), "{agent}");
        // The report names the version its install's metadata holds.
        assert_eq!(doc["agent_version"], v, "{v}: {doc}");
    }
    // The versions were installed as needed, beside each other.
    assert_eq!(versions_listed(&f), ["1.0.0", "1.1.0", "1.2.0", "1.3.0"]);

    // The same verdict at both ends: exit 1, nothing named.
    let again = f.path("reports-2");
    let mut same = args.map(String::from).to_vec();
    same[6] = "1.1.0".into();
    same[12] = again.display().to_string();
    let same: Vec<&str> = same.iter().map(String::as_str).collect();
    let (code, out, err) = f.run(&same);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("no change: fixture-agent 1.0.0 and 1.1.0"),
        "{out}"
    );
    // A reports folder in use is refused before anything runs.
    let (code, _, err) = f.run(&same);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(f.survivors(), Vec::<String>::new());
}

/// Bad bisect arguments are refused with exit 2 before anything is
/// installed (the cache holds no agent afterwards) and before the reports
/// folder is made: an unknown row (which used to install 1.0.0, then exit
/// 1), versions that do not parse, a table that does not load, a bad
/// `--deadline-scale`, `--wire`, `--repeat` or `--fails`, and a row the
/// agent's profile cannot run (N/A: no version has a verdict on it).
#[test]
fn bad_bisect_arguments_are_refused_before_any_install() {
    let f = Fixture::new();
    let table = f.path("na.yaml");
    std::fs::write(
        &table,
        r#"scenarios:
  - id: unmapped_argument
    responder:
      - when: {call: 0}
        reply: {kind: tool_call, calls: [{tool: shell, args: {command: "echo hi", frobnicate: 1}}]}
      - reply: {kind: text, text: "done {{nonce}}"}
    expect: {answer: "done {{nonce}}"}
"#,
    )
    .unwrap();
    let broken = f.path("broken.yaml");
    std::fs::write(
        &broken,
        "scenarios:
  - id: x
    responder: 7
",
    )
    .unwrap();
    let reports = f.path("reports");
    let reports_arg = reports.to_str().unwrap();
    let base = [
        "bisect",
        "--agent",
        "fixture-agent",
        "--reports",
        reports_arg,
    ];
    let (good, bad) = (["--good", "1.0.0"], ["--bad", "1.3.0"]);
    let row = |id: &'static str| -> Vec<&str> { [&good[..], &bad, &["--only", id]].concat() };
    let with = |id: &'static str, more: &[&'static str]| [row(id), more.to_vec()].concat();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (row("no_such_row"), "unknown scenario id `no_such_row`"),
        (
            vec!["--good", "one", "--bad", "1.3.0", "--only", "provider_hang"],
            "--good: ",
        ),
        (
            vec![
                "--good",
                "1.0.0",
                "--bad",
                "1.0/..",
                "--only",
                "provider_hang",
            ],
            "--bad: ",
        ),
        (
            [row("x"), vec![broken.to_str().unwrap()]].concat(),
            "broken.yaml:3:",
        ),
        (
            [row("x"), vec!["/nonexistent/table.yaml"]].concat(),
            "cannot read the scenario table",
        ),
        (
            with("provider_hang", &["--deadline-scale", "0"]),
            "--deadline-scale must be",
        ),
        (
            with("provider_hang", &["--deadline-scale", "NaN"]),
            "--deadline-scale must be",
        ),
        (
            with("provider_hang", &["--wire", "smoke-signals"]),
            "unknown wire `smoke-signals`",
        ),
        (with("provider_hang", &["--repeat", "0"]), "--repeat"),
        (with("provider_hang", &["--repeat", "101"]), "--repeat"),
        (
            with("provider_hang", &["--repeat", "2", "--fails", "3"]),
            "--fails 3 is more than --repeat 2",
        ),
        (
            [row("unmapped_argument"), vec![table.to_str().unwrap()]].concat(),
            "`unmapped_argument` is not applicable to agent `fixture-agent`",
        ),
    ];
    for (extra, named) in cases {
        let args = [&base[..], &extra].concat();
        let (code, out, err) = f.run(&args);
        assert_eq!(code, Some(2), "{extra:?}: {out}{err}");
        assert!(
            err.contains(named),
            "{extra:?} does not name `{named}`: {err}"
        );
        assert!(!err.contains("cannot be used multiple times"), "{err}");
        assert!(!out.contains("installing"), "{extra:?}: {out}");
        assert!(
            !f.path("cache/agents").exists(),
            "{extra:?} installed: {out}{err}"
        );
        assert!(!reports.exists(), "{extra:?} made the reports folder");
    }
}

/// SIGTERM to `agents setup` alone (not its process group) while its
/// setup.sh waits on an install step: the step (a grandchild, as npm or pip
/// would be) ends with the script, nothing of it is left, and chaosrun exits
/// 143 saying the install was stopped. The step is found by a marker in its
/// argv; the test knows it runs because it wrote to a FIFO the test reads.
#[test]
fn sigterm_during_an_install_ends_the_whole_install() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("catalog/slow-agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("catalog.yaml"),
        "profile: agent.yaml\npinned: 1.0.0\npip: slow-agent\n",
    )
    .unwrap();
    std::fs::write(agent.join("agent.yaml"), "exec: {first: [\"true\"]}\n").unwrap();
    let fifo = dir.path().join("started");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let marker = format!("chaosrun-install-step-{}", std::process::id());
    // The step runs in the foreground of the script, as an install does
    // (its output elsewhere: chaosrun's pipes close when the script ends).
    let setup = format!(
        "#!/bin/sh\necho installing\npython3 -c 'import sys, time; open(sys.argv[1], \"w\").write(\"up\\n\"); time.sleep(600)' {} {marker} >/dev/null 2>&1\n",
        fifo.display()
    );
    std::fs::write(agent.join("setup.sh"), setup).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_chaosrun"))
        .args(["agents", "setup", "slow-agent"])
        .env("CHAOSRUN_CACHE", dir.path().join("cache"))
        .env("CHAOSRUN_CATALOG", dir.path().join("catalog"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Blocks until the step has opened the FIFO and written to it.
    let up = std::fs::read_to_string(&fifo).unwrap();
    assert_eq!(up, "up\n");
    let step_running = || !with_argv(&marker).is_empty();
    assert!(step_running(), "the install step is not running");
    sigterm(&child);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("was stopped (SIGTERM)"), "{err}");
    // The script's own output went to stderr: stdout is chaosrun's lines.
    assert!(err.contains("installing"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The step was in the script's process group, which got the signal
    // with the script: it ends (a zombie's /proc/PID/cmdline reads empty).
    within(10, || !step_running());
    assert!(!step_running(), "the install step outlived the install");
}

/// SIGTERM to `bisect` alone while a version's row runs: its child
/// chaosrun stops the agent and exits 143, which bisect passes on; nothing
/// of the fixture is left running (found by the fixture's folder in argv).
#[test]
fn sigterm_stops_a_bisect_and_its_child_run() {
    let f = Fixture::new();
    let reports = f.path("reports");
    let child = f
        .command(&[
            "bisect",
            "--agent",
            "fixture-agent",
            "--good",
            "1.0.0",
            "--bad",
            "1.3.0",
            "--only",
            "provider_hang",
            "--reports",
            reports.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The agent runs once the first version is installed and its row began
    // (provider_hang keeps it waiting on the provider for seconds).
    let agent_ran = || f.survivors().iter().any(|p| p.contains("__main__.py"));
    assert!(within(120, agent_ran), "the agent never ran");
    sigterm(&child);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("first version"), "no verdict: {stdout}");
    within(10, || f.survivors().is_empty());
    assert_eq!(f.survivors(), Vec::<String>::new());
}

/// `CACHE/agents/NAME@VERSION` a symlink to a folder outside the cache
/// holding a real install of that version (the catalog's files removed, so
/// writing them out would show): `--agent NAME@VERSION` and `agents setup
/// NAME@VERSION` refuse it (exit 2, naming the folder and the fix), and the
/// outside folder is as it was. The same for a symlinked `agents` folder.
#[test]
fn a_symlinked_version_folder_is_refused_and_nothing_is_written_outside() {
    let f = Fixture::new();
    let (code, out, err) = f.run(&["agents", "setup", "fixture-agent@1.2.0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let entry = f.path("cache/agents/fixture-agent@1.2.0");
    let outside = f.path("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let moved = outside.join("fixture-agent@1.2.0");
    std::fs::rename(&entry, &moved).unwrap();
    for file in ["agent.yaml", "setup.sh", "catalog.yaml"] {
        std::fs::remove_file(moved.join(file)).unwrap();
    }
    std::os::unix::fs::symlink(&moved, &entry).unwrap();
    let before = common::listing(&outside);
    let run = [
        "--agent",
        "fixture-agent@1.2.0",
        "--only",
        "provider_500_forever",
    ];
    let setup = ["agents", "setup", "fixture-agent@1.2.0"];
    for args in [&run[..], &setup] {
        let (code, out, err) = f.run(args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(
            err.contains(&entry.display().to_string())
                && err.contains("symlink")
                && err.contains("chaosrun agents setup fixture-agent@1.2.0"),
            "{args:?}: {err}"
        );
        assert_eq!(
            common::listing(&outside),
            before,
            "{args:?}: written outside"
        );
    }
    // The whole `agents` folder a symlink to one holding that install.
    std::fs::remove_file(&entry).unwrap();
    let agents = f.path("cache/agents");
    std::fs::rename(&agents, outside.join("agents")).unwrap();
    std::fs::rename(&moved, outside.join("agents/fixture-agent@1.2.0")).unwrap();
    std::os::unix::fs::symlink(outside.join("agents"), &agents).unwrap();
    let before = common::listing(&outside);
    for args in [&run[..], &setup] {
        let (code, out, err) = f.run(args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(
            err.contains(&agents.display().to_string()) && err.contains("symlink"),
            "{args:?}: {err}"
        );
        assert_eq!(
            common::listing(&outside),
            before,
            "{args:?}: written outside"
        );
    }
    assert_eq!(f.survivors(), Vec::<String>::new());
}

/// Only the catalog's own install script runs: a `setup.sh` planted in the
/// cache entry of an agent whose catalog folder has none is never run (not
/// on a folder `agents setup` made, not on one made by hand), and a planted
/// one in a chaosrun-made entry of the fixture agent is replaced by the
/// catalog's before anything runs.
#[test]
fn a_planted_setup_sh_never_runs_for_another_agent() {
    let f = Fixture::new();
    let marker = f.path("ran");
    // A catalog agent with nothing to run: its setup finds no install.
    let bare = f.path("catalog/bare-agent");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::write(
        bare.join("catalog.yaml"),
        "profile: agent.yaml\npinned: 1.0.0\npip: bare-agent\n",
    )
    .unwrap();
    std::fs::write(bare.join("agent.yaml"), "exec: {first: [\"true\"]}\n").unwrap();
    let (code, _, err) = f.run(&["agents", "setup", "bare-agent"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no bare-agent install"), "{err}");
    common::planted_setup(&f.path("cache/agents/bare-agent"), &marker);
    let (code, _, err) = f.run(&["agents", "setup", "bare-agent"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(!marker.exists(), "the planted setup.sh ran: {err}");

    // The fixture agent, installed by chaosrun, then a script planted.
    let (code, out, err) = f.run(&["agents", "setup", "fixture-agent@1.2.0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let entry = f.path("cache/agents/fixture-agent@1.2.0");
    common::planted_setup(&entry, &marker);
    let (code, out, err) = f.run(&["agents", "setup", "fixture-agent@1.2.0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!marker.exists(), "the planted setup.sh ran: {out}{err}");
    assert_eq!(
        std::fs::read(entry.join("setup.sh")).unwrap(),
        std::fs::read(f.path("catalog/fixture-agent/setup.sh")).unwrap()
    );
    // A folder made by hand, with a script in it: refused, nothing run.
    let by_hand = f.path("cache/agents/fixture-agent@1.1.0");
    common::planted_setup(&by_hand, &marker);
    let (code, _, err) = f.run(&["agents", "setup", "fixture-agent@1.1.0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!marker.exists(), "the planted setup.sh ran: {err}");
}

/// An install put into the cache by hand (the version's dist-info where the
/// profile finds it, no seal of chaosrun's) is refused on use; so is a
/// chaosrun-made entry whose install metadata was changed since.
#[test]
fn an_install_made_by_hand_is_refused() {
    let f = Fixture::new();
    let site = f.path("cache/agents/fixture-agent@1.1.0/.venv/lib/python3/site-packages");
    let info = site.join("chaosrun_fixture_agent-1.1.0.dist-info");
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("METADATA"),
        "Name: chaosrun-fixture-agent\nVersion: 1.1.0\n",
    )
    .unwrap();
    let entry = f.path("cache/agents/fixture-agent@1.1.0");
    let run = [
        "--agent",
        "fixture-agent@1.1.0",
        "--only",
        "provider_500_forever",
    ];
    let (code, out, err) = f.run(&run);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains(&entry.display().to_string())
            && err.contains("not made by chaosrun")
            && err.contains("delete it")
            && err.contains("chaosrun agents setup fixture-agent@1.1.0"),
        "{err}"
    );
    assert!(!entry.join("agent.yaml").exists(), "the entry was written");
    assert_eq!(versions_listed(&f), Vec::<String>::new());

    // Made by chaosrun, then its install's metadata edited.
    std::fs::remove_dir_all(&entry).unwrap();
    let (code, out, err) = f.run(&["agents", "setup", "fixture-agent@1.1.0"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let metadata = info.join("METADATA");
    let text = std::fs::read_to_string(&metadata).unwrap();
    std::fs::write(&metadata, text + "Summary: edited\n").unwrap();
    let (code, out, err) = f.run(&run);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains(&entry.display().to_string()), "{err}");
    assert!(err.contains("changed since"), "{err}");
}
