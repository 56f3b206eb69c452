//! Adapter profiles: everything agent-specific (command, home files rendered
//! from templates, extra env, the durable store and its SQL, the tool mapping,
//! background-job markers, breaker, whether it resumes after a kill), and how
//! `--agent PATH` resolves to one.
//!
//! `--agent` names either a profile file (`*.yaml`), or an executable that
//! speaks the driver protocol, with an optional profile beside it (`./hermes`
//! with `./hermes.yaml`). Without `--agent`, the bundled reference agent runs.

pub mod acp;
pub mod bundled;
pub mod cassettes;
pub mod exec;
pub mod knobs;
pub mod needs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::provider::ToolMapping;
pub use crate::store::StoreSpec;
use crate::template::{self, Kinds, Vars};

/// A file rendered into the hermetic HOME.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HomeFile {
    /// Relative to HOME.
    pub path: String,
    pub template: String,
}

/// Install the run's redactor ([`crate::redact`]) from every value it knows
/// to be secret: the `--pass-env` values, the upstream key (`--upstream-key-env`
/// or the profile's `upstream.key_env`), the password in the upstream URL, in
/// `--history` and in the profile's Postgres store. Call once the profile has
/// the command line applied (or, when that failed, with `None`). Values too
/// short to redact are warned about.
pub fn install_redactor(profile: Option<&Profile>, pass_env: &[String], urls: &[&str]) {
    let mut names: Vec<String> = pass_env.to_vec();
    let mut all_urls: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
    if let Some(up) = profile.and_then(|p| p.upstream.as_ref()) {
        names.extend(up.key_env.clone());
        all_urls.push(up.url.clone());
    }
    if let Some(pg) = profile.and_then(|p| p.store.as_ref()?.postgres.clone()) {
        all_urls.push(pg);
    }
    let short = crate::redact::install(crate::redact::known_secrets(&names, &all_urls));
    if !short.is_empty() {
        crate::say_err!(
            "chaosrun: warning: a secret value shorter than {} characters is not redacted from the outputs",
            crate::redact::MIN_LEN
        );
    }
}

/// Apply the command line's `--pass-env` and `--upstream`/`--upstream-key-env`
/// to `profile` (shared by table runs and `explore`): each passed name is
/// rendered from chaosrun's own environment for every scenario, and the
/// upstream is merged over the profile's and checked against `scenarios`.
pub fn apply_cli(
    profile: &mut Profile,
    pass_env: &[String],
    upstream: Option<String>,
    upstream_key_env: Option<String>,
    scenarios: &[crate::scenarios::Scenario],
) -> Result<(), String> {
    let flags = crate::provider::upstream::setup::Flags {
        url: upstream,
        key_env: upstream_key_env,
        ca: None,
    };
    apply_cli_upstream(profile, pass_env, flags, scenarios)
}

/// [`apply_cli`] with every upstream flag (`--upstream-ca` too).
pub fn apply_cli_upstream(
    profile: &mut Profile,
    pass_env: &[String],
    flags: crate::provider::upstream::setup::Flags,
    scenarios: &[crate::scenarios::Scenario],
) -> Result<(), String> {
    use crate::provider::upstream::setup;
    for name in pass_env {
        crate::driver::env::check_pass_env(name)?;
        profile
            .env
            .insert(name.clone(), format!("{{{{env:{name}}}}}"));
    }
    profile.upstream = setup::merge(profile.upstream.take(), flags)?;
    setup::check(profile.upstream.as_ref(), pass_env, scenarios)
}

/// What in a tool result shows that a background job started: the result of
/// a `background: true` call naming a job id with `id_prefix` (`proc_ab12`) or
/// `pid_field` with a number (`"pid": 123`) is evidence, for the `exercised`
/// check, that the job existed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundSpec {
    pub pid_field: String,
    pub id_prefix: String,
}

