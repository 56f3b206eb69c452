//! Agents of the user's own beside the shipped ones: `CHAOSRUN_CATALOG=DIR`
//! adds every `DIR/NAME/` that holds a `catalog.yaml`:
//!
//! ```yaml
//! profile: agent.yaml      # what --agent is given inside the folder
//! pinned: 1.4.0            # the version setup.sh installs by default
//! npm: "@acme/agent"       # or pip: acme-agent (where the install is found)
//! ```
//!
//! Such an agent takes `--agent NAME[@VERSION]`, `agents setup`, `agents
//! check` and `bisect` like a shipped one; its folder is read from disk
//! instead of from the binary. A name the shipped catalog already has is an
//! error. The tests' fixture registry is one of these.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::embedded::File;
use super::entry::{Entry, Install};

/// `catalog.yaml`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    profile: String,
    pinned: String,
    #[serde(default)]
    npm: Option<String>,
    #[serde(default)]
    pip: Option<String>,
}

/// The local entries and their folders, read once per process.
struct Local {
    entries: Vec<Entry>,
    dirs: BTreeMap<&'static str, PathBuf>,
}

static LOCAL: OnceLock<Result<Local, String>> = OnceLock::new();

fn local() -> Result<&'static Local, String> {
    LOCAL
        .get_or_init(|| match std::env::var_os("CHAOSRUN_CATALOG") {
            Some(dir) if !dir.is_empty() => read(Path::new(&dir)),
            _ => Ok(Local {
                entries: Vec::new(),
                dirs: BTreeMap::new(),
            }),
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The local entries (none without `CHAOSRUN_CATALOG`).
pub fn entries() -> Result<&'static [Entry], String> {
    local().map(|l| l.entries.as_slice())
}

/// The folder of local entry `name`.
pub fn dir(name: &str) -> Option<&'static Path> {
    local().ok()?.dirs.get(name).map(PathBuf::as_path)
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn read(root: &Path) -> Result<Local, String> {
    let ctx = |e: std::io::Error| format!("CHAOSRUN_CATALOG={}: {e}", root.display());
    let mut names: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(ctx)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("catalog.yaml").is_file())
        .collect();
    names.sort();
    let mut local = Local {
        entries: Vec::new(),
        dirs: BTreeMap::new(),
    };
    for dir in names {
        let entry = entry(&dir)?;
        local.dirs.insert(entry.name, dir);
        local.entries.push(entry);
    }
    Ok(local)
}

fn entry(dir: &Path) -> Result<Entry, String> {
    let path = dir.join("catalog.yaml");
    let text = crate::input::read_input_text(&path, crate::input::PROFILE).map_err(String::from)?;
    let doc: Doc = serde_yaml::from_str(&text).map_err(|e| {
        let (l, c) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
        format!("{}:{l}:{c}: {e}", path.display())
    })?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    if super::registry::AGENTS.iter().any(|e| e.name == name) || name.contains('@') {
        return Err(format!(
            "{}: `{name}` is a shipped agent's name (or has an `@`); name the folder otherwise",
            path.display()
        ));
    }
    super::version::check(&doc.pinned).map_err(|e| format!("{}: pinned: {e}", path.display()))?;
    let install = match (doc.npm, doc.pip) {
        (Some(p), None) => Install::Npm(leak(p)),
        (None, Some(p)) => Install::Pip(leak(p)),
        _ => {
            return Err(format!(
                "{}: give exactly one of `npm: PACKAGE` or `pip: DIST`",
                path.display()
            ))
        }
    };
    Ok(super::entry::entry(
        leak(name),
        leak(doc.profile),
        leak(doc.pinned),
        install,
    ))
}

/// The folder's files as `agents setup` writes them out: installs and
/// caches left out (as `build.rs` leaves them out of the binary), at most
/// 4 MiB a file and 32 MiB in all.
pub fn files(name: &str) -> Vec<File> {
    let Some(root) = dir(name) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut budget: u64 = 32 << 20;
    walk(root, root, &mut out, &mut budget);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<File>, budget: &mut u64) {
    const SKIP: &[&str] = &["prefix", ".venv", "venv", "node_modules", "__pycache__"];
    let Ok(list) = std::fs::read_dir(dir) else {
        return;
    };
    let mut list: Vec<_> = list.flatten().collect();
    list.sort_by_key(|e| e.file_name());
    for e in list {
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let skip = SKIP.contains(&e.file_name().to_string_lossy().as_ref());
        if meta.is_dir() && !skip {
            walk(root, &path, out, budget);
        } else if meta.is_file() && meta.len() <= (4 << 20) && meta.len() <= *budget {
            let (Ok(rel), Ok(bytes)) = (path.strip_prefix(root), std::fs::read(&path)) else {
                continue;
            };
            *budget -= meta.len();
            let rel = leak(rel.to_string_lossy().to_string());
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            out.push((rel, bytes, meta.permissions().mode() & 0o777));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_is_an_entry_and_mistakes_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("acme");
        std::fs::create_dir_all(a.join("prefix/lib")).unwrap();
        std::fs::write(a.join("prefix/lib/big"), b"install").unwrap();
        std::fs::write(
            a.join("catalog.yaml"),
            "profile: agent.yaml\npinned: 1.4.0\npip: acme-agent\n",
        )
        .unwrap();
        std::fs::write(a.join("agent.yaml"), "command: [x]\n").unwrap();
        let e = entry(&a).unwrap();
        assert_eq!((e.name, e.pinned), ("acme", "1.4.0"));
        assert_eq!(e.install, Install::Pip("acme-agent"));
        std::fs::write(a.join("catalog.yaml"), "profile: a.yaml\npinned: 1\n").unwrap();
        let err = entry(&a).unwrap_err();
        assert!(err.contains("exactly one"), "{err}");
        std::fs::write(a.join("catalog.yaml"), "profile: a.yaml\npined: 1\n").unwrap();
        let err = entry(&a).unwrap_err();
        assert!(
            err.contains("catalog.yaml:2:1") && err.contains("pined"),
            "{err}"
        );
        let codex = d.path().join("codex");
        std::fs::create_dir_all(&codex).unwrap();
        std::fs::write(
            codex.join("catalog.yaml"),
            "profile: a\npinned: 1\nnpm: x\n",
        )
        .unwrap();
        assert!(entry(&codex).unwrap_err().contains("shipped agent"));
        let mut files = Vec::new();
        walk(&a, &a, &mut files, &mut (1 << 20));
        let names: Vec<&str> = files.iter().map(|f| f.0).collect();
        assert_eq!(names, ["agent.yaml", "catalog.yaml"]);
    }
}
