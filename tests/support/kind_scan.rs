//! The scan behind tests/fault_kinds.rs: every place outside a family's
//! folder that names one of its kinds, in any of the ways Rust can name one.
//! It reads the families from each `registry!` list (variant, module, type)
//! and each kind's `NAME` from its file, then reads every source file with
//! its comments and its test items (`#[cfg(test)] mod tests { ... }`, found
//! by matching braces wherever they sit, and `#[cfg(test)] mod x;` files)
//! left out, and reports:
//!
//! - `Enum::Variant`, through the enum, a `use ... as` alias, a `type` alias,
//!   or `Self::` inside an `impl` of the enum;
//! - a glob import of a kind's module (`replies::hang::*`) or of the enum's
//!   variants (`Reply::*`);
//! - the kind's type (`AuthExpired`, `replies::Hang`), which reaches its
//!   `NAME`, its constructors and its fields;
//! - its `NAME` as a string literal (`"auth_expired"`).
//!
//! A file inside a family's folder may name its own family's kinds.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// One registered kind: `Variant(module::Type)` and its `NAME`.
pub struct Kind {
    pub variant: String,
    pub module: String,
    pub ty: String,
    pub name: String,
}

/// One family: its folder, its module's name, its enum and its kinds.
pub struct Family {
    pub dir: PathBuf,
    pub module: String,
    pub enum_name: String,
    pub kinds: Vec<Kind>,
}

/// The family registry lists, by their `mod.rs`.
pub const REGISTRIES: &[&str] = &[
    "src/provider/replies/mod.rs",
    "src/provider/upstream/faults/mod.rs",
    "src/mcp/replies/mod.rs",
];

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `word` at `at` in `s` is a whole word.
fn whole_word(s: &str, at: usize, len: usize) -> bool {
    let b = s.as_bytes();
    (at == 0 || !is_ident(b[at - 1])) && b.get(at + len).is_none_or(|c| !is_ident(*c))
}

/// Read `"family", Enum: dyn Trait { Variant(module::Type), ... }` and each
/// kind's `const NAME` from `module.rs` next to it.
pub fn family(mod_rs: &Path) -> Family {
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
    let dir = mod_rs.parent().unwrap().to_path_buf();
    let mut kinds = Vec::new();
    for line in body[open + 1..close].lines().map(str::trim) {
        let Some((variant, rest)) = line.split_once('(') else {
            continue;
        };
        let path = rest.trim_end_matches(',').trim_end_matches(')');
        let (module, ty) = path.split_once("::").expect("module::Type");
        let file = std::fs::read_to_string(dir.join(format!("{module}.rs"))).unwrap();
        let decl = file
            .find("const NAME: &'static str = \"")
            .expect("const NAME");
        let after = &file[decl..];
        let name = after.split('"').nth(1).unwrap().to_string();
        kinds.push(Kind {
            variant: variant.to_string(),
            module: module.to_string(),
            ty: ty.to_string(),
            name,
        });
    }
    assert!(kinds.len() >= 3, "{enum_name}: too few kinds read");
    Family {
        module: dir.file_name().unwrap().to_string_lossy().into_owned(),
        dir,
        enum_name,
        kinds,
    }
}

pub fn families(root: &Path) -> Vec<Family> {
    REGISTRIES.iter().map(|r| family(&root.join(r))).collect()
}

/// A file read for the scan: `code` has comments and test items blanked
/// (same byte offsets as the file, newlines kept), `skeleton` has string
/// and char literals blanked as well, `strings` is every plain string
/// literal outside those as (offset, contents).
pub struct Source {
    pub code: String,
    pub skeleton: String,
    pub strings: Vec<(usize, String)>,
    /// Modules declared `#[cfg(test)] mod x;`: their files are test code.
    pub test_modules: Vec<String>,
}

/// Blank `bytes[from..to]` in place, keeping newlines (UTF-8 stays valid:
/// every byte of a blanked char becomes a space).
fn blank(bytes: &mut [u8], from: usize, to: usize) {
    let to = to.min(bytes.len());
    for b in &mut bytes[from..to] {
        if *b != b'\n' {
            *b = b' ';
        }
    }
}

