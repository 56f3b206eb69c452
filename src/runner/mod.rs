//! Running a table: scenarios run concurrently (bounded by `jobs`), each in its
//! own directory with its own provider and agent; each result is judged by the
//! oracle and emitted as a [`RunEvent`]. Every selected scenario run ends in a
//! verdict: a panic inside chaosrun is caught per scenario and becomes an
//! `ERROR` (never a dropped result); a scenario the profile cannot support is
//! `N/A`. Artifacts are kept for failures (or all) when asked.

pub mod artifacts;
mod collect;
mod disk;
mod drive;
pub(crate) use drive::bound::chaos_run as chaos_bound;
pub mod events;
pub mod plan;
pub mod sampler;
pub mod scenario;
pub mod sections;
mod session;

pub use events::{RunEvent, ScenarioResult, Stats, Verdict};
pub use plan::Shared;

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
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

/// How long ending a run's runtime waits for its blocking tasks.
pub const RUNTIME_END_WAIT: Duration = Duration::from_secs(3);

/// End a run's runtime without waiting more than [`RUNTIME_END_WAIT`] for a
/// blocking task (a file read off the async workers) that has not returned:
/// after SIGINT/SIGTERM the process exits within a bound whatever a reader
/// is doing. (Dropping a runtime waits for every blocking task, forever.)
pub fn end_runtime(rt: tokio::runtime::Runtime) {
    rt.shutdown_timeout(RUNTIME_END_WAIT);
}

/// Run `scenarios`, emitting events; returns one result per scenario run
/// (selected × repeat), in table order: a run that crashed inside chaosrun is
/// an `ERROR` result, never dropped.
pub async fn run_all(
    shared: Arc<Shared>,
    scenarios: Vec<Scenario>,
    opts: Options,
    events: mpsc::UnboundedSender<RunEvent>,
) -> Vec<Arc<ScenarioResult>> {
    let started = tokio::time::Instant::now();
    let jobs = opts.jobs.max(1);
    let repeat = opts.repeat.max(1);
    let expected = scenarios.len() * repeat as usize;
    let _ = events.send(RunEvent::Started {
        total: expected,
        jobs,
    });
    let reaper = tokio::spawn(crate::proc_hygiene::reap_orphans_forever());
    let sampler = sampler::Sampler::start(Duration::from_millis(500), shared.containment.clone());
    let caps = Capabilities {
        breaker: shared.profile.breaker,
        background: shared.profile.background.clone(),
        mcp_tool: shared
            .profile
            .tools
            .get("mcp_probe")
            .map(|t| t.name.clone()),
        renders_retries: shared.profile.renders_retries,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(opts.seed);
    let limit = Arc::new(Semaphore::new(jobs));
    let ctx = Ctx {
        shared,
        opts,
        sampler: sampler.clone(),
        caps,
        events: events.clone(),
        repeat,
    };
    let mut tasks = Vec::new();
    let (scenarios, adapted) = adapt_all(&ctx.shared.profile, scenarios);
    let runs = scenarios
        .into_iter()
        .flat_map(|s| (1..=repeat).map(move |attempt| (s.clone(), attempt)));
    for (n, (s, attempt)) in runs.enumerate() {
        let ids = plan::Ids {
            tag: format!("{}-{n}", ctx.shared.run_id),
            nonce: format!("{:08x}", rng.gen::<u32>()),
            seed: ctx.opts.seed,
        };
        let slot = (s.id.clone(), attempt);
        let (ctx, limit) = (ctx.clone(), limit.clone());
        let task = tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.expect("semaphore stays open");
            ctx.run_task(s, attempt, ids).await
        });
        tasks.push((task, slot));
    }
    let mut results = Vec::new();
    for (task, (id, attempt)) in tasks {
        let r = match task.await {
            Ok(r) => r,
            Err(e) => {
                // The task itself died (not its scenario's run, which is
                // caught in `run_task`): still a result, never a dropped one.
                let cause = if e.is_panic() {
                    panic_message(&*e.into_panic())
                } else {
                    e.to_string()
                };
                let r = Arc::new(ScenarioResult::error(
                    &id,
                    attempt,
                    repeat,
                    crate::oracle::ErrorCause::Crashed(cause),
                    0.0,
                ));
                let _ = events.send(RunEvent::ScenarioFinished(r.clone()));
                r
            }
        };
        results.push(r);
    }
    reaper.abort();
    sampler.stop();
    let knobs = ctx.shared.profile.unmapped_knobs.iter();
    let knobs = knobs.map(|k| crate::profile::knobs::warning(k));
    for w in adapted.into_iter().chain(knobs).chain(warnings(&results)) {
        let _ = events.send(RunEvent::Warning(w));
    }
    let _ = events.send(RunEvent::Finished {
        stats: Stats::tally(results.iter().map(|r| &r.verdict), expected),
        wall: started.elapsed().as_secs_f64(),
    });
    results
}

