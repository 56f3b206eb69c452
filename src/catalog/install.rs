//! The user's cache folder for shipped agents, the version installed there,
//! and `agents setup` (write the folder out, run its `setup.sh` in it).

use std::path::{Path, PathBuf};

use super::embedded;
use super::entry::{Entry, Install};

/// The per-user cache chaosrun installs agents into: `$CHAOSRUN_CACHE`, else
/// `$XDG_CACHE_HOME/chaosrun`, else `~/.cache/chaosrun` (the user's own cache,
/// chosen by the user; an agent under test still gets a fresh HOME).
pub fn cache_dir() -> Result<PathBuf, String> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("CHAOSRUN_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("chaosrun"));
    }
    match var("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".cache").join("chaosrun")),
        None => Err("no cache folder: set CHAOSRUN_CACHE (or XDG_CACHE_HOME, or HOME)".into()),
    }
}

/// The folder an agent is written to and installed in: `CACHE/agents/NAME`.
pub fn agent_dir(cache: &Path, entry: &Entry) -> PathBuf {
    cache.join("agents").join(entry.name)
}

/// The version of the agent installed in `dir`, if any. Read from the
/// package manager's own metadata (no agent process is started).
pub fn installed_version(entry: &Entry, dir: &Path) -> Option<String> {
    match entry.install {
        Install::Bundled => Some(entry.pinned.to_string()),
        Install::Npm(pkg) => {
            let manifest = dir
                .join("prefix/lib/node_modules")
                .join(pkg)
                .join("package.json");
            let cap = crate::input::Cap {
                what: "package manifest",
                bytes: 1 << 20,
            };
            let text = crate::input::read_input(&manifest, cap).ok()?;
            let doc: serde_json::Value = serde_json::from_slice(&text).ok()?;
            doc.get("version")?.as_str().map(String::from)
        }
        Install::Pip(dist) => pip_version(&dir.join(".venv/lib"), dist),
    }
}

/// `lib/python*/site-packages/DIST-VERSION.dist-info` (names normalised as
/// pip writes them: lower case, `-` and `.` as `_`).
fn pip_version(lib: &Path, dist: &str) -> Option<String> {
    let want = normalise(dist);
    for py in std::fs::read_dir(lib).ok()?.flatten() {
        let Ok(site) = std::fs::read_dir(py.path().join("site-packages")) else {
            continue;
        };
        for e in site.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(stem) = name.strip_suffix(".dist-info") else {
                continue;
            };
            if let Some((d, v)) = stem.split_once('-') {
                if normalise(d) == want {
                    return Some(v.to_string());
                }
            }
        }
    }
    None
}

fn normalise(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

/// How an agent stands in the cache, for `chaosrun agents` and `--agent NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Nothing to install.
    Bundled,
    /// The pinned version is installed.
    Pinned,
    /// Another version is installed (it runs, with a warning).
    Other(String),
    /// Not installed.
    Missing,
    /// Its folder was not in the tree this binary was built from.
    NotInBuild,
}

/// The state of `entry` under `cache`.
pub fn state(entry: &Entry, cache: &Path) -> State {
    if !embedded::has(entry.name) {
        return State::NotInBuild;
    }
    if entry.install == Install::Bundled {
        return State::Bundled;
    }
    match installed_version(entry, &agent_dir(cache, entry)) {
        Some(v) if entry.matches(&v) => State::Pinned,
        Some(v) => State::Other(v),
        None => State::Missing,
    }
}

/// `chaosrun agents setup NAME`: write the agent's folder into the cache and
/// run its `setup.sh` there (which installs into the folder, e.g. `./prefix`).
/// Returns the folder and the version now installed. `files` is the folder's
/// content (the embedded one, or a fixture's in tests).
pub fn setup(
    entry: &Entry,
    files: &[embedded::File],
    cache: &Path,
) -> Result<(PathBuf, String), String> {
    let dir = agent_dir(cache, entry);
    embedded::write_out(&dir, files).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    let script = dir.join("setup.sh");
    if script.is_file() {
        let mut cmd = script_command(&script)?;
        cmd.current_dir(&dir).stdin(std::process::Stdio::null());
        // Owned while it runs: a reaper in this process must not take its
        // exit status (`wait` would fail with ECHILD).
        let status = crate::children::spawn_owned(&mut cmd)
            .and_then(|mut child| {
                let status = child.wait();
                crate::children::disown(child.id() as i32);
                status
            })
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !status.success() {
            return Err(format!(
                "{} failed ({status}); see its output above",
                script.display()
            ));
        }
    }
    match installed_version(entry, &dir) {
        Some(v) if entry.matches(&v) => Ok((dir, v)),
        Some(v) => Err(format!(
            "{} installed {} {v}, not the pinned {}",
            script.display(),
            entry.name,
            entry.pinned
        )),
        None => Err(format!(
            "{} ran, but no {} install is in {}",
            script.display(),
            entry.name,
            dir.display()
        )),
    }
}

