//! `chaosrun matrix`: the agent × scenario results table from JSON reports,
//! as markdown (the real-agent tables in the docs are its output) or HTML.
//! Each agent's reports (its table and its process-fault table, or shards)
//! go through [`super::merge::merge`] first, so every cell comes from the
//! same typed verdict rule as `merge`; a report `merge` refuses, the
//! matrix refuses too. The agent is named by its profile's folder
//! (`examples/claude-code/claude-code.yaml` → `claude-code`; the bundled
//! agent → `reference`) and linked to the `README.md` beside its profile.
//! Every name a report gives is escaped for the table ([`gfm`]); the table
//! is laid out in time linear in its rows and cells (ids are looked up in
//! maps, never searched for).

mod gfm;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::document::{Agents, Report};
use crate::runner::Verdict;

/// One cell: what the agent's runs of one scenario came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Pass,
    Fail,
    Error,
    NotApplicable,
    /// Repeated runs that did not all agree: (passed, runs).
    Mixed(usize, usize),
    /// The agent's reports hold no run of it.
    NotRun,
}

impl Cell {
    fn markdown(&self) -> String {
        match self {
            Cell::Pass => "✓".into(),
            Cell::Fail => "**✗**".into(),
            Cell::Error => "ERROR".into(),
            Cell::NotApplicable => "N/A".into(),
            Cell::Mixed(p, n) => format!("{p}/{n}"),
            Cell::NotRun => "–".into(),
        }
    }

    /// The HTML cell's class and text.
    fn html(&self) -> (&'static str, String) {
        match self {
            Cell::Pass => ("pass", "✓".into()),
            Cell::Fail => ("fail", "✗".into()),
            Cell::Error => ("error", "ERROR".into()),
            Cell::NotApplicable => ("na", "N/A".into()),
            Cell::Mixed(p, n) => ("mixed", format!("{p}/{n}")),
            Cell::NotRun => ("none", "–".into()),
        }
    }
}

/// One agent's column.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub name: String,
    /// Its README, as the link to print (None: no README beside the profile).
    pub readme: Option<String>,
    /// (scenario id, cell) in its tables' order.
    pub cells: Vec<(String, Cell)>,
}

impl Agent {
    /// Its cells by scenario id.
    fn lookup(&self) -> HashMap<&str, &Cell> {
        self.cells.iter().map(|(i, c)| (i.as_str(), c)).collect()
    }

    /// `passed/applicable` over the scenarios it ran.
    fn tally(&self) -> String {
        let applicable = self
            .cells
            .iter()
            .filter(|(_, c)| !matches!(c, Cell::NotApplicable | Cell::NotRun))
            .count();
        let passed = self.cells.iter().filter(|(_, c)| *c == Cell::Pass).count();
        format!("{passed}/{applicable}")
    }
}

/// The whole table: the scenarios (rows, in the tables' order: a row only a
/// later agent ran stands after the row it follows in that agent's order)
/// and the agents.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    pub scenarios: Vec<String>,
    pub agents: Vec<Agent>,
}

/// The agent a report names: its profile's folder name and the README
/// beside the profile (for `NAME@VERSION`, the shipped agent's), the link
/// prefixed with `link_prefix`.
fn agent_of(agent: &str, link_prefix: &str) -> (String, Option<String>) {
    if agent == "bundled" {
        return ("reference".into(), None);
    }
    let path = Path::new(agent);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let name = dir
        .and_then(|d| d.file_name())
        .or_else(|| path.file_stem())
        .map_or_else(|| agent.to_string(), |n| n.to_string_lossy().into_owned());
    // An ACP profile (`NAME-acp.yaml`, `agent-acp.yaml`) is a column of
    // its own beside the agent's other drive: `gemini-cli (acp)`.
    let acp = path
        .file_stem()
        .is_some_and(|s| s.to_string_lossy().ends_with("-acp"));
    let readme_dir = name.clone();
    let name = match acp {
        true => format!("{name} (acp)"),
        false => name,
    };
    // A catalog agent run by name runs from the cache (`.../agents/NAME/`,
    // another version `.../agents/NAME@VERSION/`): its README is the
    // shipped one, `examples/NAME/README.md`, when that is here.
    let base = readme_dir
        .split_once('@')
        .map_or(readme_dir.as_str(), |(b, _)| b);
    let in_cache = dir.and_then(Path::parent).and_then(Path::file_name) == Some("agents".as_ref());
    let readme = match readme_dir.contains('@') || in_cache {
        true => Some(Path::new("examples").join(base).join("README.md")),
        false => dir.map(|d| d.join("README.md")),
    };
    let readme = readme
        .filter(|r| r.is_file())
        .map(|r| format!("{link_prefix}{}", r.display()));
    (name, readme)
}

