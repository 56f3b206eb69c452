//! The docs stay true to the code: every relative link in README.md and
//! docs/**/*.md resolves (file and `#anchor`), every chaosrun flag they name
//! exists in `chaosrun --help` of some subcommand, and the reply-kind
//! reference (docs/reply-kinds.md) lists exactly the kinds the table loader
//! accepts (read from its own "expected one of" message, so the test does not
//! depend on how the kinds are implemented), and the template filter table
//! in docs/profiles.md lists exactly the filters `template::FILTERS` names,
//! each example rendering as documented.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_chaosrun"))
}

/// README.md and every markdown page under docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![repo().join("README.md")];
    walk(&repo().join("docs"), &mut out);
    out.sort();
    out
}

/// A page split into prose lines (fenced code blocks blanked, so their
/// brackets are not links) and the lines of its code blocks.
struct Page {
    prose: Vec<String>,
    code: Vec<String>,
}

fn split(text: &str) -> Page {
    let (mut prose, mut code, mut fence) = (Vec::new(), Vec::new(), false);
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            prose.push(String::new());
        } else if fence {
            code.push(line.to_string());
            prose.push(String::new());
        } else {
            prose.push(line.to_string());
        }
    }
    Page { prose, code }
}

/// The inline code spans of a prose line.
fn spans(line: &str) -> Vec<&str> {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s)
        .collect()
}

/// A prose line with its inline code spans removed.
fn without_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join("")
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as
/// hyphens; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for line in split(text).prose {
        let Some(title) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The link targets `[text](target)` of a page's prose.