/// The command that runs `script` as the kernel would, its `#!` line read
/// here (`#!INTERPRETER [ONE-ARG]`, else `/bin/sh`): the script is only
/// opened for reading, never executed itself, so a fork elsewhere in the
/// process that still holds the write handle of the just-written file cannot
/// make the run fail with "Text file busy" (ETXTBSY).
fn script_command(script: &Path) -> Result<std::process::Command, String> {
    let cap = crate::input::Cap {
        what: "setup script",
        bytes: 1 << 20,
    };
    let text = crate::input::read_input(script, cap)
        .map_err(|e| format!("cannot read the setup script {e}"))?;
    let first = text.split(|b| *b == b'\n').next().unwrap_or_default();
    let shebang = first
        .strip_prefix(b"#!")
        .map(|rest| String::from_utf8_lossy(rest).trim().to_string())
        .filter(|line| !line.is_empty());
    let (interpreter, arg) = match &shebang {
        Some(line) => match line.split_once([' ', '\t']) {
            Some((i, a)) => (i.to_string(), Some(a.trim().to_string())),
            None => (line.clone(), None),
        },
        None => ("/bin/sh".to_string(), None),
    };
    let mut cmd = std::process::Command::new(interpreter);
    cmd.args(arg.filter(|a| !a.is_empty())).arg(script);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::super::entry::entry;
    use super::*;

    const SETUP: &[u8] = b"#!/bin/sh\nset -eu\nmkdir -p prefix/lib/node_modules/@x/cli\n\
        printf '{\"version\": \"%s\"}' \"${FIXTURE_VERSION:-1.2.3}\" > prefix/lib/node_modules/@x/cli/package.json\n";

    fn fixture() -> (Entry, Vec<embedded::File>) {
        let e = entry("fixture", "fixture.yaml", "1.2.3", Install::Npm("@x/cli"));
        let files: Vec<embedded::File> = vec![
            ("setup.sh", SETUP, 0o755),
            ("fixture.yaml", b"exec: {first: [x]}\n", 0o644),
        ];
        (e, files)
    }

    /// A setup.sh that needs no network, run in the cache folder: the pinned
    /// version is found in ./prefix afterwards, the folder is the user's only.
    #[test]
    fn setup_runs_the_script_in_the_cache_folder() {
        let cache = tempfile::tempdir().unwrap();
        let (e, files) = fixture();
        let (dir, v) = setup(&e, &files, cache.path()).unwrap();
        assert_eq!(v, "1.2.3");
        assert_eq!(dir, cache.path().join("agents/fixture"));
        assert!(dir.join("fixture.yaml").is_file());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(installed_version(&e, &dir).as_deref(), Some("1.2.3"));
        // Writing the folder again keeps the install.
        embedded::write_out(&dir, &files).unwrap();
        assert_eq!(installed_version(&e, &dir).as_deref(), Some("1.2.3"));
    }

    #[test]
    fn a_failing_or_wrong_setup_is_an_error() {
        let cache = tempfile::tempdir().unwrap();
        let (e, _) = fixture();
        let bad: Vec<embedded::File> = vec![("setup.sh", b"#!/bin/sh\nexit 3\n", 0o755)];
        let err = setup(&e, &bad, cache.path()).unwrap_err();
        assert!(err.contains("failed"), "{err}");
        let wrong = entry("fixture", "fixture.yaml", "9.9.9", Install::Npm("@x/cli"));
        let (_, files) = fixture();
        let err = setup(&wrong, &files, cache.path()).unwrap_err();
        assert!(err.contains("1.2.3") && err.contains("9.9.9"), "{err}");
    }

    /// The script runs through the interpreter its `#!` line names, with
    /// that line's one argument, and without one through `/bin/sh`.
    #[test]
    fn the_script_runs_through_its_shebang_interpreter() {
        let d = tempfile::tempdir().unwrap();
        let cases: [(&[u8], &str, &[&str]); 3] = [
            (b"#!/usr/bin/env bash\necho\n", "/usr/bin/env", &["bash"]),
            (b"#! /bin/sh  \necho\n", "/bin/sh", &[]),
            (b"echo\n", "/bin/sh", &[]),
        ];
        for (i, (text, program, args)) in cases.into_iter().enumerate() {
            let script = d.path().join(format!("s{i}.sh"));
            std::fs::write(&script, text).unwrap();
            let cmd = script_command(&script).unwrap();
            assert_eq!(cmd.get_program(), program);
            let mut want: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
            want.push(script.as_os_str());
            assert_eq!(cmd.get_args().collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn pip_versions_and_wildcard_pins() {
        let d = tempfile::tempdir().unwrap();
        let site = d.path().join(".venv/lib/python3.11/site-packages");
        std::fs::create_dir_all(site.join("pydantic_ai_slim-2.62.0.dist-info")).unwrap();
        std::fs::create_dir_all(site.join("psycopg-3.2.9.dist-info")).unwrap();
        let p = entry("p", "p.yaml", "2.62.0", Install::Pip("pydantic-ai-slim"));
        assert_eq!(installed_version(&p, d.path()).as_deref(), Some("2.62.0"));
        let pg = entry("pg", "pg.yaml", "3.2.*", Install::Pip("psycopg"));
        assert!(pg.matches("3.2.9") && !pg.matches("3.3.0"));
        assert_eq!(installed_version(&pg, d.path()).as_deref(), Some("3.2.9"));
        let none = entry("h", "h.yaml", "0.19.0", Install::Pip("hermes-agent"));
        assert_eq!(installed_version(&none, d.path()), None);
    }
}
