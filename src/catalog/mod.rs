//! The catalog of shipped agents and tables: `--agent NAME` resolves a
//! shipped profile by name as well as by path, `chaosrun agents` lists the
//! known agents, `chaosrun agents setup NAME` installs one into the user's
//! cache, `chaosrun agents check AGENT` runs a smoke that names what in a
//! profile no longer drives its agent ([`check`], [`steps`]), and the seed
//! tables are built in ([`tables`]).
//!
//! The registry ([`registry::AGENTS`]) is one line per agent; `build.rs`
//! embeds each entry's `examples/<name>/` folder. `--agent NAME` writes that
//! folder into `CACHE/agents/NAME/` (refreshing the profile and its helper
//! files, keeping the install `setup.sh` left there) and loads the profile
//! from it, so its relative paths (`{{profile_dir}}/prefix/bin/...`) resolve.

pub mod capabilities;
pub mod check;
pub mod cli;
pub mod embedded;
pub mod entry;
pub mod install;
pub mod registry;
pub mod steps;
pub mod tables;

use entry::Entry;
use install::State;

/// The entry named `name`, if any.
pub fn find(name: &str) -> Option<&'static Entry> {
    registry::AGENTS.iter().find(|e| e.name == name)
}

/// The known names, for messages.
pub fn names() -> String {
    registry::AGENTS
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Is `agent` meant as a path (it names a folder or a YAML file, or a file
/// of that name is here)? Otherwise it is looked up as a name.
fn is_path(agent: &str) -> bool {
    agent.contains('/')
        || agent.ends_with(".yaml")
        || agent.ends_with(".yml")
        || std::path::Path::new(agent).is_file()
}

/// Is `cmd` a program on PATH (a driver executable given by name)?
fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(cmd).is_file()))
}

/// The agent a run uses, as a path `Profile::resolve` takes, with the temp
/// folder that must live as long as the run (the bundled reference agent):
/// nothing or `reference` is the bundled agent; a path is itself; a known
/// name is its shipped profile in the user's cache (exit 2 with the fix when
/// it is not installed; a warning naming both versions when another version
/// is); an unknown name is an error listing the known ones.
pub fn agent_or_bundled(
    agent: Option<&str>,
) -> Result<(String, Option<tempfile::TempDir>), String> {
    let Some(agent) = agent else {
        return crate::profile::bundled::agent_or_bundled(None);
    };
    if is_path(agent) {
        return Ok((agent.to_string(), None));
    }
    let Some(entry) = find(agent) else {
        if on_path(agent) {
            return Ok((agent.to_string(), None));
        }
        return Err(format!(
            "unknown agent `{agent}`: not a file, a program on PATH, nor a known agent \
             (known: {}); give a profile (*.yaml) or a driver executable by path, or see `chaosrun agents`",
            names()
        ));
    };
    shipped(entry)
}

/// A known agent's profile, ready to run.
fn shipped(entry: &Entry) -> Result<(String, Option<tempfile::TempDir>), String> {
    let cache = install::cache_dir()?;
    let dir = install::agent_dir(&cache, entry);
    let setup = format!("run `chaosrun agents setup {}`", entry.name);
    match install::state(entry, &cache) {
        State::NotInBuild => {
            return Err(format!(
                "agent `{}` is in the registry but its folder (examples/{}/) was not in the \
                 tree this chaosrun was built from",
                entry.name, entry.name
            ))
        }
        State::Bundled => return crate::profile::bundled::agent_or_bundled(None),
        State::Missing => {
            return Err(format!(
                "agent `{}` {} is not installed in {}; {setup} first",
                entry.name,
                entry.pinned,
                dir.display()
            ))
        }
        State::Other(v) => crate::say_err!(
            "chaosrun: warning: agent `{}`: {v} is installed in {}, not the pinned {} its \
             profile was written for; {setup} to install {}",
            entry.name,
            dir.display(),
            entry.pinned,
            entry.pinned
        ),
        State::Pinned => {}
    }
    // The profile and its helper files as this chaosrun ships them.
    embedded::write_out(&dir, &embedded::files(entry.name)).map_err(|e| {
        format!(
            "cannot write agent `{}` into {}: {e}",
            entry.name,
            dir.display()
        )
    })?;
    Ok((dir.join(entry.profile).display().to_string(), None))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each entry whose folder was embedded holds its profile, and its
    /// `setup.sh` installs the version the registry pins (a drift between the
    /// two would make `agents` lie about what is installed).
    #[test]
    fn every_embedded_entry_holds_its_profile_and_pin() {
        let mut checked = 0;
        for e in registry::AGENTS {
            let files = embedded::files(e.name);
            let on_disk = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("examples")
                .join(e.name)
                .is_dir();
            assert_eq!(
                !files.is_empty(),
                on_disk,
                "{}: embedded iff in the tree",
                e.name
            );
            if files.is_empty() {
                continue;
            }
            checked += 1;
            let has = |rel: &str| files.iter().any(|(r, _, _)| *r == rel);
            assert!(has(e.profile), "{}: no {} in its folder", e.name, e.profile);
            assert!(
                has(&e.profile_yaml()),
                "{}: no {}",
                e.name,
                e.profile_yaml()
            );
            assert!(
                files
                    .iter()
                    .all(|(r, _, _)| !r.starts_with("prefix/") && !r.starts_with(".venv/")),
                "{}: an install was embedded",
                e.name
            );
            if e.install != entry::Install::Bundled {
                let setup = files.iter().find(|(r, _, _)| *r == "setup.sh");
                let text = String::from_utf8_lossy(setup.expect("a setup.sh").1);
                assert!(
                    text.contains(e.pinned),
                    "{}: setup.sh does not pin {}",
                    e.name,
                    e.pinned
                );
            }
        }
        assert!(checked >= 8, "only {checked} agents embedded");
    }

    #[test]
    fn names_and_paths() {
        assert!(is_path("examples/codex/codex.yaml") && is_path("my.yaml"));
        assert!(!is_path("codex"));
        assert_eq!(find("codex").map(|e| e.pinned), Some("0.169.0"));
        assert!(names().starts_with("reference, claude-code"));
        let err = agent_or_bundled(Some("no-such-agent-xyz")).unwrap_err();
        assert!(err.contains("known: reference"), "{err}");
    }
}
