//! One run's directories (a fresh 0700 root holding HOME, the work dir and the
//! spec file), the profile's home files rendered into HOME, and the argv.
//! Every path the profile names (home files, logs, the store) stays inside
//! HOME: lexically when rendered ([`within_home`]), and with symlinks resolved
//! right before chaosrun reads it ([`resolve_inside`]).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::json;

use crate::profile::Profile;
pub use crate::safe_path::{resolve_inside, within_home};
use crate::scenarios::Knobs;
use crate::template::{self, Vars};

/// The directories of one run.
#[derive(Debug, Clone)]
pub struct RunDirs {
    pub root: PathBuf,
    pub home: PathBuf,
    pub work: PathBuf,
    pub tmp: PathBuf,
    pub spec: PathBuf,
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    pub journal: PathBuf,
}

impl RunDirs {
    /// A worker's stdout and stderr logs (worker 0: `stdout.log`,
    /// `stderr.log`; worker k: `stdout.wK.log`, `stderr.wK.log`).
    pub fn logs(&self, worker: usize) -> (PathBuf, PathBuf) {
        if worker == 0 {
            (self.stdout_log.clone(), self.stderr_log.clone())
        } else {
            (
                self.root.join(format!("stdout.w{worker}.log")),
                self.root.join(format!("stderr.w{worker}.log")),
            )
        }
    }

    /// Create `root` (0700) with `home/`, `home/tmp/` and `work/` inside.
    pub fn create(root: &Path) -> anyhow::Result<RunDirs> {
        std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
        let home = root.join("home");
        let work = root.join("work");
        let tmp = home.join("tmp");
        for d in [&home, &work, &tmp] {
            std::fs::create_dir_all(d)?;
        }
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700))?;
        Ok(RunDirs {
            spec: root.join("spec.json"),
            stdout_log: root.join("stdout.log"),
            stderr_log: root.join("stderr.log"),
            journal: root.join("journal.log"),
            root: root.to_path_buf(),
            home,
            work,
            tmp,
        })
    }
}

/// Where the agent's store is, once rendered.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreAt {
    Sqlite(PathBuf),
    Postgres(String),
    /// A glob of JSONL transcripts, rendered and made absolute inside HOME.
    Jsonl(PathBuf),
}

/// Everything needed to spawn the agent.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub dirs: RunDirs,
    pub argv: Vec<String>,
    /// The profile's env, rendered (chaosrun's fixed variables come on top).
    pub profile_env: BTreeMap<String, String>,
    /// The store, rendered (a SQLite path made absolute), if the profile has one.
    pub store: Option<StoreAt>,
    /// The agent's log files, rendered and made absolute.
    pub log_paths: Vec<PathBuf>,
    /// Exec mode: the run's template variables, the turns' messages and the
    /// profile's `exec:` section (see `driver::exec`).
    pub exec: Option<ExecRun>,
    /// ACP drive: the agent's argv, the turns' messages, the work dir and
    /// the scenario's MCP server (see `driver::acp`).
    pub acp: Option<AcpRun>,
    /// The scenario's network namespace, which every agent process joins
    /// (None: the host's network; set by the runner after [`prepare`]).
    pub netns: Option<std::sync::Arc<super::netns::NetNs>>,
    /// The scenario's mount namespace, which every agent process joins
    /// (None: the host's mounts; set by the runner after [`prepare`]).
    pub mntns: Option<std::sync::Arc<super::mountns::MntNs>>,
    /// What every agent process's seccomp program refuses (set by the
    /// runner after [`prepare`]; see [`super::seccomp`]).
    pub seccomp: super::seccomp::Policy,
    /// The profile's `tty: true`: every agent process runs under a
    /// pseudo-terminal of its own ([`super::pty`]).
    pub tty: bool,
}

/// What exec mode needs to render each turn's argv.
#[derive(Debug, Clone)]
pub struct ExecRun {
    pub spec: crate::profile::exec::ExecSpec,
    pub vars: Vars,
    pub turns: Vec<String>,
    /// The values captured from the agent's output so far (`exec.capture`),
    /// shared by every turn and every restart of the scenario.
    pub captured: std::sync::Arc<std::sync::Mutex<BTreeMap<String, String>>>,
    /// The row's credential (set by the runner): once refreshed, each later
    /// turn renders the new key into its argv and into `key_env`.
    pub credential: Option<std::sync::Arc<crate::provider::credential::Credential>>,
    /// The profile's `env:` entries that use `{{api_key}}`, unrendered.
    pub key_env: BTreeMap<String, String>,
}

