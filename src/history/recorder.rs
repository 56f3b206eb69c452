//! `--history DB` on a run: a reporter that collects each finished scenario
//! and, when the run finishes, writes the whole run in one transaction. It
//! never decides anything; the outcome of the write is handed back through
//! [`Written`] so the command line can exit 2 after the verdict is printed.
//! An interrupted run (no `Finished` event) has no verdict and is not recorded.
//! With the run's own `--html` report, once the run is recorded, the history
//! of this agent's last runs (this one included) is added to that page.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{meta, RunRecord, ScenarioRecord, Store};
use crate::report::Reporter;
use crate::runner::RunEvent;

/// What describes the run being recorded.
pub struct RunMeta<'a> {
    pub table: &'a Path,
    /// As in the JSON report: the profile's source, or `bundled`.
    pub agent: String,
    /// As in the JSON report's `agent_version` (`None`: not known).
    pub agent_version: Option<String>,
    pub seed: u64,
    /// `(K, N)` for a shard.
    pub shard: Option<(usize, usize)>,
    /// The run's `--html` report, which gains the history section.
    pub html_report: Option<&'a Path>,
}

/// The outcome of the write, once the run finished: the run's row id or why
/// it could not be written.
#[derive(Clone, Default)]
pub struct Written(Arc<Mutex<Option<Result<i64, String>>>>);

impl Written {
    pub fn take(&self) -> Option<Result<i64, String>> {
        self.0.lock().ok().and_then(|mut g| g.take())
    }
}

pub struct Recorder {
    store: Store,
    run: RunRecord,
    written: Written,
    html_report: Option<PathBuf>,
}

/// Open (creating and migrating) the history before the run starts, so a bad
/// DB is an error before any agent runs; gather the run's metadata.
pub fn open(db: &str, m: RunMeta<'_>) -> Result<(Recorder, Written), String> {
    let store = Store::open(db, true)?;
    let agent_version = m.agent_version;
    let html_report = m.html_report;
    let run = RunRecord {
        chaosrun_version: meta::CHAOSRUN_VERSION.to_string(),
        table_path: Some(m.table.display().to_string()),
        table_sha256: Some(meta::table_sha256(m.table)?),
        agent: m.agent,
        agent_version,
        seed: Some(m.seed.to_string()),
        shard: m.shard.map(|(k, n)| format!("{k}/{n}")),
        started_ms: meta::now_ms(),
        finished_ms: 0,
        ci: meta::Ci::from_env(),
        scenarios: Vec::new(),
    };
    let written = Written::default();
    Ok((
        Recorder {
            store,
            run,
            written: written.clone(),
            html_report: html_report.map(Path::to_path_buf),
        },
        written,
    ))
}

impl Recorder {
    fn write(&mut self) {
        self.run.finished_ms = meta::now_ms();
        let t = Instant::now();
        let r = self.store.record(&self.run);
        if let Ok(id) = &r {
            crate::say_err!(
                "chaosrun: history: recorded run #{id} in {} ({} ms)",
                self.store.shown(),
                t.elapsed().as_millis()
            );
        }
        if r.is_ok() {
            if let Some(page) = self.html_report.clone() {
                if let Err(e) = self.add_to_report(&page) {
                    crate::say_err!("chaosrun: warning: no history in the HTML report: {e}");
                }
            }
        }
        if let Ok(mut g) = self.written.0.lock() {
            *g = Some(r);
        }
    }

    /// This agent's last runs, as a section of the run's HTML report.
    fn add_to_report(&mut self, page: &Path) -> Result<(), String> {
        let window = self.store.window(&super::store::Filter {
            last: 30,
            agent: Some(self.run.agent.clone()),
            since_ms: None,
        })?;
        let summary = super::analyze::summarize(&window);
        super::html::splice(page, &super::html::section(&summary))
    }
}

impl Reporter for Recorder {
    fn on(&mut self, event: &RunEvent) {
        match event {
            RunEvent::ScenarioFinished(r) => {
                self.run.scenarios.push(ScenarioRecord::from_result(r));
            }
            RunEvent::Finished { .. } => self.write(),
            _ => {}
        }
    }
}

/// `merge --history DB`: record the merged report as one run.
pub fn record_report(
    store: &mut Store,
    doc: &crate::report::document::Report,
) -> Result<i64, String> {
    let run = RunRecord::from_report(doc);
    store.record(&run)
}