/// The profile as written in YAML.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileDoc {
    #[serde(default)]
    command: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    home_files: Vec<HomeFile>,
    #[serde(default)]
    store: Option<StoreSpec>,
    #[serde(default)]
    tools: BTreeMap<String, ToolMapping>,
    #[serde(default)]
    background: Option<BackgroundSpec>,
    #[serde(default)]
    breaker: bool,
    #[serde(default)]
    logs: Vec<String>,
    #[serde(default)]
    workers: Option<usize>,
    #[serde(default)]
    version_cmd: Vec<String>,
    /// The agent releases this profile is known to drive (a semver range,
    /// `">=2.1.328, <=2.1.332"`); a catalog run of another version warns.
    #[serde(default)]
    versions: Option<String>,
    resume: Option<bool>,
    /// `false`: the agent offers the model no tools (it acts through its
    /// reply's text); see [`Profile::tool_calls`].
    tool_calls: Option<bool>,
    /// Texts marking the agent's auxiliary calls; see [`Profile::aux_calls`].
    #[serde(default, deserialize_with = "aux_texts")]
    aux_calls: Vec<String>,
    /// The agent's tools are functions inside this code-execution tool; see
    /// [`Profile::code_tool`].
    #[serde(default)]
    code_tool: Option<String>,
    /// The model API the agent speaks (`openai-chat` when absent); an
    /// unknown name is a load error listing the four.
    #[serde(default)]
    wire: crate::provider::Wire,
    /// Exec mode: a one-shot CLI run once per turn (instead of `command`).
    #[serde(default)]
    exec: Option<exec::ExecSpec>,
    /// ACP drive: one long-lived agent process spoken to over the Agent
    /// Client Protocol (instead of `command`).
    #[serde(default)]
    acp: Option<acp::AcpSpec>,
    /// Proxy mode: forward model calls to this real server.
    #[serde(default)]
    upstream: Option<crate::provider::upstream::UpstreamSpec>,
    /// `false`, or the MCP transports the agent's config registers (and,
    /// proxy mode, the real server behind chaosrun's).
    #[serde(default)]
    mcp: crate::mcp::McpDoc,
    /// `namespace` (the default): the agent's own network namespace,
    /// loopback only; `host`: the host's network, reported as such.
    #[serde(default)]
    network: NetworkMode,
    /// `true`: the agent may call `setns` (refused by default; see
    /// `driver::seccomp`).
    #[serde(default)]
    allow_setns: bool,
    /// `true`: the agent runs under a pseudo-terminal (`driver::pty`).
    #[serde(default)]
    tty: bool,
    /// The scenario knobs the agent itself has a setting for ([`knobs`]).
    #[serde(default)]
    agent_knobs: Vec<String>,
}

/// Where a profile's agent gets its network (`network:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// A network namespace of its own whose only interface is loopback, with
    /// the scenario's provider and MCP server on it.
    #[default]
    Namespace,
    /// The host's network, for an agent that needs a real server (the
    /// Postgres workers); the run is reported as not network-contained.
    Host,
}

/// A resolved adapter profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// What `--agent` named, for messages.
    pub source: String,
    /// argv prefix; chaosrun appends `--agent-arg` values and the spec path.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub home_files: Vec<HomeFile>,
    pub store: Option<StoreSpec>,
    pub tools: BTreeMap<String, ToolMapping>,
    pub background: Option<BackgroundSpec>,
    pub breaker: bool,
    /// The agent's own log files (relative to HOME, templated), whose tails are
    /// quoted as evidence beside stderr's.
    pub logs: Vec<String>,
    /// Worker mode: this many agent processes share one store and one
    /// conversation (1: a single agent).
    pub workers: usize,
    /// argv printing the agent's own version (first stdout line), recorded by
    /// `--history`; empty when the profile has none.
    pub version_cmd: Vec<String>,
    /// The agent can be started again on its HOME and session after a kill
    /// (`resume: false` makes kill and chaos scenarios N/A). Default true.
    pub resume: bool,
    /// The agent sends its tools with each model call and runs the calls the
    /// model makes (default true). `tool_calls: false` (aider: edits and
    /// shell commands travel in the reply's text): every model call that is
    /// not a probe counts as a main call, although it offers no tools, and a
    /// row whose model asks for a tool call is N/A.
    pub tool_calls: bool,
    /// `aux_calls: [TEXT, ...]`: a model call whose latest user message
    /// holds one of these texts is an auxiliary call (answered `ok`, outside
    /// the rows' rules and call counts) although it offers the agent's tools:
    /// a side call the agent makes on its own (Qwen Code's follow-up
    /// suggestion after each ACP turn). Empty texts are refused at load.
    pub aux_calls: Vec<String>,
    /// `code_tool: NAME`: the agent's tools (its shell, the MCP server's
    /// tools) are functions the model calls from code it runs in its
    /// code-execution tool NAME, not tools it offers by name. A row whose
    /// model asks for a tool by a name the profile does not map is N/A,
    /// said so at load ([`needs`]), never pointed at the `tools:` map.
    pub code_tool: Option<String>,
    /// The model API the agent speaks; the provider serves it.
    pub wire: crate::provider::Wire,
    /// Exec mode (no driver script): one process per turn.
    pub exec: Option<exec::ExecSpec>,
    /// ACP drive: chaosrun is the agent's ACP client ([`acp`]).
    pub acp: Option<acp::AcpSpec>,
    /// The profile's directory (`{{profile_dir}}` in exec mode and the ACP drive).
    pub dir: PathBuf,
    /// Proxy mode (`upstream:`, or `--upstream`): unmatched model calls and
    /// `relay` rules go to this server (see [`crate::provider::upstream`]).
    pub upstream: Option<crate::provider::upstream::UpstreamSpec>,
    /// Whether (and how) the agent's config registers an MCP server.
    pub mcp: crate::mcp::McpSupport,
    /// `mcp.upstream`: the real MCP server behind every MCP row that names
    /// none of its own (see [`crate::mcp::upstream`]).
    pub mcp_upstream: Option<crate::mcp::upstream::UpstreamSpec>,
    /// `network:` (see [`NetworkMode`]).
    pub network: NetworkMode,
    /// `allow_setns: true`: the agent's seccomp program lets `setns` through.
    pub allow_setns: bool,
    /// `tty: true`: every agent process runs under a pseudo-terminal of its
    /// own, its controlling terminal (exec mode: its stdin, stdout and
    /// stderr; the driver protocol and the ACP drive: its stderr).
    pub tty: bool,
    /// The knobs `agent_knobs` declares that no template renders: each one
    /// a run-wide warning ([`knobs::warning`]).
    pub unmapped_knobs: Vec<String>,
    /// Some template renders `api_max_retries` and none `api_retry_budget`:
    /// the agent retries as often as the row says, not for a time (the
    /// `request_loop` check's bound).
    pub renders_retries: bool,
}

