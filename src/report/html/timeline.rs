//! The inline SVG timeline of one scenario on its run clock: lanes for the
//! two turns, main calls, probe/aux calls and the tagged processes alive;
//! the axis; turn spans (a hung one in its own colour), under each an exec
//! turn's start-up band; bands where a call was left waiting; a mark per
//! provider call; the process step area. The vertical markers are
//! [`super::marks`], the legend [`super::legend`].

use std::fmt::Write as _;

use super::marks;
use super::{
    esc, reply_colour, HUNG_COLOUR, LABEL_ROWS, MISSED_COLOUR, PROCS_COLOUR, START_UP_COLOUR,
    TURN0_COLOUR, TURN1_COLOUR,
};
use crate::observe::{Event, Observation, Phase};
use crate::provider::recording::{CallKind, Recording};
use crate::runner::ScenarioResult;

/// Geometry of one timeline.
pub(super) struct Frame {
    pub left: f64,
    pub width: f64,
    pub t_max: f64,
}

impl Frame {
    pub fn x(&self, t: f64) -> f64 {
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

pub(super) fn secs(t: f64) -> String {
    if (t - t.round()).abs() < 1e-9 {
        format!("{t:.0}")
    } else if (t * 10.0 - (t * 10.0).round()).abs() < 1e-6 {
        format!("{t:.1}")
    } else {
        format!("{t:.2}")
    }
}

pub(super) const W: f64 = 1160.0;
pub(super) const LEFT: f64 = 150.0;
pub(super) const RIGHT: f64 = 20.0;
const TOP: f64 = 8.0 + LABEL_ROWS * 15.0;
const LANE: f64 = 28.0;
const PROC_LANE: f64 = 64.0;

/// What one timeline is drawn from, and where its lanes are.
struct Timeline<'a> {
    obs: &'a Observation,
    rec: &'a Recording,
    /// Add to a request's `at` to put it on the run clock.
    off: f64,
    f: Frame,
    /// Deadlines that lie far past what was seen: noted, not drawn.
    far: Vec<String>,
    /// (when, seconds) of the faulted turn's and the interrupt's deadlines.
    turn_deadline: Option<(f64, f64)>,
    interrupt_deadline: Option<(f64, f64)>,
    /// When a turn that never ended was stopped (a missed deadline, the exit).
    stop: f64,
    turn0_y: f64,
    turn1_y: f64,
    main_y: f64,
    other_y: f64,
    procs_y: f64,
    axis_y: f64,
    body: String,
}

/// The inline SVG timeline of one scenario.
pub fn timeline(r: &ScenarioResult, deadlines: &[(Phase, f64)]) -> String {
    let mut tl = Timeline::new(r, deadlines);
    tl.lanes();
    tl.grid();
    tl.turns();
    tl.waiting();
    tl.calls();
    tl.procs();
    let markers = marks::markers(
        tl.obs,
        [
            ("turn deadline", tl.turn_deadline),
            ("interrupt deadline", tl.interrupt_deadline),
        ],
        tl.f.t_max,
    );
    marks::draw(&mut tl.body, &markers, &tl.f, tl.axis_y);
    if !tl.far.is_empty() {
        let _ = writeln!(
            tl.body,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick\">{}</text>",
            W - RIGHT,
            tl.axis_y + 34.0,
            esc(&tl.far.join(" · "))
        );
    }
    let (legend, height) = super::legend::legend(tl.rec, tl.axis_y + 48.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg class=\"timeline\" data-scenario=\"{}\" viewBox=\"0 0 {W:.0} {height:.0}\" role=\"img\" aria-label=\"{}\">",
        esc(&r.id),
        esc(&format!("timeline of {}", r.id))
    );
    svg.push_str("<style>text{font-family:system-ui,\"DejaVu Sans\",Arial,sans-serif;font-size:12px;fill:#263238}.tick{font-size:11px;fill:#546e7a}.axis{font-size:12px;fill:#37474f}.lane{font-weight:600}.mark{font-size:12px;font-weight:600}.span{font-size:12px}</style>\n");
    svg.push_str(&tl.body);
    svg.push_str(&legend);
    svg.push_str("</svg>\n");
    svg
}

impl<'a> Timeline<'a> {
    /// The extent of what was seen, the deadlines near it, and the lanes.
    fn new(r: &'a ScenarioResult, deadlines: &[(Phase, f64)]) -> Timeline<'a> {
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

        // Deadlines: the faulted turn's from where its clock starts (the
        // observation's turn model: the oracle's start too); the
        // interrupt's from the moment it was sent.
        let turn_deadline = obs
            .clock_start(0)
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
        let stop = obs
            .find(|e| {
                matches!(e, Event::DeadlineMissed { .. } | Event::Exited { .. }).then_some(())
            })
            .map(|(t, _)| t)
            .unwrap_or(t_end);
        let turn0_y = TOP;
        let procs_y = turn0_y + 4.0 * LANE;
        Timeline {
            obs,
            rec,
            off,
            f: Frame {
                left: LEFT,
                width: W - LEFT - RIGHT,
                t_max,
            },
            far,
            turn_deadline,
            interrupt_deadline,
            stop,
            turn0_y,
            turn1_y: turn0_y + LANE,
            main_y: turn0_y + 2.0 * LANE,
            other_y: turn0_y + 3.0 * LANE,
            procs_y,
            axis_y: procs_y + PROC_LANE,
            body: String::new(),
        }
    }

    /// Lane backgrounds and labels.
    fn lanes(&mut self) {
        let rec = self.rec;
        let lane_defs = [
            (self.turn0_y, LANE, "turn 0 · faulted".to_string()),
            (self.turn1_y, LANE, "turn 1 · probe".to_string()),
            (
                self.main_y,
                LANE,
                format!("main calls ({})", rec.main_calls),
            ),
            (
                self.other_y,
                LANE,
                format!("probe / aux calls ({})", rec.probe_calls + rec.aux_calls),
            ),
            (self.procs_y, PROC_LANE, "tagged processes".to_string()),
        ];
        for (i, (y, hgt, label)) in lane_defs.iter().enumerate() {
            let fill = if i % 2 == 0 { "#f5f7f9" } else { "#ffffff" };
            let _ = writeln!(
                self.body,
                "<rect x=\"{LEFT}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{hgt:.1}\" fill=\"{fill}\"/>",
                self.f.width
            );
            let _ = writeln!(
                self.body,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"lane\">{}</text>",
                LEFT - 8.0,
                y + hgt / 2.0 + 4.0,
                esc(label)
            );
        }
    }

    /// Grid and axis.
    fn grid(&mut self) {
        let (t_max, lanes_top, axis_y) = (self.f.t_max, self.turn0_y, self.axis_y);
        let step = tick_step(t_max);
        let mut t = 0.0;
        while t <= t_max + 1e-9 {
            let x = self.f.x(t);
            let _ = writeln!(
                self.body,
                "<line x1=\"{x:.1}\" y1=\"{lanes_top:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#e0e0e0\"/>",
                axis_y + 4.0
            );
            let _ = writeln!(
                self.body,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"tick\">{} s</text>",
                axis_y + 17.0,
                secs(t)
            );
            t += step;
        }
        let _ = writeln!(
            self.body,
            "<line x1=\"{LEFT}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"#424242\"/>",
            LEFT + self.f.width
        );
        let _ = writeln!(
            self.body,
            "<text x=\"{LEFT:.1}\" y=\"{:.1}\" class=\"axis\">seconds since the scenario started (run clock) →</text>",
            axis_y + 34.0
        );
    }

    /// Exec mode: the turn's start-up, from its process's spawn (the turn's
    /// start) to its first provider call, as a pale band under the turn's
    /// span; its deadline is the boot deadline, not the turn's.
    fn start_up(&mut self, i: u64, start: f64, end_t: f64, lane_y: f64) {
        let Some((first, after_spawn)) = self.obs.turn_model().start_up(self.obs, i) else {
            return;
        };
        let until = first.min(end_t);
        if until <= start {
            return;
        }
        let (x0, x1) = (self.f.x(start), self.f.x(until));
        let _ = writeln!(
            self.body,
            "<rect class=\"start-up\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"4\" fill=\"{START_UP_COLOUR}\"><title>{}</title></rect>",
            lane_y + LANE - 4.0,
            (x1 - x0).max(1.0),
            esc(&format!(
                "turn {i} start-up: first provider call {} s after the spawn (bounded by the boot deadline; the turn's deadline runs from the call)",
                fmt1(after_spawn)
            ))
        );
    }

    /// Turns: 0 (faulted) and 1 (probe). A turn that never ended runs to the
    /// next thing that ended it (missed deadline, exit) in the hung colour.
    fn turns(&mut self) {
        for (i, name, colour, lane_y) in [
            (0, "turn 0 (faulted)", TURN0_COLOUR, self.turn0_y),
            (1, "turn 1 (probe)", TURN1_COLOUR, self.turn1_y),
        ] {
            self.turn(i, name, colour, lane_y);
        }
    }

    fn turn(&mut self, i: u64, name: &str, colour: &'static str, lane_y: f64) {
        let (obs, stop) = (self.obs, self.stop);
        let Some(start) = obs.turn_start(i) else {
            return;
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
        let (x0, x1) = (self.f.x(start), self.f.x(end_t));
        self.start_up(i, start, end_t, lane_y);
        let stroke = if fill == HUNG_COLOUR {
            MISSED_COLOUR
        } else {
            "#546e7a"
        };
        let _ = writeln!(
            self.body,
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
            self.body,
            "<text x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" class=\"span\">{}</text>",
            lane_y + LANE / 2.0 + 4.0,
            esc(&label)
        );
    }

    /// A main call answered with a reply that never completes is left waiting
    /// until the agent's next request or the end of the faulted turn: a faint
    /// band in its colour shows where the turn sat on it.
    fn waiting(&mut self) {
        let (obs, rec, off) = (self.obs, self.rec, self.off);
        let turn0_stop = obs.turn_end(0).map(|(t, _)| t).unwrap_or(self.stop);
        for (n, q) in rec.requests.iter().enumerate() {
            if q.kind != CallKind::Main || !crate::provider::Reply::waits(&q.reply) {
                continue;
            }
            let t = q.at + off;
            let until = rec.requests[n + 1..]
                .iter()
                .map(|r| r.at + off)
                .find(|u| *u >= t)
                .unwrap_or(turn0_stop)
                .max(t);
            let (x0, x1) = (self.f.x(t), self.f.x(until));
            if x1 - x0 < 2.0 {
                continue;
            }
            let _ = writeln!(
                self.body,
                "<rect class=\"waiting\" x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" fill-opacity=\"0.22\"><title>{}</title></rect>",
                self.main_y + 9.0,
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
    }

    /// Provider calls: a mark each, in the main or the probe/aux lane.
    fn calls(&mut self) {
        for q in &self.rec.requests {
            let y = if q.kind == CallKind::Main {
                self.main_y
            } else {
                self.other_y
            };
            let t = q.at + self.off;
            let x = self.f.x(t);
            let what = match (q.kind, q.main_index) {
                (CallKind::Main, Some(i)) => format!("main call #{i}"),
                (CallKind::Main, None) => "main call".to_string(),
                (CallKind::Probe, _) => "probe call".to_string(),
                (CallKind::Aux, _) => "aux call".to_string(),
                (CallKind::Subagent, Some(i)) => format!("subagent call #{i}"),
                (CallKind::Subagent, None) => "subagent call".to_string(),
            };
            let _ = writeln!(
                self.body,
                "<rect class=\"call\" x=\"{:.1}\" y=\"{:.1}\" width=\"3\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                x - 1.5,
                y + 5.0,
                LANE - 10.0,
                reply_colour(&q.reply),
                esc(&format!("{what} at {} s: {}", fmt1(t), q.reply))
            );
        }
    }

    /// Tagged processes alive: a step area.
    fn procs(&mut self) {
        let (obs, procs_y, t_max) = (self.obs, self.procs_y, self.f.t_max);
        let samples = &obs.proc_samples;
        if samples.is_empty() {
            let _ = writeln!(
                self.body,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\">no samples</text>",
                LEFT + 6.0,
                procs_y + PROC_LANE / 2.0 + 4.0
            );
            return;
        }
        let max_count = samples.iter().map(|s| s.count).max().unwrap_or(0);
        let scale_max = max_count.max(1) as f64;
        let py = |c: usize| procs_y + PROC_LANE - 4.0 - (c as f64 / scale_max) * (PROC_LANE - 10.0);
        let base = py(0);
        let mut d = format!("M{:.1},{base:.1}", self.f.x(samples[0].at));
        for (i, s) in samples.iter().enumerate() {
            let x = self.f.x(s.at);
            if i > 0 {
                let _ = write!(d, " H{x:.1}");
            } else {
                let _ = write!(d, " L{x:.1},{base:.1}");
            }
            let _ = write!(d, " V{:.1}", py(s.count));
        }
        // The last sample holds for one sampling interval (or to the end).
        let n = samples.len();
        let last = samples[n - 1].at;
        let interval = if n > 1 {
            (last - samples[0].at) / (n - 1) as f64
        } else {
            0.5
        };
        let _ = write!(
            d,
            " H{:.1} V{base:.1} Z",
            self.f.x((last + interval).min(t_max))
        );
        let _ = writeln!(
            self.body,
            "<path class=\"procs\" d=\"{d}\" fill=\"{PROCS_COLOUR}\" fill-opacity=\"0.35\" stroke=\"{PROCS_COLOUR}\" stroke-width=\"1.5\"><title>{}</title></path>",
            esc(&format!(
                "tagged processes alive (agent included), sampled {} times; at most {max_count}",
                n
            ))
        );
        let labels: &[usize] = if max_count > 0 { &[0, max_count] } else { &[0] };
        for &c in labels {
            let _ = writeln!(
                self.body,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"tick\">{c}</text>",
                LEFT - 3.0,
                py(c) + 4.0
            );
        }
        if max_count == 0 {
            let _ = writeln!(
                self.body,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"tick\">no tagged process seen in {} sample(s), taken every ~0.5 s</text>",
                LEFT + 6.0,
                procs_y + PROC_LANE / 2.0 + 4.0,
                n
            );
        }
    }
}

/// Seconds for a label: one decimal, two below a second.
pub(super) fn fmt1(t: f64) -> String {
    if t.abs() < 1.0 {
        format!("{t:.2}")
    } else {
        format!("{t:.1}")
    }
}