/// What the ACP drive needs: one agent process per scenario, spoken to as
/// its ACP client.
#[derive(Debug, Clone)]
pub struct AcpRun {
    pub spec: crate::profile::acp::AcpSpec,
    /// `acp.command` rendered, with the `--agent-arg` values appended.
    pub argv: Vec<String>,
    pub turns: Vec<String>,
    /// The scenario's work dir, absolute: `session/new`'s `cwd`, and the
    /// only place the client side's `fs/*` reads and writes.
    pub workdir: PathBuf,
    /// `session/new`'s `mcpServers`: the scenario's MCP server, if any.
    pub mcp_servers: serde_json::Value,
    /// The ACP session id the agent returned from `session/new`, kept across
    /// a kill and restart (the store query's `:session_id`).
    pub session: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// The row's faults of the client side.
    pub client: Vec<crate::scenarios::client::ClientRule>,
    /// `queue_prompt`: seconds after the first turn's first `tool_call`
    /// update to send the next turn's prompt while the first still runs.
    pub queue_after: Option<f64>,
}

/// `session/new`'s `mcpServers` from the MCP template variables: the
/// scenario's server over stdio, http or sse, else none.
pub fn acp_mcp_servers(vars: &Vars) -> serde_json::Value {
    let get = |k: &str| vars.get(k).cloned().unwrap_or_default();
    match get("mcp_transport").as_str() {
        "stdio" => {
            let args: serde_json::Value =
                serde_json::from_str(&get("mcp_args_json")).unwrap_or_else(|_| json!([]));
            json!([{"name": "chaos", "command": get("mcp_command"), "args": args, "env": []}])
        }
        "http" => json!([{"type": "http", "name": "chaos", "url": get("mcp_url"), "headers": []}]),
        "sse" => {
            json!([{"type": "sse", "name": "chaos", "url": get("mcp_sse_url"), "headers": []}])
        }
        _ => json!([]),
    }
}

/// Inputs of [`prepare`].
pub struct Inputs<'a> {
    pub profile: &'a Profile,
    pub knobs: &'a Knobs,
    pub base_url: &'a str,
    pub tag: &'a str,
    pub session_id: &'a str,
    pub turns: &'a [String],
    pub agent_args: &'a [String],
    /// The MCP template variables (`crate::mcp::vars`).
    pub mcp: &'a [(String, String)],
    /// The fake API key chaosrun gives the agent (`{{api_key}}`).
    pub api_key: &'a str,
    /// The row asks the agent to turn on its own sandbox
    /// (`{{agent_sandbox}}`: `true` or `false`).
    pub agent_sandbox: bool,
    /// The row's ACP client faults (`client:`).
    pub client: &'a [crate::scenarios::client::ClientRule],
    /// The row's `queue_prompt` (its seconds).
    pub queue_after: Option<f64>,
}

fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// The template variables of one run.
pub fn vars(i: &Inputs<'_>, dirs: &RunDirs) -> Vars {
    let profile_dir = if i.profile.exec.is_some() || i.profile.acp.is_some() {
        i.profile.dir.display().to_string()
    } else {
        i.profile
            .command
            .last()
            .and_then(|c| Path::new(c).parent())
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    [
        ("base_url", i.base_url.to_string()),
        ("model", i.knobs.model.clone()),
        ("stale_timeout", num(i.knobs.stale_timeout)),
        ("request_timeout", num(i.knobs.request_timeout)),
        ("api_max_retries", i.knobs.api_max_retries.to_string()),
        ("api_retry_budget", num(i.knobs.retry_budget())),
        ("max_turns", i.knobs.max_turns.to_string()),
        ("tool_timeout", num(i.knobs.tool_timeout)),
        ("home", dirs.home.display().to_string()),
        ("workdir", dirs.work.display().to_string()),
        ("session_id", i.session_id.to_string()),
        ("tag", i.tag.to_string()),
        ("profile_dir", profile_dir),
        ("wire", i.profile.wire.name().to_string()),
        ("api_key", i.api_key.to_string()),
        ("agent_sandbox", i.agent_sandbox.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .chain(crate::mcp::vars(None, None, None))
    .chain(i.mcp.iter().cloned())
    .collect()
}

/// The files a profile's `logs:` entry names, once rendered: the path itself
/// if it exists, or, when it holds a glob (`*` within one directory, `**`
/// across directories, `?`), the regular files under HOME matching it, sorted
/// (at most 16, found within 4,096 directory entries, 8 levels down). Nothing
/// is followed through a symlink.
pub fn expand_log(home: &Path, path: &Path) -> Vec<PathBuf> {
    let text = path.display().to_string();
    if !text.contains(['*', '?']) {
        return if path.symlink_metadata().is_ok() {
            vec![path.to_path_buf()]
        } else {
            Vec::new()
        };
    }
    let mut re = String::from("^");
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                re.push_str(".*");
            }
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    let Ok(re) = regex::Regex::new(&re) else {
        return Vec::new();
    };
    // Walk from the deepest directory before the first glob character.
    let fixed = &text[..text.find(['*', '?']).unwrap_or(text.len())];
    let start = Path::new(fixed)
        .ancestors()
        .find(|a| a.is_dir() && a.starts_with(home))
        .unwrap_or(home)
        .to_path_buf();
    let (mut found, mut budget) = (Vec::new(), 4096usize);
    let mut stack = vec![(start, 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if budget == 0 || found.len() >= 16 {
                break;
            }
            budget -= 1;
            let Ok(ft) = e.file_type() else { continue };
            let p = e.path();
            if ft.is_dir() && depth < 8 {
                stack.push((p, depth + 1));
            } else if ft.is_file() && re.is_match(&p.display().to_string()) {
                found.push(p);
            }
        }
    }
    found.sort();
    found
}

/// What rewrites the agent's copy of its key when a row's credential is
/// refreshed: every home file whose template uses `{{api_key}}`, rendered
/// again with the new key, replaced whole (written beside it, then renamed,
/// so the agent never reads half a file). None when no home file uses it.
pub fn credential_rewriter(
    i: &Inputs<'_>,
    dirs: &RunDirs,
) -> Option<crate::provider::credential::RefreshHook> {
    let files: Vec<(PathBuf, String)> = i
        .profile
        .home_files
        .iter()
        .filter(|f| template::uses(&f.template, "api_key"))
        .filter_map(|f| Some((within_home(&dirs.home, &f.path).ok()?, f.template.clone())))
        .collect();
    if files.is_empty() {
        return None;
    }
    let vars = vars(i, dirs);
    Some(Box::new(move |key: &str| {
        let mut vars = vars.clone();
        vars.insert("api_key".into(), key.to_string());
        for (path, t) in &files {
            let Ok(text) = template::render(t, &vars) else {
                continue;
            };
            let tmp = path.with_extension("chaosrun-new");
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, path);
            }
        }
    }))
}

/// The ACP drive's run (a profile with `acp:`): its argv rendered, with the
/// `--agent-arg` values appended.
fn acp_run(i: &Inputs<'_>, vars: &Vars, dirs: &RunDirs) -> anyhow::Result<Option<AcpRun>> {
    let Some(spec) = &i.profile.acp else {
        return Ok(None);
    };
    let mut argv = template::render_argv(&spec.command, vars).map_err(anyhow::Error::msg)?;
    argv.extend(i.agent_args.iter().cloned());
    Ok(Some(AcpRun {
        spec: spec.clone(),
        argv,
        turns: i.turns.to_vec(),
        workdir: std::path::absolute(&dirs.work)?,
        mcp_servers: acp_mcp_servers(vars),
        session: Default::default(),
        client: i.client.to_vec(),
        queue_after: i.queue_after,
    }))
}

