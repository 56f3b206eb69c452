//! The catalog through the real binary: `chaosrun agents` (text and JSON),
//! `--agent NAME` (the bundled reference agent by name, a shipped agent not
//! installed, another version installed, an unknown name), `agents setup`
//! into a temp CHAOSRUN_CACHE (the reference agent: no network), and the
//! built-in tables (`chaosrun` with no table, `tables write`), and every
//! shipped profile's `agent_knobs` (and where Copilot CLI's two land: its env and
//! `mcp-exec.sh`'s MCP config). No real agent is installed here.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_chaosrun"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `chaosrun ARGS` in `cwd` with CHAOSRUN_CACHE set to `cache`.
fn run(cache: &Path, cwd: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out: Output = Command::new(bin())
        .args(args)
        .env("CHAOSRUN_CACHE", cache)
        .current_dir(cwd)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// The agents whose folders are in this tree (the four new ones join when merged).
const IN_TREE: &[(&str, &str)] = &[
    ("reference", "bundled"),
    ("claude-code", "2.1.328"),
    ("codex", "0.169.0"),
    ("gemini-cli", "0.61.0"),
    ("qwen-code", "0.24.4"),
    ("hermes", "0.19.0"),
    ("pydantic-ai", "2.62.0"),
    ("aider", "0.86.2"),
    ("pgworker", "3.2.*"),
];

/// A fake npm install of `pkg` at `version` in the cache folder of `agent`.
fn fake_npm_install(cache: &Path, agent: &str, pkg: &str, version: &str) {
    let dir = cache
        .join("agents")
        .join(agent)
        .join("prefix/lib/node_modules")
        .join(pkg);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("package.json"),
        format!("{{\"version\": \"{version}\"}}"),
    )
    .unwrap();
}

/// [`fake_npm_install`] sealed as `agents setup` seals what it installed
/// (as if its setup.sh had run): an install chaosrun counts as its own.
fn sealed_npm_install(cache: &Path, agent: &str, pkg: &str, version: &str) {
    use chaosrun::catalog::{cache as folders, find, seal};
    fake_npm_install(cache, agent, pkg, version);
    let entry = find(agent).unwrap().unwrap();
    let folder = folders::open(cache, agent, false).unwrap().unwrap();
    seal::finish(&folder, entry, version, None).unwrap();
}

#[test]
fn agents_lists_pins_capabilities_and_installs() {
    let cache = tempfile::tempdir().unwrap();
    sealed_npm_install(cache.path(), "codex", "@openai/codex", "0.169.0");
    sealed_npm_install(cache.path(), "gemini-cli", "@google/gemini-cli", "0.60.1");
    let (code, out, err) = run(cache.path(), &repo(), &["agents"]);
    assert_eq!(code, Some(0), "{err}");
    let header = out.lines().next().unwrap();
    for col in [
        "agent",
        "pinned",
        "wire",
        "mode",
        "resume",
        "mcp",
        "subagent",
        "background",
        "installed",
        "versions",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let line = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}:\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    for (name, pin) in IN_TREE {
        assert_eq!(line(name)[1], *pin, "{out}");
    }
    assert_eq!(
        line("reference"),
        [
            "reference",
            "bundled",
            "openai-chat",
            "driver",
            "yes",
            "stdio+http+sse",
            "task",
            "background",
            "bundled",
            "-"
        ]
    );
    assert_eq!(
        line("claude-code"),
        [
            "claude-code",
            "2.1.328",
            "anthropic",
            "exec",
            "yes",
            "stdio+http",
            "Agent",
            "run_in_background",
            "no",
            "-"
        ]
    );
    assert_eq!(
        line("codex")[2..],
        [
            "openai-responses",
            "exec",
            "yes",
            "stdio+http",
            "multi_agent_v1/spawn_agent",
            "-",
            "yes",
            "0.169.0"
        ]
    );
    assert_eq!(
        line("gemini-cli")[8..],
        ["0.60.1", "(not", "the", "pin)", "0.60.1"]
    );
    assert!(
        out.contains(&cache.path().join("agents").display().to_string()),
        "{out}"
    );

    let (code, json, _) = run(cache.path(), &repo(), &["agents", "--json"]);
    assert_eq!(code, Some(0));
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let codex = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "codex")
        .unwrap();
    assert_eq!(codex["installed"], "yes");
    assert_eq!(codex["versions"], serde_json::json!(["0.169.0"]));
    assert_eq!(
        codex["capabilities"]["mcp"],
        serde_json::json!(["stdio", "http"])
    );
    assert_eq!(codex["capabilities"]["wire"], "openai-responses");
}

