//! Reporters: consumers of [`RunEvent`]s that never re-run any logic. The text
//! reporter prints one line per finished scenario, then every violation with its
//! evidence, then the closing `N passed, N failed` line; the progress display
//! shows what is running while it runs. The JSON (`--json`), JUnit XML
//! (`--junit`) and HTML (`--html`, one self-contained page with a timeline per
//! scenario) reporters write files. The JSON report's document is typed in
//! [`document`], shared by `--json`, `merge`, `matrix` and `judge --json`.

pub mod document;
pub mod html;
pub mod json;
pub mod junit;
pub mod matrix;
pub mod merge;
pub mod progress;
pub mod text;

#[cfg(test)]
pub(crate) mod test_support;

use crate::runner::RunEvent;

/// Something that consumes run events.
pub trait Reporter: Send {
    fn on(&mut self, event: &RunEvent);
}

/// Feed every event to every reporter, in order.
pub struct Fanout(pub Vec<Box<dyn Reporter>>);

impl Reporter for Fanout {
    fn on(&mut self, event: &RunEvent) {
        for r in &mut self.0 {
            r.on(event);
        }
    }
}
