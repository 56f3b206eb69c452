//! The timeline's legend: the reply kinds the scenario's calls were served,
//! then the marks (turn spans, a call left waiting, the markers, the
//! process area), laid out left to right and wrapped.

use std::fmt::Write as _;

use super::timeline::{LEFT, RIGHT, W};
use super::{
    esc, legend_rank, reply_colour, EXIT_COLOUR, HUNG_COLOUR, INTERRUPT_COLOUR, MISSED_COLOUR,
    PROCS_COLOUR, TURN0_COLOUR, TURN1_COLOUR, WAITING_COLOUR,
};
use crate::provider::recording::Recording;

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

/// The legend from `top` down, and the SVG's height below it.
pub(super) fn legend(rec: &Recording, top: f64) -> (String, f64) {
    let mut flow = Flow { x: LEFT, y: top };
    let mut legend = String::new();
    reply_kinds(&mut legend, &mut flow, rec, top);
    flow.x = LEFT;
    flow.y += 20.0;
    let _ = writeln!(
        legend,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"lane\">marks</text>",
        LEFT - 8.0,
        flow.y + 10.0
    );
    marks(&mut legend, &mut flow);
    (legend, flow.y + 24.0)
}

/// The reply kinds this scenario saw, in the colours' order.
fn reply_kinds(legend: &mut String, flow: &mut Flow, rec: &Recording, top: f64) {
    let mut kinds: Vec<&str> = Vec::new();
    for q in &rec.requests {
        if !kinds.contains(&q.reply.as_str()) {
            kinds.push(&q.reply);
        }
    }
    kinds.sort_by_key(|k| legend_rank(k));
    let _ = writeln!(
        legend,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"lane\">reply kinds</text>",
        LEFT - 8.0,
        top + 10.0
    );
    for k in &kinds {
        let width = 16.0 + k.chars().count() as f64 * 6.6;
        let colour = reply_colour(k);
        flow.place(legend, width, &|x, y| {
            format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"10\" height=\"12\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>\n",
                x + 14.0,
                y + 10.0,
                esc(k)
            )
        });
    }
    if kinds.is_empty() {
        flow.place(legend, 120.0, &|x, y| {
            format!(
                "<text x=\"{x:.1}\" y=\"{:.1}\" class=\"legend\">no provider calls</text>\n",
                y + 10.0
            )
        });
    }
}

/// The turn spans, a call left waiting, the marker lines and the process area.
fn marks(legend: &mut String, flow: &mut Flow) {
    let swatches: [(&str, &str, &str); 3] = [
        ("turn 0 (faulted)", TURN0_COLOUR, "#546e7a"),
        ("turn 1 (probe)", TURN1_COLOUR, "#546e7a"),
        ("turn never ended", HUNG_COLOUR, MISSED_COLOUR),
    ];
    for (name, fill, stroke) in swatches {
        let width = 24.0 + name.chars().count() as f64 * 6.6;
        flow.place(legend, width, &|x, y| {
            format!(
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"18\" height=\"12\" rx=\"2\" fill=\"{fill}\" stroke=\"{stroke}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>\n",
                x + 22.0,
                y + 10.0,
                esc(name)
            )
        });
    }
    let name = "call left waiting";
    flow.place(legend, 24.0 + name.len() as f64 * 6.6, &|x, y| {
        format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"18\" height=\"8\" fill=\"{}\" fill-opacity=\"0.3\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{name}</text>\n",
            y + 2.0,
            WAITING_COLOUR,
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
        flow.place(legend, width, &|x, y| {
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
    flow.place(legend, 150.0, &|x, y| {
        format!(
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"18\" height=\"12\" fill=\"{PROCS_COLOUR}\" fill-opacity=\"0.35\" stroke=\"{PROCS_COLOUR}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">tagged processes</text>\n",
            x + 22.0,
            y + 10.0
        )
    });
}
