//! `chaosrun history DB --html FILE`: one self-contained page (inline CSS and
//! SVG, no script, no network) with, per scenario, its label, pass rate, a
//! strip of its outcomes over the window (one coloured cell per run, oldest
//! left) and a small trend line of its duration. The same table, as a
//! [`section`], is added to a run's own `--html` report when it has `--history`.

use super::analyze::{Label, Summary, Trend};
use super::render::{date, trend_text};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

const CELL: usize = 12;

/// The outcome strip of one scenario: an inline SVG, one cell per run.
pub fn strip_svg(t: &Trend) -> String {
    let w = t.outcomes.len().max(1) * CELL;
    let mut svg = format!(
        "<svg class=\"strip\" data-scenario=\"{}\" width=\"{w}\" height=\"16\" viewBox=\"0 0 {w} 16\" role=\"img\" aria-label=\"outcomes of {}\">",
        esc(&t.id),
        esc(&t.id)
    );
    for (i, o) in t.outcomes.iter().enumerate() {
        let (class, fill) = match o.verdict.as_deref() {
            Some("pass") => ("pass", "#2e9e44"),
            Some("fail") => ("fail", "#d1343a"),
            Some("error") => ("error", "#e08a00"),
            Some(_) => ("na", "#9aa0a6"),
            None => ("none", "#eceff1"),
        };
        svg.push_str(&format!(
            "<rect class=\"cell {class}\" x=\"{}\" y=\"1\" width=\"{}\" height=\"14\" rx=\"2\" fill=\"{fill}\"><title>run #{}: {}</title></rect>",
            i * CELL + 1,
            CELL - 2,
            o.run,
            o.verdict.as_deref().unwrap_or("not run"),
        ));
    }
    svg.push_str("</svg>");
    svg
}

/// A small duration trend line (seconds per run, runs it did not run skipped).
pub fn trend_svg(t: &Trend) -> String {
    let (w, h) = (t.outcomes.len().max(2) * CELL, 28usize);
    let points: Vec<(usize, f64)> = t
        .outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.seconds.map(|s| (i, s)))
        .collect();
    let max = points.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9);
    let coords: Vec<String> = points
        .iter()
        .map(|(i, s)| {
            format!(
                "{:.1},{:.1}",
                (*i * CELL + CELL / 2) as f64,
                (h - 3) as f64 - s / max * (h - 6) as f64
            )
        })
        .collect();
    format!(
        "<svg class=\"trend\" data-scenario=\"{}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"duration of {}\"><polyline fill=\"none\" stroke=\"#3367d6\" stroke-width=\"1.5\" points=\"{}\"/></svg>",
        esc(&t.id),
        esc(&t.id),
        coords.join(" ")
    )
}

/// Styles of the history table, scoped to `.chaos-history`.
const CSS: &str = "
.chaos-history table { border-collapse: collapse; }
.chaos-history th, .chaos-history td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #e0e0e0; vertical-align: middle; }
.chaos-history td.num { text-align: right; white-space: nowrap; }
.chaos-history td.id { font-family: ui-monospace, monospace; }
.chaos-history .why { font-size: 12px; color: #b3261e; font-family: system-ui, sans-serif; max-width: 36em; }
.chaos-history .label { padding: 1px 6px; border-radius: 3px; font-weight: 600; font-size: 12px; white-space: nowrap; }
.chaos-history .label.newfail { background: #d1343a; color: #fff; }
.chaos-history .label.fixed { background: #2e9e44; color: #fff; }
.chaos-history .label.flaky { background: #e08a00; color: #fff; }
.chaos-history .label.fail { background: #f6d5d6; color: #8c1d18; }
.chaos-history .label.pass { background: #d7f0dc; color: #1e6b2f; }
.chaos-history .label.na { background: #eceff1; }
.chaos-history .tr { color: #5f6368; }
";

fn span(s: &Summary) -> String {
    match (s.runs.first(), s.runs.last()) {
        (Some(a), Some(b)) => format!(
            "{} run{}, #{} {} … #{} {} (UTC), latest agent {}",
            s.runs.len(),
            if s.runs.len() == 1 { "" } else { "s" },
            a.id,
            date(a.started_ms),
            b.id,
            date(b.started_ms),
            esc(&b.agent)
        ),
        _ => "no recorded run matches".into(),
    }
}

const LEGEND: &str = "Outcomes oldest left: <span style=\"color:#2e9e44\">■</span> pass <span style=\"color:#d1343a\">■</span> fail <span style=\"color:#e08a00\">■</span> error <span style=\"color:#9aa0a6\">■</span> n/a, pale: not run.";

/// The table: a row per scenario.
fn table(s: &Summary) -> String {
    let mut rows = String::new();
    for t in &s.scenarios {
        let label_class = match t.label {
            Label::NewFail => "newfail",
            Label::Fixed => "fixed",
            Label::Flaky => "flaky",
            Label::Fail => "fail",
            Label::Pass => "pass",
            Label::NotApplicable => "na",
        };
        let failing: Vec<String> = if t.latest == "pass" {
            Vec::new()
        } else {
            t.failing
                .iter()
                .map(|c| {
                    format!(
                        "<div class=\"why\">{} / {}: {}</div>",
                        esc(&c.invariant),
                        esc(&c.name),
                        esc(c.message.lines().next().unwrap_or(""))
                    )
                })
                .collect()
        };
        rows.push_str(&format!(
            "<tr><td class=\"id\">{}{}</td><td><span class=\"label {label_class}\">{}</span></td><td class=\"num\">{}/{}</td><td>{}</td><td>{}</td><td class=\"num\">{} <span class=\"tr\">{}</span></td></tr>\n",
            esc(&t.id),
            failing.join(""),
            t.label.as_str(),
            t.passed,
            t.runs,
            strip_svg(t),
            trend_svg(t),
            t.recent_seconds.map_or("—".into(), |v| format!("{v:.1} s")),
            esc(&trend_text(t)),
        ));
    }
    format!(
        "<table>\n<thead><tr><th>scenario</th><th>label</th><th>passed</th><th>outcomes</th><th>duration</th><th>recent</th></tr></thead>\n<tbody>\n{rows}</tbody></table>\n"
    )
}

/// The history as a section of another page (a run's HTML report).
pub fn section(s: &Summary) -> String {
    format!(
        "<section class=\"chaos-history\">\n<style>{CSS}</style>\n<h2>History</h2>\n<p>{}. {LEGEND}</p>\n{}</section>\n",
        span(s),
        table(s)
    )
}

/// The whole page.
pub fn page(s: &Summary) -> String {
    format!(
        "<!DOCTYPE html>
<html lang=\"en\"><head><meta charset=\"utf-8\">
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">
<title>chaosrun history</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #202124; }}
{CSS}</style></head>
<body>
<h1>chaosrun history</h1>
<div class=\"chaos-history\">
<p>{}. {LEGEND}</p>
{}</div>
</body></html>
",
        span(s),
        table(s)
    )
}

/// Add `section` to the HTML page at `path`, before `</body>` (atomically).
pub fn splice(path: &std::path::Path, section: &str) -> Result<(), String> {
    let page = crate::input::read_input_text(path, crate::input::HTML_PAGE)?;
    let at = page
        .rfind("</body>")
        .ok_or_else(|| format!("{} has no </body>", path.display()))?;
    let spliced = format!("{}{section}{}", &page[..at], &page[at..]);
    crate::output::write_atomic(path, spliced.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
