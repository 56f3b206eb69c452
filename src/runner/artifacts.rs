//! A saved scenario folder (what `--artifacts DIR` keeps under DIR/ID/, and
//! what `chaosrun judge` reads back): its file names, the schema of
//! `row.json`, the one writer and the one reader. Beside these files the
//! folder holds what the run left there itself (the spec, HOME files,
//! logs). Nothing is written through a symlink the agent planted, and
//! every read is capped. A folder is found by any of its files, so one
//! whose observation is gone or is no regular file is named, never
//! skipped; the observation carries its schema and sections
//! ([`super::sections`]), checked before it is believed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::input::Cap;
use crate::observe::{Capabilities, Observation};
use crate::oracle::Check;
use crate::scenarios::Scenario;

/// The observation, pure data (the oracle's whole input with the row).
pub const OBSERVATION: &str = "observation.json";
/// The resolved row and the profile's capabilities.
pub const ROW: &str = "row.json";
/// The checks as they were made at run time.
pub const CHECKS: &str = "checks.json";
/// Every recorded request, one JSON line each.
pub const REQUESTS: &str = "requests.jsonl";
/// The schema `row.json` carries.
pub const ROW_SCHEMA: &str = "chaosrun-row/1";

/// The cap on a saved observation (its recording is bounded by chaosrun's
/// own caps, far below this).
const OBSERVATION_CAP: Cap = Cap {
    what: "saved observation",
    bytes: 256 * 1024 * 1024,
};
/// The cap on `row.json` and `checks.json`.
const SMALL_CAP: Cap = Cap {
    what: "saved row or checks",
    bytes: 16 * 1024 * 1024,
};
/// Scenario folders one read takes at most.
const MAX_FOLDERS: usize = 10_000;

/// `row.json`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedRow {
    schema: String,
    row: Scenario,
    capabilities: Capabilities,
}

/// One saved scenario, read back.
pub struct Saved {
    pub row: Scenario,
    pub capabilities: Capabilities,
    pub observation: Observation,
    /// `checks.json` as recorded, where there is one.
    pub recorded_checks: Option<Vec<serde_json::Value>>,
}

/// Write the observation, the checks, the requests (JSONL) and the row
/// with the capabilities into `root` (below `base`, the artifacts folder).
/// A file that cannot be written is said on stderr; the run goes on.
pub fn write(
    base: &Path,
    root: &Path,
    obs: &Observation,
    checks: &[Check],
    row: &Scenario,
    capabilities: &Capabilities,
) {
    let rel = root.strip_prefix(base).unwrap_or(root);
    let write = |name: &str, bytes: Vec<u8>| {
        if let Err(e) = crate::output::write_beneath(base, &rel.join(name), &bytes) {
            crate::say_err!("chaosrun: cannot write {}: {e}", root.join(name).display());
        }
    };
    write(
        OBSERVATION,
        serde_json::to_vec_pretty(&super::sections::written(obs)).unwrap_or_default(),
    );
    write(
        CHECKS,
        serde_json::to_vec_pretty(checks).unwrap_or_default(),
    );
    let mut jsonl = Vec::new();
    for r in &obs.recording.requests {
        if serde_json::to_writer(&mut jsonl, r).is_ok() {
            jsonl.push(b'\n');
        }
    }
    write(REQUESTS, jsonl);
    let saved = SavedRow {
        schema: ROW_SCHEMA.into(),
        row: row.clone(),
        capabilities: capabilities.clone(),
    };
    write(ROW, serde_json::to_vec_pretty(&saved).unwrap_or_default());
}

/// Names that mark a folder as a saved scenario, whatever they are now (a
/// file, a folder, a link, gone but for its siblings).
const MARKERS: [&str; 4] = [OBSERVATION, ROW, CHECKS, REQUESTS];

/// The saved scenario folders under `dir`: `dir` itself when it holds any
/// of a saved scenario's files, else its sub-folders that do (two levels,
/// for `--repeat`), in name order. Symbolic links are never followed: a
/// link to a folder is listed, for [`read`] to name it as not read.
pub fn find(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is {}, not a folder: give a saved scenario folder (`--artifacts DIR` keeps DIR/ID/)",
            dir.display(),
            crate::input::kind(&meta)
        ));
    }
    let mut out = Vec::new();
    collect(dir, 0, &mut out)?;
    if out.is_empty() {
        return Err(format!(
            "{} holds no saved scenario: a folder with {OBSERVATION} and {ROW}, as \
             `chaosrun TABLE --artifacts DIR --keep-all` writes under DIR/ID/",
            dir.display()
        ));
    }
    Ok(out)
}

fn collect(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if MARKERS
        .iter()
        .any(|m| std::fs::symlink_metadata(dir.join(m)).is_ok())
    {
        out.push(dir.to_path_buf());
        return Ok(());
    }
    if depth == 2 {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut subs: Vec<(PathBuf, bool)> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let t = e.file_type().ok()?;
            let linked_folder = t.is_symlink() && e.path().is_dir();
            (t.is_dir() || linked_folder).then(|| (e.path(), linked_folder))
        })
        .collect();
    subs.sort();
    for (sub, linked) in subs {
        if out.len() >= MAX_FOLDERS {
            return Err(format!(
                "{} holds more than {MAX_FOLDERS} saved scenarios; judge a part of it",
                dir.display()
            ));
        }
        match linked {
            true => out.push(sub),
            false => collect(&sub, depth + 1, out)?,
        }
    }
    Ok(())
}

