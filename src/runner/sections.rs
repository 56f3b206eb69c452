//! What a saved `observation.json` carries besides the observation: the
//! schema it was written in (`schema_version`) and the sections the run
//! wrote (`sections`), and the check `chaosrun judge` makes with them before
//! it believes a saved observation. A section is a key of the observation,
//! or a key one level inside one of its records (`mcp.exchanges`,
//! `recording.subagent_calls`), that held something when the run wrote it
//! (not null, 0, false, "", [] or {}). A section deleted or emptied after
//! the run (the `mcp` record, the survivor list) reads back as a default
//! the oracle would take for "nothing happened"; judge refuses such a file
//! instead of judging it, and refuses one that lacks a section its row needs.

use serde::Serialize;
use serde_json::Value;

use crate::observe::Observation;
use crate::scenarios::Scenario;

/// The schema `observation.json` carries in `schema_version`.
pub const OBSERVATION_SCHEMA: &str = "chaosrun-observation/1";
/// The key naming the schema.
const SCHEMA_KEY: &str = "schema_version";
/// The key listing the sections.
const SECTIONS_KEY: &str = "sections";

/// The observation as written: its schema and sections, then its fields.
#[derive(Serialize)]
pub struct Written<'a> {
    schema_version: &'static str,
    sections: Vec<String>,
    #[serde(flatten)]
    observation: &'a Observation,
}

/// `obs` with its schema and the sections it holds, for writing.
pub fn written(obs: &Observation) -> Written<'_> {
    let sections = serde_json::to_value(obs)
        .map(|v| sections_of(&v))
        .unwrap_or_default();
    Written {
        schema_version: OBSERVATION_SCHEMA,
        sections,
        observation: obs,
    }
}

/// Whether a JSON value holds nothing (what a missing field defaults to).
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The sections `v` (an observation as JSON) holds, sorted: each key with
/// a value that is not empty, and each such key one level inside a record.
pub fn sections_of(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Value::Object(top) = v else {
        return out;
    };
    for (key, value) in top {
        if key == SCHEMA_KEY || key == SECTIONS_KEY || is_empty(value) {
            continue;
        }
        out.push(key.clone());
        if let Value::Object(inner) = value {
            for (k, x) in inner {
                if !is_empty(x) {
                    out.push(format!("{key}.{k}"));
                }
            }
        }
    }
    out.sort();
    out
}

/// The sections every run of `row` writes: its events (once the agent ran),
/// the MCP server's record (a row with an `mcp:` section, once the server
/// started) and the chaos schedule (a row with a `chaos:` section), each
/// with the row's part that asks for it.
fn needs(row: &Scenario, v: &Value) -> Vec<(&'static str, &'static str)> {
    let ran = v.get("setup_error").is_none_or(Value::is_null);
    let mut out = Vec::new();
    if ran {
        out.push(("events", "every run whose agent started records its events"));
    }
    if ran && row.mcp.is_some() {
        out.push(("mcp", "the row's `mcp:` section"));
    }
    if row.chaos.is_some() {
        out.push(("chaos", "the row's `chaos:` section"));
    }
    out
}

