//! The `chaosrun agents` and `chaosrun tables` subcommands: their flags and
//! what they print (`agents check` is [`super::check`]'s). Exit codes: 0
//! done, 1 a setup that failed, 2 a bad name or folder.

use std::path::PathBuf;

use super::install::{self, State};
use super::{capabilities, find, names, tables, version};

/// `chaosrun agents [--json] [setup NAME[@VERSION] | check AGENT]`.
#[derive(clap::Args, Debug)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub action: Option<AgentsAction>,
    /// Print the list as JSON (one object per agent).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum AgentsAction {
    /// Install a known agent into the user's cache ($CHAOSRUN_CACHE, else
    /// $XDG_CACHE_HOME/chaosrun, else ~/.cache/chaosrun), where `--agent
    /// NAME` finds it: the pinned version from its lock, or NAME@VERSION
    /// (NAME@latest: the newest its registry serves) beside it.
    Setup {
        /// The agent's name (see `chaosrun agents`), optionally @VERSION or @latest.
        name: String,
    },
    /// A short smoke (start, one tool call, resume, store read, MCP) that
    /// says whether the profile still drives this agent, naming the step
    /// that broke and where in the profile to look. Exit 0 every applicable
    /// step passed, 1 one failed, 2 a usage error.
    Check(super::check::CheckArgs),
}

/// `chaosrun tables write DIR`.
#[derive(clap::Args, Debug)]
pub struct TablesArgs {
    #[command(subcommand)]
    pub action: Option<TablesAction>,
}

#[derive(clap::Subcommand, Debug)]
pub enum TablesAction {
    /// Write the built-in tables into DIR for editing (never overwrites).
    Write {
        /// The folder (created if new).
        dir: PathBuf,
    },
}

/// Print to stdout; a closed stdout is not an error.
pub(super) fn say(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_all(crate::term::escape(text).as_bytes())
        .and_then(|()| out.flush());
}

fn fail(code: u8, msg: impl std::fmt::Display) -> u8 {
    crate::say_err!("chaosrun: error: {msg}");
    code
}

/// Run `chaosrun agents ...`; returns the exit code.
pub fn agents(args: &AgentsArgs) -> u8 {
    let cache = || install::cache_dir().map_err(|e| fail(2, e));
    match &args.action {
        // The table run it starts resolves the agent, cache included.
        Some(AgentsAction::Check(check)) => super::check::run(check),
        Some(AgentsAction::Setup { name }) => cache().map_or_else(|c| c, |c| setup(name, &c)),
        None => cache().map_or_else(|c| c, |c| list(args.json, &c)),
    }
}

/// `chaosrun agents [--json]`: the shipped agents and the user's own.
fn list(json: bool, cache: &std::path::Path) -> u8 {
    let all = match super::all() {
        Ok(all) => all,
        Err(e) => return fail(2, e),
    };
    let rows: Vec<Row> = all.into_iter().map(|e| row(e, cache)).collect();
    let text = if json {
        serde_json::to_string_pretty(&rows).unwrap_or_default() + "\n"
    } else {
        render(&rows, cache)
    };
    say(&text);
    0
}

fn setup(spec: &str, cache: &std::path::Path) -> u8 {
    let (name, want) = match version::split(spec) {
        Some((n, w)) => (n, Some(w)),
        None => (spec, None),
    };
    let entry = match find(name) {
        Ok(Some(e)) => e,
        Ok(None) => return fail(2, format!("unknown agent `{name}` (known: {})", names())),
        Err(e) => return fail(2, e),
    };
    if !super::has(entry) {
        return fail(
            2,
            format!("agent `{name}`'s folder was not in the tree this chaosrun was built from"),
        );
    }
    let version = match &want {
        None => entry.pinned.to_string(),
        Some(_) if entry.install == super::entry::Install::Bundled => {
            return fail(
                2,
                format!("agent `{name}` is bundled: it has no other versions"),
            )
        }
        Some(w) => match super::resolve(entry, w) {
            Ok(v) => v,
            Err(e) => return fail(2, format!("agent `{name}`: {e}")),
        },
    };
    match setup_version(entry, cache, &version) {
        Ok((dir, got)) => {
            let run = if entry.matches(&got) {
                name.to_string()
            } else {
                format!("{name}@{got}")
            };
            say(&format!(
                "{name} {got} is ready in {}; run it with `chaosrun --agent {run}`\n",
                dir.display()
            ));
            0
        }
        Err(e) => fail(e.code(), format!("agent `{name}`: {e}")),
    }
}

