//! The diagnoses in `examples/<agent>/README.md` quote the committed
//! reports, not hand-written figures (issue 36.6): in a diagnosis bullet that
//! names its rows in bold and opens with a parenthetical,
//! `* **row[, row…]** (… N calls …)`, every figure of the form "N calls" or
//! "N main calls" (a list "24 and 29 calls" pairs with the rows in order)
//! must equal `calls.main` of that row in one of the `--json` reports
//! committed beside the README (`examples/<agent>/*.json`). A row quoted
//! with a figure but found in none of them fails too: its figure cannot be
//! checked. Tables and the rest of the prose are not read.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Row id -> (report file, main calls) for every report beside a README.
type Reports = BTreeMap<String, Vec<(String, u64)>>;

fn reports(dir: &Path) -> Reports {
    let mut out = Reports::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for f in files {
        let Ok(v) =
            serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&f).unwrap())
        else {
            continue;
        };
        let Some(rows) = v.get("scenarios").and_then(|s| s.as_array()) else {
            continue;
        };
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        for r in rows {
            let (Some(id), Some(main)) = (
                r.get("id").and_then(|x| x.as_str()),
                r.pointer("/calls/main").and_then(|x| x.as_u64()),
            ) else {
                continue;
            };
            out.entry(id.to_string())
                .or_default()
                .push((name.clone(), main));
        }
    }
    out
}

/// The text with fenced code blocks blanked (line numbers kept).
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The parenthetical opening at byte `open` (a `(`), nested ones included.
fn parenthetical(text: &str, open: usize) -> &str {
    let mut depth = 0;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    &text[open + 1..]
}

fn number(s: &str) -> u64 {
    s.replace(',', "").parse().unwrap()
}

/// Every (line, row, quoted main calls) of a README's diagnosis bullets, or
/// a complaint when the figures cannot be paired with the rows.
fn figures(text: &str) -> Vec<Result<(usize, String, u64), String>> {
    let text = prose(text);
    let bullet = Regex::new(r"(?m)^\* \*\*([a-z0-9_]+(?:, [a-z0-9_]+)*)\*\*\s*\(").unwrap();
    let n = r"(?:\d{1,3}(?:,\d{3})+|\d+)";
    let calls = Regex::new(&format!(r"({n}(?:(?:, |,? and ){n})*) (?:main )?calls?\b")).unwrap();
    let sep = Regex::new(r",? and |, ").unwrap();
    let mut out = Vec::new();
    for m in bullet.captures_iter(&text) {
        let whole = m.get(0).unwrap();
        let line = text[..whole.start()].lines().count() + 1;
        let rows: Vec<&str> = m[1].split(", ").collect();
        let inside = parenthetical(&text, whole.end() - 1).replace('\n', " ");
        for c in calls.captures_iter(&inside) {
            let nums: Vec<u64> = sep.split(&c[1]).map(number).collect();
            if nums.len() == 1 {
                rows.iter()
                    .for_each(|r| out.push(Ok((line, r.to_string(), nums[0]))));
            } else if nums.len() == rows.len() {
                rows.iter()
                    .zip(&nums)
                    .for_each(|(r, k)| out.push(Ok((line, r.to_string(), *k))));
            } else {
                out.push(Err(format!(
                    "line {line}: \"{}\" has {} figures for {} rows",
                    &c[0],
                    nums.len(),
                    rows.len()
                )));
            }
        }
    }
    out
}

/// The violations of one README against the reports beside it.
fn check(readme: &str, text: &str, reports: &Reports) -> Vec<String> {
    let mut bad = Vec::new();
    for f in figures(text) {
        match f {
            Err(e) => bad.push(format!("{readme}:{e}")),
            Ok((line, row, n)) => match reports.get(&row) {
                None => bad.push(format!(
                    "{readme}:{line}: {row} is quoted with {n} calls but no committed report beside it has the row"
                )),
                Some(seen) if !seen.iter().any(|(_, m)| *m == n) => bad.push(format!(
                    "{readme}:{line}: {row} is quoted with {n} calls; the committed reports say {}",
                    seen.iter()
                        .map(|(f, m)| format!("{f}: calls.main {m}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Some(_) => {}
            },
        }
    }
    bad
}

#[test]
fn diagnosis_call_counts_match_the_committed_reports() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("README.md").is_file())
        .collect();
    dirs.sort();
    let (mut bad, mut checked) = (Vec::new(), 0);
    for d in dirs {
        let readme = d.join("README.md");
        let name = readme.strip_prefix(repo()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&readme).unwrap();
        checked += figures(&text).len();
        bad.extend(check(&name, &text, &reports(&d)));
    }
    assert!(
        checked > 10,
        "only {checked} figures found: the parser lost the bullets"
    );
    assert!(
        bad.is_empty(),
        "hand-written call counts:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_catches_a_hand_written_figure() {
    let reports: Reports = [
        (
            "tool_loop".to_string(),
            vec![("report.json".to_string(), 380)],
        ),
        ("a_500".to_string(), vec![("report.json".to_string(), 24)]),
        ("a_429".to_string(), vec![("report.json".to_string(), 31)]),
    ]
    .into_iter()
    .collect();
    let good = "* **tool_loop** (380 calls, bound 6): x\n* **a_500, a_429** (24 and 31 calls): y\n";
    assert_eq!(check("R", good, &reports), Vec::<String>::new());
    let text = "intro\n```\n* **tool_loop** (1 call)\n```\n* **tool_loop** (6 calls in the\n  120 s (after it)): x\n\
                * **a_500, a_429**\n  (24 and 29 calls, bound 16): y\n* **gone_row** (1,258 calls): z\n";
    let bad: BTreeSet<String> = check("R", text, &reports).into_iter().collect();
    let want: BTreeSet<String> = [
        "R:5: tool_loop is quoted with 6 calls; the committed reports say report.json: calls.main 380",
        "R:7: a_429 is quoted with 29 calls; the committed reports say report.json: calls.main 31",
        "R:9: gone_row is quoted with 1258 calls but no committed report beside it has the row",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(bad, want);
}
