//! The page around the timelines: the head, the summary table (errors and
//! failures first), and per scenario a section with its checks, its
//! timeline ([`super::timeline`]) and the facts (turn ends, exit, survivors,
//! artifacts, stderr tail).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::{esc, timeline, CSS};
use crate::observe::{Event, Phase};
use crate::oracle::clip;
use crate::runner::{ScenarioResult, Stats, Verdict};

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
            Some(d) => clip(&d, 200),
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
    checks(h, r);
    h.push_str(&timeline(r, deadlines.unwrap_or_default()));
    facts(h, r);
    if !obs.stderr_tail.trim().is_empty() {
        let _ = writeln!(
            h,
            "<div>agent stderr (tail)</div><pre>{}</pre>",
            esc(obs.stderr_tail.trim_end())
        );
    }
    h.push_str("</details>\n</section>\n");
}

/// The verdict's detail, each failed check with its violations, what was
/// not checked, and how many passed.
fn checks(h: &mut String, r: &ScenarioResult) {
    h.push_str("<ul class=\"checks\">\n");
    if let Some(d) = r.verdict.detail() {
        let what = match r.verdict {
            Verdict::Error { .. } => "chaosrun could not run it",
            _ => "not applicable",
        };
        let _ = writeln!(
            h,
            "<li>✗ <b>{what}</b>: <span class=\"violation\">{}</span></li>",
            esc(&d)
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
    if let Some(p) = crate::oracle::memory::peak(&r.observation) {
        let _ = writeln!(h, "<li>peak memory {:.0} MB ({})</li>", p.mb(), p.source);
    }
    let _ = writeln!(
        h,
        "<li>✓ {passed} of {} checks passed</li>\n</ul>",
        r.checks.len()
    );
}

/// How turn `i` ended (or that it never did), for the facts list.
fn turn_fact(obs: &crate::observe::Observation, i: u64) -> String {
    match obs.turn_end(i) {
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
    }
}

/// The facts list: each turn's end, the exit, a setup error, survivors and
/// where the artifacts are.
fn facts(h: &mut String, r: &ScenarioResult) {
    let obs = &r.observation;
    h.push_str("<dl class=\"facts\">\n");
    for (i, what) in [(0, "faulted turn"), (1, "probe turn")] {
        let _ = writeln!(h, "<dt>{what}</dt><dd>{}</dd>", esc(&turn_fact(obs, i)));
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
    if let Some(err) = &obs.run_error {
        let _ = writeln!(h, "<dt>run error</dt><dd>{}</dd>", esc(err));
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
}