/// Install `version` of `entry` into its folder under `cache` (kept when
/// it is already there); the folder and the version installed.
pub fn setup_version(
    entry: &super::entry::Entry,
    cache: &std::path::Path,
    version: &str,
) -> Result<(PathBuf, String), install::SetupError> {
    install::setup(entry, &super::files(entry), cache, version)
}

/// One line of `chaosrun agents`.
#[derive(Debug, serde::Serialize)]
pub struct Row {
    pub name: &'static str,
    pub pinned: &'static str,
    /// `bundled`, `yes` (the pin), `VERSION (not the pin)`, `no`, `refused`
    /// (its folder is not one chaosrun made: `--agent NAME` says why), `not
    /// in this build`.
    pub installed: String,
    /// Every version installed side by side (`agents setup NAME@VERSION`), oldest first.
    pub versions: Vec<String>,
    /// The profile's `versions:` range (the releases it is known to drive).
    pub known: Option<String>,
    pub capabilities: Option<capabilities::Capabilities>,
}

fn row(e: &'static super::entry::Entry, cache: &std::path::Path) -> Row {
    let installed = match install::state(e, cache) {
        State::Bundled => "bundled".to_string(),
        State::Pinned => "yes".to_string(),
        State::Other(v) => format!("{v} (not the pin)"),
        State::Missing => "no".to_string(),
        State::Refused(_) => "refused".to_string(),
        State::NotInBuild => "not in this build".to_string(),
    };
    let files = super::files(e);
    let capabilities = files
        .iter()
        .find(|(rel, _, _)| *rel == e.profile_yaml())
        .and_then(|(_, bytes, _)| capabilities::read(&String::from_utf8_lossy(bytes)).ok());
    let versions = match e.install {
        super::entry::Install::Bundled => Vec::new(),
        _ => install::installed(e, cache)
            .into_iter()
            .map(|(v, _)| v)
            .collect(),
    };
    Row {
        name: e.name,
        pinned: e.pinned,
        installed,
        versions,
        known: super::known_range(e, &files),
        capabilities,
    }
}

fn render(rows: &[Row], cache: &std::path::Path) -> String {
    let mut lines = vec![[
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
    ]
    .map(String::from)
    .to_vec()];
    for r in rows {
        let c = r.capabilities.as_ref();
        let opt = |v: Option<&String>| v.cloned().unwrap_or_else(|| "-".into());
        lines.push(vec![
            r.name.to_string(),
            r.pinned.to_string(),
            c.map_or("?".into(), |c| c.wire.clone()),
            c.map_or("?".into(), |c| c.mode.to_string()),
            c.map_or("?", |c| if c.resume { "yes" } else { "no" })
                .to_string(),
            match c.and_then(|c| c.mcp.as_ref()) {
                None => "-".to_string(),
                Some(t) if t.is_empty() => "no".to_string(),
                Some(t) => t.join("+"),
            },
            opt(c.and_then(|c| c.subagent.as_ref())),
            opt(c.and_then(|c| c.background.as_ref())),
            r.installed.clone(),
            if r.versions.is_empty() {
                "-".to_string()
            } else {
                r.versions.join(" ")
            },
        ]);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> = l
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "\ninstalled into {} (`chaosrun agents setup NAME[@VERSION]`); run with `chaosrun --agent NAME[@VERSION]`\n",
        cache.join("agents").display()
    ));
    out
}

/// Run `chaosrun tables [write DIR]`; returns the exit code.
pub fn tables(args: &TablesArgs) -> u8 {
    match &args.action {
        None => {
            let mut out = String::new();
            for (file, text) in tables::TABLES {
                let rows = text.lines().filter(|l| l.starts_with("  - id: ")).count();
                out.push_str(&format!("{file:<22} {rows} rows (built in)\n"));
            }
            say(&out);
            0
        }
        Some(TablesAction::Write { dir }) => match tables::write(dir) {
            Ok(paths) => {
                for p in paths {
                    say(&format!("wrote {}\n", p.display()));
                }
                0
            }
            Err(e) => fail(2, e),
        },
    }
}
