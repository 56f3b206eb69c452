//! The text and JSON forms of `chaosrun history`'s answer.

use super::analyze::{Label, Summary, Trend};

/// `2026-11-29 03:17` (UTC) for Unix milliseconds.
pub fn date(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|| "?".into())
}

/// One character per run: `+` pass, `x` fail, `E` error, `-` n/a, `.` not run.
pub fn strip(t: &Trend) -> String {
    t.outcomes
        .iter()
        .map(|o| match o.verdict.as_deref() {
            Some("pass") => '+',
            Some("fail") => 'x',
            Some("error") => 'E',
            Some(_) => '-',
            None => '.',
        })
        .collect()
}

/// `+12%`, `-3%`, or `—` without a trend.
pub fn trend_text(t: &Trend) -> String {
    match t.duration_trend {
        Some(f) => format!("{:+.0}%", f * 100.0),
        None => "—".into(),
    }
}

fn run_ref(s: &Summary, id: i64) -> String {
    match s.runs.iter().find(|r| r.id == id) {
        Some(r) => format!("#{id} {}", date(r.started_ms)),
        None => format!("#{id}"),
    }
}

/// The text answer: a header, a line per scenario with its strip (oldest
/// run left), the failing checks of new and known failures, and the counts.
pub fn text(s: &Summary) -> String {
    let mut out = String::new();
    let (Some(first), Some(last)) = (s.runs.first(), s.runs.last()) else {
        return "chaosrun history: no recorded run matches\n".into();
    };
    out.push_str(&format!(
        "chaosrun history: {} run{} (#{} {} … #{} {}), latest agent {}{}\n\n",
        s.runs.len(),
        if s.runs.len() == 1 { "" } else { "s" },
        first.id,
        date(first.started_ms),
        last.id,
        date(last.started_ms),
        last.agent,
        last.agent_version
            .as_deref()
            .map(|v| format!(" ({v})"))
            .unwrap_or_default(),
    ));
    let mut agents: Vec<&str> = s.runs.iter().map(|r| r.agent.as_str()).collect();
    agents.sort_unstable();
    agents.dedup();
    if agents.len() > 1 {
        out.push_str(&format!(
            "note: these runs are of {} agents ({}); pick one with --agent\n\n",
            agents.len(),
            agents.join(", ")
        ));
    }
    let width = s
        .scenarios
        .iter()
        .map(|t| t.id.len())
        .max()
        .unwrap_or(8)
        .max(8);
    out.push_str(&format!(
        "{:<width$}  {:<8}  {:>7}  {:<24}  {:>8}  {:>6}  RUNS (oldest first: + pass, x fail, E error, . not run)\n",
        "SCENARIO", "LABEL", "PASS", "LAST CHANGE", "SECONDS", "TREND"
    ));
    for t in &s.scenarios {
        out.push_str(&format!(
            "{:<width$}  {:<8}  {:>7}  {:<24}  {:>8}  {:>6}  {}\n",
            t.id,
            t.label.as_str(),
            format!("{}/{}", t.passed, t.runs),
            t.changed_in.map_or("—".into(), |id| run_ref(s, id)),
            t.recent_seconds.map_or("—".into(), |v| format!("{v:.1}")),
            trend_text(t),
            strip(t),
        ));
        if matches!(t.label, Label::NewFail | Label::Fail | Label::Flaky) && t.latest != "pass" {
            for c in &t.failing {
                let first_line = c.message.lines().next().unwrap_or("");
                out.push_str(&format!(
                    "{:width$}    {} / {} ({}): {first_line}\n",
                    "",
                    c.invariant,
                    c.name,
                    c.status.replace('_', " ")
                ));
            }
        }
    }
    let count = |l: Label| s.scenarios.iter().filter(|t| t.label == l).count();
    out.push_str(&format!(
        "\n{} new failure{}, {} fixed, {} flaky, {} failing (known), {} passing\n",
        count(Label::NewFail),
        if count(Label::NewFail) == 1 { "" } else { "s" },
        count(Label::Fixed),
        count(Label::Flaky),
        count(Label::Fail),
        count(Label::Pass),
    ));
    out
}

/// The JSON answer (`chaosrun-history/1`), pretty-printed.
pub fn json(s: &Summary) -> String {
    serde_json::to_string_pretty(s).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::analyze::summarize;
    use crate::history::store::{RunRow, ScenarioRow, Window};
    use crate::history::CheckRecord;

    /// Five nightly runs from 2026-11-01 03:00 UTC: a regression, a fix, a
    /// flake, a known failure and a steady pass getting slower.
    fn window() -> Window {
        let night = |i: i64| 1_793_502_000_000 + i * 86_400_000;
        let runs = (0..5)
            .map(|i| RunRow {
                id: 40 + i,
                started_ms: night(i),
                agent: "examples/hermes/hermes".into(),
                agent_version: Some("hermes 0.4.1".into()),
                commit: None,
                run_url: None,
            })
            .collect();
        let seqs = [
            ("provider_400_forever", "PPPPF"),
            ("provider_hang", "FFFFP"),
            ("tool_hang_past_timeout", "PFPPF"),
            ("store_locked", "PPFFF"),
            ("slow_stream_healthy", "PPPPP"),
        ];
        let mut rows = Vec::new();
        for (s, (id, seq)) in seqs.iter().enumerate() {
            for (i, c) in seq.chars().enumerate() {
                let failing = if c == 'F' && i == 4 {
                    vec![CheckRecord {
                        invariant: "provider_calls".into(),
                        name: "call_bound".into(),
                        status: "fail".into(),
                        message: "the faulted turn made 3 provider calls; the bound is 2\nmore"
                            .into(),
                    }]
                } else {
                    vec![]
                };
                rows.push(ScenarioRow {
                    run_id: 40 + i as i64,
                    scenario: id.to_string(),
                    attempt: 1,
                    verdict: if c == 'P' { "pass" } else { "fail" }.into(),
                    seconds: 1.0 + s as f64 + i as f64 * 0.25,
                    main_calls: 2,
                    failing,
                    row_id: (s * 10 + i) as i64,
                });
            }
        }
        Window { runs, rows }
    }

    #[test]
    fn text_of_a_week_of_nights() {
        insta::assert_snapshot!(text(&summarize(&window())));
    }

    #[test]
    fn json_round_trips_with_its_schema_name() {
        let v: serde_json::Value = serde_json::from_str(&json(&summarize(&window()))).unwrap();
        assert_eq!(v["schema"], "chaosrun-history/1");
        assert_eq!(v["new_failures"], 1);
        assert_eq!(v["scenarios"][0]["label"], "NEW FAIL");
    }
}
