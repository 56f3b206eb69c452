//! The seed tables built into the binary: `chaosrun` with no table runs
//! `scenarios.yaml`, `chaosrun process_faults.yaml` (or `acp.yaml`, `value_faults.yaml`,
//! `long_faults.yaml`) runs that one when no such
//! file is there (so does `check.yaml`, the smoke `agents check` runs), and
//! `chaosrun tables write DIR` writes them out for editing.

use std::path::{Path, PathBuf};

/// The built-in tables: (file name, text).
pub const TABLES: &[(&str, &str)] = &[
    ("scenarios.yaml", include_str!("../../scenarios.yaml")),
    (
        "process_faults.yaml",
        include_str!("../../process_faults.yaml"),
    ),
    ("acp.yaml", include_str!("../../acp.yaml")),
    ("value_faults.yaml", include_str!("../../value_faults.yaml")),
    ("long_faults.yaml", include_str!("../../long_faults.yaml")),
    ("endpoints.yaml", include_str!("../../endpoints.yaml")),
    ("check.yaml", CHECK),
];

/// The smoke table `chaosrun agents check` runs ([`super::check`]).
pub const CHECK: &str = include_str!("../../check.yaml");

/// The built-in table a bare name means (`scenarios`, `process_faults.yaml`).
pub fn builtin(name: &str) -> Option<(&'static str, &'static str)> {
    TABLES
        .iter()
        .copied()
        .find(|(file, _)| *file == name || file.strip_suffix(".yaml") == Some(name))
}

/// The table a run reads: the file given, or a built-in one written into a
/// temp folder that lives as long as the returned guard. A path that exists,
/// or that names a folder (`a/scenarios.yaml`), is always the file.
pub fn resolve(arg: Option<&Path>) -> Result<(PathBuf, Option<tempfile::TempDir>), String> {
    let name = match arg {
        None => "scenarios.yaml",
        Some(p) => {
            let bare = p.to_str().filter(|s| !s.contains('/'));
            match bare.and_then(builtin) {
                Some((file, _)) if std::fs::symlink_metadata(p).is_err() => file,
                _ => return Ok((p.to_path_buf(), None)),
            }
        }
    };
    let (file, text) = builtin(name).expect("a built-in table");
    let dir = tempfile::Builder::new()
        .prefix("chaosrun-table-")
        .tempdir()
        .map_err(|e| format!("cannot write the built-in table {file}: {e}"))?;
    let path = dir.path().join(file);
    std::fs::write(&path, text)
        .map_err(|e| format!("cannot write the built-in table {file}: {e}"))?;
    crate::say_err!(
        "chaosrun: table: built-in {file} (`chaosrun tables write DIR` writes it out for editing)"
    );
    Ok((path, Some(dir)))
}

/// [`crate::scenarios::select`] over `table`, read from `path`: an unknown
/// id that is a row of a built-in table (the other one, or this one when
/// `path` is the user's own copy) names that table and the command that
/// runs it, instead of listing the ids it does not hold.
pub fn select(
    path: &Path,
    table: &[crate::scenarios::Scenario],
    only: &[String],
    skip: &[String],
) -> Result<Vec<crate::scenarios::Scenario>, String> {
    crate::scenarios::select(table, only, skip).map_err(|e| {
        let unknown = only
            .iter()
            .chain(skip)
            .find(|id| !table.iter().any(|s| &s.id == *id));
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
        match unknown.and_then(|id| Some((id, holding(id)?))) {
            Some((id, other)) => format!(
                "unknown scenario id `{id}` in {}: it is a row of the built-in {other}; run it with `chaosrun {other} --only {id}`",
                file.unwrap_or_else(|| path.display().to_string())
            ),
            None => e,
        }
    })
}

/// The built-in table (`scenarios.yaml`, `process_faults.yaml`, ...) with a row
/// `id`, if one has it.
fn holding(id: &str) -> Option<&'static str> {
    TABLES
        .iter()
        .filter(|(file, _)| *file != "check.yaml")
        .find(|(file, text)| {
            crate::scenarios::load_str(text, file)
                .is_ok_and(|t| t.scenarios.iter().any(|s| s.id == id))
        })
        .map(|(file, _)| *file)
}

/// Write every built-in table into `dir` (created if new). Refuses, writing
/// nothing, when any of them is already there.
pub fn write(dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let paths: Vec<PathBuf> = TABLES.iter().map(|(f, _)| dir.join(f)).collect();
    if let Some(p) = paths.iter().find(|p| std::fs::symlink_metadata(p).is_ok()) {
        return Err(format!(
            "{} already exists; `tables write` never overwrites (pick an empty folder)",
            p.display()
        ));
    }
    for (path, (_, text)) in paths.iter().zip(TABLES) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        std::io::Write::write_all(&mut f, text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_long_fault_table_is_built_in_and_named_for_its_rows() {
        assert_eq!(
            builtin("long_faults").map(|t| t.0),
            Some("long_faults.yaml")
        );
        let table =
            crate::scenarios::load_str(builtin("long_faults").unwrap().1, "long_faults.yaml");
        assert!(table.is_ok(), "{:?}", table.err());
        assert_eq!(
            holding("provider_outage_minute_clears"),
            Some("long_faults.yaml")
        );
    }

    #[test]
    fn the_endpoint_table_is_built_in_and_loads() {
        let (name, text) = builtin("endpoints").unwrap();
        assert_eq!(name, "endpoints.yaml");
        let table = crate::scenarios::load_str(text, name).unwrap();
        let faults: Vec<_> = table.scenarios.iter().map(|s| s.endpoint_fault).collect();
        assert!(faults.iter().all(Option::is_some), "{faults:?}");
        assert_eq!(holding("endpoints_hang"), Some("endpoints.yaml"));
    }

    #[test]
    fn bare_names_and_paths() {
        assert_eq!(builtin("scenarios").map(|t| t.0), Some("scenarios.yaml"));
        assert_eq!(
            builtin("process_faults.yaml").map(|t| t.0),
            Some("process_faults.yaml")
        );
        assert!(builtin("other.yaml").is_none());
        let d = tempfile::tempdir().unwrap();
        let own = d.path().join("scenarios.yaml");
        let (p, guard) = resolve(Some(&own)).unwrap();
        assert_eq!((p, guard.is_none()), (own, true));
    }

    #[test]
    fn write_refuses_to_overwrite() {
        let d = tempfile::tempdir().unwrap();
        let written = write(d.path()).unwrap();
        assert_eq!(written.len(), TABLES.len());
        let first = std::fs::read_to_string(&written[0]).unwrap();
        assert_eq!(first, TABLES[0].1);
        std::fs::write(&written[1], "mine").unwrap();
        let err = write(d.path()).unwrap_err();
        assert!(err.contains("already exists"), "{err}");
        assert_eq!(std::fs::read_to_string(&written[1]).unwrap(), "mine");
    }
}
