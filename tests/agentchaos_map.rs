//! docs/agentchaos.md maps each of AgentChaos's 65 fault configurations
//! (floritange/AgentChaos at 8eb8402, `agentchaos/fault_config.py`) onto a
//! shipped row or one responder rule. These tests hold the page to that:
//! every configuration is there once; every row it names is in
//! scenarios.yaml or value_faults.yaml; every rule parses, passes the
//! reply's own check and loads as a table row; each mapping fires on the
//! calls its AgentChaos strategy names (single, persistent, intermittent,
//! burst, positional) and serves the fault AgentChaos injects; and the
//! `liveness?` column follows the rule the page states.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use chaosrun::provider::rules::{pick, Call, CallMatch, Rule};
use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

/// Every configuration AgentChaos's docs/faults.md lists (its Quick
/// Reference table, in its order).
const AGENTCHAOS: [&str; 65] = [
    "llm_error_single",
    "llm_error_persistent",
    "llm_error_intermittent",
    "llm_error_burst",
    "llm_timeout_single",
    "llm_timeout_persistent",
    "llm_timeout_intermittent",
    "llm_timeout_burst",
    "llm_empty_single",
    "llm_empty_persistent",
    "llm_empty_intermittent",
    "llm_empty_burst",
    "llm_truncate_single",
    "llm_truncate_persistent",
    "llm_truncate_intermittent",
    "llm_truncate_burst",
    "llm_corrupt_single",
    "llm_corrupt_persistent",
    "llm_corrupt_intermittent",
    "llm_corrupt_burst",
    "llm_schema_single",
    "llm_schema_persistent",
    "llm_schema_intermittent",
    "llm_schema_burst",
    "tool_error_single",
    "tool_error_persistent",
    "tool_error_intermittent",
    "tool_error_burst",
    "tool_timeout_single",
    "tool_timeout_persistent",
    "tool_timeout_intermittent",
    "tool_timeout_burst",
    "tool_empty_single",
    "tool_empty_persistent",
    "tool_empty_intermittent",
    "tool_empty_burst",
    "tool_truncate_single",
    "tool_truncate_persistent",
    "tool_truncate_intermittent",
    "tool_truncate_burst",
    "tool_corrupt_single",
    "tool_corrupt_persistent",
    "tool_corrupt_intermittent",
    "tool_corrupt_burst",
    "tool_schema_single",
    "tool_schema_persistent",
    "tool_schema_intermittent",
    "tool_schema_burst",
    "compound_api_degradation",
    "compound_content_filter",
    "compound_max_tokens",
    "compound_proxy_html",
    "compound_stale_cache",
    "compound_stale_data",
    "compound_wrong_entity",
    "compound_slow_response",
    "llm_error_pos_early",
    "llm_error_pos_mid",
    "llm_error_pos_late",
    "llm_timeout_pos_early",
    "llm_timeout_pos_mid",
    "llm_timeout_pos_late",
    "llm_schema_pos_early",
    "llm_schema_pos_mid",
    "llm_schema_pos_late",
];

/// Rows the page must name: the real faults behind AgentChaos's error and
/// timeout texts, and the rows closest to its value faults.
const CITED: [&str; 20] = [
    "provider_500_forever",
    "provider_hang",
    "provider_hang_then_recover",
    "provider_overload_episode_clears",
    "provider_garbage_body_forever",
    "tool_args_truncated_json",
    "tool_args_garbage",
    "value_empty_answer",
    "value_cut_for_length",
    "value_refusal",
    "value_tool_calls_finish_without_calls",
    "value_schema_breaking_arguments",
    "value_empty_or_cut_at_random",
    "value_tool_args_cut_for_length",
    "value_duplicate_tool_call_id",
    "value_tool_args_empty_every_call",
    "value_tool_args_wrong_key_every_call",
    "value_tool_args_garbled_every_call",
    "value_tool_calls_dropped_every_call",
    "tool_loop_hits_turn_budget",
];

