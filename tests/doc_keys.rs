//! The key references list exactly the keys the loaders accept: every
//! profile key in docs/profile-keys.md, every table key in docs/table.md
//! ("Table keys"). The keys are read from the loader itself: a document
//! with an unknown key at some path is refused with "unknown field
//! `zz_unknown`, expected one of ...", which names every key a mapping at
//! that path takes; the walk follows each key that is a mapping in turn,
//! `NAME` stands for the keys of a mapping the user names (`tools.NAME`)
//! and `[]` for each item of a list.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `{a: [{b: INNER}]}` for the path `a.[].b`.
fn nest(path: &[String], inner: &str) -> String {
    path.iter()
        .rev()
        .fold(inner.to_string(), |acc, k| match k.as_str() {
            "[]" => format!("[{acc}]"),
            _ => format!("{{{k}: {acc}}}"),
        })
}

/// Which loader: a profile, or a scenario table.
#[derive(Clone, Copy)]
enum Loader {
    Profile,
    Table,
}

/// The loader's error for `doc`, if it refuses it.
fn refusal(dir: &Path, loader: Loader, doc: &str) -> Option<String> {
    match loader {
        Loader::Profile => {
            let file = dir.join("probe.yaml");
            std::fs::write(&file, format!("{doc}\n")).unwrap();
            chaosrun::profile::Profile::resolve(file.to_str().unwrap()).err()
        }
        Loader::Table => chaosrun::scenarios::load::load_str(&format!("{doc}\n"), "t.yaml")
            .err()
            .map(|e| e.to_string()),
    }
}

/// The keys the mapping at `path` takes, if the loader names them when one
/// it does not take is there.
fn keys_at(dir: &Path, loader: Loader, path: &[String], inner: &str) -> Option<Vec<String>> {
    let doc = nest(path, inner);
    // The top level is the document itself, not a flow mapping in a field.
    let doc = doc
        .strip_prefix('{')
        .and_then(|d| d.strip_suffix('}'))
        .unwrap_or(&doc);
    let err = refusal(dir, loader, doc)?;
    // "expected one of `a`, `b`", "expected `a` or `b`", "expected `a`".
    let list = err.split("unknown field `zz_unknown`, expected ").nth(1)?;
    let list = list.lines().next().unwrap_or_default();
    Some(
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

/// `home_files.[].path` written `home_files[].path`.
fn render(path: &[String]) -> String {
    path.join(".").replace(".[]", "[]")
}

/// Every key path the loader accepts, `tools.NAME.name` style.
fn walk(dir: &Path, loader: Loader, path: Vec<String>, out: &mut BTreeSet<String>) {
    if path.len() > 6 {
        return;
    }
    // A mapping of its own keys; a mapping of names the user gives
    // (`NAME`); a list of mappings (`[]`).
    let shapes = [
        ("{zz_unknown: 1}", None),
        ("{NAME: {zz_unknown: 1}}", Some("NAME")),
        ("[{zz_unknown: 1}]", Some("[]")),
    ];
    let found = shapes.iter().find_map(|(inner, step)| {
        if path.is_empty() && step.is_some() {
            return None;
        }
        let fields = keys_at(dir, loader, &path, inner)?;
        let mut at = path.clone();
        if let Some(step) = step {
            at.push(step.to_string());
            out.insert(render(&at));
        }
        Some((fields, at))
    });
    let Some((fields, at)) = found else {
        return;
    };
    for f in fields {
        let mut p = at.clone();
        p.push(f);
        out.insert(render(&p));
        walk(dir, loader, p, out);
    }
}

/// The keys a page lists (its key table's first column, in backticks),
/// from the section headed `from` (or the whole page) to the next heading.
fn documented(page: &str, from: Option<&str>) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("docs").join(page)).unwrap();
    let text = match from {
        Some(h) => {
            let start = text
                .find(h)
                .unwrap_or_else(|| panic!("{page} has no `{h}`"));
            let rest = &text[start + h.len()..];
            &rest[..rest.find("\n#").unwrap_or(rest.len())]
        }
        None => &text[..],
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

/// Keys below a value the loader reads by hand (its error names the forms,
/// not the keys), so the walk cannot list them: documented all the same.
const READ_BY_HAND: &[&str] = &[
    "tools.NAME.args.ARG",
    "tools.NAME.args.ARG.name",
    "tools.NAME.args.ARG.map",
    "tools.NAME.args.ARG.values",
];

#[test]
fn every_profile_key_is_in_the_reference_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut accepted = BTreeSet::new();
    walk(dir.path(), Loader::Profile, Vec::new(), &mut accepted);
    assert!(accepted.contains("exec.final"), "{accepted:?}");
    assert!(accepted.contains("store.records[].when"), "{accepted:?}");
    accepted.extend(READ_BY_HAND.iter().map(|k| k.to_string()));
    same(
        &accepted,
        &documented("profile-keys.md", None),
        "docs/profile-keys.md",
    );
}

#[test]
fn every_table_key_is_in_the_table_page_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut accepted = BTreeSet::new();
    walk(dir.path(), Loader::Table, Vec::new(), &mut accepted);
    assert!(accepted.contains("scenarios[].chaos"), "{accepted:?}");
    assert!(accepted.contains("scenarios[].mcp.rules"), "{accepted:?}");
    let page = documented("table.md", Some("## Table keys"));
    same(&accepted, &page, "docs/table.md (Table keys)");
}

/// The table's prose list of reply kinds is the registry's.
#[test]
fn the_table_page_names_every_reply_kind() {
    let text = std::fs::read_to_string(repo().join("docs/table.md")).unwrap();
    let start = text.find("Reply kinds (").expect("the reply-kind list");
    let list = &text[start..start + text[start..].find(')').unwrap()];
    let named: BTreeSet<&str> = list.split('`').skip(1).step_by(2).collect();
    let kinds: BTreeSet<&str> = chaosrun::provider::replies::kind_names()
        .iter()
        .copied()
        .collect();
    assert_eq!(named, kinds, "docs/table.md's list of reply kinds");
}

fn same(accepted: &BTreeSet<String>, documented: &BTreeSet<String>, page: &str) {
    let missing: Vec<_> = accepted.difference(documented).collect();
    let extra: Vec<_> = documented.difference(accepted).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{page}: keys the loader takes but the page lacks: {missing:?}; \
         keys the page lists that the loader refuses: {extra:?}"
    );
}