/// The template variables a scenario run provides, with placeholder values
/// (used to validate a profile before anything runs).
pub fn placeholder_vars() -> Vars {
    [
        "base_url",
        "model",
        "stale_timeout",
        "request_timeout",
        "api_max_retries",
        "api_retry_budget",
        "max_turns",
        "tool_timeout",
        "home",
        "workdir",
        "session_id",
        "tag",
        "profile_dir",
        "wire",
        "api_key",
        "agent_sandbox",
    ]
    .into_iter()
    .chain(crate::mcp::VAR_NAMES.iter().copied())
    .map(|k| (k.to_string(), "1".to_string()))
    .collect()
}

/// What each template variable of [`placeholder_vars`] holds, so a filter
/// that does not fit it (`{{agent_sandbox | ms}}`) is refused at load
/// ([`template::check`]).
pub fn var_kinds() -> Kinds {
    use template::Kind::{Count, Seconds, Switch, Text};
    let mut kinds: Kinds = placeholder_vars().into_keys().map(|k| (k, Text)).collect();
    for (name, kind) in [
        ("stale_timeout", Seconds),
        ("request_timeout", Seconds),
        ("tool_timeout", Seconds),
        ("api_max_retries", Count),
        ("api_retry_budget", Seconds),
        ("max_turns", Count),
        ("agent_sandbox", Switch),
    ] {
        kinds.insert(name.into(), kind);
    }
    kinds
}

fn parse_doc(path: &Path) -> Result<ProfileDoc, String> {
    let text = crate::input::read_input_text(path, crate::input::PROFILE).map_err(String::from)?;
    serde_yaml::from_str(&text).map_err(|e| {
        let (l, c) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        // A template refused inside a section (`exec`) is placed at itself.
        let (l, c) = template::quoted(&msg)
            .and_then(|expr| template::find(&text, expr))
            .unwrap_or((l, c));
        format!("{}:{l}:{c}: {msg}", path.display())
    })
}

/// `e` prefixed with `FILE:LINE:COL` of the template it quotes, when that
/// template stands in the profile at `path` (a load error found after the
/// YAML was read carries no position of its own).
/// `aux_calls`: texts, none empty (an empty one would make every model call
/// auxiliary, so no row's fault would ever reach the agent).
fn aux_texts<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    /// One text, refused where it stands when empty.
    struct AuxText(String);
    impl<'de> Deserialize<'de> for AuxText {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let t = String::deserialize(d)?;
            if t.trim().is_empty() {
                return Err(serde::de::Error::custom(
                    "an empty text would make every model call auxiliary; give the \
                     text that marks the agent's side calls",
                ));
            }
            Ok(AuxText(t))
        }
    }
    Ok(Vec::<AuxText>::deserialize(d)?
        .into_iter()
        .map(|t| t.0)
        .collect())
}

fn at_template(path: &Path, e: String) -> String {
    let found = template::quoted(&e).and_then(|expr| {
        let text = crate::input::read_input_text(path, crate::input::PROFILE).ok()?;
        template::find(&text, expr)
    });
    match found {
        Some((l, c)) => format!("{}:{l}:{c}: {e}", path.display()),
        None => e,
    }
}

/// An `acp:` section stands alone (no `exec`, no top-level `command`) and
/// drives one agent; its program must exist like `command`'s.
fn check_acp(agent: &str, doc: &mut ProfileDoc) -> Result<(), String> {
    let Some(a) = &doc.acp else { return Ok(()) };
    if doc.exec.is_some() || !doc.command.is_empty() {
        return Err(format!(
            "adapter profile `{agent}` has `acp` (an agent driven over the Agent Client \
             Protocol) beside `{}`; keep one",
            if doc.exec.is_some() {
                "exec"
            } else {
                "command"
            }
        ));
    }
    if doc.workers.unwrap_or(1) != 1 {
        return Err(format!(
            "adapter profile `{agent}`: the ACP drive runs one agent; `workers` must be 1"
        ));
    }
    doc.command = vec![a.command[0].clone()];
    Ok(())
}