/// A catalog agent run by name (its profile in the cache,
/// `.../agents/NAME/FILE`) is the shipped profile `examples/NAME/FILE`
/// (the cache holds a copy of it): one column with the reports run from
/// `examples/NAME/`. Any other agent is itself.
fn shipped_path(agent: &str) -> String {
    let path = Path::new(agent);
    let dir = path.parent();
    let in_cache = dir.and_then(Path::parent).and_then(Path::file_name) == Some("agents".as_ref());
    match (in_cache, dir.and_then(Path::file_name), path.file_name()) {
        (true, Some(name), Some(file)) if !name.to_string_lossy().contains('@') => {
            format!(
                "examples/{}/{}",
                name.to_string_lossy(),
                file.to_string_lossy()
            )
        }
        _ => agent.to_string(),
    }
}

/// Row `id`'s cell in an agent's [`Agent::lookup`].
fn cell_in(cells: &HashMap<&str, &Cell>, id: &str) -> Cell {
    cells.get(id).map_or(Cell::NotRun, |c| (*c).clone())
}

/// One agent's cells from its merged report, in the order of its tables
/// (`selected`: the order the rows stand in the tables, not the order they
/// finished in); a scenario `selected` does not name goes last.
fn cells(doc: &Report) -> Vec<(String, Cell)> {
    let mut runs: Vec<(String, Vec<&Verdict>)> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for s in &doc.scenarios {
        match at.get(s.id.as_str()) {
            Some(&i) => runs[i].1.push(&s.verdict),
            None => {
                at.insert(&s.id, runs.len());
                runs.push((s.id.clone(), vec![&s.verdict]));
            }
        }
    }
    let mut position: HashMap<&str, usize> = HashMap::new();
    for (i, id) in doc.selected.iter().enumerate() {
        position.entry(id).or_insert(i);
    }
    let last = doc.selected.len();
    runs.sort_by_key(|(id, _)| position.get(id.as_str()).copied().unwrap_or(last));
    runs.into_iter()
        .map(|(id, v)| {
            let cell = match v.as_slice() {
                all if all.iter().all(|x| x.name() == all[0].name()) => cell_of(all[0]),
                all => Cell::Mixed(all.iter().filter(|x| x.passed()).count(), all.len()),
            };
            (id, cell)
        })
        .collect()
}

/// The cell of runs that all had `verdict`.
fn cell_of(verdict: &Verdict) -> Cell {
    match verdict {
        Verdict::Pass => Cell::Pass,
        Verdict::Fail => Cell::Fail,
        Verdict::NotApplicable { .. } => Cell::NotApplicable,
        Verdict::Error { .. } => Cell::Error,
    }
}

/// Read the reports, group them by agent (in first-seen order), merge each
/// agent's with `merge`'s rules, and lay out the table.
pub fn build(reports: &[PathBuf], link_prefix: &str) -> Result<Matrix, String> {
    let mut groups: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for p in reports {
        let doc = super::document::read(p)?;
        let Agents::One(agent) = doc.agent else {
            return Err(format!(
                "{}: the report names no single agent (`agent` is {}); give each agent's own reports",
                p.display(),
                doc.agent
            ));
        };
        let agent = shipped_path(&agent);
        match groups.iter_mut().find(|(a, _)| *a == agent) {
            Some((_, ps)) => ps.push(p.clone()),
            None => groups.push((agent, vec![p.clone()])),
        }
    }
    let mut m = Matrix {
        scenarios: Vec::new(),
        agents: Vec::new(),
    };
    for (agent, paths) in groups {
        let doc = super::merge::merge(&paths)?;
        if doc.agent_version.is_none() && paths.len() > 1 {
            let named = paths
                .iter()
                .filter_map(|p| super::document::read(p).ok()?.agent_version)
                .count();
            if named > 0 {
                return Err(format!(
                    "the reports of `{agent}` name different agent versions: give each version's reports a profile of its own (NAME@VERSION)"
                ));
            }
        }
        let (name, readme) = agent_of(&agent, link_prefix);
        if m.agents.iter().any(|a| a.name == name) {
            return Err(format!(
                "two reports' agents are both named `{name}` ({agent} and another profile in a folder of that name)"
            ));
        }
        let cells = cells(&doc);
        add_rows(&mut m.scenarios, &cells);
        m.agents.push(Agent {
            name,
            readme,
            cells,
        });
    }
    Ok(m)
}