/// Run-wide warnings: a `logs:` entry that matched no file in any scenario
/// that started the agent (the profile likely names the wrong path, so the
/// evidence a failure would quote is missing).
fn warnings(results: &[Arc<ScenarioResult>]) -> Vec<String> {
    let ran: Vec<&crate::observe::Observation> = results
        .iter()
        .map(|r| &r.observation)
        .filter(|o| o.setup_error.is_none() && !o.events.is_empty())
        .collect();
    let Some(first) = ran.first() else {
        return Vec::new();
    };
    first
        .logs_missing
        .iter()
        .filter(|p| ran.iter().all(|o| o.logs_missing.contains(p)))
        .map(|p| {
            format!(
                "the profile's log {p} never appeared in any of the {} scenario runs: check its `logs:` path",
                ran.len()
            )
        })
        .collect()
}

/// What every scenario task shares.
#[derive(Clone)]
struct Ctx {
    shared: Arc<Shared>,
    opts: Options,
    sampler: sampler::Sampler,
    caps: Capabilities,
    events: mpsc::UnboundedSender<RunEvent>,
    repeat: u32,
}

impl Ctx {
    /// One scenario run, start to verdict, sent as `ScenarioFinished`: N/A
    /// without running when the profile lacks what it needs; `ERROR` (its
    /// processes swept) when the run panics inside chaosrun.
    async fn run_task(&self, s: Scenario, attempt: u32, ids: plan::Ids) -> Arc<ScenarioResult> {
        let (opts, repeat) = (&self.opts, self.repeat);
        let _ = self
            .events
            .send(RunEvent::ScenarioStarted { id: s.id.clone() });
        let root = match &opts.artifacts {
            Some(dir) if repeat > 1 => dir.join(&s.id).join(attempt.to_string()),
            Some(dir) => dir.join(&s.id),
            None => std::env::temp_dir().join(format!("chaosrun-{}", ids.tag)),
        };
        let start = tokio::time::Instant::now();
        let result = if let Some(reason) = not_applicable(&self.shared.profile, &s) {
            ScenarioResult::not_applicable(&s.id, attempt, repeat, reason)
        } else {
            let run = run_one(
                &self.shared,
                &s,
                &ids,
                &root,
                start,
                &self.sampler,
                self.caps.clone(),
                &self.events,
            );
            let outcome = AssertUnwindSafe(run).catch_unwind().await;
            let _ = self.sampler.take(&ids.tag);
            match outcome {
                Ok((mut obs, crate::oracle::Judged { checks, verdict })) => {
                    let keep = opts.artifacts.is_some() && (opts.keep_all || !verdict.passed());
                    let artifacts = if keep {
                        if let Some(base) = &opts.artifacts {
                            artifacts::write(base, &root, &obs, &checks, &s, &self.caps);
                        }
                        Some(root)
                    } else {
                        let _ = std::fs::remove_dir_all(&root);
                        None
                    };
                    obs.slim();
                    ScenarioResult {
                        id: s.id.clone(),
                        attempt,
                        attempts: repeat,
                        verdict,
                        seconds: obs.wall,
                        main_calls: obs.recording.main_calls,
                        checks,
                        observation: obs,
                        artifacts,
                    }
                }
                Err(panic) => {
                    // The run unwound mid-way: nothing it started may stay.
                    let tag = ids.tag.clone();
                    let _ = tokio::task::spawn_blocking(move || {
                        crate::proc_hygiene::sweep_marked(
                            crate::proc_hygiene::TAG_VAR,
                            &tag,
                            Duration::from_secs(10),
                        )
                    })
                    .await;
                    let mut r = ScenarioResult::error(
                        &s.id,
                        attempt,
                        repeat,
                        crate::oracle::ErrorCause::Crashed(panic_message(&*panic)),
                        start.elapsed().as_secs_f64(),
                    );
                    if opts.artifacts.is_some() && root.exists() {
                        r.artifacts = Some(root);
                    } else {
                        let _ = std::fs::remove_dir_all(&root);
                    }
                    r
                }
            }
        };
        let result = Arc::new(result);
        let _ = self.events.send(RunEvent::ScenarioFinished(result.clone()));
        result
    }
}