/// Is `cmd` runnable: a path that exists, or a bare name found on PATH.
fn find_program(cmd: &str) -> Option<PathBuf> {
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return p.is_file().then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(cmd))
            .find(|p| p.is_file())
    })
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

impl Profile {
    /// `--deadline-scale F`: the profile's own deadlines scale with the
    /// rows' (today one: exec mode's `interrupt_grace`, SIGINT to SIGKILL).
    pub fn scale_deadlines(&mut self, f: f64) {
        if let Some(e) = &mut self.exec {
            e.interrupt_grace *= f;
        }
    }

    /// Resolve `--agent PATH`.
    pub fn resolve(agent: &str) -> Result<Profile, String> {
        Profile::load(agent, true)
    }

    /// The profile at `agent`, checked as [`Profile::resolve`] checks it but
    /// for its command, which need not be installed yet: `bisect` checks a
    /// catalog agent's profile (templates, rows' needs) before it installs
    /// any version.
    pub fn resolve_uninstalled(agent: &str) -> Result<Profile, String> {
        Profile::load(agent, false)
    }

    /// [`Profile::resolve`]; `installed`: the command must be found.
    fn load(agent: &str, installed: bool) -> Result<Profile, String> {
        let path = Path::new(agent);
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if is_yaml {
            // (A FIFO or a device is refused by the bounded read, by name.)
            if std::fs::metadata(path).is_err() {
                return Err(format!("adapter profile `{agent}` does not exist"));
            }
            let dir = absolute(path)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let mut doc = parse_doc(path)?;
            if let Some(e) = &doc.exec {
                if !doc.command.is_empty() {
                    return Err(format!(
                        "adapter profile `{agent}` has both `command` (a driver-protocol agent) \
                         and `exec` (a one-shot CLI run per turn); keep one"
                    ));
                }
                if doc.workers.unwrap_or(1) != 1 {
                    return Err(format!(
                        "adapter profile `{agent}`: exec mode runs one agent; `workers` must be 1"
                    ));
                }
                // The program each turn runs must exist, like `command`'s.
                doc.command = vec![e.first[0].clone()];
            }
            check_acp(agent, &mut doc)?;
            if doc.command.is_empty() {
                return Err(format!(
                    "adapter profile `{agent}` has no `command`; give the agent's argv, e.g. \
                     `command: [\"python3\", \"{{{{profile_dir}}}}/agent.py\"]`"
                ));
            }
            return Profile::from_doc(agent, doc, &dir, installed)
                .map_err(|e| at_template(path, e));
        }
        let Some(exe) = find_program(agent) else {
            return Err(format!(
                "agent command `{agent}` not found: pass an executable that speaks the driver \
                 protocol, or an adapter profile (*.yaml)"
            ));
        };
        let exe = absolute(&exe);
        let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        let beside = [
            exe.with_extension("yaml"),
            PathBuf::from(format!("{}.yaml", exe.display())),
        ]
        .into_iter()
        .find(|p| p.is_file());
        let mut doc = match &beside {
            Some(p) => parse_doc(p)?,
            None => ProfileDoc::default(),
        };
        if doc.command.is_empty() {
            doc.command = vec![exe.display().to_string()];
        }
        let profile = Profile::from_doc(agent, doc, &dir, installed);
        match &beside {
            Some(p) => profile.map_err(|e| at_template(p, e)),
            None => profile,
        }
    }

