//! One run's set-up and teardown, shared by table runs ([`super::run`]) and
//! `explore` ([`super::explore`]): the agent flags both commands flatten
//! ([`AgentFlags`]), resolving them into the agent and its profile
//! ([`AgentFlags::resolve`], the redactor installed), and the run's shared
//! parts ([`Run::open`]: run id, child subreaper, containment, cleanup guard,
//! the runner's [`Shared`], the tokio runtime), ended in one place
//! ([`Run::close`], or on drop: runtime, containment, marked leftovers, the
//! run's temp folders, the bundled agent's folder, the guard).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::proc_hygiene::{self, Guard, RunContainment, RUN_VAR};
use crate::profile::Profile;
use crate::runner::Shared;
use crate::scenarios::Scenario;

/// How long the end of a run sweeps for processes marked with its run id.
const SWEEP_WAIT: Duration = Duration::from_secs(10);

/// The flags that name the agent and how it reaches a model: the same for a
/// table run and `explore` (`#[command(flatten)]` in both).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AgentFlags {
    /// A known agent's name (see `chaosrun agents`), an adapter profile
    /// (*.yaml) or a driver executable (a profile beside it, `NAME.yaml`, is
    /// used when present). Default: the bundled reference agent.
    #[arg(long, value_name = "NAME|PATH")]
    pub agent: Option<String>,
    /// An extra argument for the agent command, before the spec path
    /// (repeatable), e.g. --agent-arg=--bug=NAME.
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// Pass the caller's variable NAME to the agent (repeatable). The agent
    /// otherwise gets only PATH, LANG, LC_*, TERM, TZ, USER, LOGNAME, SHELL,
    /// its own HOME and TMPDIR, chaosrun's CHAOS_* and the profile's `env`.
    /// NAME must be set (else exit 2).
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// The model API wire the agent speaks (openai-chat, openai-responses,
    /// anthropic, gemini), overriding the profile's `wire:`.
    #[arg(long, value_name = "WIRE")]
    pub wire: Option<crate::provider::Wire>,
    /// Proxy mode: forward the model calls no rule answers (and `relay`
    /// rules) to this real server on the agent's wire (its base URL,
    /// https://... or http://...), overriding the profile's `upstream.url`.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// The variable holding the upstream's API key (also give --pass-env NAME),
    /// overriding the profile's `upstream.key_env`.
    #[arg(long = "upstream-key-env", value_name = "NAME")]
    pub upstream_key_env: Option<String>,
    /// A PEM file of certificates to trust for an https:// upstream: a
    /// private CA, or the upstream's own (self-signed) certificate, trusted
    /// as itself; overriding the profile's `upstream.ca`.
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_ca: Option<PathBuf>,
}

/// What a command adds to [`AgentFlags::resolve`]: a table run's cassette
/// flags and the other URLs whose secrets must not reach an output.
#[derive(Default)]
pub struct Extra<'a> {
    /// `--replay DIR`: rewrite the rows' relay rules to read cassettes.
    pub replay: Option<&'a Path>,
    /// `--record DIR`: write what the upstream answers.
    pub record: Option<PathBuf>,
    /// More URLs to redact (`--history`'s).
    pub urls: Vec<&'a str>,
}

/// The agent resolved for a run: what `--agent` named (or the bundled
/// agent's path), its profile with the flags applied, and the temp folder
/// the bundled agent lives in (removed when the run closes).
pub struct Agent {
    pub path: String,
    pub profile: Profile,
    /// The agent's version as the report names it (set by the run, see
    /// `cli::run`; `None` where it cannot be told).
    pub version: Option<String>,
    bundled_dir: Option<tempfile::TempDir>,
}

impl AgentFlags {
    /// The agent and its profile with the flags' overrides (`--wire`, the
    /// upstream, `--pass-env`, `extra`'s cassettes) checked against `rows`,
    /// and the redactor installed (also when the flags are refused).
    pub fn resolve(&self, rows: &mut [Scenario], extra: Extra<'_>) -> Result<Agent, String> {
        let (path, bundled_dir) = crate::catalog::agent_or_bundled(self.agent.as_deref())?;
        let mut profile = Profile::resolve(&path)?;
        if let Some(wire) = self.wire {
            profile.wire = wire;
        }
        if profile.exec.is_some() && !self.agent_args.is_empty() {
            return Err(format!(
                "--agent-arg is for a driver-protocol agent; `{}` is an exec-mode profile: put \
                 the arguments in its `exec.first`/`next`/`resume` argv (or read them there with \
                 `{{{{env:NAME}}}}`)",
                profile.source
            ));
        }
        let urls: Vec<&str> = self
            .upstream
            .iter()
            .map(String::as_str)
            .chain(extra.urls.iter().copied())
            .collect();
        crate::profile::cassettes::replay(rows, extra.replay)?;
        let flags = crate::provider::upstream::setup::Flags {
            url: self.upstream.clone(),
            key_env: self.upstream_key_env.clone(),
            ca: self.upstream_ca.clone(),
        };
        if let Err(e) =
            crate::profile::apply_cli_upstream(&mut profile, &self.pass_env, flags, rows)
        {
            let mut names = self.pass_env.clone();
            names.extend(self.upstream_key_env.clone());
            crate::profile::install_redactor(None, &names, &urls);
            return Err(e);
        }
        crate::profile::cassettes::record(&mut profile, extra.record)?;
        crate::profile::install_redactor(Some(&profile), &self.pass_env, &urls);
        // A shipped profile run from its folder with no install beside it:
        // every row would fail as the agent's fault.
        let at = std::path::Path::new(&path);
        if let Some(name) = crate::catalog::uninstalled_at(at) {
            let dir = at.parent().map_or(".".into(), |d| d.display().to_string());
            return Err(format!(
                "{name} is not installed beside `{path}`: run `{dir}/setup.sh` first, or run \
                 the installed copy with `chaosrun agents setup {name}` and `--agent {name}`"
            ));
        }
        Ok(Agent {
            path,
            profile,
            version: None,
            bundled_dir,
        })
    }

