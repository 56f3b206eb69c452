//! The agent folders compiled into the binary (`build.rs` lists them) and
//! writing one out to disk.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

include!(concat!(env!("OUT_DIR"), "/catalog_files.rs"));

/// One embedded file of a folder: its path inside the folder, bytes, mode.
pub type File = (&'static str, &'static [u8], u32);

/// The embedded files of `examples/<name>/` (empty when the folder was not
/// there at build time).
pub fn files(name: &str) -> Vec<File> {
    let prefix = format!("{name}/");
    FILES
        .iter()
        .filter_map(|(path, bytes, mode)| {
            path.strip_prefix(&prefix).map(|rel| (rel, *bytes, *mode))
        })
        .collect()
}

/// Was `examples/<name>/` embedded?
pub fn has(name: &str) -> bool {
    !files(name).is_empty()
}

/// Write `files` under `dir` (created 0700 if new). A file whose content and
/// mode are already right is left alone; any other is replaced through a
/// temp file and a rename, so a run reading the folder never sees half a
/// file. Files not in `files` (an install: `prefix/`, `.venv/`) are kept.
pub fn write_out(dir: &Path, files: &[File]) -> std::io::Result<()> {
    create_private_dir(dir)?;
    for (rel, bytes, mode) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let same = std::fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o777 == *mode)
            && std::fs::read(&path).is_ok_and(|b| b == *bytes);
        if same {
            continue;
        }
        let mut tmp = tempfile::NamedTempFile::new_in(path.parent().unwrap_or(dir))?;
        tmp.write_all(bytes)?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(*mode))?;
        tmp.persist(&path).map_err(|e| e.error)?;
    }
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

use std::os::unix::fs::DirBuilderExt as _;