    fn from_doc(
        source: &str,
        doc: ProfileDoc,
        dir: &Path,
        installed: bool,
    ) -> Result<Profile, String> {
        let mut vars = Vars::new();
        vars.insert("profile_dir".into(), dir.display().to_string());
        let command = doc
            .command
            .iter()
            .map(|a| template::render(a, &vars))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("adapter profile `{source}`: command: {e}"))?;
        if let Some(range) = &doc.versions {
            semver::VersionReq::parse(range).map_err(|e| {
                format!(
                    "adapter profile `{source}`: versions: `{range}` is not a version range: {e}"
                )
            })?;
        }
        let version_cmd = doc
            .version_cmd
            .iter()
            .map(|a| template::render(a, &vars))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("adapter profile `{source}`: version_cmd: {e}"))?;
        knobs::validate(&doc.agent_knobs)
            .map_err(|e| format!("adapter profile `{source}`: {e}"))?;
        let unmapped_knobs = knobs::unmapped(&doc.agent_knobs, &doc);
        // Retries bounded by a count the row sets, not by time.
        let renders = |k: &str| knobs::unmapped(&[k.to_string()], &doc).is_empty();
        let renders_retries = renders("api_max_retries") && !renders("api_retry_budget");
        if installed && find_program(&command[0]).is_none() {
            return Err(format!(
                "agent command `{}` (from `{source}`) not found",
                command[0]
            ));
        }
        if installed {
            not_installed(&version_cmd, source)?;
        }
        let profile = Profile {
            source: source.to_string(),
            command,
            env: doc.env,
            home_files: doc.home_files,
            store: doc.store,
            tools: doc.tools,
            background: doc.background,
            breaker: doc.breaker,
            logs: doc.logs,
            workers: doc.workers.unwrap_or(1),
            version_cmd,
            resume: doc.resume.unwrap_or(true),
            tool_calls: doc.tool_calls.unwrap_or(true),
            aux_calls: doc.aux_calls,
            code_tool: doc.code_tool.filter(|n| !n.trim().is_empty()),
            wire: doc.wire,
            exec: doc.exec,
            acp: doc.acp,
            upstream: doc.upstream,
            dir: dir.to_path_buf(),
            mcp: doc.mcp.support,
            mcp_upstream: doc.mcp.upstream,
            network: doc.network,
            allow_setns: doc.allow_setns,
            tty: doc.tty,
            unmapped_knobs,
            renders_retries,
        };
        profile.validate_templates()?;
        profile.validate_home_paths()?;
        Ok(profile)
    }

    /// Every path the profile names inside HOME (home files, logs, a SQLite
    /// store) rendered with a placeholder HOME must stay inside it: no
    /// absolute path elsewhere, no `..` climbing out (`../../etc/shadow`).
    fn validate_home_paths(&self) -> Result<(), String> {
        let home = Path::new("/chaosrun-placeholder-home");
        let mut vars = placeholder_vars();
        vars.insert("home".into(), home.display().to_string());
        let paths = self
            .home_files
            .iter()
            .map(|f| ("home file", &f.path))
            .chain(self.logs.iter().map(|l| ("log", l)))
            .chain(
                self.store
                    .iter()
                    .flat_map(|s| s.path.iter().chain(s.jsonl.iter()).map(|p| ("store", p))),
            );
        for (what, p) in paths {
            let rendered = template::render(p, &vars)
                .map_err(|e| format!("adapter profile `{}`: {e}", self.source))?;
            crate::safe_path::within_home(home, &rendered).map_err(|e| {
                format!(
                    "adapter profile `{}`: {what} path {e}; it must stay inside the agent's HOME",
                    self.source
                )
            })?;
        }
        Ok(())
    }

    /// Render every template once with placeholders, so a typo fails before
    /// any agent starts.
    fn validate_templates(&self) -> Result<(), String> {
        let (vars, kinds) = (placeholder_vars(), var_kinds());
        let texts = self
            .env
            .values()
            .chain(self.home_files.iter().map(|f| &f.template))
            .chain(
                self.store
                    .iter()
                    .flat_map(|s| s.path.iter().chain(s.postgres.iter()).chain(s.jsonl.iter())),
            )
            .chain(self.logs.iter());
        for t in texts {
            template::check(t, &vars, &kinds)
                .map_err(|e| format!("adapter profile `{}`: {e}", self.source))?;
        }
        if let Some(s) = &self.store {
            s.check_kind()
                .map_err(|e| format!("adapter profile `{}`: {e}", self.source))?;
        }
        if !(1..=64).contains(&self.workers) {
            return Err(format!(
                "adapter profile `{}`: `workers` is 1 to 64",
                self.source
            ));
        }
        for f in &self.home_files {
            if Path::new(&f.path).is_absolute() || f.path.split('/').any(|c| c == "..") {
                return Err(format!(
                    "adapter profile `{}`: home file `{}` must be a relative path inside HOME",
                    self.source, f.path
                ));
            }
        }
        Ok(())
    }
}

/// Every file `--agent agent` reads to start the agent: the profile (or the
/// driver executable and the profile beside it) and each argv entry of the
/// command that is a file (the interpreter found on PATH included). No output
/// may overwrite one of them.
pub fn input_files(agent: &str, profile: &Profile) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let path = Path::new(agent);
    if path.exists() {
        let abs = absolute(path);
        files.push(abs.with_extension("yaml"));
        files.push(PathBuf::from(format!("{}.yaml", abs.display())));
        files.push(abs);
    } else if let Some(exe) = find_program(agent) {
        let abs = absolute(&exe);
        files.push(abs.with_extension("yaml"));
        files.push(PathBuf::from(format!("{}.yaml", abs.display())));
        files.push(abs);
    }
    if let Some(first) = profile.command.first().and_then(|c| find_program(c)) {
        files.push(absolute(&first));
    }
    files.extend(
        profile
            .command
            .iter()
            .map(Path::new)
            .filter(|p| p.is_file())
            .map(absolute),
    );
    files.retain(|f| f.exists());
    files.sort();
    files.dedup();
    files
}