/// Create the run's directories, render home files and the spec.
pub fn prepare(root: &Path, i: &Inputs<'_>) -> anyhow::Result<Prepared> {
    let dirs = RunDirs::create(root)?;
    let vars = vars(i, &dirs);
    let render = |t: &str| template::render(t, &vars).map_err(anyhow::Error::msg);
    for f in &i.profile.home_files {
        let path = within_home(&dirs.home, &f.path).map_err(anyhow::Error::msg)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, render(&f.template)?)
            .with_context(|| format!("writing home file {}", path.display()))?;
    }
    let spec = json!({
        "session_id": i.session_id,
        "turns": i.turns,
        "workdir": dirs.work,
        "base_url": i.base_url,
        "wire": i.profile.wire.name(),
        // The retry budget resolved, as `{{api_retry_budget}}` renders it.
        "knobs": crate::scenarios::Knobs {
            api_retry_budget: Some(i.knobs.retry_budget()),
            ..i.knobs.clone()
        },
    });
    std::fs::write(&dirs.spec, serde_json::to_vec_pretty(&spec)?)?;
    std::fs::write(&dirs.journal, b"")?;
    let profile_env = i
        .profile
        .env
        .iter()
        .map(|(k, v)| Ok((k.clone(), render(v)?)))
        .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    let store = match &i.profile.store {
        Some(s) => match (&s.path, &s.postgres) {
            (Some(p), _) => Some(StoreAt::Sqlite(
                within_home(&dirs.home, &render(p)?).map_err(anyhow::Error::msg)?,
            )),
            (None, Some(dsn)) => Some(StoreAt::Postgres(render(dsn)?)),
            (None, None) => match &s.jsonl {
                Some(g) => Some(StoreAt::Jsonl(
                    within_home(&dirs.home, &render(g)?).map_err(anyhow::Error::msg)?,
                )),
                None => None,
            },
        },
        None => None,
    };
    let log_paths = i
        .profile
        .logs
        .iter()
        .map(|l| within_home(&dirs.home, &render(l)?).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut argv = i.profile.command.clone();
    argv.extend(i.agent_args.iter().cloned());
    argv.push(dirs.spec.display().to_string());
    let exec = i.profile.exec.as_ref().map(|spec| {
        let mut vars = vars.clone();
        vars.insert(
            "session_uuid".into(),
            crate::profile::exec::session_uuid(i.session_id),
        );
        ExecRun {
            spec: spec.clone(),
            vars,
            turns: i.turns.to_vec(),
            captured: Default::default(),
            credential: None,
            key_env: i
                .profile
                .env
                .iter()
                .filter(|(_, t)| template::uses(t, "api_key"))
                .map(|(k, t)| (k.clone(), t.clone()))
                .collect(),
        }
    });
    let acp = acp_run(i, &vars, &dirs)?;
    Ok(Prepared {
        dirs,
        argv,
        profile_env,
        store,
        log_paths,
        exec,
        acp,
        netns: None,
        mntns: None,
        seccomp: super::seccomp::Policy::default(),
        tty: i.profile.tty,
    })
}

/// The argv and spec path to start worker `worker` of `workers` with: the
/// prepared spec as is for a single agent's first start; otherwise a spec
/// beside it with `worker`/`workers` and, for a restart, `resume: true` and
/// `start_turn`.
pub fn worker_spec(
    prep: &Prepared,
    worker: usize,
    workers: usize,
    resume: Option<u64>,
) -> anyhow::Result<(Vec<String>, PathBuf)> {
    if workers == 1 && resume.is_none() {
        return Ok((prep.argv.clone(), prep.dirs.spec.clone()));
    }
    // The agent can write in the run folder: never follow what it planted.
    let root = &prep.dirs.root;
    let spec_name = prep.dirs.spec.file_name().unwrap_or_default();
    let bytes = crate::output::read_beneath(root, Path::new(spec_name), 16 << 20)?;
    let mut spec: serde_json::Value = serde_json::from_slice(&bytes)?;
    if workers > 1 {
        spec["worker"] = worker.into();
        spec["workers"] = workers.into();
    }
    let mut name = if workers > 1 {
        format!("spec-w{worker}")
    } else {
        "spec".to_string()
    };
    if let Some(start_turn) = resume {
        spec["resume"] = serde_json::Value::Bool(true);
        spec["start_turn"] = start_turn.into();
        name.push_str(&format!("-resume-{start_turn}"));
    }
    let file = format!("{name}.json");
    crate::output::write_run_file(root, Path::new(&file), &serde_json::to_vec_pretty(&spec)?)?;
    let path = root.join(file);
    let mut argv = prep.argv.clone();
    if let Some(last) = argv.last_mut() {
        *last = path.display().to_string();
    }
    Ok((argv, path))
}

/// Files that agents read from the folders above their work dir (project
/// instructions, project config, a git root they take as the project).
pub const INHERITED: &[&str] = &[
    "AGENTS.md",
    "CLAUDE.md",
    "GEMINI.md",
    "QWEN.md",
    "opencode.json",
    "opencode.jsonc",
    "kilo.json",
    ".git",
];