    /// The agent as a run's first line names it: the profile's source, or
    /// the bundled reference agent.
    pub fn shown(&self, profile: &Profile) -> String {
        if self.agent.is_some() {
            profile.source.clone()
        } else {
            "bundled reference agent".into()
        }
    }
}

/// A run's shared parts, open from [`Run::open`] until [`Run::close`] (or
/// drop): every process the run started is gone after it, and so are its
/// temp folders.
pub struct Run {
    /// What every scenario of the run shares (profile, run id, containment).
    pub shared: Arc<Shared>,
    rt: Option<tokio::runtime::Runtime>,
    guard: Option<Guard>,
    bundled_dir: Option<tempfile::TempDir>,
}

impl Run {
    /// A new run id, chaosrun as a child subreaper, the run's containment, a
    /// cleanup guard (removing the bundled agent's folder if chaosrun dies),
    /// the runner's [`Shared`] and a tokio runtime. What cannot be had is a
    /// warning, never a refusal.
    pub fn open(agent: Agent, agent_args: &[String], artifacts: Option<PathBuf>) -> Run {
        let run_id = format!("chaos{}", proc_hygiene::new_id(&mut rand::thread_rng()));
        if let Err(e) = proc_hygiene::become_subreaper() {
            crate::say_err!("chaosrun: warning: cannot become a child subreaper ({e}); orphans re-parent to init but are still found by their tag");
        }
        let containment = Arc::new(RunContainment::new(&run_id));
        let temp: Vec<&Path> = agent.bundled_dir.iter().map(|d| d.path()).collect();
        let guard = std::env::current_exe()
            .and_then(|exe| Guard::spawn(&exe, &run_id, &temp))
            .map_err(|e| crate::say_err!("chaosrun: warning: no cleanup guard ({e}); a SIGKILL of chaosrun may leave processes behind"))
            .ok();
        // After the guard started (it is chaosrun too): room for the
        // handles kept per running scenario. Children get the old limit.
        crate::fd_limit::raise();
        let shared = Arc::new(Shared {
            profile: agent.profile,
            agent_args: agent_args.to_vec(),
            run_id,
            containment,
            boot_gate: Shared::boot_gate(),
            artifacts,
        });
        Run {
            shared,
            rt: Some(tokio::runtime::Runtime::new().expect("tokio runtime")),
            guard,
            bundled_dir: agent.bundled_dir,
        }
    }

    /// The run's tokio runtime.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("a run's runtime lives until close")
    }

    /// End the run: the runtime (never waiting long on a blocking read),
    /// the containment and any process still marked with the run id, the
    /// run's scenario folders in the temp dir, the bundled agent's folder,
    /// then the guard. Returns how many processes had to be killed.
    pub fn close(mut self) -> usize {
        self.end()
    }

    fn end(&mut self) -> usize {
        let Some(rt) = self.rt.take() else { return 0 };
        crate::runner::end_runtime(rt);
        let killed = kill_leftovers(&self.shared);
        remove_run_folders(&self.shared.run_id);
        drop(self.bundled_dir.take());
        if let Some(g) = self.guard.take() {
            g.finish();
        }
        killed
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        self.end();
    }
}

/// Kill every process of the run still alive: the containment's, then any
/// marked with the run id (a dying job may spawn more; bounded). How many.
pub fn kill_leftovers(shared: &Shared) -> usize {
    shared.containment.end() + proc_hygiene::sweep_marked(RUN_VAR, &shared.run_id, SWEEP_WAIT)
}

/// Remove what is left of this run's scenario folders in the temp dir
/// (`chaosrun-RUN-N`): after an interrupt, or a scenario whose run ended
/// early. Artifacts the user asked for live elsewhere and stay.
fn remove_run_folders(run_id: &str) {
    let prefix = format!("chaosrun-{run_id}-");
    let Ok(dir) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