/// A profile whose command is a wrapper script (it finds the agent itself)
/// still names the agent's own program in `version_cmd`: when that is an
/// absolute path that does not exist, the agent is not installed, and every
/// row would fail as the agent's fault. `Err` says so.
fn not_installed(version_cmd: &[String], source: &str) -> Result<(), String> {
    match version_cmd.first() {
        Some(prog) if Path::new(prog).is_absolute() && !Path::new(prog).exists() => Err(format!(
            "the agent is not installed: `{source}`'s version_cmd runs `{prog}`, which does not \
             exist (install it: the example's setup.sh, or `chaosrun agents setup NAME` and \
             `--agent NAME` for a known agent)"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shipped profile's templates fit their variables' kinds (the
    /// load-time check refuses none of them), its command not installed.
    #[test]
    fn every_shipped_profile_passes_the_template_kind_check() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        let mut loaded = 0;
        for dir in std::fs::read_dir(&root).unwrap().flatten() {
            let Ok(files) = std::fs::read_dir(dir.path()) else {
                continue;
            };
            for f in files.flatten().map(|f| f.path()) {
                let text = std::fs::read_to_string(&f).unwrap_or_default();
                let is_profile = f.extension().is_some_and(|e| e == "yaml")
                    && (text.contains("\ncommand:")
                        || text.contains("\nexec:")
                        || text.starts_with("exec:"));
                if !is_profile {
                    continue;
                }
                Profile::resolve_uninstalled(f.to_str().unwrap())
                    .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
                loaded += 1;
            }
        }
        assert!(loaded >= 12, "only {loaded} profiles found");
    }

    /// `{{api_retry_budget}}` is a number of seconds: the unit filters take
    /// it, so a budget in ms or whole seconds is rendered, a switch filter is not.
    #[test]
    fn the_retry_budget_is_a_variable_of_seconds() {
        let (vars, kinds) = (placeholder_vars(), var_kinds());
        for ok in [
            "{{api_retry_budget}}",
            "{{api_retry_budget | ms}}",
            "{{api_retry_budget | int}}",
        ] {
            template::check(ok, &vars, &kinds).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(kinds["api_retry_budget"], template::Kind::Seconds);
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn yaml_profile_renders_profile_dir_into_command() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.yaml",
            "command: [\"sh\", \"{{profile_dir}}/x.sh\"]\nbreaker: true\n",
        );
        let prof = Profile::resolve(p.to_str().unwrap()).unwrap();
        assert_eq!(
            prof.command[1],
            format!("{}/x.sh", absolute(d.path()).display())
        );
        assert!(prof.breaker && prof.store.is_none());
    }

    #[test]
    fn upstream_is_read_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.yaml",
            "command: [sh]\nupstream: {url: \"http://127.0.0.1:4000/v1\", key_env: UP_KEY}\n",
        );
        let prof = Profile::resolve(p.to_str().unwrap()).unwrap();
        let up = prof.upstream.unwrap();
        assert_eq!(up.url, "http://127.0.0.1:4000/v1");
        assert_eq!(up.key_env.as_deref(), Some("UP_KEY"));
        let p = write(
            d.path(),
            "b.yaml",
            "command: [sh]\nupstream: {url: x, key: sk-1}\n",
        );
        let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
        assert!(e.contains("key"), "{e}");
    }

    #[test]
    fn version_cmd_is_optional_and_rendered_like_command() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.yaml",
            "command: [sh]\nversion_cmd: [\"{{profile_dir}}/agent\", \"--version\"]\n",
        );
        // The program it names must exist: else the agent is not installed.
        let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
        assert!(
            e.contains("the agent is not installed") && e.contains("/agent`, which does not exist"),
            "{e}"
        );
        std::fs::write(d.path().join("agent"), "#!/bin/sh\necho 1.0\n").unwrap();
        let prof = Profile::resolve(p.to_str().unwrap()).unwrap();
        assert_eq!(
            prof.version_cmd,
            [
                format!("{}/agent", absolute(d.path()).display()),
                "--version".to_string()
            ]
        );
        let none = write(d.path(), "b.yaml", "command: [sh]\n");
        assert!(Profile::resolve(none.to_str().unwrap())
            .unwrap()
            .version_cmd
            .is_empty());
    }

    /// `versions:` is a semver range; anything else is a load error.
    #[test]
    fn versions_is_a_checked_range() {
        let d = tempfile::tempdir().unwrap();
        let ok = write(
            d.path(),
            "a.yaml",
            "command: [sh]\nversions: \">=1.2.0, <2\"\n",
        );
        assert!(Profile::resolve(ok.to_str().unwrap()).is_ok());
        let bad = write(
            d.path(),
            "b.yaml",
            "command: [sh]\nversions: \"about 1.2\"\n",
        );
        let e = Profile::resolve(bad.to_str().unwrap()).unwrap_err();
        assert!(
            e.contains("versions: `about 1.2` is not a version range"),
            "{e}"
        );
    }

    #[test]
    fn executable_picks_up_the_profile_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let exe = write(d.path(), "agent", "#!/bin/sh\n");
        write(
            d.path(),
            "agent.yaml",
            "store: {path: s.db, messages_sql: \"select 1 where :session_id = 1\"}\n",
        );
        let prof = Profile::resolve(exe.to_str().unwrap()).unwrap();
        assert_eq!(prof.command, vec![absolute(&exe).display().to_string()]);
        assert_eq!(prof.store.unwrap().path.as_deref(), Some("s.db"));
        assert_eq!(prof.workers, 1);
    }

    #[test]
    fn missing_agent_command_says_so() {
        let e = Profile::resolve("/no/such/agent").unwrap_err();
        assert!(
            e.contains("agent command `/no/such/agent` not found"),
            "{e}"
        );
    }

    #[test]
    fn unknown_template_variable_is_rejected_at_load() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.yaml",
            "command: [sh]\nenv: {X: \"{{bse_url}}\"}\n",
        );
        let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
        assert!(e.contains("bse_url") && e.contains("base_url"), "{e}");
    }

    #[test]
    fn store_is_sqlite_or_postgres_and_workers_are_bounded() {
        let d = tempfile::tempdir().unwrap();
        let both = write(
            d.path(),
            "a.yaml",
            "command: [sh]\nstore: {path: a, postgres: b, messages_sql: x}\n",
        );
        assert!(Profile::resolve(both.to_str().unwrap())
            .unwrap_err()
            .contains("one of `path` (SQLite), `postgres`"));
        let pg = write(
            d.path(),
            "b.yaml",
            "command: [sh]\nworkers: 3\nstore: {postgres: \"host=127.0.0.1\", messages_sql: \"select $1\"}\n",
        );
        let p = Profile::resolve(pg.to_str().unwrap()).unwrap();
        assert_eq!(
            (p.workers, p.store.unwrap().postgres.as_deref()),
            (3, Some("host=127.0.0.1"))
        );
        let zero = write(d.path(), "c.yaml", "command: [sh]\nworkers: 0\n");
        assert!(Profile::resolve(zero.to_str().unwrap())
            .unwrap_err()
            .contains("1 to 64"));
    }

    #[test]
    fn paths_outside_home_are_refused_at_load() {
        let d = tempfile::tempdir().unwrap();
        for (i, bad) in [
            "logs: [../../etc/shadow]",
            "logs: [/etc/shadow]",
            "store: {path: \"{{home}}/../x.db\", messages_sql: \"SELECT 1 FROM m WHERE s = :session_id\"}",
            "home_files: [{path: ../x, template: y}]",
            "store: {jsonl: \"../*.jsonl\", records: [{role: user, text: t}]}",
            "store: {jsonl: \"/root/.claude/**/*.jsonl\", records: [{role: user, text: t}]}",
        ]
        .iter()
        .enumerate()
        {
            let p = write(
                d.path(),
                &format!("p{i}.yaml"),
                &format!("command: [sh]\n{bad}\n"),
            );
            let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
            assert!(e.contains("HOME"), "{bad}: {e}");
        }
        let ok = write(
            d.path(),
            "ok.yaml",
            "command: [sh]\nlogs: [\"{{home}}/.a/log\", .b/log]\n",
        );
        assert!(Profile::resolve(ok.to_str().unwrap()).is_ok());
    }

    #[test]
    fn a_jsonl_store_needs_a_mapping_and_takes_no_sql() {
        let d = tempfile::tempdir().unwrap();
        for (i, (store, says)) in [
            ("{jsonl: \"a/*.jsonl\"}", "needs `records`"),
            ("{jsonl: a.jsonl, messages_sql: x, records: [{role: user}]}", "not `messages_sql`"),
            ("{jsonl: a.jsonl, records: [{role: user, role_path: r}]}", "one of `role`"),
            ("{path: a.db, messages_sql: \"select 1 where :session_id\", records: [{role: user}]}", "belong to a `jsonl` store"),
        ]
        .iter()
        .enumerate()
        {
            let p = write(d.path(), &format!("j{i}.yaml"), &format!("command: [sh]\nstore: {store}\n"));
            let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
            assert!(e.contains(says), "{store}: {e}");
        }
        let ok = write(
            d.path(),
            "ok.yaml",
            "command: [sh]\nstore:\n  jsonl: \"{{home}}/.codex/sessions/**/*.jsonl\"\n  records:\n    - {when: {type: response_item}, role_path: payload.role, text: payload.content}\n",
        );
        let p = Profile::resolve(ok.to_str().unwrap()).unwrap();
        assert_eq!(p.store.unwrap().records.len(), 1);
    }

    #[test]
    fn a_store_query_must_bind_the_session_id_its_way() {
        let spec = |path: bool, sql: &str| StoreSpec {
            path: path.then(|| "s.db".into()),
            postgres: (!path).then(|| "host=h".into()),
            ..crate::store::sql_spec(sql, Default::default())
        };
        let ok = "SELECT role, content, tool_call_id, tool_calls FROM m WHERE session_id = :session_id AND x = 'a?b' ORDER BY id";
        assert_eq!(spec(true, ok).check_binding(), Ok(()));
        assert_eq!(
            spec(false, "SELECT a::text FROM m WHERE s = $1").check_binding(),
            Ok(())
        );
        for (sqlite, bad, says) in [
            (true, "SELECT 1 FROM m WHERE s = ?1", "it uses ?1"),
            (true, "SELECT 1 FROM m WHERE s = $1", "it uses $1"),
            (true, "SELECT 1 FROM m", "binds no session id"),
            (
                true,
                "SELECT 1 FROM m WHERE s = :session_idx",
                "it uses :session_idx",
            ),
            (
                false,
                "SELECT 1 FROM m WHERE s = :session_id",
                "binds no session id",
            ),
            (
                false,
                "SELECT 1 FROM m WHERE s = $1 AND t = $2",
                "it uses $2",
            ),
        ] {
            let e = spec(sqlite, bad).check_binding().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(
                e.contains(if sqlite {
                    "`:session_id` (SQLite)"
                } else {
                    "`$1` (Postgres)"
                }),
                "{e}"
            );
        }
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "q.yaml",
            "command: [sh]\nstore: {path: s.db, messages_sql: \"SELECT 1 FROM m WHERE s = ?1\"}\n",
        );
        let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
        assert!(e.contains("q.yaml") && e.contains("?1"), "{e}");
    }

    #[test]
    fn wire_defaults_to_chat_and_an_unknown_one_names_the_four() {
        use crate::provider::Wire;
        let d = tempfile::tempdir().unwrap();
        let plain = write(d.path(), "a.yaml", "command: [sh]\n");
        assert_eq!(
            Profile::resolve(plain.to_str().unwrap()).unwrap().wire,
            Wire::OpenaiChat
        );
        let g = write(d.path(), "g.yaml", "command: [sh]\nwire: gemini\n");
        assert_eq!(
            Profile::resolve(g.to_str().unwrap()).unwrap().wire,
            Wire::Gemini
        );
        let bad = write(d.path(), "b.yaml", "command: [sh]\nwire: grpc\n");
        let e = Profile::resolve(bad.to_str().unwrap()).unwrap_err();
        assert!(e.contains("b.yaml:2:") && e.contains("grpc"), "{e}");
        for w in Wire::ALL {
            assert!(e.contains(w.name()), "{e}");
        }
    }

    #[test]
    fn tool_argument_values_can_be_transformed_and_a_bad_map_is_named() {
        use crate::provider::{ArgMap, ValueMap};
        let d = tempfile::tempdir().unwrap();
        let ok = write(
            d.path(),
            "t.yaml",
            "command: [sh]\ntools:\n  shell: {name: Bash, args: {command: command, timeout: {name: timeout, map: ms}}}\n",
        );
        let p = Profile::resolve(ok.to_str().unwrap()).unwrap();
        let args = &p.tools["shell"].args;
        assert_eq!(args["command"], ArgMap::Rename("command".into()));
        assert_eq!(
            args["timeout"],
            ArgMap::Map {
                name: "timeout".into(),
                map: ValueMap::Ms
            }
        );
        assert_eq!(args["timeout"].apply(&serde_json::json!(3)), 3000);
        assert_eq!(args["command"].apply(&serde_json::json!(3)), 3);
        let bad = write(
            d.path(),
            "b.yaml",
            "command: [sh]\ntools:\n  shell: {name: Bash, args: {timeout: {name: t, map: hours}}}\n",
        );
        let e = Profile::resolve(bad.to_str().unwrap()).unwrap_err();
        assert!(
            e.contains("b.yaml:3:") && e.contains("`hours`") && e.contains("ms"),
            "{e}"
        );
    }

    #[test]
    fn tool_argument_values_can_be_looked_up_by_their_text() {
        // GitHub Copilot CLI's `bash` runs in the background with
        // `mode: "async"`, not a boolean (examples/copilot/).
        let d = tempfile::tempdir().unwrap();
        let ok = write(
            d.path(),
            "t.yaml",
            "command: [sh]\ntools:\n  shell: {name: bash, args: {background: {name: mode, values: {\"true\": async, \"false\": sync}}}}\n",
        );
        let p = Profile::resolve(ok.to_str().unwrap()).unwrap();
        let bg = &p.tools["shell"].args["background"];
        assert_eq!(bg.name(), "mode");
        assert_eq!(bg.apply(&serde_json::json!(true)), "async");
        assert_eq!(bg.apply(&serde_json::json!(false)), "sync");
        assert_eq!(bg.apply(&serde_json::json!("other")), "other");
    }

    #[test]
    fn profile_yaml_error_has_line_and_column() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "a.yaml", "command: [sh]\nbreaker: maybe\n");
        let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
        assert!(e.contains("a.yaml:2:"), "{e}");
    }
}
