//! The module layering of docs/architecture.md ("Layers": lower layers
//! never import higher ones), checked on the source: every `crate::MODULE` path outside test
//! code is read, and an import from a lower layer to a higher one fails this
//! test unless it is one of the few named in [`ALLOWED`], each with the
//! reason it stays.

use std::collections::BTreeSet;
use std::path::Path;

/// Layers, lowest first: a module may use its own layer and those below.
const LAYERS: &[&[&str]] = &[
    &[
        "units",
        "output",
        "input",
        "safe_path",
        "template",
        "term",
        "redact",
        "listen",
        "message",
        "children",
        "fd_limit",
        "kinds",
    ],
    &["provider", "mcp"],
    &["scenarios", "profile", "store"],
    &["proc_hygiene", "observe"],
    &["driver", "oracle"],
    &["runner"],
    &["explore", "report", "history", "catalog"],
    &["cli", "main"],
];

/// Lower -> higher imports that remain, as `file -> module`, with why.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "src/profile/mod.rs",
        "driver",
        "`apply_cli` checks a `--pass-env` name with the driver's environment rules",
    ),
    (
        "src/provider/serve.rs",
        "proc_hygiene",
        "`chaosrun serve` counts the tagged processes for `wait_for` by itself",
    ),
    (
        "src/provider/upstream/setup.rs",
        "scenarios",
        "the upstream flags are checked against the table's reply kinds",
    ),
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The top module a file under src/ belongs to (`src/runner/drive.rs` -> `runner`).
fn module_of(rel: &Path) -> String {
    let first = rel.components().nth(1).expect("under src/");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_string()
}

/// The code of a file without its `#[cfg(test)]` tail.
fn code(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `file -> module` import from a lower layer to a higher one.
fn upward_imports(root: &Path) -> BTreeSet<(String, String)> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let re = regex::Regex::new(r"crate::([a-z_]+)").unwrap();
    let mut out = BTreeSet::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap();
        let from = module_of(rel);
        let Some(low) = layer(&from) else { continue };
        let text = std::fs::read_to_string(&f).unwrap();
        for c in re.captures_iter(code(&text)) {
            let to = &c[1];
            if layer(to).is_some_and(|high| high > low) {
                out.insert((rel.display().to_string(), to.to_string()));
            }
        }
    }
    out
}

#[test]
fn every_top_module_has_a_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    for e in std::fs::read_dir(root.join("src")).unwrap().flatten() {
        let name = e
            .file_name()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if name != "lib" && layer(&name).is_none() {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "modules with no layer in LAYERS: {missing:?}"
    );
}

#[test]
fn lower_layers_never_import_higher_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = upward_imports(root);
    let allowed: BTreeSet<(String, String)> = ALLOWED
        .iter()
        .map(|(f, m, _)| (f.to_string(), m.to_string()))
        .collect();
    let new: Vec<_> = found.difference(&allowed).collect();
    assert!(
        new.is_empty(),
        "imports from a lower layer to a higher one (move the item down to the layer that owns it): {new:?}"
    );
    assert!(ALLOWED.len() <= 3, "at most three named exceptions");
}

#[test]
fn the_check_sees_an_upward_import() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("src/units")).unwrap();
    std::fs::write(
        d.path().join("src/units/mod.rs"),
        "use crate::runner::Thing;\n#[cfg(test)]\nmod tests { use crate::main::X; }\n",
    )
    .unwrap();
    let found = upward_imports(d.path());
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        vec![("src/units/mod.rs".to_string(), "runner".to_string())]
    );
}
