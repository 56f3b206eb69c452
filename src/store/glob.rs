//! The glob of a JSONL store: `*` and `?` within one path component, `**`
//! for any number of components. Files are found by walking HOME from the
//! pattern's fixed prefix, without following symlinks (a symlinked directory
//! is not entered; a symlinked file is resolved and kept only if it stays
//! inside HOME), at most [`MAX_ENTRIES`] directory entries. Every match that is
//! not a directory is kept, FIFOs included: the reader refuses those by name.

use std::path::{Path, PathBuf};

/// Most directory entries looked at while walking.
pub const MAX_ENTRIES: usize = 100_000;

/// Whether `name` matches one component pattern (`*`, `?`, literals).
fn component(pat: &[char], name: &[char]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some('*'), _) => {
            component(&pat[1..], name) || (!name.is_empty() && component(pat, &name[1..]))
        }
        (Some('?'), Some(_)) => component(&pat[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => component(&pat[1..], &name[1..]),
        _ => false,
    }
}

/// Whether the components `path` match the pattern components `pat`.
pub fn matches(pat: &[&str], path: &[&str]) -> bool {
    match pat.first() {
        None => path.is_empty(),
        Some(&"**") => (0..=path.len()).any(|k| matches(&pat[1..], &path[k..])),
        Some(p) => {
            !path.is_empty()
                && component(
                    &p.chars().collect::<Vec<_>>(),
                    &path[0].chars().collect::<Vec<_>>(),
                )
                && matches(&pat[1..], &path[1..])
        }
    }
}

/// Whether a pattern component holds a wildcard.
pub fn wild(c: &str) -> bool {
    c.contains(['*', '?'])
}

/// `path`'s components below `home`, as text; why not, when it is not
/// inside `home`.
pub fn parts_below(home: &Path, path: &Path) -> Result<Vec<String>, String> {
    let rel = path
        .strip_prefix(home)
        .map_err(|_| format!("{} is not inside HOME", path.display()))?;
    Ok(rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect())
}

/// The files under `home` matching `pattern` (absolute, inside `home`),
/// sorted by path; and whether the walk stopped at [`MAX_ENTRIES`].
pub fn find(home: &Path, pattern: &Path) -> Result<(Vec<PathBuf>, bool), String> {
    let parts = parts_below(home, pattern)?;
    let fixed = parts.iter().take_while(|c| !wild(c)).count();
    let mut root = home.to_path_buf();
    for c in &parts[..fixed.min(parts.len().saturating_sub(1))] {
        root.push(c);
    }
    let pat: Vec<&str> = parts.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    let mut seen = 0usize;
    let mut stack = vec![root];
    let mut capped = false;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                capped = true;
                stack.clear();
                break;
            }
            let path = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(rel) = path.strip_prefix(home) else {
                continue;
            };
            let comps: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let comps: Vec<&str> = comps.iter().map(String::as_str).collect();
            // Not only regular files: a FIFO (or a device) where the glob
            // matches is reported by the reader, which never opens it.
            if matches(&pat, &comps) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok((out, capped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, path: &str) -> bool {
        let p: Vec<&str> = p.split('/').collect();
        let path: Vec<&str> = path.split('/').collect();
        matches(&p, &path)
    }

    #[test]
    fn stars_stay_in_a_component_and_double_stars_cross_them() {
        assert!(m(
            ".claude/projects/**/*.jsonl",
            ".claude/projects/-w/abc.jsonl"
        ));
        assert!(m(".claude/projects/**/*.jsonl", ".claude/projects/a.jsonl"));
        assert!(m(
            ".codex/sessions/**/rollout-*.jsonl",
            ".codex/sessions/2026/11/29/rollout-1.jsonl"
        ));
        assert!(!m(
            ".claude/projects/*.jsonl",
            ".claude/projects/-w/abc.jsonl"
        ));
        assert!(!m("*.jsonl", "a.json"));
        assert!(m("s?.jsonl", "s1.jsonl"));
    }

    #[test]
    fn finds_files_under_the_fixed_prefix_only() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path();
        std::fs::create_dir_all(home.join(".codex/sessions/2026/11")).unwrap();
        std::fs::write(home.join(".codex/sessions/2026/11/r.jsonl"), "{}").unwrap();
        std::fs::write(home.join("other.jsonl"), "{}").unwrap();
        let (found, capped) = find(home, &home.join(".codex/sessions/**/*.jsonl")).unwrap();
        assert_eq!(found, [home.join(".codex/sessions/2026/11/r.jsonl")]);
        assert!(!capped);
        let (none, _) = find(home, &home.join(".nothing/**/*.jsonl")).unwrap();
        assert!(none.is_empty());
    }
}