/// The seed for `p` draws in these tests.
const SEED: u64 = 1;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn page() -> String {
    std::fs::read_to_string(repo().join("docs/agentchaos.md")).expect("docs/agentchaos.md")
}

/// One data row of the page's table.
#[derive(Debug)]
struct Row {
    line: usize,
    config: String,
    chaosrun: String,
    liveness: String,
}

/// The data rows of the table whose header starts `| config |`.
fn table(page: &str) -> Vec<Row> {
    let lines: Vec<&str> = page.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("| config |"))
        .expect("a table whose header starts `| config |`");
    assert_eq!(
        cells(lines[header]),
        ["config", "what it does", "chaosrun", "liveness?"],
        "the table's columns"
    );
    assert!(
        lines[header + 1].starts_with("|---"),
        "the header's separator"
    );
    let mut rows = Vec::new();
    for (n, l) in lines.iter().enumerate().skip(header + 2) {
        if !l.starts_with('|') {
            break;
        }
        let c = cells(l);
        assert_eq!(c.len(), 4, "line {}: 4 cells, not {}: {l}", n + 1, c.len());
        let config = c[0]
            .strip_prefix('`')
            .and_then(|s| s.strip_suffix('`'))
            .unwrap_or_else(|| panic!("line {}: the config id in backticks: {}", n + 1, c[0]));
        rows.push(Row {
            line: n + 1,
            config: config.to_string(),
            chaosrun: c[2].clone(),
            liveness: c[3].clone(),
        });
    }
    rows
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

/// What a row's `chaosrun` cell names.
#[derive(Debug)]
enum Mapping {
    /// A shipped row, by id.
    Row(String),
    /// One responder rule, as written.
    Rule(String),
}

fn mapping(row: &Row) -> Mapping {
    let cell = row.chaosrun.as_str();
    if let Some(rest) = cell.strip_prefix("row `") {
        let (id, after) = rest.split_once('`').unwrap_or_else(|| {
            panic!("line {}: an unclosed row id: {cell}", row.line);
        });
        assert!(
            after.is_empty() || after == " (every call)",
            "line {}: after the row's id, nothing or ` (every call)`: {cell}",
            row.line
        );
        return Mapping::Row(id.to_string());
    }
    match cell.strip_prefix('`').and_then(|s| s.strip_suffix('`')) {
        Some(rule) if !rule.contains('`') => Mapping::Rule(rule.to_string()),
        _ => panic!(
            "line {}: `{}`'s cell is neither row `ID` nor one rule in backticks: {cell}",
            row.line, row.config
        ),
    }
}

/// The shipped rows by id, from both tables, read as plain YAML.
fn shipped() -> BTreeMap<String, Yaml> {
    let mut out = BTreeMap::new();
    for file in ["scenarios.yaml", "value_faults.yaml"] {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let doc: Yaml = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let rows = doc["scenarios"]
            .as_sequence()
            .unwrap_or_else(|| panic!("{file}: no `scenarios` list"));
        for row in rows {
            let id = row["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{file}: a row without an id"));
            out.insert(id.to_string(), row.clone());
        }
    }
    assert!(
        out.contains_key("provider_hang") && out.contains_key("value_empty_answer"),
        "both tables read: {:?}",
        out.keys().collect::<Vec<_>>()
    );
    out
}

/// A rule as the page writes it, parsed and checked as the loader checks a
/// reply, and loaded as the one rule of a row.
fn rule(yaml: &str) -> Result<Rule, String> {
    let r: Rule = serde_yaml::from_str(yaml).map_err(|e| format!("does not parse: {e}"))?;
    r.reply
        .check()
        .map_err(|e| format!("the reply's check refuses it: {e}"))?;
    load(&[yaml])?;
    Ok(r)
}

/// Load `rules` as the responder of a one-row table.
fn load(rules: &[&str]) -> Result<(), String> {
    let responder: String = rules.iter().map(|r| format!("      - {r}\n")).collect();
    let table = format!(
        "scenarios:\n  - id: agentchaos_map\n    responder:\n{responder}    expect: ended\n"
    );
    chaosrun::scenarios::load::load_str(&table, "agentchaos_map.yaml")
        .map(|_| ())
        .map_err(|e| format!("the table loader refuses it: {e}"))
}

