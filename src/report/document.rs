//! The `chaosrun-report/2` document as types (specified by
//! docs/report-schema.json): the [`Report`] that `--json` writes and `merge`
//! reads and writes, that `matrix` reads, and the [`Scenario`] entry that
//! `judge --json` prints too. Written through a `serde_json::Value`, whose
//! keys are sorted (serde_json's `preserve_order` feature is off), so the
//! file is the same document, key order included, as the hand-built one it
//! replaces. Every reader of a saved report ([`read`], [`parse`]) goes
//! through these types. Reading is lenient where a report of an older chaosrun may lack
//! a field (`#[serde(default)]`), and strict on verdicts and check statuses:
//! a name the run does not write is refused, never read as a pass.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::listen::Network;
use crate::observe::ScheduledFault;
use crate::oracle::{Invariant, Status};
use crate::proc_hygiene::Kind;
use crate::runner::{ScenarioResult, Stats, Verdict};

/// `/2`: verdicts (`error`, `not_applicable`) apart from `failed`, and the
/// selection (ids, shard, repeat) so `merge` can tell a missing shard.
pub const SCHEMA: &str = "chaosrun-report/2";

fn one() -> u32 {
    1
}

/// A report. `S` is the scenario entry: [`Scenario`], or a raw
/// `serde_json::Value` as [`read`] gives it, so `merge` can refuse a bad
/// entry naming it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
pub struct Report<S = Scenario> {
    pub schema: String,
    /// False until the run has ended (a killed run leaves it false).
    #[serde(default)]
    pub complete: bool,
    /// None in a merge of reports with different seeds.
    #[serde(default)]
    pub seed: Option<u64>,
    pub agent: Agents,
    /// The agent's version: from its install's package metadata (a known
    /// agent's profile), else the profile's `version_cmd`; absent where
    /// neither tells it (and in a merge of reports that disagree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// A merged report's: each input report's seed, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<Option<u64>>>,
    /// Every scenario id selected, in table order, before sharding.
    pub selected: Vec<String>,
    #[serde(default)]
    pub shard: Option<Shard>,
    #[serde(default = "one")]
    pub repeat: u32,
    #[serde(default)]
    pub passed: usize,
    #[serde(default)]
    pub failed: usize,
    #[serde(default)]
    pub errors: usize,
    #[serde(default)]
    pub not_applicable: usize,
    /// None until the run has finished.
    #[serde(default)]
    pub wall_seconds: Option<f64>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Every finished scenario run, in the order they finished.
    #[serde(default)]
    pub scenarios: Vec<S>,
}

/// The agent under test: one, or (a merge of several agents' reports) a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Agents {
    One(String),
    Several(Vec<String>),
}

impl Agents {
    /// Every agent named.
    pub fn names(&self) -> &[String] {
        match self {
            Agents::One(a) => std::slice::from_ref(a),
            Agents::Several(list) => list,
        }
    }
}

impl fmt::Display for Agents {
    /// As JSON (`"a"`, `["a","b"]`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&json)
    }
}

/// `--shard K/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub k: u64,
    pub n: u64,
}

/// One scenario run's entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub id: String,
    #[serde(default = "one")]
    pub attempt: u32,
    #[serde(default = "one")]
    pub attempts: u32,
    /// `verdict`, with an error's `cause` or an N/A's `reason`.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// True exactly when the verdict is `pass` (`merge` recomputes it).
    #[serde(default)]
    pub passed: bool,
    #[serde(default)]
    pub seconds: f64,
    #[serde(default)]
    pub calls: Calls,
    pub checks: Vec<Check>,
    #[serde(default)]
    pub artifacts: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containment: Option<Kind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// A chaos run's; null for other scenarios.
    #[serde(default)]
    pub chaos: Option<Chaos>,
    /// The agent's processes' peak memory, where it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// An `oom` row's memory limit and the kernel's OOM kills under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kill: Option<OomKill>,
}

/// An `oom` row's limit and what the kernel did under it (the
/// observation's `oom_kill` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomKill {
    /// The memory cgroup that held the limit (`cgroup v2 memory.max`,
    /// `cgroup v1 memory.limit_in_bytes`; `none` when none could be made).
    pub via: String,
    /// The limit, and the usage it was counted from, in MB.
    pub limit_mb: f64,
    pub usage_mb: f64,
    /// How many processes the kernel OOM-killed in that cgroup (0: none).
    pub oom_kills: u64,
}

/// The agent's processes' peak memory (the `memory_bounded` check's figure).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// In MB, to one decimal.
    pub peak_mb: f64,
    /// `cgroup memory.peak` or `sampled RSS`.
    pub source: String,
}

/// Requests the fault provider received, by role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calls {
    #[serde(default)]
    pub main: u64,
    #[serde(default)]
    pub probe: u64,
    #[serde(default)]
    pub aux: u64,
    /// Present when a subagent made any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<u64>,
}

