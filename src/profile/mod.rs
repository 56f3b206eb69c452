//! Adapter profiles: everything agent-specific (command, home files rendered
//! from templates, extra env, the durable store and its SQL, the tool mapping,
//! background-job markers, breaker), and how `--agent PATH` resolves to one.
//!
//! `--agent` names either a profile file (`*.yaml`), or an executable that
//! speaks the driver protocol, with an optional profile beside it (`./hermes`
//! with `./hermes.yaml`). Without `--agent`, the bundled reference agent runs.

pub mod bundled;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::provider::ToolMapping;
use crate::template::{self, Vars};

/// A file rendered into the hermetic HOME.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HomeFile {
    /// Relative to HOME.
    pub path: String,
    pub template: String,
}

/// Where the agent keeps its messages: a SQLite file, or a Postgres database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSpec {
    /// SQLite file, relative to HOME (templated).
    #[serde(default)]
    pub path: Option<String>,
    /// Postgres connection string (libpq key=value or URL; templated).
    #[serde(default)]
    pub postgres: Option<String>,
    /// Returns `role, content, tool_call_id, tool_calls` of a session's active
    /// messages, oldest first; the session id is bound as `:session_id`
    /// (SQLite) or `$1` (Postgres).
    pub messages_sql: String,
}

/// What in a tool result shows that a background job started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// The model API the agent speaks (`openai-chat` when absent); an
    /// unknown name is a load error listing the four.
    #[serde(default)]
    wire: crate::provider::Wire,
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
    /// The model API the agent speaks; the provider serves it.
    pub wire: crate::provider::Wire,
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
        "max_turns",
        "tool_timeout",
        "home",
        "workdir",
        "session_id",
        "tag",
        "profile_dir",
        "wire",
    ]
    .into_iter()
    .map(|k| (k.to_string(), "1".to_string()))
    .collect()
}

fn parse_doc(path: &Path) -> Result<ProfileDoc, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read adapter profile {}: {e}", path.display()))?;
    serde_yaml::from_str(&text).map_err(|e| {
        let (l, c) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        format!("{}:{l}:{c}: {msg}", path.display())
    })
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
    /// Resolve `--agent PATH`.
    pub fn resolve(agent: &str) -> Result<Profile, String> {
        let path = Path::new(agent);
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if is_yaml {
            if !path.is_file() {
                return Err(format!("adapter profile `{agent}` does not exist"));
            }
            let dir = absolute(path)
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let doc = parse_doc(path)?;
            if doc.command.is_empty() {
                return Err(format!(
                    "adapter profile `{agent}` has no `command`; give the agent's argv, e.g. \
                     `command: [\"python3\", \"{{{{profile_dir}}}}/agent.py\"]`"
                ));
            }
            return Profile::from_doc(agent, doc, &dir);
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
        Profile::from_doc(agent, doc, &dir)
    }

    fn from_doc(source: &str, doc: ProfileDoc, dir: &Path) -> Result<Profile, String> {
        let mut vars = Vars::new();
        vars.insert("profile_dir".into(), dir.display().to_string());
        let command = doc
            .command
            .iter()
            .map(|a| template::render(a, &vars))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("adapter profile `{source}`: command: {e}"))?;
        if find_program(&command[0]).is_none() {
            return Err(format!(
                "agent command `{}` (from `{source}`) not found",
                command[0]
            ));
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
            wire: doc.wire,
        };
        profile.validate_templates()?;
        Ok(profile)
    }

    /// Render every template once with placeholders, so a typo fails before
    /// any agent starts.
    fn validate_templates(&self) -> Result<(), String> {
        let vars = placeholder_vars();
        let texts = self
            .env
            .values()
            .chain(self.home_files.iter().map(|f| &f.template))
            .chain(
                self.store
                    .iter()
                    .flat_map(|s| s.path.iter().chain(s.postgres.iter())),
            )
            .chain(self.logs.iter());
        for t in texts {
            template::render(t, &vars)
                .map_err(|e| format!("adapter profile `{}`: {e}", self.source))?;
        }
        if let Some(s) = &self.store {
            if s.path.is_some() == s.postgres.is_some() {
                return Err(format!(
                    "adapter profile `{}`: `store` takes either `path` (SQLite) or `postgres` (a DSN)",
                    self.source
                ));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn executable_picks_up_the_profile_beside_it() {
        let d = tempfile::tempdir().unwrap();
        let exe = write(d.path(), "agent", "#!/bin/sh\n");
        write(
            d.path(),
            "agent.yaml",
            "store: {path: s.db, messages_sql: \"select 1\"}\n",
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
            .contains("either `path`"));
        let pg = write(
            d.path(),
            "b.yaml",
            "command: [sh]\nworkers: 3\nstore: {postgres: \"host=127.0.0.1\", messages_sql: x}\n",
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
    fn profile_yaml_error_has_line_and_column() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "a.yaml", "command: [sh]\nbreaker: maybe\n");
        let e = Profile::resolve(p.to_str().unwrap()).unwrap_err();
        assert!(e.contains("a.yaml:2:"), "{e}");
    }
}