/// `a`, `b`: names in backticks.
fn names(list: &[&str]) -> String {
    list.iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Check `v`, the saved observation (at `path`) as JSON, against its own
/// record and its row: it names this schema, lacks no section the row
/// needs, and holds exactly the sections the run recorded.
pub fn verify(path: &str, v: &Value, row: &Scenario) -> Result<(), String> {
    const AGAIN: &str = "run the scenario again with --artifacts to judge it";
    let version = match v.get(SCHEMA_KEY) {
        None => {
            return Err(format!(
                "{path}: no `{SCHEMA_KEY}`: saved by a chaosrun older than \
                 `{OBSERVATION_SCHEMA}`, or not by chaosrun; {AGAIN}"
            ))
        }
        Some(s) => s.as_str().unwrap_or("(not a string)"),
    };
    if version != OBSERVATION_SCHEMA {
        return Err(format!(
            "{path}: {SCHEMA_KEY} `{version}`; this chaosrun reads `{OBSERVATION_SCHEMA}`"
        ));
    }
    let recorded: Vec<&str> = match v.get(SECTIONS_KEY).and_then(Value::as_array) {
        Some(a) => a.iter().map(|s| s.as_str().unwrap_or("")).collect(),
        None => {
            return Err(format!(
                "{path}: no list of `{SECTIONS_KEY}` the run wrote (it was removed); {AGAIN}"
            ))
        }
    };
    let present = sections_of(v);
    let has = |name: &str| present.iter().any(|p| p == name);
    for (name, why) in needs(row, v) {
        if !has(name) {
            return Err(format!(
                "{path}: the observation lacks `{name}`, which the row needs ({why}): \
                 a saved folder missing what its row needs is not judged; {AGAIN}"
            ));
        }
    }
    let gone: Vec<&str> = recorded.iter().copied().filter(|r| !has(r)).collect();
    if !gone.is_empty() {
        return Err(format!(
            "{path}: the run wrote {} but the file has them missing or empty: it was \
             edited after the run, and judge does not guess what was there; {AGAIN}",
            names(&gone)
        ));
    }
    let added: Vec<&str> = present
        .iter()
        .map(String::as_str)
        .filter(|p| !recorded.contains(p))
        .collect();
    if !added.is_empty() {
        return Err(format!(
            "{path}: holds {} that the run did not write (it was edited after the run); {AGAIN}",
            names(&added)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A golden's row (`mcp_call_hangs`: it has an `mcp:` section).
    fn golden_row() -> Scenario {
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/mcp_call_hangs--mcp_no_timeout");
        crate::runner::artifacts::read(&golden)
            .expect("the golden reads")
            .row
    }

    #[test]
    fn sections_are_the_keys_that_hold_something_one_level_deep() {
        let v = json!({
            "schema_version": OBSERVATION_SCHEMA, "sections": ["x"],
            "events": [1], "survivors": [], "mcp": null, "wall": 0.0, "tag": "t",
            "recording": {"requests": [], "main_calls": 3, "subagent_calls": 0},
            "chaos": {"seed": 1, "schedule": [{"at": 1}]},
        });
        assert_eq!(
            sections_of(&v),
            [
                "chaos",
                "chaos.schedule",
                "chaos.seed",
                "events",
                "recording",
                "recording.main_calls",
                "tag"
            ]
        );
    }

    #[test]
    fn a_row_needs_its_mcp_record_and_schedule_unless_the_agent_never_ran() {
        let mut row = golden_row();
        let mut v = json!({"schema_version": OBSERVATION_SCHEMA, "events": [1]});
        v["sections"] = json!(sections_of(&v));
        let err = verify("o.json", &v, &row).unwrap_err();
        assert!(err.contains("lacks `mcp`"), "{err}");
        assert!(err.contains("the row's `mcp:` section"), "{err}");
        row.mcp = None;
        verify("o.json", &v, &row).unwrap();
        row.chaos = Some(
            serde_json::from_value(json!({"turns": 3, "duration": 10.0, "min_faults": 1})).unwrap(),
        );
        let err = verify("o.json", &v, &row).unwrap_err();
        assert!(err.contains("lacks `chaos`"), "{err}");
        row.chaos = None;
        // An agent that never started wrote no events, and that is no edit.
        let mut never_ran = json!({"schema_version": OBSERVATION_SCHEMA, "setup_error": "no"});
        never_ran["sections"] = json!(sections_of(&never_ran));
        verify("o.json", &never_ran, &golden_row()).unwrap();
        let mut no_events = json!({"schema_version": OBSERVATION_SCHEMA, "events": []});
        no_events["sections"] = json!(sections_of(&no_events));
        let err = verify("o.json", &no_events, &row).unwrap_err();
        assert!(err.contains("lacks `events`"), "{err}");
    }

    #[test]
    fn a_section_removed_added_or_a_missing_header_is_refused() {
        let row = {
            let mut r = golden_row();
            r.mcp = None;
            r
        };
        let mut v = json!({"schema_version": OBSERVATION_SCHEMA, "events": [1], "survivors": [2]});
        v["sections"] = json!(sections_of(&v));
        verify("o.json", &v, &row).unwrap();
        let mut emptied = v.clone();
        emptied["survivors"] = json!([]);
        let err = verify("o.json", &emptied, &row).unwrap_err();
        assert!(err.contains("the run wrote `survivors`"), "{err}");
        let mut added = v.clone();
        added["journal"] = json!(["x"]);
        let err = verify("o.json", &added, &row).unwrap_err();
        assert!(
            err.contains("holds `journal` that the run did not write"),
            "{err}"
        );
        let mut old = v.clone();
        old.as_object_mut().unwrap().remove("schema_version");
        let err = verify("o.json", &old, &row).unwrap_err();
        assert!(err.contains("no `schema_version`"), "{err}");
        let mut other = v.clone();
        other["schema_version"] = json!("chaosrun-observation/9");
        let err = verify("o.json", &other, &row).unwrap_err();
        assert!(err.contains("chaosrun-observation/9"), "{err}");
        let mut unlisted = v;
        unlisted.as_object_mut().unwrap().remove("sections");
        let err = verify("o.json", &unlisted, &row).unwrap_err();
        assert!(err.contains("no list of `sections`"), "{err}");
    }

    #[test]
    fn the_written_observation_lists_its_sections_and_verifies() {
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/mcp_call_hangs--mcp_no_timeout");
        let saved = crate::runner::artifacts::read(&golden).expect("the golden reads");
        let v = serde_json::to_value(written(&saved.observation)).unwrap();
        assert_eq!(v[SCHEMA_KEY], OBSERVATION_SCHEMA);
        let listed: Vec<&str> = v[SECTIONS_KEY]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        for s in [
            "events",
            "mcp",
            "mcp.exchanges",
            "survivors",
            "recording.requests",
        ] {
            assert!(listed.contains(&s), "{s} not in {listed:?}");
        }
        verify("o.json", &v, &saved.row).unwrap();
    }
}
