//! Live progress on a terminal (indicatif): an overall bar with done, failed
//! (errors included) and running counts, and one line per running scenario with its phase and elapsed
//! time against the phase's deadline. [`Live`] prints another reporter's lines
//! above the bars (bars hidden while it writes), so the two never garble.

use std::collections::HashMap;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Reporter;
use crate::runner::RunEvent;

pub struct Progress {
    multi: MultiProgress,
    overall: ProgressBar,
    running: HashMap<String, ProgressBar>,
    done: u64,
    failed: u64,
}

impl Progress {
    /// Draws on stderr.
    pub fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(0));
        overall.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} done  {msg}")
                .expect("valid template"),
        );
        overall.enable_steady_tick(Duration::from_millis(200));
        Progress {
            multi,
            overall,
            running: HashMap::new(),
            done: 0,
            failed: 0,
        }
    }

    fn summary(&self) {
        self.overall.set_message(format!(
            "{} failed, {} running",
            self.failed,
            self.running.len()
        ));
    }

    /// Run `f` with the bars hidden (for printing lines above them).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.multi.suspend(f)
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

impl Reporter for Progress {
    fn on(&mut self, event: &RunEvent) {
        match event {
            RunEvent::Started { total, .. } => self.overall.set_length(*total as u64),
            RunEvent::ScenarioStarted { id } => {
                let bar = self.multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {prefix:40} {msg}")
                        .expect("valid template"),
                );
                bar.set_prefix(id.clone());
                bar.enable_steady_tick(Duration::from_millis(200));
                self.running.insert(id.clone(), bar);
                self.summary();
            }
            RunEvent::Phase {
                id,
                phase,
                deadline,
            } => {
                if let Some(bar) = self.running.get(id) {
                    bar.reset_elapsed();
                    bar.set_style(
                        ProgressStyle::with_template(&format!(
                            "  {{spinner}} {{prefix:40}} {:<13} {{elapsed}} / {deadline:.0}s",
                            phase.label()
                        ))
                        .expect("valid template"),
                    );
                }
            }
            RunEvent::ScenarioFinished(r) => {
                if let Some(bar) = self.running.remove(&r.id) {
                    bar.finish_and_clear();
                    self.multi.remove(&bar);
                }
                self.done += 1;
                if !r.passed() && !matches!(r.verdict, crate::runner::Verdict::NotApplicable { .. })
                {
                    self.failed += 1;
                }
                self.overall.set_position(self.done);
                self.summary();
            }
            RunEvent::Finished { .. } => {
                self.overall.finish_and_clear();
            }
            RunEvent::Warning(_) => {}
        }
    }
}

/// Progress bars plus a line reporter printing above them.
pub struct Live<R: Reporter> {
    pub progress: Progress,
    pub lines: R,
}

impl<R: Reporter> Reporter for Live<R> {
    fn on(&mut self, event: &RunEvent) {
        if matches!(event, RunEvent::Finished { .. }) {
            self.progress.on(event);
            self.lines.on(event);
            return;
        }
        let lines = &mut self.lines;
        self.progress.suspend(|| lines.on(event));
        self.progress.on(event);
    }
}