fn links(text: &str) -> Vec<(usize, String)> {
    let re = regex::Regex::new(r#"\]\(([^)\s]+)(?:\s+"[^"]*")?\)"#).unwrap();
    let mut out = Vec::new();
    for (i, line) in split(text).prose.iter().enumerate() {
        for c in re.captures_iter(&without_spans(line)) {
            out.push((i + 1, c[1].to_string()));
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let at = format!(
                "{}:{line}: {target}",
                page.strip_prefix(repo()).unwrap().display()
            );
            if !path.exists() {
                broken.push(format!("{at}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let known = anchors(&std::fs::read_to_string(&path).unwrap_or_default());
                if !known.contains(anchor) {
                    broken.push(format!("{at}: no heading with anchor #{anchor}"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links found");
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// Every flag in `chaosrun --help` and in the help of every subcommand, nested.
fn known_flags() -> BTreeSet<String> {
    let flag = regex::Regex::new(r"--[a-z][a-z0-9-]*").unwrap();
    let mut flags = BTreeSet::new();
    let mut todo: Vec<Vec<String>> = vec![vec![]];
    while let Some(path) = todo.pop() {
        let out = Command::new(bin())
            .args(&path)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success(), "chaosrun {path:?} --help failed");
        let help = String::from_utf8_lossy(&out.stdout).to_string();
        flags.extend(flag.find_iter(&help).map(|m| m.as_str().to_string()));
        let mut in_commands = false;
        for line in help.lines() {
            if line.starts_with("Commands:") {
                in_commands = true;
            } else if in_commands && line.starts_with("  ") {
                let name = line.split_whitespace().next().unwrap_or("");
                if !name.is_empty() && name != "help" {
                    let mut sub = path.clone();
                    sub.push(name.to_string());
                    todo.push(sub);
                }
            } else if in_commands && !line.trim().is_empty() {
                in_commands = false;
            }
        }
    }
    flags
}

/// The `--flags` a token list names (`--a=b` is `--a`; `--a/--b` both).
fn flags_in<'a>(tokens: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut out = Vec::new();
    for token in tokens {
        if token.starts_with('#') {
            break;
        }
        for part in token.split(['/', ',']) {
            let part = part.trim_matches(|c: char| matches!(c, '(' | ')' | '.' | ';' | ':' | '`'));
            if let Some(name) = part.strip_prefix("--") {
                let name = name.split('=').next().unwrap_or("");
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    out.push(format!("--{name}"));
                }
            }
        }
    }
    out
}

/// The flags a page names: inline spans that start with `--` (their first
/// token) or `chaosrun ` (every token), and `chaosrun ...` lines of code blocks.
fn documented_flags(text: &str) -> Vec<(String, String)> {
    let page = split(text);
    let mut out = Vec::new();
    for line in &page.prose {
        for span in spans(line) {
            let span = span.trim();
            if span.starts_with("--") {
                let first = span.split_whitespace().next().unwrap_or("");
                out.extend(
                    flags_in(std::iter::once(first))
                        .into_iter()
                        .map(|f| (f, span.to_string())),
                );
            } else if let Some(rest) = span.strip_prefix("chaosrun ") {
                out.extend(
                    flags_in(rest.split_whitespace())
                        .into_iter()
                        .map(|f| (f, span.to_string())),
                );
            }
        }
    }
    for line in &page.code {
        let l = line.trim_start().trim_start_matches("$ ");
        let rest = l
            .strip_prefix("chaosrun ")
            .or_else(|| l.strip_prefix("cargo run --release -- "))
            .or_else(|| l.strip_prefix("./target/release/chaosrun "));
        if let Some(rest) = rest {
            out.extend(
                flags_in(rest.split_whitespace())
                    .into_iter()
                    .map(|f| (f, l.to_string())),
            );
        }
    }
    out
}

/// Other programs' flags some page names alone (the convention is to name
/// the program with it: `claude --resume ID`), each with whose it is.
const FOREIGN_FLAGS: &[(&str, &str)] = &[(
    "--resume",
    "the agents' own resume flag (Claude Code, Gemini CLI, qwen-code), docs/reproductions.md",
)];

#[test]
fn every_documented_flag_exists() {
    let known = known_flags();
    assert!(
        known.contains("--agent") && known.contains("--budget"),
        "{known:?}"
    );
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (flag, context) in documented_flags(&text) {
            checked += 1;
            if !known.contains(&flag) && !FOREIGN_FLAGS.iter().any(|(f, _)| *f == flag) {
                let name = page.strip_prefix(repo()).unwrap().display().to_string();
                missing.push(format!("{name}: {flag} (in `{context}`)"));
            }
        }
    }
    assert!(checked > 50, "only {checked} documented flags found");
    assert!(
        missing.is_empty(),
        "flags no `chaosrun ... --help` knows:\n{}",
        missing.join("\n")
    );
}

/// The kinds the loader accepts at `reply` (its "expected one of" list).
fn loader_kinds(table: &str) -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.yaml");
    std::fs::write(&path, table).unwrap();
    let out = Command::new(bin()).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let list = err
        .split("expected one of ")
        .nth(1)
        .unwrap_or_else(|| panic!("no list of kinds in: {err}"));
    let list = list.lines().next().unwrap();
    list.split(", ")
        .map(|k| k.trim().trim_matches('`').to_string())
        .collect()
}

/// The kinds a section of docs/reply-kinds.md lists (its table's first column).
fn documented_kinds(section: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("docs/reply-kinds.md")).unwrap();
    let start = text
        .find(&format!("\n## {section}\n"))
        .unwrap_or_else(|| panic!("docs/reply-kinds.md has no section `## {section}`"));
    let body = &text[start + section.len() + 5..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(String::from)
        .collect()
}

const UNKNOWN_REPLY: &str =
    "scenarios:\n  - id: x\n    responder:\n      - reply: {kind: no_such_kind}\n    expect: error\n";
const UNKNOWN_RELAY: &str = "scenarios:\n  - id: x\n    responder:\n      - reply: {kind: relay, fault: {kind: no_such_kind}}\n    expect: error\n";
const UNKNOWN_MCP: &str = "scenarios:\n  - id: x\n    mcp:\n      rules:\n        - reply: {kind: no_such_kind}\n    responder:\n      - reply: {kind: text, text: hi}\n    expect: error\n";

#[test]
fn reply_kind_reference_matches_the_loader() {
    for (section, table) in [
        ("Model provider replies", UNKNOWN_REPLY),
        ("Relay faults", UNKNOWN_RELAY),
        ("MCP replies", UNKNOWN_MCP),
    ] {
        let accepted = loader_kinds(table);
        let documented = documented_kinds(section);
        assert!(accepted.len() >= 5, "{section}: {accepted:?}");
        let undocumented: Vec<_> = accepted.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&accepted).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "{section}: accepted by the loader but not documented: {undocumented:?}; \
             documented but not accepted: {unknown:?}"
        );
    }
}

/// The fields a kind accepts, from the loader's refusal of an unknown one
/// (`expected one of `a`, `b``, `expected `a` or `b``, `there are no fields`).
fn loader_fields(kind: &str) -> BTreeSet<String> {
    let table = format!(
        "scenarios:\n  - id: x\n    responder:\n      - reply: {{kind: {kind}, zz_no_field: 1}}\n    expect: error\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.yaml");
    std::fs::write(&path, table).unwrap();
    let out = Command::new(bin()).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{kind}");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let err = err.lines().next().unwrap_or_default().to_string();
    if err.contains("there are no fields") {
        return BTreeSet::new();
    }
    let list = err
        .split_once("expected one of ")
        .or_else(|| err.split_once("expected "))
        .unwrap_or_else(|| panic!("{kind}: no list of fields in: {err}"))
        .1;
    list.split(", ")
        .flat_map(|f| f.split(" or "))
        .map(|f| f.trim().trim_matches('`').to_string())
        .collect()
}

/// The fields a kind's row of the "Model provider replies" table lists: each
/// backticked name outside parentheses, up to a `:` (`calls: [{tool, args}]`
/// is `calls`).
fn documented_fields(row: &str) -> BTreeSet<String> {
    let cell = row.split(" | ").nth(1).unwrap_or_default();
    let mut flat = String::new();
    let mut depth = 0;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => flat.push(c),
            _ => {}
        }
    }
    flat.split('`')
        .skip(1)
        .step_by(2)
        .map(|f| f.split(':').next().unwrap().trim().to_string())
        .collect()
}

/// docs/reply-kinds.md lists every field of every model reply kind, and no
/// field the loader refuses.
#[test]
fn reply_kind_fields_match_the_loader() {
    let text = std::fs::read_to_string(repo().join("docs/reply-kinds.md")).unwrap();
    let start = text.find("\n## Model provider replies\n").unwrap();
    let body = &text[start + 5..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut checked = 0;
    let mut wrong = Vec::new();
    for row in body.lines().filter(|l| l.starts_with("| `")) {
        let kind = row[3..].split('`').next().unwrap();
        let (accepted, documented) = (loader_fields(kind), documented_fields(row));
        if accepted != documented {
            wrong.push(format!(
                "{kind}: the loader takes {accepted:?}, the page lists {documented:?}"
            ));
        }
        checked += 1;
    }
    assert!(checked >= 10, "{checked} kinds read");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let caught = documented_fields("| `x` | `a`, `b: N` (`not_a_field`) | y |");
    assert_eq!(caught, ["a", "b"].map(String::from).into_iter().collect());
}

/// The checks above catch what they must: a broken anchor, an unknown flag.
#[test]
fn the_checks_catch_mistakes() {
    let text = "# Top\n## The agent's store\nsee [x](#the-agents-store) and [y](#nope)\n`--no-such-flag X` and `chaosrun --only a --jobs=2`\n```\nchaosrun --typo\n```\n";
    let a = anchors(text);
    assert!(a.contains("the-agents-store") && a.contains("top"), "{a:?}");
    let targets: Vec<String> = links(text).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["#the-agents-store", "#nope"]);
    assert!(!a.contains("nope"));
    let flags: Vec<String> = documented_flags(text).into_iter().map(|(f, _)| f).collect();
    assert_eq!(flags, ["--no-such-flag", "--only", "--jobs", "--typo"]);
    let known = known_flags();
    assert!(!known.contains("--no-such-flag") && !known.contains("--typo"));
}

/// Every `docs/PAGE.md#anchor` the command line's help names exists: the
/// page, and a heading whose GitHub anchor is that anchor.
#[test]
fn help_texts_point_at_docs_that_exist() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let re = regex::Regex::new(r"docs/([a-z0-9-]+\.md)(?:#([a-z0-9-]+))?").unwrap();
    let mut seen = 0;
    for entry in std::fs::read_dir(root.join("src/cli")).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        for line in text.lines().filter(|l| l.trim_start().starts_with("///")) {
            for c in re.captures_iter(line) {
                seen += 1;
                let page = root.join("docs").join(&c[1]);
                let body = std::fs::read_to_string(&page).unwrap_or_else(|_| {
                    panic!("{}: docs/{} does not exist", entry.path().display(), &c[1])
                });
                if let Some(anchor) = c.get(2) {
                    assert!(
                        anchors(&body).contains(anchor.as_str()),
                        "{}: docs/{}#{} names no heading there",
                        entry.path().display(),
                        &c[1],
                        anchor.as_str()
                    );
                }
            }
        }
    }
    assert!(seen > 0, "no help text names a docs page");
}