#[test]
fn agent_reference_by_name_runs_with_no_path() {
    let cache = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let (code, out, err) = run(
        cache.path(),
        cwd.path(),
        &[
            "--agent",
            "reference",
            "--only",
            "tool_args_garbage",
            "--no-progress",
        ],
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("PASS  tool_args_garbage"), "{out}");
    assert!(err.contains("table: built-in scenarios.yaml"), "{err}");
}

#[test]
fn unknown_agent_name_is_exit_2_listing_the_known_ones() {
    let cache = tempfile::tempdir().unwrap();
    let (code, _, err) = run(
        cache.path(),
        &repo(),
        &["--agent", "no-such-agent", "--only", "provider_hang"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("unknown agent `no-such-agent`"), "{err}");
    for (name, _) in IN_TREE {
        assert!(err.contains(name), "{name} not listed: {err}");
    }
    let (code, _, err) = run(cache.path(), &repo(), &["agents", "setup", "no-such-agent"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("known: reference, claude-code"), "{err}");
}

#[test]
fn a_shipped_agent_not_installed_names_the_setup_command() {
    let cache = tempfile::tempdir().unwrap();
    let (code, _, err) = run(
        cache.path(),
        &repo(),
        &["--agent", "claude-code", "--only", "provider_hang"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not installed"), "{err}");
    assert!(err.contains("chaosrun agents setup claude-code"), "{err}");
}

/// Another version installed runs, with a warning naming both versions. (The
/// fake install has no binary, so the row fails: exit 1, not 2.)
#[test]
fn another_installed_version_runs_with_a_warning() {
    let cache = tempfile::tempdir().unwrap();
    sealed_npm_install(cache.path(), "qwen-code", "@qwen-code/qwen-code", "0.20.0");
    std::fs::create_dir_all(cache.path().join("agents/qwen-code/prefix/bin")).unwrap();
    let qwen = cache.path().join("agents/qwen-code/prefix/bin/qwen");
    std::fs::write(
        &qwen,
        "#!/bin/sh\necho '{\"type\":\"result\",\"is_error\":true,\"result\":\"fake\"}'\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&qwen, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out, err) = run(
        cache.path(),
        &repo(),
        &[
            "--agent",
            "qwen-code",
            "--only",
            "provider_400_forever",
            "--no-progress",
        ],
    );
    assert!(err.contains("0.20.0") && err.contains("0.24.4"), "{err}");
    assert!(err.contains("warning"), "{err}");
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(cache
        .path()
        .join("agents/qwen-code/qwen-code.yaml")
        .is_file());
}

#[test]
fn agents_setup_writes_the_folder_into_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let (code, out, err) = run(cache.path(), &repo(), &["agents", "setup", "reference"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let dir = cache.path().join("agents/reference");
    assert!(out.contains(&dir.display().to_string()), "{out}");
    let shipped = std::fs::read(repo().join("examples/reference/agent.yaml")).unwrap();
    assert_eq!(std::fs::read(dir.join("agent.yaml")).unwrap(), shipped);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("agent.py"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "agent.py keeps its exec bits");
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[test]
fn built_in_tables_run_by_name_and_write_out() {
    let cache = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let (code, out, err) = run(cache.path(), cwd.path(), &["process_faults.yaml", "--list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("kill_mid_stream"), "{out}");
    assert!(err.contains("built-in process_faults.yaml"), "{err}");
    // A file of that name here wins over the built-in one.
    std::fs::write(
        cwd.path().join("process_faults.yaml"),
        "scenarios:\n  - id: mine\n    responder:\n      - reply: {kind: error, status: 500}\n    expect: error\n",
    )
    .unwrap();
    let (code, out, _) = run(cache.path(), cwd.path(), &["process_faults.yaml", "--list"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("mine"), "{out}");

    let dir = cwd.path().join("tables");
    let (code, out, err) = run(cache.path(), cwd.path(), &["tables", "write", "tables"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("scenarios.yaml"), "{out}");
    for name in ["scenarios.yaml", "process_faults.yaml"] {
        assert_eq!(
            std::fs::read(dir.join(name)).unwrap(),
            std::fs::read(repo().join(name)).unwrap(),
            "{name}"
        );
    }
    std::fs::write(dir.join("scenarios.yaml"), "edited").unwrap();
    let (code, _, err) = run(cache.path(), cwd.path(), &["tables", "write", "tables"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.join("scenarios.yaml")).unwrap(),
        "edited"
    );
}

/// Every npm agent installs a locked set: its `npm/package.json` asks for
/// exactly the catalog's pin, its `npm/package-lock.json` resolves that
/// version, and its `setup.sh` installs from them (a pin bumped without
/// `scripts/npm-locks.sh` fails here).
#[test]
fn npm_agents_install_the_locked_pin() {
    use chaosrun::catalog::entry::Install;
    let json = |p: &Path| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
        )
        .unwrap()
    };
    let mut seen = 0;
    for e in chaosrun::catalog::registry::AGENTS {
        let Install::Npm(pkg) = e.install else {
            continue;
        };
        let dir = repo().join("examples").join(e.name);
        let manifest = json(&dir.join("npm/package.json"));
        assert_eq!(
            manifest["dependencies"][pkg], e.pinned,
            "{}: npm/package.json",
            e.name
        );
        let lock = json(&dir.join("npm/package-lock.json"));
        let locked = &lock["packages"][format!("node_modules/{pkg}")]["version"];
        assert_eq!(locked, e.pinned, "{}: npm/package-lock.json", e.name);
        let setup = std::fs::read_to_string(dir.join("setup.sh")).unwrap();
        assert!(
            setup.contains("\"$here/npm/package-lock.json\"")
                && !setup
                    .lines()
                    .any(|l| l.trim_start().starts_with("npm install -g")),
            "{}: setup.sh does not install from the lock",
            e.name
        );
        seen += 1;
    }
    assert!(seen >= 8, "only {seen} npm agents in the catalog");
}

/// A `setup.sh` planted in the cache entry of the bundled reference agent
/// (which has nothing to install) never runs: in a folder made by hand the
/// entry is refused (exit 2, naming it and the fix), and in the folder
/// `agents setup` made itself the script is not the catalog's, so it is not
/// run either.
#[test]
fn a_setup_sh_planted_in_the_reference_entry_never_runs() {
    let cache = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran");
    let dir = cache.path().join("agents/reference");
    common::planted_setup(&dir, &marker);
    let (code, out, err) = run(cache.path(), &repo(), &["agents", "setup", "reference"]);
    assert!(!marker.exists(), "the planted setup.sh ran: {out}{err}");
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
    assert!(
        err.contains("delete it") && err.contains("chaosrun agents setup reference"),
        "{err}"
    );

    std::fs::remove_dir_all(&dir).unwrap();
    let (code, out, err) = run(cache.path(), &repo(), &["agents", "setup", "reference"]);
    assert_eq!(code, Some(0), "{out}{err}");
    common::planted_setup(&dir, &marker);
    let (code, out, err) = run(cache.path(), &repo(), &["agents", "setup", "reference"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!marker.exists(), "the planted setup.sh ran: {out}{err}");
}

/// An `agents` folder that is a symlink out of the cache is refused, by
/// `agents setup` and `--agent`, and nothing is written where it points.
#[test]
fn a_symlinked_agents_folder_is_refused() {
    let cache = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "mine").unwrap();
    fake_npm_install(outside.path(), "codex", "@openai/codex", "0.169.0");
    std::fs::rename(
        outside.path().join("agents"),
        outside.path().join("elsewhere"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("elsewhere"),
        cache.path().join("agents"),
    )
    .unwrap();
    let before = common::listing(outside.path());
    let agents = cache.path().join("agents");
    for args in [
        &["agents", "setup", "reference"][..],
        &["--agent", "codex", "--only", "provider_400_forever"],
    ] {
        let (code, out, err) = run(cache.path(), &repo(), args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(
            err.contains(&agents.display().to_string()) && err.contains("symlink"),
            "{args:?}: {err}"
        );
        assert_eq!(
            common::listing(outside.path()),
            before,
            "{args:?}: written outside"
        );
    }
}

/// A cache entry chaosrun did not make (an install put there by hand) is
/// refused: `--agent` and `agents setup` exit 2 naming the folder and the
/// fix, and `chaosrun agents` does not count it as installed.
#[test]
fn a_cache_entry_made_by_hand_is_refused() {
    let cache = tempfile::tempdir().unwrap();
    fake_npm_install(cache.path(), "codex", "@openai/codex", "0.169.0");
    let dir = cache.path().join("agents/codex");
    let before = common::listing(&dir);
    for args in [
        &["--agent", "codex", "--only", "provider_400_forever"][..],
        &["agents", "setup", "codex"],
    ] {
        let (code, out, err) = run(cache.path(), &repo(), args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(
            err.contains(&dir.display().to_string())
                && err.contains("not made by chaosrun")
                && err.contains("delete it")
                && err.contains("chaosrun agents setup codex"),
            "{args:?}: {err}"
        );
        assert_eq!(
            common::listing(&dir),
            before,
            "{args:?}: the entry was written"
        );
    }
    let (code, json, _) = run(cache.path(), &repo(), &["agents", "--json"]);
    assert_eq!(code, Some(0));
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let codex = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "codex")
        .unwrap();
    assert_eq!(codex["installed"], "refused", "{codex}");
    assert_eq!(codex["versions"], serde_json::json!([]), "{codex}");
}

/// Every shipped profile says which of chaosrun's knobs its agent has a
/// setting for (`agent_knobs`, docs/profile-audit.md) and renders each one
/// it lists, so no published verdict judges an agent's default where the
/// agent could be given the row's value (issue 47, item 12).
#[test]
fn every_shipped_profile_declares_its_agents_knobs_and_renders_them() {
    for e in chaosrun::catalog::registry::AGENTS {
        let path = repo().join("examples").join(e.name).join(e.profile_yaml());
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let declared: Vec<String> = doc
            .get("agent_knobs")
            .and_then(serde_yaml::Value::as_sequence)
            .unwrap_or_else(|| panic!("{} declares no agent_knobs", path.display()))
            .iter()
            .map(|k| k.as_str().unwrap().to_string())
            .collect();
        chaosrun::profile::knobs::validate(&declared).unwrap();
        let unmapped = chaosrun::profile::knobs::unmapped(&declared, &doc);
        assert!(
            unmapped.is_empty(),
            "{} declares {unmapped:?} but renders them nowhere",
            path.display()
        );
    }
}

/// Copilot CLI's one knob (docs/profile-audit.md): its native runtime's
/// `COPILOT_NATIVE_HTTP_TIMEOUT_MS` bounds the wait for the response headers
/// (measured: examples/copilot/README.md, "Knobs"), so the profile renders
/// the row's `request_timeout` there, in milliseconds (5 s is 5000, not 5).
#[test]
fn copilot_renders_request_timeout_as_its_header_wait_in_ms() {
    let path = repo().join("examples/copilot/copilot.yaml");
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let template = doc["env"]["COPILOT_NATIVE_HTTP_TIMEOUT_MS"]
        .as_str()
        .unwrap_or_else(|| panic!("{} sets no COPILOT_NATIVE_HTTP_TIMEOUT_MS", path.display()));
    let mut vars = chaosrun::profile::placeholder_vars();
    vars.insert("request_timeout".into(), "5".into());
    assert_eq!(chaosrun::template::render(template, &vars).unwrap(), "5000");
    vars.insert("request_timeout".into(), "600".into());
    assert_eq!(
        chaosrun::template::render(template, &vars).unwrap(),
        "600000"
    );
}

/// Copilot CLI's MCP call timeout (docs/profile-audit.md): the profile
/// renders the row's `tool_timeout` in ms into `MCP_EXEC_TIMEOUT_MS`, and
/// `mcp-exec.sh` writes it into the server's config as `timeout` on both
/// transports (measured to bound a `tools/call`: examples/copilot/README.md,
/// "Knobs"); unset, the config has none.
#[test]
fn copilot_mcp_config_carries_tool_timeout_in_ms() {
    let dir = repo().join("examples/copilot");
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("copilot.yaml")).unwrap()).unwrap();
    let template = doc["env"]["MCP_EXEC_TIMEOUT_MS"]
        .as_str()
        .expect("copilot.yaml sets no MCP_EXEC_TIMEOUT_MS");
    let mut vars = chaosrun::profile::placeholder_vars();
    vars.insert("tool_timeout".into(), "3".into());
    let ms = chaosrun::template::render(template, &vars).unwrap();
    assert_eq!(ms, "3000");
    // mcp-exec.sh with `echo` for copilot prints the argv it would run.
    let config = |transport: &str, timeout: Option<&str>| {
        let mut cmd = Command::new("sh");
        cmd.arg(dir.join("mcp-exec.sh")).args([
            transport,
            "/bin/server",
            r#"["a"]"#,
            "http://127.0.0.1:9/mcp",
            "echo",
        ]);
        cmd.env_remove("MCP_EXEC_TIMEOUT_MS");
        if let Some(t) = timeout {
            cmd.env("MCP_EXEC_TIMEOUT_MS", t);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let json = text
            .trim()
            .strip_prefix("--additional-mcp-config ")
            .unwrap();
        serde_json::from_str::<serde_json::Value>(json).unwrap()["mcpServers"]["chaos"].clone()
    };
    for transport in ["stdio", "http"] {
        assert_eq!(config(transport, Some(&ms))["timeout"], 3000, "{transport}");
        assert!(
            config(transport, None).get("timeout").is_none(),
            "{transport}"
        );
    }
}
