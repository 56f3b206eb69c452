//! The seal chaosrun leaves in each agent folder it makes in the cache
//! (`.chaosrun-entry.json`), checked on every use: a folder without one,
//! with one naming another agent or version, or whose install's metadata
//! file no longer hashes as sealed, is refused (the message names the folder
//! and the fix). What it guards against is a folder chaosrun did not make
//! (planted, copied in, made by hand, left by an older chaosrun), never
//! run, written or trusted as an install. It is no secret: someone who can
//! write the cache and means to forge one can; the agent under test runs
//! with its own HOME and is never pointed at the cache.
//!
//! ```json
//! {"made_by": "chaosrun", "agent": "codex", "state": "ready", "version": "0.169.0",
//!  "install": "prefix/lib/node_modules/@openai/codex/package.json", "sha256": "…",
//!  "script": "…"}
//! ```
//!
//! `state` is `installing` from the start of `agents setup` until its
//! install is checked: such a folder counts as not installed, and `agents
//! setup` may finish it. `script` is the sha256 of the catalog `setup.sh`
//! that ran (provenance; a later chaosrun may ship another).

use std::path::Path;

use sha2::Digest as _;

use super::cache::{refusal, Folder};
use super::entry::{Entry, Install};

/// The seal's file name in the folder.
pub const NAME: &str = ".chaosrun-entry.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum State {
    Installing,
    Ready,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Seal {
    made_by: String,
    agent: String,
    state: State,
    #[serde(default)]
    version: Option<String>,
    /// The install's metadata file, relative to the folder.
    #[serde(default)]
    install: Option<String>,
    /// Its sha256.
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    script: Option<String>,
}

fn sha256(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

const METADATA_CAP: u64 = 1 << 20;

fn write(folder: &Folder, seal: &Seal) -> Result<(), String> {
    let text = serde_json::to_vec_pretty(seal).unwrap_or_default();
    folder
        .write(Path::new(NAME), &text, 0o600)
        .map_err(|e| format!("cannot write {}: {e}", folder.path.join(NAME).display()))
}

/// Mark `folder` as being set up by chaosrun (before anything is written
/// or run in it).
pub fn begin(folder: &Folder, entry: &Entry, script: Option<&[u8]>) -> Result<(), String> {
    write(
        folder,
        &Seal {
            made_by: "chaosrun".into(),
            agent: entry.name.into(),
            state: State::Installing,
            version: None,
            install: None,
            sha256: None,
            script: script.map(sha256),
        },
    )
}

/// Seal `folder` as holding `version`, its install's metadata hashed.
pub fn finish(
    folder: &Folder,
    entry: &Entry,
    version: &str,
    script: Option<&[u8]>,
) -> Result<(), String> {
    let install = super::install::metadata_file(entry, &folder.path);
    let sha = match &install {
        Some(rel) => {
            Some(sha256(&folder.read(Path::new(rel), METADATA_CAP).map_err(
                |e| format!("{}: {e}", folder.path.join(rel).display()),
            )?))
        }
        None => None,
    };
    write(
        folder,
        &Seal {
            made_by: "chaosrun".into(),
            agent: entry.name.into(),
            state: State::Ready,
            version: Some(version.into()),
            install,
            sha256: sha,
            script: script.map(sha256),
        },
    )
}

/// The seal, if `folder` holds one chaosrun wrote for `entry`.
fn read(folder: &Folder, entry: &Entry) -> Result<Seal, String> {
    let refuse = |why: &str| refusal(&folder.path, why, &folder.name);
    let bytes = folder.read(Path::new(NAME), 64 << 10).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => format!("holds no seal ({NAME})"),
            _ => format!("has an unreadable seal ({NAME}: {e})"),
        };
        refuse(&format!(
            "was not made by chaosrun (or by one older than its seals): it {why}"
        ))
    })?;
    let seal: Seal = serde_json::from_slice(&bytes).map_err(|e| {
        refuse(&format!(
            "was not made by chaosrun: its seal {NAME} does not read ({e})"
        ))
    })?;
    if seal.made_by != "chaosrun" || seal.agent != entry.name {
        return Err(refuse(&format!(
            "was not made by chaosrun for agent `{}`: its seal names `{}`",
            entry.name, seal.agent
        )));
    }
    Ok(seal)
}

