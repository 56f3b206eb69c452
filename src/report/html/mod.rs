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

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use super::junit::write_atomically;
use super::Reporter;
use crate::observe::{Event, Phase};
use crate::oracle::clip;
use crate::provider::recording::CallKind;
use crate::runner::{RunEvent, ScenarioResult, Stats, Verdict};

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

/// The colour of a reply kind, and the kinds in legend order.
const REPLY_COLOURS: &[(&str, &str)] = &[
    ("text", "#2e7d32"),
    ("tool_call", "#1565c0"),
    ("error", "#d32f2f"),
    ("hang", "#7b1fa2"),
    ("stall_mid_stream", "#ef6c00"),
    ("drop_mid_stream", "#795548"),
    ("silent_after_headers", "#e91e63"),
    ("raw", "#00897b"),
    ("bad_request", "#fbc02d"),
    ("not_found", "#9e9e9e"),
    ("models", "#90a4ae"),
];
const OTHER_COLOUR: &str = "#212121";

fn reply_colour(kind: &str) -> &'static str {
    REPLY_COLOURS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, c)| *c)
        .unwrap_or(OTHER_COLOUR)
}

const INTERRUPT_COLOUR: &str = "#f9a825";
const MISSED_COLOUR: &str = "#b71c1c";
const EXIT_COLOUR: &str = "#263238";
const TURN0_COLOUR: &str = "#90caf9";
const TURN1_COLOUR: &str = "#a5d6a7";
const HUNG_COLOUR: &str = "#ffcdd2";
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