/// The [`INHERITED`] files in `base` and the folders above it: a run's work
/// dir sits below `base` (the `--artifacts` folder, else the temp dir), so an
/// agent that walks up from its work dir may read them (Claude Code reads
/// every CLAUDE.md up to `/`; opencode every opencode.json and AGENTS.md).
pub fn inherited_files(base: &Path) -> Vec<PathBuf> {
    let base = std::path::absolute(base).unwrap_or_else(|_| base.to_path_buf());
    base.ancestors()
        .flat_map(|dir| INHERITED.iter().map(move |name| dir.join(name)))
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acp_session_gets_the_scenarios_mcp_server() {
        let vars = |pairs: &[(&str, &str)]| -> Vars {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let stdio = vars(&[
            ("mcp_transport", "stdio"),
            ("mcp_command", "/bin/chaosrun"),
            ("mcp_args_json", r#"["mcp-stdio","--socket","/s"]"#),
        ]);
        assert_eq!(
            acp_mcp_servers(&stdio),
            json!([{"name": "chaos", "command": "/bin/chaosrun",
                    "args": ["mcp-stdio", "--socket", "/s"], "env": []}])
        );
        let http = vars(&[
            ("mcp_transport", "http"),
            ("mcp_url", "http://127.0.0.1:9/mcp"),
        ]);
        assert_eq!(
            acp_mcp_servers(&http),
            json!([{"type": "http", "name": "chaos", "url": "http://127.0.0.1:9/mcp", "headers": []}])
        );
        let sse = vars(&[
            ("mcp_transport", "sse"),
            ("mcp_sse_url", "http://127.0.0.1:9/sse"),
        ]);
        assert_eq!(
            acp_mcp_servers(&sse),
            json!([{"type": "sse", "name": "chaos", "url": "http://127.0.0.1:9/sse", "headers": []}])
        );
        assert_eq!(acp_mcp_servers(&vars(&[("mcp_transport", "")])), json!([]));
    }

    #[test]
    fn profile_paths_stay_inside_home() {
        let home = Path::new("/run/x/home");
        assert_eq!(
            within_home(home, ".a/b.log").unwrap(),
            Path::new("/run/x/home/.a/b.log")
        );
        assert_eq!(
            within_home(home, "/run/x/home/s.db").unwrap(),
            Path::new("/run/x/home/s.db")
        );
        assert!(within_home(home, "a/../b").is_ok());
        for bad in ["../../etc/shadow", "/etc/shadow", "a/../../x", "..", ""] {
            assert!(within_home(home, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn log_globs_match_files_under_home() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join(".a/logs/2026")).unwrap();
        std::fs::write(home.join(".a/logs/one.log"), "1").unwrap();
        std::fs::write(home.join(".a/logs/2026/two.log"), "2").unwrap();
        std::fs::write(home.join(".a/logs/skip.txt"), "x").unwrap();
        let g = |p: &str| expand_log(&home, &home.join(p));
        assert_eq!(g(".a/logs/*.log"), [home.join(".a/logs/one.log")]);
        assert_eq!(
            g(".a/**.log"),
            [
                home.join(".a/logs/2026/two.log"),
                home.join(".a/logs/one.log")
            ]
        );
        assert_eq!(g(".a/logs/one.log"), [home.join(".a/logs/one.log")]);
        assert!(g(".a/logs/none-*.log").is_empty());
        assert!(g(".a/logs/missing.log").is_empty());
    }

    #[test]
    fn a_planted_symlink_out_of_home_is_refused_at_read_time() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        std::fs::create_dir_all(home.join("logs")).unwrap();
        let outside = d.path().join("secret");
        std::fs::write(&outside, "pw").unwrap();
        std::os::unix::fs::symlink(&outside, home.join("logs/agent.log")).unwrap();
        let e = resolve_inside(&home, &home.join("logs/agent.log")).unwrap_err();
        assert!(e.contains("outside the agent's HOME"), "{e}");
        std::fs::write(home.join("logs/real.log"), "ok").unwrap();
        std::os::unix::fs::symlink("real.log", home.join("logs/in.log")).unwrap();
        assert!(resolve_inside(&home, &home.join("logs/in.log")).is_ok());
    }

    /// Instruction files and a git root above the base are found, nearest
    /// first; a folder without them gives nothing.
    #[test]
    fn files_agents_inherit_from_above_the_work_dir_are_found() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().join("repo/target/chaos");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(d.path().join("repo/.git")).unwrap();
        std::fs::write(d.path().join("repo/AGENTS.md"), "x").unwrap();
        std::fs::write(d.path().join("CLAUDE.md"), "x").unwrap();
        let found = inherited_files(&base);
        let ours: Vec<_> = found.iter().filter(|p| p.starts_with(d.path())).collect();
        assert_eq!(
            ours,
            [
                &d.path().join("repo/AGENTS.md"),
                &d.path().join("repo/.git"),
                &d.path().join("CLAUDE.md"),
            ]
        );
        let clean = tempfile::tempdir().unwrap();
        assert!(inherited_files(clean.path())
            .iter()
            .all(|p| !p.starts_with(clean.path())));
    }
}