/// The version installed in `folder` as chaosrun sealed it, checked now:
/// `Ok(None)` for an empty folder or one whose setup did not finish (not
/// installed); an error naming the folder and the fix for one chaosrun did
/// not make, one holding another version than its name says, or one whose
/// install's metadata changed since it was sealed.
pub fn verify(folder: &Folder, entry: &Entry) -> Result<Option<String>, String> {
    if folder.is_empty() {
        return Ok(None);
    }
    let seal = read(folder, entry)?;
    if seal.state == State::Installing {
        return Ok(None);
    }
    let refuse = |why: &str| refusal(&folder.path, why, &folder.name);
    let version = seal.version.clone().unwrap_or_default();
    let named = folder.name.split_once('@').map(|(_, v)| v);
    if named.is_some_and(|v| v != version) {
        return Err(refuse(&format!("is sealed as holding {version}")));
    }
    if entry.install == Install::Bundled {
        return Ok(Some(version));
    }
    let changed = |what: String| refuse(&format!("changed since chaosrun made it ({what})"));
    let now = super::install::metadata_file(entry, &folder.path);
    if now != seal.install || now.is_none() {
        return Err(changed(format!(
            "its install's metadata is {}, sealed as {}",
            now.as_deref().unwrap_or("missing"),
            seal.install.as_deref().unwrap_or("none")
        )));
    }
    let rel = now.unwrap_or_default();
    let bytes = folder
        .read(Path::new(&rel), METADATA_CAP)
        .map_err(|e| changed(format!("{rel}: {e}")))?;
    if Some(sha256(&bytes)) != seal.sha256 {
        return Err(changed(format!("{rel} is not the file it sealed")));
    }
    match super::install::installed_version(entry, &folder.path) {
        Some(v) if v == version => Ok(Some(version)),
        v => Err(changed(format!(
            "it holds {}, sealed as {version}",
            v.as_deref().unwrap_or("no install")
        ))),
    }
}

/// May `agents setup` install into `folder`? When it is empty, its setup
/// never finished, or it holds a sealed install still as sealed; anything
/// else is refused (nothing in it is run or trusted).
pub fn may_setup(folder: &Folder, entry: &Entry) -> Result<(), String> {
    if folder.is_empty() {
        return Ok(());
    }
    if read(folder, entry)?.state == State::Installing {
        return Ok(());
    }
    verify(folder, entry).map(drop)
}

#[cfg(test)]
mod tests {
    use super::super::cache::open;
    use super::super::entry::entry;
    use super::*;

    fn npm_install(dir: &Path, version: &str) {
        let pkg = dir.join("prefix/lib/node_modules/@x/cli");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(
            pkg.join("package.json"),
            format!("{{\"version\": \"{version}\"}}"),
        )
        .unwrap();
    }

    /// Unsealed: refused; installing: not installed; sealed: its version;
    /// its metadata edited, or another agent's seal: refused.
    #[test]
    fn a_folder_is_trusted_only_as_sealed() {
        let cache = tempfile::tempdir().unwrap();
        let e = entry("x", "x.yaml", "1.0.0", Install::Npm("@x/cli"));
        let dir = open(cache.path(), "x@2.0.0", true).unwrap().unwrap();
        assert_eq!(verify(&dir, &e), Ok(None), "empty");
        npm_install(&dir.path, "2.0.0");
        let err = verify(&dir, &e).unwrap_err();
        assert!(err.contains("was not made by chaosrun"), "{err}");
        assert!(err.contains("chaosrun agents setup x@2.0.0"), "{err}");
        assert!(may_setup(&dir, &e).is_err());
        begin(&dir, &e, Some(b"script")).unwrap();
        assert_eq!(verify(&dir, &e), Ok(None), "installing");
        assert!(may_setup(&dir, &e).is_ok());
        finish(&dir, &e, "2.0.0", Some(b"script")).unwrap();
        assert_eq!(verify(&dir, &e), Ok(Some("2.0.0".into())));
        let other = entry("y", "y.yaml", "1.0.0", Install::Npm("@x/cli"));
        assert!(verify(&dir, &other).unwrap_err().contains("names `x`"));
        npm_install(&dir.path, "2.0.1");
        let err = verify(&dir, &e).unwrap_err();
        assert!(err.contains("changed since"), "{err}");
        assert!(may_setup(&dir, &e).is_err());
    }
}