/// Whether `name` in `dir` is there (a regular file) or not at all; any
/// other kind of thing in its place (a folder, a link, a FIFO) is an error.
fn regular(dir: &Path, name: &str) -> Result<bool, String> {
    match std::fs::symlink_metadata(dir.join(name)) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) => Err(format!(
            "{}: {name} is {}; judge reads only the regular file a run wrote (links \
             are not followed)",
            dir.display(),
            crate::input::kind(&m)
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{}: {e}", dir.join(name).display())),
    }
}

/// Parse `bytes`, read from `path`, as JSON into `T`; errors name
/// `PATH:LINE:COL`.
fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "{}:{}:{}: not a saved scenario file chaosrun can read: {e}",
            path.display(),
            e.line(),
            e.column()
        )
    })
}

/// Parse `path` (at most `cap`) as JSON into `T`.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path, cap: Cap) -> Result<T, String> {
    let bytes = crate::input::read_input(path, cap)?;
    parse_json(path, &bytes)
}

/// Read the saved scenario in `dir`: its row (of this schema), its
/// observation (of the same scenario, of this schema, holding the sections
/// its run wrote and its row needs: [`super::sections`]) and its recorded
/// checks. Each file must be a regular file; `checks.json` may be absent.
pub fn read(dir: &Path) -> Result<Saved, String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is {}: links are not followed; judge the folder it points to",
            dir.display(),
            crate::input::kind(&meta)
        ));
    }
    if !regular(dir, OBSERVATION)? {
        return Err(format!(
            "{}: no {OBSERVATION}: without what the run saw the scenario \
             cannot be judged; run it again with --artifacts",
            dir.display()
        ));
    }
    if !regular(dir, ROW)? {
        return Err(format!(
            "{}: no {ROW} (saved by a chaosrun before `judge` existed, or not by \
             chaosrun): run the scenario again with --artifacts to judge it",
            dir.display()
        ));
    }
    let row_path = dir.join(ROW);
    let saved: SavedRow = read_json(&row_path, SMALL_CAP)?;
    if saved.schema != ROW_SCHEMA {
        return Err(format!(
            "{}: schema `{}`; this chaosrun reads `{ROW_SCHEMA}`",
            row_path.display(),
            saved.schema
        ));
    }
    let obs_path = dir.join(OBSERVATION);
    let bytes = crate::input::read_input(&obs_path, OBSERVATION_CAP)?;
    let shape: serde_json::Value = parse_json(&obs_path, &bytes)?;
    super::sections::verify(&obs_path.display().to_string(), &shape, &saved.row)?;
    drop(shape);
    let observation: Observation = parse_json(&obs_path, &bytes)?;
    if observation.scenario != saved.row.id {
        return Err(format!(
            "{}: the observation is of scenario `{}` but {ROW} of `{}`",
            dir.display(),
            observation.scenario,
            saved.row.id
        ));
    }
    let recorded_checks = match regular(dir, CHECKS)? {
        true => Some(read_json(&dir.join(CHECKS), SMALL_CAP)?),
        false => None,
    };
    Ok(Saved {
        row: saved.row,
        capabilities: saved.capabilities,
        observation,
        recorded_checks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the writer saves, the reader reads back the same: a golden
    /// folder read, written into a fresh artifacts folder, and read again.
    #[test]
    fn a_saved_folder_reads_back_as_written() {
        let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/interrupt_hung_tool");
        let first = read(&golden).expect("the golden folder reads");
        let checks =
            crate::oracle::check(&first.row, first.capabilities.clone(), &first.observation);
        let base = tempfile::tempdir().unwrap();
        let root = base.path().join(&first.row.id);
        std::fs::create_dir_all(&root).unwrap();
        write(
            base.path(),
            &root,
            &first.observation,
            &checks,
            &first.row,
            &first.capabilities,
        );
        assert_eq!(find(base.path()).unwrap(), vec![root.clone()]);
        let again = read(&root).expect("the written folder reads");
        assert_eq!(value(&again.observation), value(&first.observation));
        assert_eq!(value(&again.row), value(&first.row));
        assert_eq!(value(&again.capabilities), value(&first.capabilities));
        let recorded = again.recorded_checks.expect("checks.json written");
        assert_eq!(
            serde_json::Value::Array(recorded),
            serde_json::to_value(&checks).unwrap()
        );
        let requests = std::fs::read_to_string(root.join(REQUESTS)).unwrap();
        assert_eq!(
            requests.lines().count(),
            first.observation.recording.requests.len()
        );
    }

    /// Serialised form, for comparing values that have no `PartialEq`.
    fn value(v: &impl Serialize) -> serde_json::Value {
        serde_json::to_value(v).unwrap()
    }
}