/// Blank comments (in both views) and literals' contents (in the skeleton).
fn lex(text: &str) -> (Vec<u8>, Vec<u8>) {
    let mut code = text.as_bytes().to_vec();
    let mut skel = code.clone();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let next = b.get(i + 1).copied();
        if b[i] == b'/' && next == Some(b'/') {
            let end = text[i..].find('\n').map_or(b.len(), |e| i + e);
            blank(&mut code, i, end);
            blank(&mut skel, i, end);
            i = end;
        } else if b[i] == b'/' && next == Some(b'*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 1;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            blank(&mut code, i, j);
            blank(&mut skel, i, j);
            i = j;
        } else if b[i] == b'r' && (i == 0 || !is_ident(b[i - 1])) && raw_start(b, i).is_some() {
            let hashes = raw_start(b, i).unwrap();
            let body = i + 2 + hashes;
            let close = format!("\"{}", "#".repeat(hashes));
            let end = text[body..].find(&close).map_or(b.len(), |e| body + e);
            blank(&mut skel, body, end);
            i = end + close.len();
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut skel, i + 1, j);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '"'), or a lifetime ('a).
            let end = if next == Some(b'\\') {
                text[i + 2..].find('\'').map(|e| i + 2 + e + 1)
            } else {
                let c = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + c) == Some(&b'\'')).then_some(i + 2 + c)
            };
            match end {
                Some(e) => {
                    blank(&mut skel, i + 1, e - 1);
                    i = e;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    (code, skel)
}

/// `r"`, `r#"`, `r##"`: the number of `#`s.
fn raw_start(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

/// The end (exclusive) of the item starting at `from`: its `;` or the `}`
/// closing its first brace at depth 0, whichever comes first.
fn item_end(skel: &[u8], from: usize) -> usize {
    let mut depth = 0i32;
    for (j, c) in skel.iter().enumerate().skip(from) {
        match c {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' => depth -= 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            b';' if depth == 0 => return j + 1,
            _ => {}
        }
    }
    skel.len()
}

/// Read `text`: comments and every `#[cfg(test)]` item blanked.
pub fn read(text: &str) -> Source {
    let (mut code, mut skel) = lex(text);
    let mut test_modules = Vec::new();
    let whole_file = String::from_utf8_lossy(&skel).contains("#![cfg(test)]");
    if whole_file {
        let n = code.len();
        blank(&mut code, 0, n);
        blank(&mut skel, 0, n);
    }
    loop {
        let s = String::from_utf8_lossy(&skel).into_owned();
        let Some(at) = s.find("#[cfg(test)]") else {
            break;
        };
        let end = item_end(&skel, at + "#[cfg(test)]".len());
        let item: Vec<&str> = s[at..end].split_whitespace().collect();
        if item.last().is_some_and(|w| w.ends_with(';')) {
            if let Some(m) = item.iter().position(|w| *w == "mod") {
                test_modules.push(item[m + 1].trim_end_matches(';').to_string());
            }
        }
        blank(&mut code, at, end);
        blank(&mut skel, at, end);
    }
    let code = String::from_utf8(code).unwrap();
    let skeleton = String::from_utf8(skel).unwrap();
    let strings = string_literals(&code, &skeleton);
    Source {
        code,
        skeleton,
        strings,
        test_modules,
    }
}

/// Plain string literals: where the skeleton has `"` + blanks + `"`.
fn string_literals(code: &str, skel: &str) -> Vec<(usize, String)> {
    let sb = skel.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < sb.len() {
        if sb[i] == b'"' {
            let Some(len) = skel[i + 1..].find('"') else {
                break;
            };
            let raw = i > 0 && (sb[i - 1] == b'r' || sb[i - 1] == b'#');
            if !raw {
                out.push((i, code[i + 1..i + 1 + len].to_string()));
            }
            i += len + 2;
        } else {
            i += 1;
        }
    }
    out
}

/// The names a file gives family `f`'s enum: its own, `use ... as X` and
/// `type X = ...Enum;`.
fn names_for(f: &Family, skel: &str) -> Vec<String> {
    let mut names = vec![f.enum_name.clone()];
    let alias = format!("{} as ", f.enum_name);
    for (i, _) in skel.match_indices(&alias) {
        let rest = &skel[i + alias.len()..];
        let end = rest
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        names.push(rest[..end].to_string());
    }
    for (i, _) in skel.match_indices("type ") {
        if !whole_word(skel, i, 4) {
            continue;
        }
        let decl = &skel[i + 5..];
        let Some(semi) = decl.find(';') else { continue };
        let Some((alias, target)) = decl[..semi].split_once('=') else {
            continue;
        };
        let target = target.trim();
        if target == f.enum_name || target.ends_with(&format!("::{}", f.enum_name)) {
            names.push(alias.trim().to_string());
        }
    }
    names
}

/// The byte ranges of `impl` blocks whose type is one of `names`.
fn impl_bodies(skel: &str, names: &[String]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, _) in skel.match_indices("impl") {
        if !whole_word(skel, i, 4) {
            continue;
        }
        let Some(open) = skel[i..].find('{').map(|o| i + o) else {
            continue;
        };
        let head = &skel[i + 4..open];
        let target = head.rsplit(" for ").next().unwrap_or(head);
        let target = target.split('<').next().unwrap_or("").trim();
        let last = target.rsplit("::").next().unwrap_or(target);
        if names.iter().any(|n| n == last) {
            out.push((open, item_end(skel.as_bytes(), open)));
        }
    }
    out
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Every `file:line: what` naming a kind of a family outside its folder.
pub fn violations(files: &[(PathBuf, Source)], families: &[Family]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, src) in files {
        let home = families.iter().find(|f| path.starts_with(&f.dir));
        let skel = src.skeleton.as_str();
        let mut hit = |at: usize, what: &str| {
            out.push(format!("{}:{}: {what}", path.display(), line_of(skel, at)));
        };
        for f in families {
            let own = home.is_some_and(|h| std::ptr::eq(h, f));
            // Two families share the enum name `Reply`: a family's folder may
            // name its own enum's variants, whichever family's they are.
            let own_enum = home.is_some_and(|h| h.enum_name == f.enum_name);
            let own_variant =
                |v: &str| own_enum && home.unwrap().kinds.iter().any(|o| o.variant == v);
            let names = names_for(f, skel);
            let selfs = impl_bodies(skel, &names);
            for name in names.iter().map(String::as_str).chain(["Self"]) {
                let glob = format!("{name}::*");
                for (at, _) in skel.match_indices(&glob) {
                    if name != "Self" && !own_enum && whole_word(skel, at, name.len()) {
                        hit(at, &glob);
                    }
                }
                for k in f.kinds.iter().filter(|k| !own_variant(&k.variant)) {
                    let needle = format!("{name}::{}", k.variant);
                    for (at, _) in skel.match_indices(&needle) {
                        let in_impl = selfs.iter().any(|(a, b)| (*a..*b).contains(&at));
                        if whole_word(skel, at, needle.len()) && (name != "Self" || in_impl) {
                            hit(at, &needle);
                        }
                    }
                }
            }
            if own {
                continue;
            }
            // A family folder's own type of the same name (`Hang`) is its own.
            let own_type = |ty: &str| home.is_some_and(|h| h.kinds.iter().any(|o| o.ty == ty));
            for k in &f.kinds {
                let glob = format!("{}::{}::*", f.module, k.module);
                for (at, _) in skel.match_indices(&glob) {
                    hit(at, &glob);
                }
                let uses: Vec<usize> = skel
                    .match_indices(&k.ty)
                    .map(|(at, _)| at)
                    .filter(|at| whole_word(skel, *at, k.ty.len()))
                    .collect();
                let through = |at: &usize| through_family(skel, *at, f, k);
                if !own_type(&k.ty) && uses.iter().any(through) {
                    // Imported or named through the family: every bare use too.
                    for at in uses.iter().filter(|at| through(at) || bare(skel, **at)) {
                        hit(*at, &k.ty);
                    }
                }
                for (at, s) in &src.strings {
                    if *s == k.name && !home.is_some_and(|h| h.kinds.iter().any(|o| o.name == *s)) {
                        hit(*at, &format!("\"{s}\""));
                    }
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// `Type` at `at` is reached through its family's module or its own:
/// `replies::Hang`, `hang::Hang`, `use crate::provider::replies::{Hang, ..}`
/// (not another type's variant, `Plan::Hang`, nor a type of the same name).
fn through_family(skel: &str, at: usize, f: &Family, k: &Kind) -> bool {
    let family = |seg: &str| seg == f.module;
    if let Some(path) = skel[..at].trim_end().strip_suffix("::") {
        // The `a::b::` path right before the type.
        let start = path
            .rfind(|c: char| !c.is_alphanumeric() && c != '_' && c != ':')
            .map_or(0, |i| i + 1);
        let segs: Vec<&str> = path[start..].split("::").collect();
        let module_of_kind = segs.last() == Some(&k.module.as_str())
            && skel.contains(&format!("{}::{}", f.module, k.module));
        return segs.iter().any(|s| family(s)) || module_of_kind;
    }
    // Inside a `use a::b::{.., Type, ..};` group: the path before its `{`.
    let stmt_start = skel[..at].rfind([';', '}']).map_or(0, |i| i + 1);
    let stmt = &skel[stmt_start..at];
    let Some(u) = stmt.find("use ") else {
        return false;
    };
    stmt[u..]
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .any(family)
}

/// `Type` at `at` stands alone (not `Other::Type`).
fn bare(skel: &str, at: usize) -> bool {
    !skel[..at].trim_end().ends_with("::")
}

/// Every `.rs` file under `dir`, read, but for test-only module files.
pub fn sources(dir: &Path) -> Vec<(PathBuf, Source)> {
    let mut out = Vec::new();
    walk(dir, &mut out);
    let tests: Vec<PathBuf> = out
        .iter()
        .flat_map(|(p, s)| {
            let dir = p.parent().unwrap().to_path_buf();
            s.test_modules.iter().map(move |m| dir.join(m))
        })
        .collect();
    out.retain(|(p, _)| {
        !tests
            .iter()
            .any(|t| p.starts_with(t) || *p == t.with_extension("rs"))
    });
    out
}

fn walk(dir: &Path, out: &mut Vec<(PathBuf, Source)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            out.push((p, read(&text)));
        }
    }
}

/// Every violation under `root/src`, paths relative to `root`.
pub fn scan(root: &Path) -> Vec<String> {
    let families = families(root);
    let files = sources(&root.join("src"));
    violations(&files, &families)
        .into_iter()
        .map(|v| {
            v.strip_prefix(&format!("{}/", root.display()))
                .unwrap_or(&v)
                .to_string()
        })
        .collect()
}