/// Add an agent's rows to `rows`: one it adds goes right after the row
/// before it in the agent's own order, so rows keep their tables' order
/// across agents that ran different subsets.
///
/// The new rows go in one pass: each after the last known row before it
/// (`after[i + 1]`: after row `i`; `after[0]`: first).
fn add_rows(rows: &mut Vec<String>, cells: &[(String, Cell)]) {
    let index: HashMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.as_str(), i))
        .collect();
    let mut after: Vec<Vec<&String>> = vec![Vec::new(); rows.len() + 1];
    let mut anchor = 0;
    for (id, _) in cells {
        match index.get(id.as_str()) {
            Some(&i) => anchor = i + 1,
            None => after[anchor].push(id),
        }
    }
    if after.iter().all(Vec::is_empty) {
        return;
    }
    let mut laid = Vec::with_capacity(rows.len() + cells.len());
    laid.extend(after[0].iter().map(|id| (*id).clone()));
    for (row, next) in rows.iter().zip(&after[1..]) {
        laid.push(row.clone());
        laid.extend(next.iter().map(|id| (*id).clone()));
    }
    *rows = laid;
}

/// The markdown table, with its legend line.
pub fn markdown(m: &Matrix) -> String {
    let mut out = String::from(
        "✓ pass · **✗** fail · ERROR chaosrun could not run it · N/A not applicable to the agent's profile · k/n passes of repeated runs · – not run\n\n| scenario |",
    );
    for a in &m.agents {
        match &a.readme {
            Some(r) => {
                let _ = write!(out, " [{}]({}) |", gfm::text(&a.name), gfm::link(r));
            }
            None => {
                let _ = write!(out, " {} |", gfm::text(&a.name));
            }
        }
    }
    out.push_str("\n|---|");
    out.push_str(&":-:|".repeat(m.agents.len()));
    out.push('\n');
    let lookups: Vec<_> = m.agents.iter().map(Agent::lookup).collect();
    for id in &m.scenarios {
        let _ = write!(out, "| {} |", gfm::code(id));
        for cells in &lookups {
            let cell = cell_in(cells, id);
            let _ = write!(out, " {} |", cell.markdown());
        }
        out.push('\n');
    }
    out.push_str("| **passed** |");
    for a in &m.agents {
        let _ = write!(out, " **{}** |", a.tally());
    }
    out.push('\n');
    out
}

