//! Fault kinds stay in their files (docs/fault-kinds.md): outside a
//! family's folder no code names one of its kinds' variants
//! (`Reply::Hang(_)`, `Fault::Error(e)`); the rest of the code asks the
//! family's trait or the kind's `Facts`. The families and their variants
//! are read from each `registry!` list, so a new kind is covered the day it
//! is registered. Test code (`#[cfg(test)]` tails) may name variants.

mod common;

use std::path::{Path, PathBuf};

use common::repo;

/// One family: its folder, its enum and every registered variant.
struct Family {
    dir: PathBuf,
    enum_name: String,
    variants: Vec<String>,
}

/// The family registry lists, by their `mod.rs`.
const REGISTRIES: &[&str] = &[
    "src/provider/replies/mod.rs",
    "src/provider/upstream/faults/mod.rs",
    "src/mcp/replies/mod.rs",
];

/// Read `"family", Enum: dyn Trait { Variant(module::Type), ... }`.
fn family(mod_rs: &Path) -> Family {
    let text = std::fs::read_to_string(mod_rs).unwrap();
    let start = text.find("registry! {").expect("a registry! list");
    let body = &text[start..];
    let head = body.find(": dyn ").expect("`Enum: dyn Trait`");
    let enum_name = body[..head]
        .rsplit(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap()
        .to_string();
    let open = head + body[head..].find('{').unwrap();
    let close = open + body[open..].find('}').unwrap();
    let variants = body[open + 1..close]
        .split(',')
        .filter_map(|l| l.trim().split('(').next())
        .filter(|v| !v.is_empty() && !v.starts_with("//"))
        .map(str::to_string)
        .collect::<Vec<_>>();
    assert!(variants.len() >= 3, "{enum_name}: {variants:?}");
    Family {
        dir: mod_rs.parent().unwrap().to_path_buf(),
        enum_name,
        variants,
    }
}

/// The code of a file without its `#[cfg(test)]` tail.
fn code(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

/// The names a file gives family `f`'s enum: its own and `use ... as X`.
fn names_for(f: &Family, code: &str) -> Vec<String> {
    let mut names = vec![f.enum_name.clone()];
    let alias = format!("{} as ", f.enum_name);
    for (i, _) in code.match_indices(&alias) {
        let rest = &code[i + alias.len()..];
        let end = rest
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        names.push(rest[..end].to_string());
    }
    names
}

/// Every `file:line: Enum::Variant` naming a variant of a family outside
/// its folder. A file inside a family folder may name its own family's
/// variants (two families share the enum name `Reply`).
fn violations(files: &[(PathBuf, String)], families: &[Family]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let code = code(text);
        let home = families.iter().find(|f| path.starts_with(&f.dir));
        for f in families {
            for name in names_for(f, code) {
                for v in &f.variants {
                    let needle = format!("{name}::{v}");
                    let own = home.is_some_and(|h| h.enum_name == name && h.variants.contains(v));
                    for (at, _) in code.match_indices(&needle) {
                        let next = code[at + needle.len()..].chars().next();
                        let word_end = next.is_none_or(|c| !c.is_alphanumeric() && c != '_');
                        let word_start = code[..at]
                            .chars()
                            .last()
                            .is_none_or(|c| !c.is_alphanumeric() && c != '_');
                        if word_end && word_start && !own {
                            let line = code[..at].lines().count();
                            out.push(format!("{}:{line}: {needle}", path.display()));
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((p, text));
        }
    }
}

fn families() -> Vec<Family> {
    REGISTRIES.iter().map(|r| family(&repo().join(r))).collect()
}

#[test]
fn no_fault_kind_is_named_outside_its_family() {
    let families = families();
    let mut files = Vec::new();
    rust_files(&repo().join("src"), &mut files);
    let found = violations(&files, &families);
    assert!(
        found.is_empty(),
        "{} place(s) name a fault kind outside its family's folder; ask the family's \
         trait (or the kind's Facts) instead:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The scan reads every family and catches a variant named through the enum
/// or an alias, but not a longer name, the family's own folder, or tests.
#[test]
fn the_scan_catches_a_named_variant() {
    let families = families();
    let names: Vec<&str> = families.iter().map(|f| f.enum_name.as_str()).collect();
    assert_eq!(names, ["Reply", "Fault", "Reply"]);
    assert!(families[0].variants.contains(&"StallMidStream".to_string()));
    assert!(families[1].variants.contains(&"AnswerThenHang".to_string()));
    assert!(families[2].variants.contains(&"SchemaSwap".to_string()));
    let files = vec![
        (
            repo().join("src/oracle/x.rs"),
            "use crate::provider::Reply as R;\nfn a(r: &R) -> bool {\n    matches!(r, R::Hang(_))\n}\n\
             fn b(r: &Reply) -> bool { matches!(r, Reply::Error(_) | Reply::HangOn) }\n\
             #[cfg(test)]\nmod t { fn c() { let _ = Reply::Text; } }\n"
                .to_string(),
        ),
        (
            families[2].dir.join("y.rs"),
            "fn d() { let _ = Reply::SchemaSwap; let _ = Fault::Error; }\n".to_string(),
        ),
    ];
    let found = violations(&files, &families);
    let short: Vec<String> = found
        .iter()
        .map(|l| l.rsplit('/').next().unwrap().to_string())
        .collect();
    assert_eq!(
        short,
        [
            "y.rs:1: Fault::Error",
            "x.rs:3: R::Hang",
            "x.rs:5: Reply::Error"
        ],
        "{found:?}"
    );
}