/// A mapping resolved to rules: the rule alone, or the shipped row's
/// responder. `row` tells which (a row's fallback answers are no fault).
struct Resolved {
    rules: Vec<Rule>,
    row: bool,
}

fn resolve(row: &Row, shipped: &BTreeMap<String, Yaml>) -> Result<Resolved, String> {
    match mapping(row) {
        Mapping::Rule(yaml) => Ok(Resolved {
            rules: vec![rule(&yaml)?],
            row: false,
        }),
        Mapping::Row(id) => {
            let r = shipped.get(&id).ok_or_else(|| {
                format!("row `{id}` is in neither scenarios.yaml nor value_faults.yaml")
            })?;
            let rules: Vec<Rule> = serde_yaml::from_value(r["responder"].clone())
                .map_err(|e| format!("row `{id}`'s responder does not parse: {e}"))?;
            Ok(Resolved { rules, row: true })
        }
    }
}

/// What calls 0..n get, in order (None: no rule, the plain `ok`): a call
/// after a reply with tool calls follows a tool result.
fn served(rules: &[Rule], n: u64) -> Vec<Option<(usize, &Rule)>> {
    let mut after_tool = false;
    (0..n)
        .map(|index| {
            let call = Call {
                index,
                after_tool,
                seed: SEED,
                ..Call::default()
            };
            let picked = pick(rules, &call);
            after_tool = picked.is_some_and(|(_, r)| !r.reply.tool_calls().is_empty());
            picked
        })
        .collect()
}

impl Resolved {
    /// The calls among 0..n the fault fires on: a rule of the page's own
    /// fires whenever it matches; a row fires where its reply is a fault.
    fn fired(&self, n: u64) -> Vec<u64> {
        served(&self.rules, n)
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some_and(|(_, r)| !self.row || r.reply.is_fault()))
            .map(|(i, _)| i as u64)
            .collect()
    }

    /// The reply the fault serves: the first call it fires on.
    fn fault(&self) -> Option<&Rule> {
        let first = *self.fired(1000).first()?;
        served(&self.rules, first + 1)[first as usize].map(|(_, r)| r)
    }
}

/// The calls AgentChaos's strategy fires on among the first `window`, and
/// that window for a shipped row (a rule of the page's own is checked over
/// [`WINDOW`] calls; a row up to the call after the last one named, as its
/// later calls follow the row's own story). None: intermittent, or the
/// stale cache, checked apart.
fn strategy(config: &str) -> Option<(Vec<u64>, u64)> {
    if config.ends_with("_intermittent") || config == "compound_stale_cache" {
        return None;
    }
    if config.ends_with("_persistent") {
        return Some(((0..WINDOW).collect(), WINDOW));
    }
    let want = if config.ends_with("_burst") {
        vec![0, 1, 2]
    } else if config.ends_with("_pos_mid") {
        vec![1]
    } else if config.ends_with("_pos_late") {
        vec![2]
    } else {
        // single, pos_early and every other compound: max_count 1.
        vec![0]
    };
    let window = want.last().unwrap() + 2;
    Some((want, window))
}

/// How many calls a rule of the page's own is checked over.
const WINDOW: u64 = 16;

fn json(r: &Rule) -> Json {
    serde_json::to_value(&r.reply).unwrap()
}

fn text_of(reply: &Json) -> Option<&str> {
    (reply["kind"] == "text")
        .then(|| reply["text"].as_str())
        .flatten()
}

fn finish(reply: &Json) -> &str {
    match reply["kind"].as_str() {
        Some("tool_call") => reply["finish_reason"].as_str().unwrap_or("tool_calls"),
        _ => reply["finish_reason"].as_str().unwrap_or(""),
    }
}

