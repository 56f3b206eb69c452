//! Running a table: scenarios run concurrently (bounded by `jobs`), each in its
//! own directory with its own provider and agent; each result is judged by the
//! oracle and emitted as a [`RunEvent`]. Artifacts are kept for failures (or
//! all) when asked.

pub mod chaos;
mod drive;
pub mod events;
pub mod sampler;
pub mod scenario;
pub mod store;
mod turns;

pub use events::{RunEvent, ScenarioResult};
pub use scenario::Shared;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, Semaphore};

use crate::observe::Capabilities;
use crate::scenarios::Scenario;

/// How a run is carried out.
#[derive(Debug, Clone)]
pub struct Options {
    pub jobs: usize,
    /// Keep artifacts under this directory (for failures; all with `keep_all`).
    pub artifacts: Option<PathBuf>,
    pub keep_all: bool,
    /// Fixes every random choice (nonces).
    pub seed: u64,
    /// Runs of each scenario (`--repeat`), at least 1.
    pub repeat: u32,
}

/// Run `scenarios`, emitting events; returns the results in table order.
pub async fn run_all(
    shared: Arc<Shared>,
    scenarios: Vec<Scenario>,
    opts: Options,
    events: mpsc::UnboundedSender<RunEvent>,
) -> Vec<ScenarioResult> {
    let started = tokio::time::Instant::now();
    let jobs = opts.jobs.max(1);
    let repeat = opts.repeat.max(1);
    let _ = events.send(RunEvent::Started {
        total: scenarios.len() * repeat as usize,
        jobs,
    });
    let reaper = tokio::spawn(async {
        loop {
            crate::proc_hygiene::reap_orphans();
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let sampler = sampler::Sampler::start(Duration::from_millis(500));
    let caps = Capabilities {
        breaker: shared.profile.breaker,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    let limit = Arc::new(Semaphore::new(jobs));
    let mut tasks = Vec::new();
    let runs = scenarios
        .into_iter()
        .flat_map(|s| (1..=repeat).map(move |attempt| (s.clone(), attempt)));
    for (n, (s, attempt)) in runs.enumerate() {
        let ids = scenario::Ids {
            tag: format!("{}-{n}", shared.run_id),
            nonce: format!("{:08x}", rng.gen::<u32>()),
            seed: opts.seed,
        };
        let (shared, limit, events, opts) =
            (shared.clone(), limit.clone(), events.clone(), opts.clone());
        let sampler = sampler.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.expect("semaphore stays open");
            let _ = events.send(RunEvent::ScenarioStarted { id: s.id.clone() });
            let root = match &opts.artifacts {
                Some(dir) if repeat > 1 => dir.join(&s.id).join(attempt.to_string()),
                Some(dir) => dir.join(&s.id),
                None => std::env::temp_dir().join(format!("chaosrun-{}", ids.tag)),
            };
            let phase_events = events.clone();
            let id = s.id.clone();
            let on_phase = move |phase, deadline| {
                let _ = phase_events.send(RunEvent::Phase {
                    id: id.clone(),
                    phase,
                    deadline,
                });
            };
            let start = tokio::time::Instant::now();
            sampler.watch(&ids.tag, start);
            let mut obs = scenario::observe(&shared, &s, &ids, &root, start, &on_phase).await;
            obs.proc_samples = sampler.take(&ids.tag);
            let checks = crate::oracle::check(&s, caps, &obs);
            let passed = checks.iter().all(|c| !c.failed());
            let keep = opts.artifacts.is_some() && (opts.keep_all || !passed);
            let artifacts = if keep {
                if let Some(base) = &opts.artifacts {
                    write_artifacts(base, &root, &obs, &checks);
                }
                Some(root)
            } else {
                let _ = std::fs::remove_dir_all(&root);
                None
            };
            let result = ScenarioResult {
                id: s.id.clone(),
                attempt,
                attempts: repeat,
                passed,
                seconds: obs.wall,
                main_calls: obs.recording.main_calls,
                checks,
                observation: obs,
                artifacts,
            };
            let _ = events.send(RunEvent::ScenarioFinished(Box::new(result.clone())));
            result
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        match t.await {
            Ok(r) => results.push(r),
            Err(e) => eprintln!("chaosrun: a scenario task failed: {e}"),
        }
    }
    reaper.abort();
    sampler.stop();
    let passed = results.iter().filter(|r| r.passed).count();
    let _ = events.send(RunEvent::Finished {
        passed,
        failed: results.len() - passed,
        wall: started.elapsed().as_secs_f64(),
    });
    results
}

/// Write the observation, the checks and the requests (JSONL) beside the
/// spec, home files and logs already in `root` (below `base`, the artifacts
/// directory), never following a symlink the agent planted there.
fn write_artifacts(
    base: &std::path::Path,
    root: &std::path::Path,
    obs: &crate::observe::Observation,
    checks: &[crate::oracle::Check],
) {
    let rel = root.strip_prefix(base).unwrap_or(root);
    let write = |name: &str, bytes: Vec<u8>| {
        if let Err(e) = crate::output::write_beneath(base, &rel.join(name), &bytes) {
            eprintln!("chaosrun: cannot write {}: {e}", root.join(name).display());
        }
    };
    write(
        "observation.json",
        serde_json::to_vec_pretty(obs).unwrap_or_default(),
    );
    write(
        "checks.json",
        serde_json::to_vec_pretty(checks).unwrap_or_default(),
    );
    let mut jsonl = Vec::new();
    for r in &obs.recording.requests {
        if serde_json::to_writer(&mut jsonl, r).is_ok() {
            jsonl.push(b'\n');
        }
    }
    write("requests.jsonl", jsonl);
}
