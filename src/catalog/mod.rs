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
//! `NAME@VERSION` is another version's install beside it
//! (`CACHE/agents/NAME@VERSION/`, see [`install`] and [`version`]). A cache
//! folder is used only as chaosrun made it: reached without following a
//! link ([`cache`]) and sealed by `agents setup` ([`seal`]); anything else is
//! refused with the fix.

pub mod cache;
pub mod capabilities;
pub mod check;
pub mod cli;
pub mod embedded;
pub mod entry;
pub mod install;
pub mod local;
pub mod packages;
pub mod registry;
pub mod seal;
pub mod steps;
pub mod tables;
pub mod version;

use entry::Entry;
use install::State;
use version::Want;

/// Every known agent: the shipped ones, then the user's own
/// (`CHAOSRUN_CATALOG`, see [`local`]).
pub fn all() -> Result<Vec<&'static Entry>, String> {
    Ok(registry::AGENTS.iter().chain(local::entries()?).collect())
}

/// The entry named `name`, if any.
pub fn find(name: &str) -> Result<Option<&'static Entry>, String> {
    Ok(all()?.into_iter().find(|e| e.name == name))
}

/// The known names, for messages.
pub fn names() -> String {
    all()
        .unwrap_or_else(|_| registry::AGENTS.iter().collect())
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The files of an agent's folder: embedded in the binary for a shipped
/// agent, read from `CHAOSRUN_CATALOG` for a local one.
pub fn files(entry: &Entry) -> Vec<embedded::File> {
    match local::dir(entry.name) {
        Some(_) => local::files(entry.name),
        None => embedded::files(entry.name),
    }
}

/// Does this build (or the local catalog) hold the agent's folder?
pub fn has(entry: &Entry) -> bool {
    // Without reading the folder: a local entry's files are read (and kept
    // for the process) only where they are written out.
    local::dir(entry.name).is_some() || embedded::has(entry.name)
}

/// The version of the known agent whose profile is at `profile` (its file
/// name is the entry's profile, or driver, and its folder holds the
/// install): read from the package manager's metadata there, so a shipped
/// profile run from `examples/NAME/`, the cache or a `NAME@VERSION` folder
/// names the version it ran. `None` for any other path.
pub fn version_at(profile: &std::path::Path) -> Option<String> {
    let file = profile.file_name()?.to_str()?;
    let dir = profile.parent()?;
    all()
        .ok()?
        .into_iter()
        .filter(|e| {
            // Its ACP profile (`NAME-acp.yaml`) runs the same install.
            let acp = acp_file(e).is_ok_and(|f| f == file);
            (e.profile == file || acp) && e.install != entry::Install::Bundled
        })
        .find_map(|e| install::installed_version(e, dir))
}

/// The known agent whose shipped profile is at `profile` but whose install
/// is not beside it: the file is the entry's profile (or its ACP profile)
/// in a folder named for the entry that holds its `setup.sh` (an
/// `examples/NAME/` copy), and no package metadata is there. Every row
/// would fail as the agent's fault; the caller refuses the run instead.
pub fn uninstalled_at(profile: &std::path::Path) -> Option<&'static str> {
    let file = profile.file_name()?.to_str()?;
    let dir = profile.parent()?;
    let named = dir.file_name()?.to_str()?;
    let e = all().ok()?.into_iter().find(|e| {
        let acp = acp_file(e).is_ok_and(|f| f == file);
        (e.profile == file || acp) && e.install != entry::Install::Bundled && e.name == named
    })?;
    (dir.join("setup.sh").is_file() && install::installed_version(e, dir).is_none())
        .then_some(e.name)
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
/// is); `NAME@VERSION` (or `@latest`) is that version's install beside the
/// pinned one; an unknown name is an error listing the known ones.
pub fn agent_or_bundled(
    agent: Option<&str>,
) -> Result<(String, Option<tempfile::TempDir>), String> {
    let Some(agent) = agent else {
        return crate::profile::bundled::agent_or_bundled(None);
    };
    if is_path(agent) {
        return Ok((agent.to_string(), None));
    }
    let (name, want) = match version::split(agent) {
        Some((name, want)) => (name, Some(want)),
        None => (agent, None),
    };
    if find(name)?.is_none() {
        if let Some(base) = name.strip_suffix(ACP_SUFFIX).filter(|b| !b.is_empty()) {
            if let Some(entry) = find(base)? {
                let file = acp_file(entry)?;
                let at = agent.replacen(name, base, 1);
                let (profile, keep) = agent_or_bundled(Some(&at))?;
                let path = std::path::Path::new(&profile).with_file_name(file);
                return Ok((path.display().to_string(), keep));
            }
        }
    }
    let Some(entry) = find(name)? else {
        if want.is_none() && on_path(agent) {
            return Ok((agent.to_string(), None));
        }
        return Err(format!(
            "unknown agent `{name}`: not a file, a program on PATH, nor a known agent \
             (known: {}); give a profile (*.yaml) or a driver executable by path, or see `chaosrun agents`",
            names()
        ));
    };
    match want {
        None => shipped(entry),
        Some(_) if entry.install == entry::Install::Bundled => Err(format!(
            "agent `{name}` is bundled with chaosrun: it has no other versions"
        )),
        Some(want) => {
            let v = resolve(entry, &want)?;
            if entry.matches(&v) {
                shipped(entry)
            } else {
                versioned(entry, &v)
            }
        }
    }
}

/// What a known name ends with to run its agent over the Agent Client
/// Protocol: `gemini-cli-acp` is `gemini-cli`'s folder and install, driven
/// through its ACP profile.
pub const ACP_SUFFIX: &str = "-acp";

/// The file name of `entry`'s ACP profile, `NAME-acp.yaml` for its
/// `NAME.yaml` (`agent-acp.yaml` for the reference agent's `agent.yaml`),
/// looked up in its folder before anything is installed; an agent with none
/// is an error saying so.
fn acp_file(entry: &Entry) -> Result<String, String> {
    let yaml = entry.profile_yaml();
    let stem = yaml.strip_suffix(".yaml").unwrap_or(&yaml);
    let file = format!("{stem}{ACP_SUFFIX}.yaml");
    let bundled = entry.install == entry::Install::Bundled;
    if bundled || files(entry).iter().any(|(path, _, _)| *path == file) {
        return Ok(file);
    }
    Err(format!(
        "agent `{}` has no ACP profile (no {file} in examples/{}/): it is driven through \
         `{}` only; docs/acp.md lists the agents that speak ACP",
        entry.name, entry.name, entry.name
    ))
}

/// The version `want` names: itself, or (`latest`) what the agent's
/// registry serves today, printed.
pub fn resolve(entry: &Entry, want: &Want) -> Result<String, String> {
    match want {
        Want::Exact(v) => version::check(v).map(|()| v.clone()),
        Want::Latest => {
            let v = packages::latest(entry)?;
            crate::say_err!(
                "chaosrun: {}@latest is {v} (`{}`)",
                entry.name,
                packages::lister(entry).unwrap_or_default()
            );
            Ok(v)
        }
    }
}

/// A non-pinned version's install, ready to run.
fn versioned(entry: &Entry, v: &str) -> Result<(String, Option<tempfile::TempDir>), String> {
    let cache = install::cache_dir()?;
    let dir = install::version_dir(&cache, entry, v);
    match install::trusted_version(entry, &cache, v)? {
        Some(have) if have == v => {}
        _ => {
            return Err(format!(
                "agent `{}` {v} is not installed in {}; run `chaosrun agents setup {}@{v}` first",
                entry.name,
                dir.display(),
                entry.name
            ))
        }
    }
    ready(entry, &cache, &cache::folder_name(entry, v), v)
}

/// A known agent's profile at its pin, ready to run.
fn shipped(entry: &Entry) -> Result<(String, Option<tempfile::TempDir>), String> {
    let cache = install::cache_dir()?;
    let dir = install::agent_dir(&cache, entry);
    let setup = format!("run `chaosrun agents setup {}`", entry.name);
    let have = match install::state(entry, &cache) {
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
        State::Other(v) => {
            crate::say_err!(
                "chaosrun: warning: agent `{}`: {v} is installed in {}, not the pinned {} its \
                 profile was written for; {setup} to install {}",
                entry.name,
                dir.display(),
                entry.pinned,
                entry.pinned
            );
            v
        }
        State::Refused(why) => return Err(why),
        State::Pinned => entry.pinned.to_string(),
    };
    ready(entry, &cache, entry.name, &have)
}

/// Write the profile and its helper files as this chaosrun ships them into
/// its folder `name` under `cache` (the install there, `version`, is kept;
/// the folder was checked just before, and is reached again without
/// following a link), warn when `version` is outside the profile's
/// `versions:` range, and return the profile's path.
fn ready(
    entry: &Entry,
    cache: &std::path::Path,
    name: &str,
    version: &str,
) -> Result<(String, Option<tempfile::TempDir>), String> {
    let files = files(entry);
    let dir = cache::open(cache, name, false)?
        .ok_or_else(|| format!("{name} is gone from {}", cache.display()))?;
    dir.write_out(&files).map_err(|e| {
        format!(
            "cannot write agent `{}` into {}: {e}",
            entry.name,
            dir.path.display()
        )
    })?;
    if let Some(msg) = range_warning(entry, &files, version) {
        crate::say_err!("chaosrun: warning: {msg}");
    }
    Ok((dir.path.join(entry.profile).display().to_string(), None))
}

/// The profile's `versions:` range, when it has one.
pub fn known_range(entry: &Entry, files: &[embedded::File]) -> Option<String> {
    let (_, bytes, _) = files.iter().find(|(r, _, _)| *r == entry.profile_yaml())?;
    let doc: serde_yaml::Value = serde_yaml::from_slice(bytes).ok()?;
    doc.get("versions")?.as_str().map(String::from)
}

/// A warning when `version` is outside (or cannot be placed in) the
/// profile's `versions:` range.
fn range_warning(entry: &Entry, files: &[embedded::File], version: &str) -> Option<String> {
    let text = known_range(entry, files)?;
    let range = version::range(&text).ok()?;
    let tail =
        "its flags, store path or tool names may have changed; `chaosrun agents check` tells";
    match version::in_range(version, &range) {
        Some(true) => None,
        Some(false) => Some(format!(
            "agent `{}` {version} is outside the versions its profile is known to drive ({text}); {tail}",
            entry.name
        )),
        None => Some(format!(
            "agent `{}` {version} is not a release chaosrun can place in its profile's range ({text}); {tail}",
            entry.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ACP profile (`gemini-cli-acp.yaml`) names the version of the
    /// install it sits on, as its exec profile does: the report's
    /// `agent_version` (without it a run fell back to `version_cmd`, which
    /// timed out under load, or had none).
    #[test]
    fn an_acp_profile_names_its_installs_version() {
        let d = tempfile::tempdir().unwrap();
        let manifest = d.path().join("prefix/lib/node_modules/@google/gemini-cli");
        std::fs::create_dir_all(&manifest).unwrap();
        std::fs::write(manifest.join("package.json"), r#"{"version": "0.61.0"}"#).unwrap();
        for file in ["gemini-cli.yaml", "gemini-cli-acp.yaml"] {
            assert_eq!(
                version_at(&d.path().join(file)).as_deref(),
                Some("0.61.0"),
                "{file}"
            );
        }
        assert_eq!(version_at(&d.path().join("other-acp.yaml")), None);
    }

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
        assert_eq!(find("codex").unwrap().map(|e| e.pinned), Some("0.169.0"));
        assert!(names().starts_with("reference, claude-code"));
        let err = agent_or_bundled(Some("no-such-agent-xyz")).unwrap_err();
        assert!(err.contains("known: reference"), "{err}");
    }
}
