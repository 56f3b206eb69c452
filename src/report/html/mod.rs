//! The HTML report (`--html FILE`): one self-contained page (inline CSS, no
//! script, no font or image fetched from anywhere) with a summary table and,
//! per scenario, its checks and an inline SVG timeline on the scenario's run
//! clock: the turns as spans, every provider call as a mark coloured by the
//! reply kind served, the interrupt, missed deadlines, the exit, the turn
//! deadline, and a step area of the tagged processes alive. Errors (chaosrun
//! could not run the scenario, with the cause) and failed scenarios come
//! first, expanded; N/A ones next; passed ones are collapsed. Every piece of text is
//! escaped: agent output and stderr are untrusted. Written once, atomically,
//! when the run finishes.
//!
//! Its parts: [`page`] (the page, summary table and scenario sections),
//! [`timeline`] (one scenario's SVG), [`marks`] (the timeline's vertical
//! markers) and [`legend`]; this module holds the reporter, the escaping
//! and the colours.

mod legend;
mod marks;
mod page;
mod timeline;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

pub use page::render;
pub use timeline::timeline;

use super::junit::write_atomically;
use super::Reporter;
use crate::observe::Phase;
use crate::provider::Reply;
use crate::runner::{RunEvent, ScenarioResult};

pub struct Html {
    path: PathBuf,
    seed: u64,
    results: Vec<Arc<ScenarioResult>>,
    /// Per scenario id: the deadlines (seconds) the runner announced per phase.
    deadlines: HashMap<String, Vec<(Phase, f64)>>,
    /// Run-wide warnings, shown above the summary table.
    warnings: Vec<String>,
}

impl Html {
    pub fn new(path: PathBuf, seed: u64) -> Html {
        Html {
            path,
            seed,
            warnings: Vec::new(),
            results: Vec::new(),
            deadlines: HashMap::new(),
        }
    }
}

impl Reporter for Html {
    fn on(&mut self, event: &RunEvent) {
        match event {
            RunEvent::Phase {
                id,
                phase,
                deadline,
            } => {
                let d = self.deadlines.entry(id.clone()).or_default();
                if !d.iter().any(|(p, _)| p == phase) {
                    d.push((*phase, *deadline));
                }
            }
            RunEvent::ScenarioFinished(r) => self.results.push(r.clone()),
            RunEvent::Warning(w) => self.warnings.push(w.clone()),
            RunEvent::Finished { stats, wall } => {
                let mut page = render(
                    &self.results,
                    &self.deadlines,
                    self.seed,
                    Some(*wall),
                    Some(*stats),
                );
                if !self.warnings.is_empty() {
                    let banner: String = self
                        .warnings
                        .iter()
                        .map(|w| format!("<p class=\"warning\">warning: {}</p>\n", esc(w)))
                        .collect();
                    if let Some(at) = page.find("<table class=\"summary\">") {
                        page.insert_str(at, &banner);
                    }
                }
                write_atomically(&self.path, &page, "html.tmp");
            }
            _ => {}
        }
    }
}

/// Text made safe for HTML and SVG, in element content and quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newline are not valid HTML text.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The colours of what a record names that is no reply kind (each kind's
/// colour is in its own file), after the kinds in legend order.
const SERVED_COLOURS: &[(&str, &str)] = &[
    ("bad_request", "#fbc02d"),
    ("not_found", "#9e9e9e"),
    ("models", "#90a4ae"),
];
const OTHER_COLOUR: &str = "#212121";
/// The legend's swatch for a call left waiting (each band is drawn in its
/// reply kind's colour).
const WAITING_COLOUR: &str = "#7b1fa2";

fn reply_colour(kind: &str) -> &'static str {
    Reply::colour_of(kind)
        .or_else(|| {
            SERVED_COLOURS
                .iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, c)| *c)
        })
        .unwrap_or(OTHER_COLOUR)
}

/// Where `kind` goes in the legend: the reply kinds in registry order, then
/// the other names the server records.
fn legend_rank(kind: &str) -> usize {
    let served = || SERVED_COLOURS.iter().position(|(k, _)| *k == kind);
    match Reply::KINDS.iter().position(|k| *k == kind) {
        Some(i) => i,
        None => served().map_or(usize::MAX, |i| Reply::KINDS.len() + i),
    }
}

/// Rows of marker labels above the lanes.
const LABEL_ROWS: f64 = 2.0;

