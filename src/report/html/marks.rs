//! The timeline's vertical markers (the interrupt, missed deadlines, the
//! exit or chaosrun's kill, the kernel's OOM kill, and the deadlines near what was seen), each
//! labelled in a row above the lanes.

use std::fmt::Write as _;

use super::timeline::{fmt1, secs, Frame, W};
use super::{esc, EXIT_COLOUR, INTERRUPT_COLOUR, LABEL_ROWS, MISSED_COLOUR};
use crate::observe::{Event, Observation};

/// A vertical marker across the lanes, labelled above them.
pub(super) struct Marker {
    t: f64,
    colour: &'static str,
    dashed: bool,
    label: String,
    tip: String,
}

/// The markers of `obs`, and of each deadline `(what, (when, seconds))`
/// that falls before `t_max`, in time order.
pub(super) fn markers(
    obs: &Observation,
    deadlines: [(&str, Option<(f64, f64)>); 2],
    t_max: f64,
) -> Vec<Marker> {
    let mut markers: Vec<Marker> = obs
        .events
        .iter()
        .filter_map(|e| event_marker(e.at, &e.event))
        .collect();
    for (what, dl) in deadlines {
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
    markers
}

/// The marker of an event at `at`, if it has one.
fn event_marker(at: f64, event: &Event) -> Option<Marker> {
    Some(match event {
        Event::InterruptSent { main_calls } => Marker {
            t: at,
            colour: INTERRUPT_COLOUR,
            dashed: false,
            label: "interrupt".into(),
            tip: format!(
                "interrupt sent at {} s, after {main_calls} main calls",
                fmt1(at)
            ),
        },
        Event::DeadlineMissed { phase, seconds } => Marker {
            t: at,
            colour: MISSED_COLOUR,
            dashed: false,
            label: format!("✕ {} deadline missed", phase.label()),
            tip: format!(
                "the {} deadline ({} s) passed at {} s",
                phase.label(),
                secs(*seconds),
                fmt1(at)
            ),
        },
        Event::Exited {
            code,
            signal,
            killed_by_chaosrun,
        } => Marker {
            t: at,
            colour: EXIT_COLOUR,
            dashed: false,
            label: if *killed_by_chaosrun {
                "killed".into()
            } else {
                "exit".into()
            },
            tip: format!(
                "agent exited at {} s (code {code:?}, signal {signal:?}{})",
                fmt1(at),
                if *killed_by_chaosrun {
                    ", killed by chaosrun"
                } else {
                    ""
                }
            ),
        },
        Event::OomKill {
            via,
            usage_mb,
            limit_mb,
            oom_kills,
            ..
        } if *oom_kills > 0 => Marker {
            t: at,
            colour: EXIT_COLOUR,
            dashed: false,
            label: "OOM kill".into(),
            tip: format!(
                "the kernel OOM-killed {oom_kills} process(es) under a {limit_mb} MB limit ({via}; {usage_mb} MB in use when it was set), seen at {} s",
                fmt1(at)
            ),
        },
        _ => return None,
    })
}

/// Draw `markers` down to `axis_y`, their labels in rows above the lanes,
/// each row filled left to right.
pub(super) fn draw(body: &mut String, markers: &[Marker], f: &Frame, axis_y: f64) {
    let mut row_ends = [f64::NEG_INFINITY; LABEL_ROWS as usize];
    for m in markers {
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
}
