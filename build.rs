//! Embeds the shipped agent folders (`examples/<name>/` for every entry of
//! `src/catalog/registry.rs`) into the binary, so `chaosrun --agent NAME` and
//! `chaosrun agents setup NAME` work for a `cargo install` user with no
//! checkout. Writes `$OUT_DIR/catalog_files.rs`: a list of
//! `(relative path, bytes, unix mode)`.
//!
//! A registry entry whose folder is missing at build time is skipped (a
//! `cargo:warning` names it); the catalog then lists it as not in this build.
//! Installs living inside a folder (`prefix/`, `.venv/`, `node_modules/`) are
//! never embedded, nor is a file over 4 MiB.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const SKIP_DIRS: &[&str] = &[
    "prefix",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".pytest_cache",
];
const MAX_FILE: u64 = 4 << 20;

/// The names of the registry's entries: every `entry("NAME"` in registry.rs.
fn registry_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("entry(\"") {
            if let Some(end) = rest.find('"') {
                names.push(rest[..end].to_string());
            }
        }
    }
    names
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf, u32)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if !SKIP_DIRS.contains(&name.as_str()) {
                walk(root, &path, out);
            }
        } else if meta.is_file() {
            if meta.len() > MAX_FILE {
                println!(
                    "cargo:warning=catalog: {} is over 4 MiB; not embedded",
                    path.display()
                );
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .to_string();
            out.push((rel, path.clone(), meta.permissions().mode() & 0o777));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let registry = manifest.join("src/catalog/registry.rs");
    let examples = manifest.join("examples");
    println!("cargo:rerun-if-changed=src/catalog/registry.rs");
    println!("cargo:rerun-if-changed=examples");
    let text = std::fs::read_to_string(&registry).expect("src/catalog/registry.rs");
    let mut files = Vec::new();
    for name in registry_names(&text) {
        let dir = examples.join(&name);
        if dir.is_dir() {
            walk(&examples, &dir, &mut files);
        } else {
            println!("cargo:warning=catalog: examples/{name}/ is missing; agent `{name}` is not in this build");
        }
    }
    let mut src = String::from("/// Every embedded file: (path under examples/, bytes, unix mode).\npub static FILES: &[(&str, &[u8], u32)] = &[\n");
    for (rel, path, mode) in &files {
        let _ = writeln!(
            src,
            "    ({rel:?}, include_bytes!({:?}), {mode:#o}),",
            path.display().to_string()
        );
    }
    src.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("out dir")).join("catalog_files.rs");
    std::fs::write(out, src).expect("write catalog_files.rs");
}
