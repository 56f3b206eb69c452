//! The user's cache folder for shipped agents, the version installed there
//! (as chaosrun sealed it, [`seal`]), and `agents setup` (write the folder
//! out through [`cache`], run the catalog's `setup.sh` in it, seal it).

use std::path::{Path, PathBuf};

use super::cache::{self, Folder};
use super::embedded;
use super::entry::{Entry, Install};
use super::seal;
use crate::children::Forward;

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
    version_dir(cache, entry, entry.pinned)
}

/// The folder of `version`'s install: the pinned one's for the pin, else
/// `CACHE/agents/NAME@VERSION` (versions sit side by side).
pub fn version_dir(cache: &Path, entry: &Entry, version: &str) -> PathBuf {
    cache
        .join("agents")
        .join(cache::folder_name(entry, version))
}

/// Every version of `entry` installed under `cache` as chaosrun made it,
/// oldest first, with its folder: the pinned folder's and each
/// `NAME@VERSION` folder's (a folder refused by [`seal::verify`] is left
/// out; `--agent` and `agents setup` say why).
pub fn installed(entry: &Entry, cache: &Path) -> Vec<(String, PathBuf)> {
    let prefix = format!("{}@", entry.name);
    let mut names = vec![entry.name.to_string()];
    names.extend(
        cache::list(cache)
            .into_iter()
            .filter(|n| n.starts_with(&prefix)),
    );
    let mut out: Vec<(String, PathBuf)> = names
        .iter()
        .filter_map(|n| {
            let folder = cache::open(cache, n, false).ok()??;
            let v = seal::verify(&folder, entry).ok()??;
            Some((v, folder.path))
        })
        .collect();
    out.sort_by(|a, b| super::version::cmp(&a.0, &b.0));
    out
}

/// The version in `version`'s folder under `cache` (the pin's folder for
/// the pin), as chaosrun sealed it and checked now: `Ok(None)` when nothing
/// is installed there; an error naming the folder and the fix when it is
/// refused (a link, not made by chaosrun, changed since).
pub fn trusted_version(
    entry: &Entry,
    cache: &Path,
    version: &str,
) -> Result<Option<String>, String> {
    match cache::open(cache, &cache::folder_name(entry, version), false)? {
        Some(folder) => seal::verify(&folder, entry),
        None => Ok(None),
    }
}

/// The version of the agent installed in `dir`, if any. Read from the
/// package manager's own metadata (no agent process is started).
pub fn installed_version(entry: &Entry, dir: &Path) -> Option<String> {
    match entry.install {
        Install::Bundled => Some(entry.pinned.to_string()),
        Install::Npm(pkg) => {
            let manifest = dir.join(npm_manifest(pkg));
            let cap = crate::input::Cap {
                what: "package manifest",
                bytes: 1 << 20,
            };
            let text = crate::input::read_input(&manifest, cap).ok()?;
            let doc: serde_json::Value = serde_json::from_slice(&text).ok()?;
            doc.get("version")?.as_str().map(String::from)
        }
        Install::Pip(dist) => pip_info(dir, dist).map(|(v, _)| v),
    }
}

/// The install's metadata file that names its version, relative to `dir`
/// (what [`seal`] hashes): npm's `package.json` of the package, pip's
/// `METADATA` in its dist-info; `None` for nothing installed or bundled.
pub fn metadata_file(entry: &Entry, dir: &Path) -> Option<String> {
    let rel = match entry.install {
        Install::Bundled => return None,
        Install::Npm(pkg) => npm_manifest(pkg),
        Install::Pip(dist) => pip_info(dir, dist)?.1.join("METADATA"),
    };
    dir.join(&rel)
        .is_file()
        .then(|| rel.to_string_lossy().to_string())
}

fn npm_manifest(pkg: &str) -> PathBuf {
    Path::new("prefix/lib/node_modules")
        .join(pkg)
        .join("package.json")
}

