//! The agent folders compiled into the binary (`build.rs` lists them); they
//! are written out into the cache by [`super::cache`].

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