/// Each call's arguments as JSON: an object as it is, a verbatim string
/// parsed (Null when it is not JSON).
fn args(reply: &Json) -> Vec<Json> {
    reply["calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| match &c["args"] {
                    Json::String(s) => serde_json::from_str(s).unwrap_or(Json::Null),
                    other => other.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every string inside `v`.
fn strings(v: &Json) -> Vec<&str> {
    match v {
        Json::String(s) => vec![s.as_str()],
        Json::Array(a) => a.iter().flat_map(strings).collect(),
        Json::Object(m) => m.values().flat_map(strings).collect(),
        _ => vec![],
    }
}

/// UTF-8 read as Latin-1: every char is one byte, and those bytes are UTF-8
/// for another, non-ASCII text.
fn is_mojibake(s: &str) -> bool {
    let bytes: Option<Vec<u8>> = s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect();
    bytes
        .and_then(|b| String::from_utf8(b).ok())
        .is_some_and(|orig| orig != s && !orig.is_ascii())
}

/// What is wrong with `reply` as the fault AgentChaos's `config` injects
/// (`fault_config.py`), if anything.
fn family_mismatch(config: &str, reply: &Json) -> Option<String> {
    let text = text_of(reply);
    let kind = reply["kind"].as_str().unwrap_or("");
    let starts = |p: &str| text.is_some_and(|t| t.starts_with(p));
    let ok = if config.starts_with("llm_error") {
        starts("[API ERROR] HTTP 500") && finish(reply) == "stop"
    } else if config.starts_with("llm_timeout") {
        starts("[TIMEOUT] The request timed out") && finish(reply) == "stop"
    } else if config.starts_with("llm_empty") {
        text == Some("") && finish(reply) == "stop"
    } else if config.starts_with("llm_truncate") || config == "compound_max_tokens" {
        text.is_some_and(|t| !t.is_empty()) && finish(reply) == "length"
    } else if config.starts_with("llm_corrupt") {
        text.is_some_and(is_mojibake) && finish(reply) == "stop"
    } else if config.starts_with("llm_schema") {
        text.and_then(|t| serde_json::from_str::<Json>(t).ok())
            .is_some_and(|v| v["error"].is_string())
            && finish(reply) == "stop"
    } else if config.starts_with("tool_error") {
        kind == "tool_call" && reply["calls"][0]["args"] == Json::String("{}".into())
    } else if config.starts_with("tool_timeout") {
        starts("[TIMEOUT] Connection dropped") && finish(reply) == "tool_calls"
    } else if config.starts_with("tool_empty") {
        text == Some("") && finish(reply) == "tool_calls"
    } else if config.starts_with("tool_truncate") {
        // Values cut, JSON kept valid, the finish left alone.
        kind == "tool_call"
            && finish(reply) == "tool_calls"
            && args(reply).iter().all(|a| a.is_object())
    } else if config.starts_with("tool_corrupt") {
        kind == "tool_call"
            && finish(reply) == "tool_calls"
            && args(reply).iter().any(|a| {
                a.is_object()
                    && strings(a)
                        .iter()
                        .any(|s| s.chars().any(|c| ('\u{2600}'..='\u{26ff}').contains(&c)))
            })
    } else if config.starts_with("tool_schema") {
        // Valid JSON without the shell tool's command string.
        kind == "tool_call"
            && args(reply)
                .iter()
                .any(|a| a.is_object() && !a["command"].is_string())
    } else {
        match config {
            "compound_api_degradation" => {
                let chars = text.map_or(0, |t| t.chars().count()) as f64;
                let chunk = reply["chunk_chars"].as_f64().unwrap_or(1.0);
                let pause = reply["delay_per_chunk"].as_f64().unwrap_or(0.0)
                    * ((chars / chunk).ceil() - 1.0);
                starts("[SERVICE UNAVAILABLE] HTTP 503") && (pause - 3.0).abs() < 1e-9
            }
            "compound_content_filter" => {
                starts("[CONTENT FILTERED]") && finish(reply) == "content_filter"
            }
            "compound_proxy_html" => {
                starts("<!DOCTYPE html>") && text.is_some_and(|t| t.contains("502 Bad Gateway"))
            }
            "compound_stale_data" | "compound_wrong_entity" => {
                let value = if config == "compound_stale_data" {
                    "Pyongyang"
                } else {
                    "Springfield"
                };
                kind == "tool_call"
                    && args(reply)
                        .iter()
                        .any(|a| a["command"].as_str().is_some_and(|c| c.contains(value)))
            }
            "compound_slow_response" => {
                kind == "relay"
                    && reply["fault"]["kind"] == "delay_first_byte"
                    && reply["fault"]["seconds"].as_f64() == Some(5.0)
            }
            "compound_stale_cache" => {
                kind == "tool_call"
                    && reply["calls"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|c| c["id"].is_string()))
            }
            other => return Some(format!("no AgentChaos fault is known as `{other}`")),
        }
    };
    (!ok).then(|| format!("serves {reply}"))
}

#[test]
fn the_table_lists_every_agentchaos_config_once() {
    let rows = table(&page());
    assert_eq!(rows.len(), 65, "65 data rows");
    let ids: BTreeSet<&str> = rows.iter().map(|r| r.config.as_str()).collect();
    assert_eq!(ids.len(), 65, "65 distinct config ids");
    let expected: BTreeSet<&str> = AGENTCHAOS.into_iter().collect();
    assert_eq!(expected.len(), 65);
    let missing: Vec<_> = expected.difference(&ids).collect();
    let unknown: Vec<_> = ids.difference(&expected).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "missing from the page: {missing:?}; not AgentChaos's: {unknown:?}"
    );
    for r in &rows {
        assert!(
            r.liveness == "yes" || r.liveness == "no",
            "line {}: `liveness?` is yes or no, not {:?}",
            r.line,
            r.liveness
        );
    }
}