/// `.venv/lib/python*/site-packages/DIST-VERSION.dist-info` (names
/// normalised as pip writes them: lower case, `-` and `.` as `_`): the
/// version and that folder, relative to `dir`.
fn pip_info(dir: &Path, dist: &str) -> Option<(String, PathBuf)> {
    let want = normalise(dist);
    let lib = Path::new(".venv/lib");
    for py in std::fs::read_dir(dir.join(lib)).ok()?.flatten() {
        let site = lib.join(py.file_name()).join("site-packages");
        let Ok(list) = std::fs::read_dir(dir.join(&site)) else {
            continue;
        };
        for e in list.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Some(stem) = name.strip_suffix(".dist-info") else {
                continue;
            };
            if let Some((d, v)) = stem.split_once('-') {
                if normalise(d) == want {
                    return Some((v.to_string(), site.join(&name)));
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
    /// Its folder is refused (why, and the fix).
    Refused(String),
    /// Its folder was not in the tree this binary was built from.
    NotInBuild,
}

/// The state of `entry` under `cache`.
pub fn state(entry: &Entry, cache: &Path) -> State {
    if !super::has(entry) {
        return State::NotInBuild;
    }
    if entry.install == Install::Bundled {
        return State::Bundled;
    }
    match trusted_version(entry, cache, entry.pinned) {
        Ok(Some(v)) if entry.matches(&v) => State::Pinned,
        Ok(Some(v)) => State::Other(v),
        Ok(None) => State::Missing,
        Err(why) => State::Refused(why),
    }
}

/// Why `agents setup` installed nothing: its folder is refused (exit 2),
/// or the install failed (exit 1, or 128+N when a signal stopped it).
#[derive(Debug)]
pub enum SetupError {
    Refused(String),
    Failed(String),
}

impl SetupError {
    /// The exit code it means.
    pub fn code(&self) -> u8 {
        match self {
            SetupError::Refused(_) => 2,
            SetupError::Failed(_) => {
                crate::children::stop_signal().map_or(1, |sig| (128 + sig) as u8)
            }
        }
    }
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Refused(m) | SetupError::Failed(m) => f.write_str(m),
        }
    }
}

/// `chaosrun agents setup NAME[@VERSION]`: write the agent's folder into
/// `version`'s folder under `cache` and run the catalog's `setup.sh` there
/// (which installs into the folder, e.g. `./prefix`), with
/// `CHAOSRUN_AGENT_VERSION` set to `version` (the pin installs from the
/// folder's lock; another version as its registry resolves it today). Only
/// the script in `files` runs, never one found in the folder; a folder that
/// is a link, or that chaosrun did not make, is refused before anything is
/// written. Returns the folder and the version now installed, sealed.
/// `files` is the folder's content (the embedded one, or a fixture's in tests).
pub fn setup(
    entry: &Entry,
    files: &[embedded::File],
    cache: &Path,
    version: &str,
) -> Result<(PathBuf, String), SetupError> {
    let name = cache::folder_name(entry, version);
    let folder = cache::open(cache, &name, true)
        .map_err(SetupError::Refused)?
        .ok_or_else(|| SetupError::Failed(format!("cannot make {name} in {}", cache.display())))?;
    seal::may_setup(&folder, entry).map_err(SetupError::Refused)?;
    let script = files
        .iter()
        .find(|(rel, _, _)| *rel == "setup.sh")
        .map(|f| f.1);
    seal::begin(&folder, entry, script).map_err(SetupError::Failed)?;
    folder
        .write_out(files)
        .map_err(|e| SetupError::Failed(format!("cannot write {}: {e}", folder.path.display())))?;
    if let Some(text) = script {
        run_script(&folder, text, version).map_err(SetupError::Failed)?;
    }
    let got = check_installed(entry, &folder.path, version).map_err(SetupError::Failed)?;
    seal::finish(&folder, entry, &got, script).map_err(SetupError::Failed)?;
    Ok((folder.path, got))
}

/// Run the catalog's setup script `text`, just written as the folder's
/// `setup.sh` (checked to be it, read without following a link), in the
/// folder.
fn run_script(folder: &Folder, text: &[u8], version: &str) -> Result<(), String> {
    let script = folder.path.join("setup.sh");
    let on_disk = folder
        .read(Path::new("setup.sh"), 1 << 20)
        .map_err(|e| format!("cannot read {}: {e}", script.display()))?;
    if on_disk != text {
        return Err(format!(
            "{} is not the catalog's setup script after writing it; not run",
            script.display()
        ));
    }
    let mut cmd = script_command(&script, text);
    // Its output is progress: stdout stays chaosrun's own (bisect's lines).
    cmd.current_dir(&folder.path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .env("CHAOSRUN_AGENT_VERSION", version);
    // In its own process group, SIGINT/SIGTERM passed on to all of it:
    // an npm or pip it started ends with it.
    let code = crate::children::run_forwarding_signals(&mut cmd, Forward::Group)
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if let Some(sig) = crate::children::stop_signal() {
        return Err(format!(
            "{} was stopped ({}); the install in {} may be partial",
            script.display(),
            signal_name(sig),
            folder.path.display()
        ));
    }
    if code != 0 {
        return Err(format!(
            "{} failed (exit {code}); see its output above",
            script.display()
        ));
    }
    Ok(())
}

/// The version installed in `dir` after the script, if it is the one asked.
fn check_installed(entry: &Entry, dir: &Path, version: &str) -> Result<String, String> {
    let script = dir.join("setup.sh");
    let wanted = |v: &str| {
        if entry.matches(version) {
            entry.matches(v)
        } else {
            v == version
        }
    };
    match installed_version(entry, dir) {
        Some(v) if wanted(&v) => Ok(v),
        Some(v) => Err(format!(
            "{} installed {} {v}, not {version}",
            script.display(),
            entry.name,
        )),
        None => Err(format!(
            "{} ran, but no {} install is in {}",
            script.display(),
            entry.name,
            dir.display()
        )),
    }
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string())
}

/// The command that runs `script` (whose content is `text`, the catalog's)
/// as the kernel would, its `#!` line read from `text` (`#!INTERPRETER
/// [ONE-ARG]`, else `/bin/sh`): the script is only opened for reading by
/// its interpreter, never executed itself, so a fork elsewhere in the
/// process that still holds the write handle of the just-written file
/// cannot make the run fail with "Text file busy" (ETXTBSY).
fn script_command(script: &Path, text: &[u8]) -> std::process::Command {
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
    cmd
}

#[cfg(test)]
mod tests {
    use super::super::entry::entry;
    use super::*;

    /// Installs CHAOSRUN_AGENT_VERSION (else 1.2.3).
    const SETUP_TEXT: &str = "#!/bin/sh\nset -eu\nmkdir -p prefix/lib/node_modules/@x/cli\n\
        printf '{\"version\": \"%s\"}' \"${CHAOSRUN_AGENT_VERSION:-1.2.3}\" > prefix/lib/node_modules/@x/cli/package.json\n";
    const SETUP: &[u8] = SETUP_TEXT.as_bytes();

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
        let dir = agent_dir(cache.path(), &e);
        let (at, v) = setup(&e, &files, cache.path(), e.pinned).unwrap();
        assert_eq!((at, v.as_str()), (dir.clone(), "1.2.3"));
        assert_eq!(dir, cache.path().join("agents/fixture"));
        assert!(dir.join("fixture.yaml").is_file());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(installed_version(&e, &dir).as_deref(), Some("1.2.3"));
        assert_eq!(
            trusted_version(&e, cache.path(), "1.2.3")
                .unwrap()
                .as_deref(),
            Some("1.2.3")
        );
        // Writing the folder again keeps the install (and its seal).
        let folder = cache::open(cache.path(), "fixture", false)
            .unwrap()
            .unwrap();
        folder.write_out(&files).unwrap();
        assert_eq!(
            trusted_version(&e, cache.path(), "1.2.3")
                .unwrap()
                .as_deref(),
            Some("1.2.3")
        );
    }

    /// Another version goes into its own folder beside the pin's, with the
    /// version in the script's environment; both are listed, oldest first.
    #[test]
    fn versions_install_side_by_side() {
        let cache = tempfile::tempdir().unwrap();
        let (e, files) = fixture();
        let pin = agent_dir(cache.path(), &e);
        assert_eq!(version_dir(cache.path(), &e, "1.2.3"), pin);
        let other = version_dir(cache.path(), &e, "1.10.0");
        assert_eq!(other, cache.path().join("agents/fixture@1.10.0"));
        let got = |v: &str| setup(&e, &files, cache.path(), v).unwrap();
        assert_eq!(got("1.10.0"), (other.clone(), "1.10.0".to_string()));
        assert_eq!(got("1.2.3"), (pin.clone(), "1.2.3".to_string()));
        let got: Vec<(String, PathBuf)> = installed(&e, cache.path());
        assert_eq!(
            got,
            [("1.2.3".to_string(), pin), ("1.10.0".to_string(), other)]
        );
        assert_eq!(state(&e, cache.path()), State::NotInBuild);
    }

    #[test]
    fn a_failing_or_wrong_setup_is_an_error() {
        let cache = tempfile::tempdir().unwrap();
        let (e, _) = fixture();
        let bad: Vec<embedded::File> = vec![("setup.sh", b"#!/bin/sh\nexit 3\n", 0o755)];
        let err = setup(&e, &bad, cache.path(), e.pinned).unwrap_err();
        assert!(err.to_string().contains("failed"), "{err}");
        assert_eq!(err.code(), 1);
        // A script that installs another version than asked (for the pin
        // and for another version alike).
        let (_, files) = fixture();
        let fixed = SETUP_TEXT.replace("${CHAOSRUN_AGENT_VERSION:-1.2.3}", "1.2.3");
        let fixed: &'static [u8] = Box::leak(fixed.into_bytes().into_boxed_slice());
        let files: Vec<embedded::File> = vec![("setup.sh", fixed, 0o755), files[1]];
        let wrong = entry("fixture", "fixture.yaml", "9.9.9", Install::Npm("@x/cli"));
        let err = setup(&wrong, &files, cache.path(), wrong.pinned)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1.2.3") && err.contains("9.9.9"), "{err}");
        let err = setup(&e, &files, cache.path(), "2.0.0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("1.2.3, not 2.0.0"), "{err}");
        // Neither left a trusted install.
        assert_eq!(trusted_version(&e, cache.path(), "2.0.0"), Ok(None));
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
            let cmd = script_command(&script, text);
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

    /// Only the catalog's script runs: with none in `files`, a `setup.sh`
    /// found in the folder is not run; a folder not made by chaosrun is
    /// refused (exit 2) before anything is written into it.
    #[test]
    fn only_the_catalogs_script_runs() {
        let cache = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let marker = out.path().join("ran");
        let e = entry("bundle", "b.yaml", "bundled", Install::Bundled);
        let files: Vec<embedded::File> = vec![("b.yaml", b"command: [x]\n", 0o644)];
        let planted = format!("#!/bin/sh\ntouch {}\n", marker.display());
        let dir = agent_dir(cache.path(), &e);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("setup.sh"), &planted).unwrap();
        let err = setup(&e, &files, cache.path(), "bundled").unwrap_err();
        assert_eq!(err.code(), 2, "{err}");
        assert!(
            err.to_string().contains("was not made by chaosrun"),
            "{err}"
        );
        assert!(!dir.join("b.yaml").exists());
        std::fs::remove_dir_all(&dir).unwrap();
        setup(&e, &files, cache.path(), "bundled").unwrap();
        std::fs::write(dir.join("setup.sh"), &planted).unwrap();
        setup(&e, &files, cache.path(), "bundled").unwrap();
        assert!(!marker.exists(), "the planted script ran");
    }
}