/// One check as the report holds it: the oracle's check (whose name is a
/// `&'static str`, so it is written but never read back) with an owned name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub invariant: Invariant,
    pub name: String,
    /// `status`, with a failure's `violations` or a not-checked `reason`.
    #[serde(flatten)]
    pub status: Status,
}

/// A chaos run's seed, schedule and the faults that landed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chaos {
    pub seed: u64,
    pub schedule: Vec<ScheduledFault>,
    /// Kills and stops that landed while the agent was working.
    #[serde(default)]
    pub kills: usize,
    #[serde(default)]
    pub stops: usize,
    /// Faults that landed during start-up.
    #[serde(default)]
    pub in_start_up: usize,
    /// Seconds the run may take once the agent booted, from the row's
    /// declaration; past it the run is cut (`every_turn_finishes` says so).
    #[serde(default)]
    pub bound: f64,
}

impl Scenario {
    /// The entry of a finished scenario run.
    pub fn of(r: &ScenarioResult) -> Scenario {
        let obs = &r.observation;
        let rec = &obs.recording;
        Scenario {
            id: r.id.clone(),
            attempt: r.attempt,
            attempts: r.attempts,
            verdict: r.verdict.clone(),
            passed: r.passed(),
            seconds: (r.seconds * 1000.0).round() / 1000.0,
            calls: Calls {
                main: rec.main_calls,
                probe: rec.probe_calls,
                aux: rec.aux_calls,
                subagent: (rec.subagent_calls > 0).then_some(rec.subagent_calls),
            },
            checks: r
                .checks
                .iter()
                .map(|c| Check {
                    invariant: c.invariant,
                    name: c.name.to_string(),
                    status: c.status.clone(),
                })
                .collect(),
            artifacts: r.artifacts.clone(),
            containment: Some(obs.containment.kind),
            network: Some(obs.network.clone()),
            chaos: obs.chaos.as_ref().map(|c| {
                let (kills, stops) = obs.faults_landed_working();
                let (k, s) = obs.faults_landed();
                Chaos {
                    seed: c.seed,
                    schedule: c.schedule.clone(),
                    kills,
                    stops,
                    in_start_up: k + s - kills - stops,
                    bound: c.bound,
                }
            }),
            memory: crate::oracle::memory::peak(obs).map(|p| Memory {
                peak_mb: (p.mb() * 10.0).round() / 10.0,
                source: p.source.to_string(),
            }),
            oom_kill: obs
                .find(|e| match e {
                    crate::observe::Event::OomKill {
                        via,
                        usage_mb,
                        limit_mb,
                        oom_kills,
                        ..
                    } => Some(OomKill {
                        via: via.clone(),
                        limit_mb: *limit_mb,
                        usage_mb: *usage_mb,
                        oom_kills: *oom_kills,
                    }),
                    _ => None,
                })
                .map(|(_, o)| o),
        }
    }
}

/// Which run a raw scenario entry is, read leniently (`?`, run 1) to name
/// it in an error about the entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
pub struct RunKey {
    pub id: String,
    #[serde(default = "one")]
    pub attempt: u32,
}

impl RunKey {
    pub fn of(raw: &Value) -> RunKey {
        RunKey::deserialize(raw).unwrap_or_else(|_| RunKey {
            id: "?".into(),
            attempt: 1,
        })
    }
}

impl<S> Report<S> {
    /// The tally the report records.
    pub fn stats(&self) -> Stats {
        Stats {
            passed: self.passed,
            failed: self.failed,
            errors: self.errors,
            not_applicable: self.not_applicable,
        }
    }
}

impl<S: Serialize> Report<S> {
    /// The document as a JSON value (keys sorted).
    pub fn to_value(&self) -> serde_json::Result<Value> {
        serde_json::to_value(self)
    }

    /// The document as the file holds it: pretty JSON, keys sorted.
    pub fn to_json_pretty(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec_pretty(&self.to_value()?)
    }
}

/// A report file as JSON (bounded by [`crate::input::REPORT`]); errors name
/// `PATH:LINE:COL`.
pub fn read_json(p: &Path) -> Result<Value, String> {
    let text = crate::input::read_input(p, crate::input::REPORT)?;
    serde_json::from_slice(&text).map_err(|e| located(p, "not JSON", &e))
}

fn located(p: &Path, what: &str, e: &serde_json::Error) -> String {
    format!("{}:{}:{}: {what}: {e}", p.display(), e.line(), e.column())
}

/// Only the schema, to refuse another format before reading it as this one.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    schema: Value,
}

/// A report file, typed, each scenario entry still raw. A file that is not
/// JSON, not a [`SCHEMA`] report, or not shaped like one is refused naming
/// it.
pub fn read(p: &Path) -> Result<Report<Value>, String> {
    typed(read_json(p)?, &p.display().to_string())
}