const INTERRUPT_COLOUR: &str = "#f9a825";
const MISSED_COLOUR: &str = "#b71c1c";
const EXIT_COLOUR: &str = "#263238";
const TURN0_COLOUR: &str = "#90caf9";
const TURN1_COLOUR: &str = "#a5d6a7";
const HUNG_COLOUR: &str = "#ffcdd2";
/// Exec mode: a turn's start-up, spawn to first provider call.
const START_UP_COLOUR: &str = "#b0bec5";
const PROCS_COLOUR: &str = "#9575cd";

const CSS: &str = r#"
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;margin:24px;color:#1b1b1b;background:#fafafa;line-height:1.4}
h1{font-size:1.5em;margin:0 0 4px}
.meta{color:#555;margin:0 0 16px}
table.summary{border-collapse:collapse;margin-bottom:24px;background:#fff;width:100%}
table.summary th,table.summary td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
table.summary th{background:#eceff1}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.verdict{font-weight:700;padding:1px 6px;border-radius:3px;color:#fff}
.verdict.fail{background:#c62828}.verdict.pass{background:#2e7d32}
.verdict.error{background:#6a1b9a}.verdict.not_applicable{background:#757575}
section.scenario{background:#fff;border:1px solid #ddd;border-left:6px solid #2e7d32;margin:12px 0;padding:4px 12px}
section.scenario[data-verdict=fail]{border-left-color:#c62828}
section.scenario[data-verdict=error]{border-left-color:#6a1b9a}
summary{cursor:pointer;font-size:1.1em;padding:6px 0}
summary code{font-weight:700}
ul.checks{margin:4px 0 8px;padding-left:20px}
ul.checks li{margin:2px 0}
.violation{white-space:pre-wrap;font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:.9em;color:#b71c1c;display:block;margin-left:12px}
.reason{color:#555}
svg.timeline{width:100%;height:auto;max-width:1200px;display:block;margin:8px 0;background:#fff}
pre{background:#263238;color:#eceff1;padding:8px;overflow:auto;max-height:20em;white-space:pre-wrap}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:8px 0}
p.warning{background:#fff4ce;border:1px solid #e0b000;padding:.4em .6em}
dl.facts dt{color:#555}dl.facts dd{margin:0;white-space:pre-wrap;word-break:break-word}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{feed, sample_results, VIOLATION};

    fn page() -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.html");
        let mut html = Html::new(path.clone(), 7);
        feed(&mut html, sample_results());
        assert!(!path.with_extension("html.tmp").exists());
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn one_timeline_per_scenario_failed_first_and_expanded() {
        let page = page();
        assert_eq!(page.matches("<svg class=\"timeline\"").count(), 2);
        assert!(page.contains("data-scenario=\"healthy_one\""));
        assert!(page.contains("data-scenario=\"storm&lt;&amp;&gt;\""));
        assert_eq!(page.matches("data-verdict=\"fail\"").count(), 1);
        let fail = page.find("data-verdict=\"fail\"").unwrap();
        let pass = page.find("data-verdict=\"pass\"").unwrap();
        assert!(fail < pass, "failed scenarios come first");
        assert_eq!(page.matches("<details open>").count(), 1);
        assert!(page.contains(VIOLATION));
        assert!(page.contains("seed 7"));
    }

    #[test]
    fn untrusted_text_is_escaped_and_nothing_is_fetched() {
        let page = page();
        assert!(!page.contains("<script"), "agent text must be escaped");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;"));
        assert!(page.contains("with &lt;evidence&gt;"));
        for attr in ["src=", "href=\"http", "href='http", "url(", "@import"] {
            assert!(!page.contains(attr), "{attr}");
        }
    }

    #[test]
    fn the_timeline_shows_calls_the_hung_turn_and_the_markers() {
        let results = sample_results();
        let mut deadlines = HashMap::new();
        deadlines.insert(
            "storm<&>".to_string(),
            vec![(Phase::FaultedTurn, 90.0), (Phase::Interrupt, 15.0)],
        );
        let svg = timeline(&results[1], &deadlines["storm<&>"]);
        assert_eq!(svg.matches("class=\"call\"").count(), 62);
        assert!(svg.contains("no turn_end after 26.7 s"), "{svg}");
        assert!(svg.contains("class=\"waiting\""));
        assert!(svg.contains("interrupt sent at 12.0 s, after 28 main calls"));
        assert!(svg.contains("✕ interrupt deadline missed"));
        // The interrupt deadline (12 + 15 s) is on the chart, dashed; the
        // turn deadline (turn_start 0.3 + 90 s) is far beyond it and only noted.
        assert!(svg.contains("interrupt deadline: 15 s, at 27.0 s"));
        assert!(svg.contains("turn deadline at 90.3 s (90 s) →"));
        assert!(svg.contains("class=\"procs\""));
        for kind in ["error", "hang", "stall_mid_stream", "text", "tool_call"] {
            assert!(
                svg.contains(&format!("class=\"legend\">{kind}</text>")),
                "{kind}"
            );
        }
        assert!(
            svg.contains("30 s</text>"),
            "the axis is labelled in seconds"
        );
    }

    #[test]
    fn an_exec_turns_start_up_is_a_band_and_its_deadline_runs_from_the_first_call() {
        let mut r = sample_results().remove(1);
        let start = r.observation.turn_start(0).unwrap();
        let first = start + 4.0;
        let at = r
            .observation
            .events
            .iter()
            .position(|e| e.at > first)
            .unwrap_or(r.observation.events.len());
        r.observation.events.insert(
            at,
            crate::observe::Timed {
                at: first,
                worker: None,
                event: crate::observe::Event::FirstCall {
                    turn: 0,
                    after_spawn: 4.0,
                    first_output: None,
                },
            },
        );
        let svg = timeline(&r, &[(Phase::FaultedTurn, 90.0), (Phase::Interrupt, 15.0)]);
        assert_eq!(svg.matches("class=\"start-up\"").count(), 1, "{svg}");
        assert!(svg.contains("turn 0 start-up: first provider call 4.0 s after the spawn"));
        let due = first + 90.0;
        assert!(
            svg.contains(&format!("turn deadline at {due:.1} s (90 s) →")),
            "the turn deadline runs from the first call: {svg}"
        );
    }

    /// A driver-protocol agent whose `turn_start` came 3 s after its
    /// `ready`: the drawn turn deadline runs from `turn_start`, where the
    /// oracle's `faulted_turn_ends` counts it from (it used to run from
    /// `ready`, 3 s earlier than the verdict's).
    #[test]
    fn a_driver_turns_deadline_is_drawn_where_the_oracle_counts_it() {
        use crate::observe::{Event, TurnModel};
        let mut r = sample_results().remove(1);
        let obs = &mut r.observation;
        let ready = obs
            .find(|e| matches!(e, Event::Ready).then_some(()))
            .map(|(t, _)| t)
            .expect("the sample says ready");
        for t in &mut obs.events {
            if matches!(t.event, Event::TurnStart { i: 0 }) {
                t.at = ready + 3.0;
            }
        }
        obs.events.sort_by(|a, b| a.at.total_cmp(&b.at));
        assert_eq!(obs.turn_model(), TurnModel::DRIVER_PROTOCOL);
        assert_eq!(obs.clock_start(0), Some(ready + 3.0));
        let svg = timeline(&r, &[(Phase::FaultedTurn, 90.0), (Phase::Interrupt, 15.0)]);
        let due = ready + 3.0 + 90.0;
        assert!(
            svg.contains(&format!("turn deadline at {due:.1} s (90 s) →")),
            "the turn deadline runs from turn_start ({:.1} s): {svg}",
            ready + 3.0
        );
    }

    /// Finished scenarios from the golden runs (tests/golden), judged.
    fn goldens() -> Vec<ScenarioResult> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
        let mut dirs: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join(crate::runner::artifacts::OBSERVATION).is_file())
            .collect();
        dirs.sort();
        dirs.iter()
            .map(|d| crate::cli::judge::judge_folder(d).unwrap().result)
            .collect()
    }

    /// Each result's deadlines as the runner announces them.
    fn deadlines_of(results: &[Arc<ScenarioResult>]) -> HashMap<String, Vec<(Phase, f64)>> {
        let mut d = HashMap::new();
        d.insert(
            "storm<&>".to_string(),
            vec![(Phase::FaultedTurn, 90.0), (Phase::Interrupt, 15.0)],
        );
        for r in results {
            d.entry(r.id.clone())
                .or_insert_with(|| vec![(Phase::FaultedTurn, 60.0), (Phase::Interrupt, 15.0)]);
        }
        d
    }

    /// The page of the sample runs and the golden runs, pinned: a change to
    /// the page shows as a snapshot diff to review (`cargo insta review`).
    /// Regenerating the goldens changes it too.
    #[test]
    fn page_snapshot() {
        let mut results: Vec<Arc<ScenarioResult>> =
            sample_results().into_iter().map(Arc::new).collect();
        results.extend(goldens().into_iter().map(Arc::new));
        let page = render(&results, &deadlines_of(&results), 7, Some(17.0), None);
        let page = page.replace(env!("CARGO_MANIFEST_DIR"), "REPO");
        insta::assert_snapshot!(page);
    }
}