/// The rows of the filter table in docs/profiles.md (`## Template filters`):
/// (name, example, what it renders as), `\|` read back as `|`.
fn documented_filters() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(repo().join("docs/profiles.md")).unwrap();
    let start = text
        .find("\n## Template filters\n")
        .expect("docs/profiles.md has no section `## Template filters`");
    let body = &text[start + 1..];
    let body = &body[..body[3..].find("\n## ").map_or(body.len(), |i| i + 3)];
    let code = |cell: &str| cell.trim().trim_matches('`').replace("\\|", "|");
    body.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> = l
                .replace("\\|", "\u{1}")
                .split('|')
                .map(|c| c.replace('\u{1}', "\\|"))
                .collect();
            let name = code(&cells[1]);
            let name = name.split([':', ' ']).next().unwrap().to_string();
            (name, code(&cells[3]), code(&cells[4]))
        })
        .collect()
}

/// The profile reference lists exactly the template filters the code
/// implements, and each example renders as documented.
#[test]
fn template_filter_reference_matches_the_code() {
    let documented = documented_filters();
    let names: BTreeSet<String> = documented.iter().map(|d| d.0.clone()).collect();
    let implemented: BTreeSet<String> = chaosrun::template::FILTERS
        .iter()
        .map(|f| f.to_string())
        .collect();
    assert_eq!(names, implemented, "documented vs implemented filters");
    let vars: chaosrun::template::Vars = [
        ("stale_timeout".to_string(), "2.5".to_string()),
        ("message".to_string(), "say \"hi\"".to_string()),
    ]
    .into();
    for (name, example, want) in documented {
        let got = chaosrun::template::render(&example, &vars)
            .unwrap_or_else(|e| panic!("`{name}`: {example} does not render: {e}"));
        assert_eq!(got, want, "`{name}`: {example}");
    }
}