/// A report's text (`shown` names it in errors), typed through and through:
/// each scenario entry too, its verdict with its typed cause.
pub fn parse(text: &str, shown: &str) -> Result<Report, String> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| format!("{shown}:{}:{}: not JSON: {e}", e.line(), e.column()))?;
    typed(value, shown)
}

/// `value` as a [`SCHEMA`] report whose entries are `S`.
fn typed<S: serde::de::DeserializeOwned>(value: Value, shown: &str) -> Result<Report<S>, String> {
    let head =
        Head::deserialize(&value).map_err(|e| format!("{shown}: not a {SCHEMA} report: {e}"))?;
    if head.schema != SCHEMA {
        return Err(format!(
            "{shown}: not a {SCHEMA} report (schema {}); rerun it with this chaosrun",
            head.schema
        ));
    }
    Report::deserialize(value).map_err(|e| format!("{shown}: not a {SCHEMA} report: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::json::{Json, Selection};
    use crate::report::test_support::{feed, sample_with_optional_parts};

    /// Write the sample results (every optional part of an entry) as the
    /// report of shard `shard` (K, N) of them all.
    fn write(path: &Path, shard: (usize, usize)) {
        let all = sample_with_optional_parts();
        let selection = Selection {
            ids: all.iter().map(|r| r.id.clone()).collect(),
            shard: Some(shard),
            repeat: 1,
        };
        let mine = all
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % shard.1 + 1 == shard.0)
            .map(|(_, r)| r)
            .collect();
        let mut json = Json::new(path.to_path_buf(), 3, "agent.yaml".into(), selection);
        feed(&mut json, mine);
    }

    /// A document the writer wrote, read back typed and written again, is
    /// the same JSON value, byte for byte, optional parts included.
    #[test]
    fn a_written_report_reads_back_and_writes_the_same_document() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        write(&path, (1, 1));
        let bytes = std::fs::read(&path).unwrap();
        let written: Value = serde_json::from_slice(&bytes).unwrap();
        let typed: Report = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(typed.scenarios.len(), 4);
        assert_eq!(typed.scenarios[0].calls.subagent, Some(2));
        assert_eq!(typed.to_value().unwrap(), written);
        assert_eq!(typed.to_json_pretty().unwrap(), bytes, "the same bytes");
        let raw = read(&path).unwrap();
        assert_eq!(raw.to_value().unwrap(), written);
    }

    /// Two shard reports the writer wrote, chaos run included, and their
    /// merge are valid against docs/report-schema.json.
    #[test]
    fn written_shards_and_their_merge_match_docs_report_schema() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/report-schema.json");
        let schema: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let v = jsonschema::validator_for(&schema).unwrap();
        let errors = |doc: &Value| -> Vec<String> {
            v.iter_errors(doc)
                .map(|e| format!("{}: {e}", e.instance_path))
                .collect()
        };
        let dir = tempfile::tempdir().unwrap();
        let shards = [dir.path().join("1.json"), dir.path().join("2.json")];
        for (k, p) in shards.iter().enumerate() {
            write(p, (k + 1, 2));
            assert_eq!(errors(&read_json(p).unwrap()), Vec::<String>::new());
        }
        let merged = crate::report::merge::merge(&shards).unwrap();
        assert_eq!(merged.scenarios.len(), 4);
        assert!(merged.scenarios.iter().any(|s| s.chaos.is_some()));
        assert_eq!(errors(&merged.to_value().unwrap()), Vec::<String>::new());
    }

    #[test]
    fn a_report_of_another_format_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                r#"{"schema": "chaosrun-report/1", "complete": true}"#,
                "(schema \"chaosrun-report/1\")",
            ),
            (r#"[1, 2]"#, "not a chaosrun-report/2 report"),
            (
                r#"{"schema": "chaosrun-report/2", "complete": true, "agent": "a"}"#,
                "missing field `selected`",
            ),
            (
                r#"{"schema": "chaosrun-report/2", "agent": "a", "selected": [], "repeat": "x"}"#,
                "invalid type",
            ),
        ];
        for (i, (text, says)) in cases.iter().enumerate() {
            let p = dir.path().join(format!("{i}.json"));
            std::fs::write(&p, text).unwrap();
            let e = read(&p).unwrap_err();
            assert!(e.starts_with(&format!("{}: ", p.display())), "{e}");
            assert!(e.contains(says), "case {i}: {e}");
        }
        let p = dir.path().join("cut.json");
        std::fs::write(&p, "{\"schema\":\n ").unwrap();
        let e = read(&p).unwrap_err();
        assert!(e.starts_with(&format!("{}:2:", p.display())), "{e}");
        assert!(e.contains(": not JSON: EOF"), "{e}");
    }
}