/// One scenario run, observed and judged. A panic inside it is caught by the
/// caller and becomes an `ERROR` result.
#[allow(clippy::too_many_arguments)]
async fn run_one(
    shared: &Shared,
    s: &Scenario,
    ids: &plan::Ids,
    root: &std::path::Path,
    start: tokio::time::Instant,
    sampler: &sampler::Sampler,
    caps: Capabilities,
    events: &mpsc::UnboundedSender<RunEvent>,
) -> (crate::observe::Observation, crate::oracle::Judged) {
    test_panic(&s.id);
    let phase_events = events.clone();
    let id = s.id.clone();
    let on_phase = move |phase, deadline| {
        let _ = phase_events.send(RunEvent::Phase {
            id: id.clone(),
            phase,
            deadline,
        });
    };
    let obs = scenario::observe(shared, s, ids, root, start, sampler, &on_phase).await;
    let judged = crate::oracle::judge(s, caps, &obs);
    (obs, judged)
}

/// The rows as this profile can run them ([`crate::profile::needs::adapt`]:
/// a background call it cannot make dropped from a row that makes others),
/// and a note for each row changed.
fn adapt_all(
    profile: &crate::profile::Profile,
    rows: Vec<Scenario>,
) -> (Vec<Scenario>, Vec<String>) {
    let mut notes = Vec::new();
    let rows = rows
        .into_iter()
        .map(|s| match crate::profile::needs::adapt(profile, &s) {
            Some((adapted, note)) => {
                notes.push(note);
                adapted
            }
            None => s,
        })
        .collect();
    (rows, notes)
}

/// Why `s` cannot apply (N/A, not run), as the oracle decides it from the
/// profile and the host facts the row needs, gathered here.
fn not_applicable(
    profile: &crate::profile::Profile,
    s: &Scenario,
) -> Option<crate::oracle::NotApplicable> {
    use crate::oracle::applies::{self, HostFacts, HostNeed};
    let missing = applies::host_needs(s)
        .into_iter()
        .filter_map(|need| match need {
            HostNeed::MemoryController => {
                crate::proc_hygiene::memory_limit::host_gap().map(|why| (need, why))
            }
        })
        .collect();
    applies::not_applicable(profile, s, &HostFacts { missing })
}

/// Debug builds only: `CHAOSRUN_TEST_PANIC=<scenario id>` makes that
/// scenario's run panic, so tests can see a crash inside chaosrun reported as
/// `ERROR` (release builds have no such hook).
fn test_panic(id: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("CHAOSRUN_TEST_PANIC").is_ok_and(|v| v == id) {
        panic!("CHAOSRUN_TEST_PANIC: injected panic in scenario {id}");
    }
    #[cfg(not(debug_assertions))]
    let _ = id;
}

/// The text of a panic payload.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic (no message)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ending_the_runtime_does_not_wait_for_a_reader_stuck_on_a_fifo() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("transcript.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        // A blocking open of a FIFO with no writer: it returns only when
        // someone opens the other end.
        rt.spawn_blocking(move || {
            let _ = tx.send(());
            let _ = std::fs::read(&path);
        });
        rx.recv().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            end_runtime(rt);
            let _ = done_tx.send(());
        });
        let ended = done_rx.recv_timeout(RUNTIME_END_WAIT + Duration::from_secs(10));
        // Release the reader (a writer end opened and closed) either way.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
        assert!(
            ended.is_ok(),
            "ending the runtime waited for the stuck reader"
        );
    }
}