/// A self-contained HTML page holding the table.
pub fn html(m: &Matrix) -> String {
    use super::html::esc;
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>chaosrun results</title>\n<style>body{font-family:system-ui,\"DejaVu Sans\",Arial,sans-serif;margin:24px}table{border-collapse:collapse}th,td{border:1px solid #ddd;padding:3px 8px}td{text-align:center}td.id{text-align:left}.pass{color:#2e7d32}.fail{color:#c62828;font-weight:700}.error{color:#6a1b9a}.na,.none{color:#757575}.mixed{color:#ef6c00}</style>\n</head>\n<body>\n<table class=\"matrix\">\n<thead><tr><th>scenario</th>",
    );
    for a in &m.agents {
        match &a.readme {
            Some(r) => {
                let _ = write!(out, "<th><a href=\"{}\">{}</a></th>", esc(r), esc(&a.name));
            }
            None => {
                let _ = write!(out, "<th>{}</th>", esc(&a.name));
            }
        }
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    let lookups: Vec<_> = m.agents.iter().map(Agent::lookup).collect();
    for id in &m.scenarios {
        let _ = write!(out, "<tr><td class=\"id\"><code>{}</code></td>", esc(id));
        for cells in &lookups {
            let cell = cell_in(cells, id);
            let (class, text) = cell.html();
            let _ = write!(out, "<td class=\"{class}\">{}</td>", esc(&text));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("<tr><td class=\"id\"><b>passed</b></td>");
    for a in &m.agents {
        let _ = write!(out, "<td><b>{}</b></td>", esc(&a.tally()));
    }
    out.push_str("</tr>\n</tbody>\n</table>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// The cells of a report given as JSON with only what the matrix reads
    /// (each scenario's id and verdict, the `selected` order).
    fn cells(doc: &Value) -> Vec<(String, Cell)> {
        let scenarios = doc["scenarios"].as_array().unwrap().iter().map(|s| {
            serde_json::from_value(serde_json::json!({"id": s["id"], "verdict": s["verdict"],
                "cause": "", "reason": "", "checks": []}))
            .unwrap()
        });
        let report = Report {
            schema: super::super::document::SCHEMA.into(),
            complete: true,
            seed: None,
            agent: Agents::One(doc["agent"].as_str().unwrap().into()),
            agent_version: None,
            seeds: None,
            selected: serde_json::from_value(doc["selected"].clone()).unwrap_or_default(),
            shard: None,
            repeat: 1,
            passed: 0,
            failed: 0,
            errors: 0,
            not_applicable: 0,
            wall_seconds: None,
            warnings: Vec::new(),
            scenarios: scenarios.collect(),
        };
        super::cells(&report)
    }

    fn doc(agent: &str, runs: &[(&str, &str)]) -> Value {
        serde_json::json!({
            "agent": agent,
            "scenarios": runs.iter().map(|(id, v)| serde_json::json!({"id": id, "verdict": v})).collect::<Vec<_>>(),
        })
    }

    /// Cells follow the tables' order (`selected`), not the order the runs
    /// finished in; rows only a later agent ran stand where its order puts
    /// them.
    #[test]
    fn rows_keep_the_tables_order_across_agents() {
        let mut d = doc("a", &[("c", "pass"), ("a", "fail"), ("z", "pass")]);
        d["selected"] = serde_json::json!(["a", "c"]);
        let ids: Vec<String> = cells(&d).into_iter().map(|(i, _)| i).collect();
        assert_eq!(ids, ["a", "c", "z"]);
        let mut rows = vec!["a".to_string(), "c".to_string()];
        let later = [
            ("a", Cell::Pass),
            ("b", Cell::Pass),
            ("c", Cell::Pass),
            ("d", Cell::Fail),
        ];
        let later: Vec<(String, Cell)> = later.into_iter().map(|(i, c)| (i.into(), c)).collect();
        add_rows(&mut rows, &later);
        assert_eq!(rows, ["a", "b", "c", "d"]);
    }

    /// The one-pass `add_rows` places rows as inserting each new row after
    /// the last known one before it (the old quadratic rule) did.
    #[test]
    fn rows_are_placed_as_one_by_one_insertion_placed_them() {
        fn one_by_one(rows: &mut Vec<String>, ids: &[&str]) {
            let mut at = 0;
            for id in ids {
                match rows.iter().position(|s| s == id) {
                    Some(i) => at = i + 1,
                    None => {
                        rows.insert(at, id.to_string());
                        at += 1;
                    }
                }
            }
        }
        let cases: [(&[&str], &[&str]); 5] = [
            (&["a", "b"], &["b", "x", "a", "y"]),
            (&["a", "b", "c"], &["p", "q", "c", "r", "a", "s"]),
            (&[], &["a", "b"]),
            (&["a"], &[]),
            (&["a", "b", "c"], &["c", "b", "a", "z"]),
        ];
        for (rows, ids) in cases {
            let mut want: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
            let mut got = want.clone();
            one_by_one(&mut want, ids);
            let cells: Vec<(String, Cell)> =
                ids.iter().map(|i| (i.to_string(), Cell::Pass)).collect();
            add_rows(&mut got, &cells);
            assert_eq!(got, want, "{rows:?} + {ids:?}");
        }
    }

    #[test]
    fn cells_count_repeats_and_keep_verdicts_apart() {
        let d = doc(
            "a",
            &[
                ("x", "pass"),
                ("y", "fail"),
                ("z", "not_applicable"),
                ("w", "error"),
                ("r", "pass"),
                ("r", "fail"),
                ("r", "pass"),
                ("s", "fail"),
                ("s", "fail"),
            ],
        );
        let c = cells(&d);
        assert_eq!(
            c,
            vec![
                ("x".into(), Cell::Pass),
                ("y".into(), Cell::Fail),
                ("z".into(), Cell::NotApplicable),
                ("w".into(), Cell::Error),
                ("r".into(), Cell::Mixed(2, 3)),
                ("s".into(), Cell::Fail),
            ]
        );
        let a = Agent {
            name: "a".into(),
            readme: None,
            cells: c,
        };
        // N/A and not-run rows are not counted; a mixed row is not a pass.
        assert_eq!(a.tally(), "1/5");
        assert_eq!(cell_in(&a.lookup(), "missing"), Cell::NotRun);
    }

    #[test]
    fn hostile_agent_names_cannot_break_the_table_or_the_page() {
        let m = Matrix {
            scenarios: vec!["x".into()],
            agents: vec![Agent {
                name: "a|b](<script>)".into(),
                readme: Some("dir (1)/README.md\"><script>".into()),
                cells: vec![("x".into(), Cell::Pass)],
            }],
        };
        let md = markdown(&m);
        let header = md.lines().nth(2).unwrap();
        assert_eq!(header.matches(" |").count(), 2, "{header}");
        assert!(header.contains("a\\|b\\]"), "{header}");
        assert!(!header.contains("(1)"), "{header}");
        let page = html(&m);
        assert!(!page.contains("<script>"), "{page}");
    }

    #[test]
    fn an_acp_profile_is_a_column_of_its_own() {
        let root = env!("CARGO_MANIFEST_DIR");
        let (name, readme) = agent_of(&format!("{root}/examples/codex/codex-acp.yaml"), "");
        assert_eq!(name, "codex (acp)");
        assert_eq!(readme, Some(format!("{root}/examples/codex/README.md")));
        let cached = "/c/agents/gemini-cli@0.60.1/gemini-cli-acp.yaml";
        assert_eq!(agent_of(cached, "").0, "gemini-cli@0.60.1 (acp)");
        assert_eq!(agent_of("/tmp/x/agent-acp.yaml", "").0, "x (acp)");
        // Run by name (`--agent copilot-acp`), from the cache: the shipped README.
        let by_name = agent_of(
            "/root/.cache/chaosrun/agents/copilot/copilot-acp.yaml",
            "../",
        );
        assert_eq!(by_name.0, "copilot (acp)");
        assert_eq!(by_name.1.as_deref(), Some("../examples/copilot/README.md"));
    }

    #[test]
    fn the_agent_is_named_by_its_profiles_folder() {
        assert_eq!(agent_of("bundled", ""), ("reference".into(), None));
        let root = env!("CARGO_MANIFEST_DIR");
        let (name, readme) = agent_of(&format!("{root}/examples/codex/codex.yaml"), "");
        assert_eq!(name, "codex");
        assert_eq!(readme, Some(format!("{root}/examples/codex/README.md")));
        assert_eq!(agent_of("agent.yaml", "").0, "agent");
        assert_eq!(agent_of("/nonexistent/x/p.yaml", "../").1, None);
    }

    #[test]
    fn a_catalog_agent_run_by_name_is_its_shipped_profile() {
        let cache = "/root/.cache/chaosrun/agents/codex/codex.yaml";
        assert_eq!(shipped_path(cache), "examples/codex/codex.yaml");
        let acp = "/home/u/.cache/chaosrun/agents/codex/codex-acp.yaml";
        assert_eq!(shipped_path(acp), "examples/codex/codex-acp.yaml");
        // Another version stays its own column; any other path is itself.
        let other = "/root/.cache/chaosrun/agents/codex@0.171.0/codex.yaml";
        assert_eq!(shipped_path(other), other);
        assert_eq!(shipped_path("my/agents/codex.yaml"), "my/agents/codex.yaml");
        assert_eq!(shipped_path("bundled"), "bundled");
    }
}