#[test]
fn every_mapping_is_a_shipped_row_or_a_rule_the_loader_accepts() {
    let shipped = shipped();
    let rows = table(&page());
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            resolve(r, &shipped)
                .err()
                .map(|e| format!("line {} `{}`: {e}", r.line, r.config))
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn each_mapping_fires_on_the_calls_its_strategy_names() {
    let shipped = shipped();
    let mut failed = Vec::new();
    for r in table(&page()) {
        let Ok(m) = resolve(&r, &shipped) else {
            failed.push(format!("`{}`: does not resolve", r.config));
            continue;
        };
        let mut fail = |why: String| failed.push(format!("line {} `{}`: {why}", r.line, r.config));
        if r.config == "compound_stale_cache" {
            // The second call replays the first call's tool call, id and all.
            let s = served(&m.rules, 2);
            let ids = |i: usize| -> Vec<(String, String)> {
                s[i].map_or(vec![], |(_, rule)| {
                    rule.reply
                        .tool_calls()
                        .iter()
                        .filter_map(|c| Some((c.tool.clone(), c.id.clone()?)))
                        .collect()
                })
            };
            let (first, second) = (ids(0), ids(1));
            if second.is_empty() || !second.iter().all(|c| first.contains(c)) {
                fail(format!(
                    "call 1 does not replay call 0's tool call ids: {first:?} then {second:?}"
                ));
            }
            continue;
        }
        match strategy(&r.config) {
            Some((want, row_window)) => {
                let window = if m.row { row_window } else { WINDOW };
                let got = m.fired(window);
                if got != want {
                    fail(format!(
                        "fires on calls {got:?} of 0..{window}, not {want:?}"
                    ));
                }
            }
            None => {
                let n = m.fired(1000).len();
                if !(240..=360).contains(&n) {
                    fail(format!("fires on {n} of 1000 calls, not about 300 (p 0.3)"));
                }
                if !m.row && m.rules[0].when.p != Some(0.3) {
                    fail(format!("`when.p` is {:?}, not 0.3", m.rules[0].when.p));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn each_mapping_serves_the_fault_agentchaos_injects() {
    let shipped = shipped();
    let mut failed = Vec::new();
    for r in table(&page()) {
        let Ok(m) = resolve(&r, &shipped) else {
            failed.push(format!("`{}`: does not resolve", r.config));
            continue;
        };
        let why = match m.fault() {
            None => Some("never fires".to_string()),
            Some(rule) => family_mismatch(&r.config, &json(rule)),
        };
        if let Some(why) = why {
            failed.push(format!("line {} `{}`: {why}", r.line, r.config));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The page's rule: yes for a replay, or for a fault that fires on every
/// call (persistent) with a reply an agent may answer with another call; no
/// otherwise. Each yes is a shipped row.
#[test]
fn the_liveness_column_follows_the_pages_rule() {
    let shipped = shipped();
    let mut failed = Vec::new();
    let mut yes = 0;
    for r in table(&page()) {
        let Ok(m) = resolve(&r, &shipped) else {
            failed.push(format!("`{}`: does not resolve", r.config));
            continue;
        };
        let Some(fault) = m.fault() else {
            failed.push(format!("`{}`: never fires", r.config));
            continue;
        };
        let reply = json(fault);
        let text = text_of(&reply);
        let replays = r.config == "compound_stale_cache";
        let unbounded = r.config.ends_with("_persistent");
        let invites = reply["kind"] == "tool_call"
            || text == Some("")
            || matches!(finish(&reply), "length" | "tool_calls");
        let want = if replays || (unbounded && invites) {
            "yes"
        } else {
            "no"
        };
        yes += usize::from(want == "yes");
        if r.liveness != want {
            failed.push(format!(
                "line {} `{}`: liveness? says {}, the rule says {want}",
                r.line, r.config, r.liveness
            ));
        }
        // The liveness ones are rows, not only rules.
        if want == "yes" && !m.row {
            failed.push(format!(
                "line {} `{}`: a liveness fault mapped to a rule, not a shipped row",
                r.line, r.config
            ));
        }
    }
    assert!(yes > 0, "no liveness configuration at all");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn rows_named_anywhere_on_the_page_are_shipped() {
    let shipped = shipped();
    // Whitespace as one space (a name may wrap after "row"), and lower
    // case ("Row `ID`" at a sentence's start).
    let page = page()
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let named: BTreeSet<&str> = page
        .split("row `")
        .skip(1)
        .filter_map(|s| s.split('`').next())
        .collect();
    let unknown: Vec<_> = named
        .iter()
        .filter(|id| !shipped.contains_key(**id))
        .collect();
    let uncited: Vec<_> = CITED.iter().filter(|id| !named.contains(**id)).collect();
    assert!(
        unknown.is_empty() && uncited.is_empty(),
        "named but not shipped: {unknown:?}; not named on the page: {uncited:?}"
    );
}

#[test]
fn the_pages_yaml_examples_load_and_reach_their_call() {
    let page = page();
    let blocks: Vec<&str> = page
        .split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(!blocks.is_empty(), "no yaml example on the page");
    for block in blocks {
        let rules: Vec<Rule> =
            serde_yaml::from_str(block).unwrap_or_else(|e| panic!("{e}:\n{block}"));
        for r in &rules {
            r.reply.check().unwrap_or_else(|e| panic!("{e}:\n{block}"));
        }
        let lines: Vec<&str> = block.lines().filter(|l| l.starts_with("- ")).collect();
        let lines: Vec<&str> = lines.iter().map(|l| &l[2..]).collect();
        load(&lines).unwrap_or_else(|e| panic!("{e}:\n{block}"));
        // A rule on call k > 0 is reached: every call before it is answered
        // with tool calls, so the agent calls again.
        for (i, r) in rules.iter().enumerate() {
            if let Some(CallMatch::Index(k)) = r.when.call {
                let s = served(&rules, k + 1);
                assert!(
                    s[..k as usize]
                        .iter()
                        .all(|p| p.is_some_and(|(_, r)| !r.reply.tool_calls().is_empty())),
                    "calls before {k} are not all tool calls:\n{block}"
                );
                assert_eq!(s[k as usize].map(|(n, _)| n), Some(i), "{block}");
            }
        }
    }
}