/// The whole page.
pub fn render(
    results: &[Arc<ScenarioResult>],
    deadlines: &HashMap<String, Vec<(Phase, f64)>>,
    seed: u64,
    wall: Option<f64>,
    stats: Option<Stats>,
) -> String {
    // Errors and failures first, then N/A, then passes.
    let rank = |r: &ScenarioResult| match r.verdict {
        Verdict::Error { .. } => 0,
        Verdict::Fail => 1,
        Verdict::NotApplicable { .. } => 2,
        Verdict::Pass => 3,
    };
    let mut order: Vec<&ScenarioResult> = results.iter().map(|r| &**r).collect();
    order.sort_by(|a, b| {
        (rank(a), &a.id, a.attempt)
            .partial_cmp(&(rank(b), &b.id, b.attempt))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let stats =
        stats.unwrap_or_else(|| Stats::tally(results.iter().map(|r| &r.verdict), results.len()));
    let summary = stats.summary();
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(h, "<title>chaosrun: {}</title>", esc(&summary));
    let _ = writeln!(h, "<style>{CSS}</style>\n</head>\n<body>");
    h.push_str("<h1>chaosrun report</h1>\n");
    let _ = writeln!(
        h,
        "<p class=\"meta\">{} scenario run{}: <b>{}</b> · seed {seed}{}</p>",
        stats.total(),
        if stats.total() == 1 { "" } else { "s" },
        esc(&summary),
        wall.map(|w| format!(" · wall time {w:.1} s"))
            .unwrap_or_default(),
    );

    h.push_str("<table class=\"summary\">\n<thead><tr><th>scenario</th><th>verdict</th><th>seconds</th><th>provider calls</th><th>first violation</th></tr></thead>\n<tbody>\n");
    for (n, r) in order.iter().enumerate() {
        let rec = &r.observation.recording;
        let first = match r.verdict.detail() {
            Some(d) => clip(d, 200),
            None => r
                .failures()
                .flat_map(|c| c.violations().first().map(|v| (c, v)))
                .next()
                .map(|(c, v)| format!("{} / {}: {}", c.invariant.label(), c.name, clip(v, 200)))
                .unwrap_or_default(),
        };
        let mut calls = format!("{} main", rec.main_calls);
        if rec.probe_calls > 0 || rec.aux_calls > 0 {
            let _ = write!(
                calls,
                " · {} probe · {} aux",
                rec.probe_calls, rec.aux_calls
            );
        }
        let _ = writeln!(
            h,
            "<tr><td><a href=\"#{}\"><code>{}</code></a></td><td>{}</td><td class=\"num\">{:.1}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            anchor(n, r),
            esc(&display_id(r)),
            verdict(&r.verdict),
            r.seconds,
            esc(&calls),
            esc(&first),
        );
    }
    h.push_str("</tbody>\n</table>\n");

    for (n, r) in order.iter().enumerate() {
        section(&mut h, n, r, deadlines.get(&r.id).map(Vec::as_slice));
    }
    h.push_str("</body>\n</html>\n");
    h
}

fn verdict(v: &Verdict) -> String {
    format!(
        "<span class=\"verdict {}\">{}</span>",
        v.name(),
        esc(v.label())
    )
}

fn display_id(r: &ScenarioResult) -> String {
    if r.attempts > 1 {
        format!("{} (run {}/{})", r.id, r.attempt, r.attempts)
    } else {
        r.id.clone()
    }
}

/// A unique, attribute-safe fragment id for scenario `n`.
fn anchor(n: usize, r: &ScenarioResult) -> String {
    let clean: String =
        r.id.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
    format!("s{n}-{clean}")
}

fn section(h: &mut String, n: usize, r: &ScenarioResult, deadlines: Option<&[(Phase, f64)]>) {
    let obs = &r.observation;
    let _ = writeln!(
        h,
        "<section class=\"scenario\" id=\"{}\" data-scenario=\"{}\" data-verdict=\"{}\">",
        anchor(n, r),
        esc(&r.id),
        r.verdict.name()
    );
    let _ = writeln!(
        h,
        "<details{}><summary>{} <code>{}</code> · {:.1} s · {} main call{}</summary>",
        if r.passed() { "" } else { " open" },
        verdict(&r.verdict),
        esc(&display_id(r)),
        r.seconds,
        obs.recording.main_calls,
        if obs.recording.main_calls == 1 {
            ""
        } else {
            "s"
        },
    );

    h.push_str("<ul class=\"checks\">\n");
    if let Some(d) = r.verdict.detail() {
        let what = match r.verdict {
            Verdict::Error { .. } => "chaosrun could not run it",
            _ => "not applicable",
        };
        let _ = writeln!(
            h,
            "<li>✗ <b>{what}</b>: <span class=\"violation\">{}</span></li>",
            esc(d)
        );
    }
    for c in r.failures() {
        let _ = write!(
            h,
            "<li>✗ <b>{} / {}</b>",
            esc(c.invariant.label()),
            esc(c.name)
        );
        for v in c.violations() {
            let _ = write!(h, "<span class=\"violation\">{}</span>", esc(v));
        }
        h.push_str("</li>\n");
    }
    for c in r.not_checked() {
        let _ = writeln!(
            h,
            "<li>– not checked: <b>{} / {}</b>: <span class=\"reason\">{}</span></li>",
            esc(c.invariant.label()),
            esc(c.name),
            esc(c.not_checked_reason().unwrap_or_default())
        );
    }
    let passed = r
        .checks
        .iter()
        .filter(|c| !c.failed() && !c.not_checked())
        .count();
    let _ = writeln!(
        h,
        "<li>✓ {passed} of {} checks passed</li>\n</ul>",
        r.checks.len()
    );

    h.push_str(&timeline(r, deadlines.unwrap_or_default()));

    h.push_str("<dl class=\"facts\">\n");
    for (i, what) in [(0, "faulted turn"), (1, "probe turn")] {
        let text = match obs.turn_end(i) {
            Some((t, e)) => {
                let mut flags = Vec::new();
                for (on, name) in [
                    (e.completed, "completed"),
                    (e.failed, "failed"),
                    (e.interrupted, "interrupted"),
                ] {
                    if on {
                        flags.push(name);
                    }
                }
                let mut s = format!("ended at {t:.1} s");
                if !flags.is_empty() {
                    let _ = write!(s, " ({})", flags.join(", "));
                }
                if !e.exit_reason.is_empty() {
                    let _ = write!(s, ", exit_reason {}", clip(&e.exit_reason, 200));
                }
                let _ = write!(s, ", final: {:?}", clip(&e.final_text, 400));
                s
            }
            None => match obs.turn_start(i) {
                Some(t) => format!("started at {t:.1} s and never ended"),
                None => "never started".to_string(),
            },
        };
        let _ = writeln!(h, "<dt>{what}</dt><dd>{}</dd>", esc(&text));
    }
    if let Some((
        t,
        Event::Exited {
            code,
            signal,
            killed_by_chaosrun,
        },
    )) = obs.exited()
    {
        let how = match (code, signal) {
            (Some(c), _) => format!("code {c}"),
            (None, Some(s)) => format!("signal {s}"),
            _ => "unknown status".into(),
        };
        let by = if killed_by_chaosrun {
            ", killed by chaosrun"
        } else {
            ""
        };
        let _ = writeln!(
            h,
            "<dt>exit</dt><dd>{}</dd>",
            esc(&format!("at {t:.1} s, {how}{by}"))
        );
    }
    if let Some(err) = &obs.setup_error {
        let _ = writeln!(h, "<dt>setup error</dt><dd>{}</dd>", esc(err));
    }
    if !obs.survivors.is_empty() {
        let _ = writeln!(
            h,
            "<dt>survivors</dt><dd>{} tagged process(es) alive after the reap deadline</dd>",
            obs.survivors.len()
        );
    }
    if let Some(dir) = &r.artifacts {
        let _ = writeln!(
            h,
            "<dt>artifacts</dt><dd><code>{}</code></dd>",
            esc(&dir.display().to_string())
        );
    }
    h.push_str("</dl>\n");
    if !obs.stderr_tail.trim().is_empty() {
        let _ = writeln!(
            h,
            "<div>agent stderr (tail)</div><pre>{}</pre>",
            esc(obs.stderr_tail.trim_end())
        );
    }
    h.push_str("</details>\n</section>\n");
}

/// Geometry of one timeline.
struct Frame {
    left: f64,
    width: f64,
    t_max: f64,
}

impl Frame {
    fn x(&self, t: f64) -> f64 {
        self.left + (t.clamp(0.0, self.t_max) / self.t_max) * self.width
    }
}

/// A tick step giving about 8 to 12 ticks over `t_max` seconds.
fn tick_step(t_max: f64) -> f64 {
    const STEPS: &[f64] = &[
        0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
        60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
    ];
    let raw = t_max / 10.0;
    STEPS.iter().copied().find(|s| *s >= raw).unwrap_or(3600.0)
}

fn secs(t: f64) -> String {
    if (t - t.round()).abs() < 1e-9 {
        format!("{t:.0}")
    } else if (t * 10.0 - (t * 10.0).round()).abs() < 1e-6 {
        format!("{t:.1}")
    } else {
        format!("{t:.2}")
    }
}

/// A vertical marker across the lanes, labelled above them.
struct Marker {
    t: f64,
    colour: &'static str,
    dashed: bool,
    label: String,
    tip: String,
}

const W: f64 = 1160.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 20.0;
const LABEL_ROWS: f64 = 2.0;
const TOP: f64 = 8.0 + LABEL_ROWS * 15.0;
const LANE: f64 = 28.0;
const PROC_LANE: f64 = 64.0;

/// The inline SVG timeline of one scenario.
pub fn timeline(r: &ScenarioResult, deadlines: &[(Phase, f64)]) -> String {
    let obs = &r.observation;
    let rec = &obs.recording;
    let off = obs.provider_offset;
    let deadline_of = |p: Phase| deadlines.iter().find(|(q, _)| *q == p).map(|(_, d)| *d);

    // The extent of what was seen.
    let mut t_end = obs.wall.max(r.seconds);
    for e in &obs.events {
        t_end = t_end.max(e.at);
    }
    for q in &rec.requests {
        t_end = t_end.max(q.at + off);
    }
    for s in &obs.proc_samples {
        t_end = t_end.max(s.at);
    }

    // Deadlines: the faulted turn's runs from `ready` (when the runner armed
    // it); the interrupt's from the moment it was sent.
    let ready = obs
        .find(|e| matches!(e, Event::Ready).then_some(()))
        .map(|(t, _)| t);
    let turn_deadline = ready
        .or_else(|| obs.turn_start(0))
        .zip(deadline_of(Phase::FaultedTurn))
        .map(|(t, d)| (t + d, d));
    let interrupt_deadline = obs
        .interrupt_sent()
        .zip(deadline_of(Phase::Interrupt))
        .map(|((t, _), d)| (t + d, d));
    // Draw a deadline only when it is near what was seen; otherwise note it.
    let mut far = Vec::new();
    for (what, dl) in [
        ("turn deadline", turn_deadline),
        ("interrupt deadline", interrupt_deadline),
    ] {
        if let Some((t, d)) = dl {
            if t <= t_end * 1.15 {
                t_end = t_end.max(t);
            } else {
                far.push(format!("{what} at {} s ({} s) →", fmt1(t), secs(d)));
            }
        }
    }
    let t_max = if t_end > 0.0 { t_end * 1.02 } else { 1.0 };
    let f = Frame {
        left: LEFT,
        width: W - LEFT - RIGHT,
        t_max,
    };

    let lanes_top = TOP;
    let turn0_y = lanes_top;
    let turn1_y = turn0_y + LANE;
    let main_y = turn1_y + LANE;
    let other_y = main_y + LANE;
    let procs_y = other_y + LANE;
    let lanes_bottom = procs_y + PROC_LANE;
    let axis_y = lanes_bottom;

    let mut body = String::new();
    // Lane backgrounds and labels.
    let lane_defs = [
        (turn0_y, LANE, "turn 0 · faulted".to_string()),
        (turn1_y, LANE, "turn 1 · probe".to_string()),
        (main_y, LANE, format!("main calls ({})", rec.main_calls)),
        (
            other_y,
            LANE,
            format!("probe / aux calls ({})", rec.probe_calls + rec.aux_calls),
        ),
        (procs_y, PROC_LANE, "tagged processes".to_string()),
    ];
    for (i, (y, hgt, label)) in lane_defs.iter().enumerate() {
        let fill = if i % 2 == 0 { "#f5f7f9" } else { "#ffffff" };
        let _ = writeln!(
            body,
            "<rect x=\"{LEFT}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{hgt:.1}\" fill=\"{fill}\"/>",
            f.width
        );
        let _ = writeln!(
            body,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"lane\">{}</text>",
            LEFT - 8.0,
            y + hgt / 2.0 + 4.0,
            esc(label)
        );
    }

    // Grid and axis.
    let step = tick_step(t_max);
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let x = f.x(t);
        let _ = writeln!(
            body,
            "<line x1=\"{x:.1}\" y1=\"{lanes_top:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#e0e0e0\"/>",
            axis_y + 4.0
        );
        let _ = writeln!(
            body,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tick\">{} s</text>",
            axis_y + 17.0,
            secs(t)
        );
        t += step;
    }
    let _ = writeln!(
        body,
        "<line x1=\"{LEFT}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"#424242\"/>",
        LEFT + f.width
    );
    let _ = writeln!(
        body,
        "<text x=\"{LEFT:.1}\" y=\"{:.1}\" class=\"axis\">seconds since the scenario started (run clock) →</text>",
        axis_y + 34.0
    );

    // Turns: 0 (faulted) and 1 (probe). A turn that never ended runs to the
    // next thing that ended it (missed deadline, exit) in the hung colour.
    let stop = obs
        .find(|e| matches!(e, Event::DeadlineMissed { .. } | Event::Exited { .. }).then_some(()))
        .map(|(t, _)| t)
        .unwrap_or(t_end);
    for (i, name, colour, lane_y) in [
        (0, "turn 0 (faulted)", TURN0_COLOUR, turn0_y),
        (1, "turn 1 (probe)", TURN1_COLOUR, turn1_y),
    ] {
        let Some(start) = obs.turn_start(i) else {
            continue;
        };
        let (end_t, fill, label, tip) = match obs.turn_end(i) {
            Some((t, e)) => {
                let how = if e.interrupted {
                    "interrupted"
                } else if e.failed {
                    "failed"
                } else if e.completed {
                    "completed"
                } else {
                    "ended"
                };
                (
                    t,
                    colour,
                    format!("{how} after {} s", fmt1(t - start)),
                    format!("{name}: {} s → {} s ({how})", fmt1(start), fmt1(t)),
                )
            }
            None => (
                stop.max(start),
                HUNG_COLOUR,
                format!("no turn_end after {} s", fmt1(stop.max(start) - start)),
                format!("{name}: started at {} s, never ended", fmt1(start)),
            ),
        };
        let (x0, x1) = (f.x(start), f.x(end_t));
        let stroke = if fill == HUNG_COLOUR {
            MISSED_COLOUR
        } else {
            "#546e7a"
        };
        let _ = writeln!(
            body,
            "<rect class=\"turn\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\" stroke=\"{stroke}\" rx=\"3\"><title>{}</title></rect>",
            lane_y + 4.0,
            (x1 - x0).max(2.0),
            LANE - 8.0,
            esc(&tip)
        );
        // The label sits inside the span when it fits, else after it, or
        // before it near the right edge.
        let approx = label.chars().count() as f64 * 6.6;
        let (lx, anchor) = if x1 - x0 > approx + 8.0 {
            (x0 + 5.0, "start")
        } else if x1 + 4.0 + approx <= W - RIGHT {
            (x1 + 4.0, "start")
        } else {
            (x0 - 4.0, "end")
        };
        let _ = writeln!(
            body,
            "<text x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" class=\"span\">{}</text>",
            lane_y + LANE / 2.0 + 4.0,
            esc(&label)
        );
    }

    // A main call answered with a reply that never completes is left waiting
    // until the agent's next request or the end of the faulted turn: a faint
    // band in its colour shows where the turn sat on it.
    let turn0_stop = obs.turn_end(0).map(|(t, _)| t).unwrap_or(stop);
    for (n, q) in rec.requests.iter().enumerate() {
        if q.kind != CallKind::Main
            || !matches!(
                q.reply.as_str(),
                "hang" | "stall_mid_stream" | "silent_after_headers"
            )
        {
            continue;
        }
        let t = q.at + off;
        let until = rec.requests[n + 1..]
            .iter()
            .map(|r| r.at + off)
            .find(|u| *u >= t)
            .unwrap_or(turn0_stop)
            .max(t);
        let (x0, x1) = (f.x(t), f.x(until));
        if x1 - x0 < 2.0 {
            continue;
        }
        let _ = writeln!(
            body,
            "<rect class=\"waiting\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" fill-opacity=\"0.22\"><title>{}</title></rect>",
            main_y + 9.0,
            x1 - x0,
            LANE - 18.0,
            reply_colour(&q.reply),
            esc(&format!(
                "{} reply at {} s; the agent's next request came {} s later",
                q.reply,
                fmt1(t),
                fmt1(until - t)
            ))
        );
    }

    // Provider calls.
    for q in &rec.requests {
        let y = if q.kind == CallKind::Main {
            main_y
        } else {
            other_y
        };
        let t = q.at + off;
        let x = f.x(t);
        let what = match (q.kind, q.main_index) {
            (CallKind::Main, Some(i)) => format!("main call #{i}"),
            (CallKind::Main, None) => "main call".to_string(),
            (CallKind::Probe, _) => "probe call".to_string(),
            (CallKind::Aux, _) => "aux call".to_string(),
            (CallKind::Subagent, Some(i)) => format!("subagent call #{i}"),
            (CallKind::Subagent, None) => "subagent call".to_string(),
        };
        let _ = writeln!(
            body,
            "<rect class=\"call\" x=\"{:.1}\" y=\"{:.1}\" width=\"3\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
            x - 1.5,
            y + 5.0,
            LANE - 10.0,
            reply_colour(&q.reply),
            esc(&format!("{what} at {} s: {}", fmt1(t), q.reply))
        );
    }

    // Tagged processes alive: a step area.
    let max_count = obs.proc_samples.iter().map(|s| s.count).max().unwrap_or(0);
    let scale_max = max_count.max(1) as f64;
    let py = |c: usize| procs_y + PROC_LANE - 4.0 - (c as f64 / scale_max) * (PROC_LANE - 10.0);
    if !obs.proc_samples.is_empty() {
        let base = py(0);
        let mut d = format!("M{:.1},{base:.1}", f.x(obs.proc_samples[0].at));
        for (i, s) in obs.proc_samples.iter().enumerate() {
            let x = f.x(s.at);
            if i > 0 {
                let _ = write!(d, " H{x:.1}");
            } else {
                let _ = write!(d, " L{x:.1},{base:.1}");
            }
            let _ = write!(d, " V{:.1}", py(s.count));
        }
        // The last sample holds for one sampling interval (or to the end).
        let n = obs.proc_samples.len();
        let last = obs.proc_samples[n - 1].at;
        let interval = if n > 1 {
            (last - obs.proc_samples[0].at) / (n - 1) as f64
        } else {
            0.5
        };
        let _ = write!(d, " H{:.1} V{base:.1} Z", f.x((last + interval).min(t_max)));
        let _ = writeln!(
            body,
            "<path class=\"procs\" d=\"{d}\" fill=\"{PROCS_COLOUR}\" fill-opacity=\"0.35\" stroke=\"{PROCS_COLOUR}\" stroke-width=\"1.5\"><title>{}</title></path>",
            esc(&format!(
                "tagged processes alive (agent included), sampled {} times; at most {max_count}",
                obs.proc_samples.len()
            ))
        );
        let labels: &[usize] = if max_count > 0 { &[0, max_count] } else { &[0] };
        for &c in labels {
            let _ = writeln!(
                body,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick\">{c}</text>",
                LEFT - 3.0,
                py(c) + 4.0
            );
        }
        if max_count == 0 {
            let _ = writeln!(
                body,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\">no tagged process seen in {} sample(s), taken every ~0.5 s</text>",
                LEFT + 6.0,
                procs_y + PROC_LANE / 2.0 + 4.0,
                obs.proc_samples.len()
            );
        }
    } else {
        let _ = writeln!(
            body,
            "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\">no samples</text>",
            LEFT + 6.0,
            procs_y + PROC_LANE / 2.0 + 4.0
        );
    }

    // Vertical markers.
    let mut markers = Vec::new();
    for e in &obs.events {
        match &e.event {
            Event::InterruptSent { main_calls } => markers.push(Marker {
                t: e.at,
                colour: INTERRUPT_COLOUR,
                dashed: false,
                label: "interrupt".into(),
                tip: format!(
                    "interrupt sent at {} s, after {main_calls} main calls",
                    fmt1(e.at)
                ),
            }),
            Event::DeadlineMissed { phase, seconds } => markers.push(Marker {
                t: e.at,
                colour: MISSED_COLOUR,
                dashed: false,
                label: format!("✕ {} deadline missed", phase.label()),
                tip: format!(
                    "the {} deadline ({} s) passed at {} s",
                    phase.label(),
                    secs(*seconds),
                    fmt1(e.at)
                ),
            }),
            Event::Exited {
                code,
                signal,
                killed_by_chaosrun,
            } => markers.push(Marker {
                t: e.at,
                colour: EXIT_COLOUR,
                dashed: false,
                label: if *killed_by_chaosrun {
                    "killed".into()
                } else {
                    "exit".into()
                },
                tip: format!(
                    "agent exited at {} s (code {code:?}, signal {signal:?}{})",
                    fmt1(e.at),
                    if *killed_by_chaosrun {
                        ", killed by chaosrun"
                    } else {
                        ""
                    }
                ),
            }),
            _ => {}
        }
    }
    for (what, dl) in [
        ("turn deadline", turn_deadline),
        ("interrupt deadline", interrupt_deadline),
    ] {
        if let Some((t, d)) = dl {
            if t <= t_max {
                markers.push(Marker {
                    t,
                    colour: MISSED_COLOUR,
                    dashed: true,
                    label: what.into(),
                    tip: format!("{what}: {} s, at {} s", secs(d), fmt1(t)),
                });
            }
        }
    }
    markers.sort_by(|a, b| a.t.partial_cmp(&b.t).unwrap_or(std::cmp::Ordering::Equal));
    // Labels in rows above the lanes, each row filled left to right.
    let mut row_ends = [f64::NEG_INFINITY; LABEL_ROWS as usize];
    for m in &markers {
        let x = f.x(m.t);
        let width = m.label.chars().count() as f64 * 6.4 + 6.0;
        // Right-align labels that would run off the right edge.
        let (lx0, anchor) = if x + width > W {
            (x - width, "end")
        } else {
            (x, "start")
        };
        let row = row_ends.iter().position(|end| *end < lx0).unwrap_or(0);
        row_ends[row] = lx0 + width;
        let ly = 8.0 + (row as f64 + 1.0) * 15.0 - 3.0;
        let dash = if m.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = writeln!(
            body,
            "<line class=\"marker\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{axis_y:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}><title>{}</title></line>",
            ly + 3.0,
            m.colour,
            esc(&m.tip)
        );
        let tx = if anchor == "end" { x - 3.0 } else { x + 3.0 };
        let _ = writeln!(
            body,
            "<text x=\"{tx:.1}\" y=\"{ly:.1}\" text-anchor=\"{anchor}\" class=\"mark\" fill=\"{}\">{}<title>{}</title></text>",
            m.colour,
            esc(&m.label),
            esc(&m.tip)
        );
    }
    if !far.is_empty() {
        let _ = writeln!(
            body,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick\">{}</text>",
            W - RIGHT,
            axis_y + 34.0,
            esc(&far.join(" · "))
        );
    }

    // Legend: the reply kinds this scenario saw, then the markers.
    let mut kinds: Vec<&str> = Vec::new();
    for q in &rec.requests {
        if !kinds.contains(&q.reply.as_str()) {
            kinds.push(&q.reply);
        }
    }
    kinds.sort_by_key(|k| {
        REPLY_COLOURS
            .iter()
            .position(|(c, _)| c == k)
            .unwrap_or(usize::MAX)
    });
    let legend_top = axis_y + 48.0;
    let mut flow = Flow {
        x: LEFT,
        y: legend_top,
    };
    let mut legend = String::new();
    let _ = writeln!(
        legend,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"lane\">reply kinds</text>",
        LEFT - 8.0,
        legend_top + 10.0
    );
    for k in &kinds {
        let width = 16.0 + k.chars().count() as f64 * 6.6;
        let colour = reply_colour(k);
        flow.place(&mut legend, width, &|x, y| {
            format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"10\" height=\"12\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>\n",
                x + 14.0,
                y + 10.0,
                esc(k)
            )
        });
    }
    if kinds.is_empty() {
        flow.place(&mut legend, 120.0, &|x, y| {
            format!(
                "<text x=\"{x:.1}\" y=\"{:.1}\" class=\"legend\">no provider calls</text>\n",
                y + 10.0
            )
        });
    }
    flow.x = LEFT;
    flow.y += 20.0;
    let _ = writeln!(
        legend,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"lane\">marks</text>",
        LEFT - 8.0,
        flow.y + 10.0
    );
    let swatches: [(&str, &str, &str); 3] = [
        ("turn 0 (faulted)", TURN0_COLOUR, "#546e7a"),
        ("turn 1 (probe)", TURN1_COLOUR, "#546e7a"),
        ("turn never ended", HUNG_COLOUR, MISSED_COLOUR),
    ];
    for (name, fill, stroke) in swatches {
        let width = 24.0 + name.chars().count() as f64 * 6.6;
        flow.place(&mut legend, width, &|x, y| {
            format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"18\" height=\"12\" rx=\"2\" fill=\"{fill}\" stroke=\"{stroke}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>\n",
                x + 22.0,
                y + 10.0,
                esc(name)
            )
        });
    }
    let name = "call left waiting";
    flow.place(&mut legend, 24.0 + name.len() as f64 * 6.6, &|x, y| {
        format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"18\" height=\"8\" fill=\"{}\" fill-opacity=\"0.3\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{name}</text>\n",
            y + 2.0,
            reply_colour("hang"),
            x + 22.0,
            y + 10.0
        )
    });
    let lines: [(&str, &str, bool); 4] = [
        ("interrupt", INTERRUPT_COLOUR, false),
        ("deadline missed", MISSED_COLOUR, false),
        ("deadline", MISSED_COLOUR, true),
        ("exit", EXIT_COLOUR, false),
    ];
    for (name, colour, dashed) in lines {
        let width = 24.0 + name.chars().count() as f64 * 6.6;
        let dash = if dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        flow.place(&mut legend, width, &|x, y| {
            format!(
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/><line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>\n",
                x + 9.0,
                x + 9.0,
                y + 12.0,
                y + 6.0,
                x + 18.0,
                y + 6.0,
                x + 22.0,
                y + 10.0,
                esc(name)
            )
        });
    }
    flow.place(&mut legend, 150.0, &|x, y| {
        format!(
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"18\" height=\"12\" fill=\"{PROCS_COLOUR}\" fill-opacity=\"0.35\" stroke=\"{PROCS_COLOUR}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">tagged processes</text>\n",
            x + 22.0,
            y + 10.0
        )
    });
    let height = flow.y + 24.0;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg class=\"timeline\" data-scenario=\"{}\" viewBox=\"0 0 {W:.0} {height:.0}\" role=\"img\" aria-label=\"{}\">",
        esc(&r.id),
        esc(&format!("timeline of {}", r.id))
    );
    svg.push_str("<style>text{font-family:system-ui,\"DejaVu Sans\",Arial,sans-serif;font-size:12px;fill:#263238}.tick{font-size:11px;fill:#546e7a}.axis{font-size:12px;fill:#37474f}.lane{font-weight:600}.mark{font-size:12px;font-weight:600}.span{font-size:12px}</style>\n");
    svg.push_str(&body);
    svg.push_str(&legend);
    svg.push_str("</svg>\n");
    svg
}

/// Legend items laid out left to right, wrapping at the right edge.
struct Flow {
    x: f64,
    y: f64,
}

impl Flow {
    fn place(&mut self, out: &mut String, width: f64, item: &dyn Fn(f64, f64) -> String) {
        if self.x + width > W - RIGHT {
            self.x = LEFT;
            self.y += 18.0;
        }
        out.push_str(&item(self.x, self.y));
        self.x += width + 14.0;
    }
}

/// Seconds for a label: one decimal, two below a second.
fn fmt1(t: f64) -> String {
    if t.abs() < 1.0 {
        format!("{t:.2}")
    } else {
        format!("{t:.1}")
    }
}

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
        // turn deadline (0.2 + 90 s) is far beyond it and only noted.
        assert!(svg.contains("interrupt deadline: 15 s, at 27.0 s"));
        assert!(svg.contains("turn deadline at 90.2 s (90 s) →"));
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
}
