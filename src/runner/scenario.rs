//! One scenario run: start the provider, prepare the agent's HOME, drive its
//! turns (or a chaos run) through [`super::drive`], wait for `closed` and every
//! process's exit, reap, read the store and the journal, and hand back the
//! [`Observation`]. It judges nothing.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::drive::{secs, Drive, Launch, Next};
use crate::driver::env;
use crate::driver::home::{prepare, Inputs, StoreAt};
use crate::observe::{Event, Observation, Phase, StoreObservation};
use crate::proc_hygiene::{self, TAG_VAR};
use crate::profile::Profile;
use crate::provider::{Provider, ProviderConfig};
use crate::scenarios::Scenario;

/// What every scenario of a run shares.
pub struct Shared {
    pub profile: Profile,
    pub agent_args: Vec<String>,
    /// Marks every process of this chaosrun invocation.
    pub run_id: String,
    /// At most this many agents boot (spawn → `ready`) at once, first come
    /// first served: a boot storm of the whole table would otherwise slow the
    /// long scenarios that start first. Their boot deadline starts at spawn.
    pub boot_gate: Arc<tokio::sync::Semaphore>,
}

impl Shared {
    /// A gate as wide as the machine's CPUs.
    pub fn boot_gate() -> Arc<tokio::sync::Semaphore> {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Arc::new(tokio::sync::Semaphore::new(cpus))
    }
}

/// Identity of one scenario run.
pub struct Ids {
    pub tag: String,
    pub nonce: String,
    /// The run's seed (a chaos schedule derives its own from it).
    pub seed: u64,
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The journal's lines, at most 10,000 of at most 500 chars each.
fn read_journal(path: &Path) -> Vec<String> {
    let text = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .take(10_000)
        .map(|l| l.chars().take(500).collect())
        .collect()
}

fn stderr_tail(path: &Path, max_lines: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let tail_bytes = &text[text.len().saturating_sub(64 * 1024)..];
    let text = String::from_utf8_lossy(tail_bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

/// Workers that said `closed` (0 for a single agent's events).
fn closed_workers(d: &Drive<'_>) -> BTreeSet<usize> {
    d.events
        .iter()
        .filter(|t| matches!(t.event, Event::Closed))
        .map(|t| t.worker.unwrap_or(0))
        .collect()
}

/// After the turns: every process must say `closed` and exit by itself within
/// the exit deadline; one that does not (or a run that did not get through its
/// turns) is killed. Returns whether chaosrun had to kill any.
async fn close(d: &mut Drive<'_>, clean: bool, exit_secs: f64) -> bool {
    let deadline = Instant::now() + secs(exit_secs);
    let mut missed = false;
    if clean {
        (d.on_phase)(Phase::Exit, exit_secs);
        while closed_workers(d).len() < d.count() {
            tokio::select! {
                next = d.next() => match next {
                    Next::Event(at, k, ev) => d.push_from(at, k, ev),
                    Next::Eof(_) => {}
                },
                _ = sleep_until(deadline) => {
                    d.missed(Phase::Exit, exit_secs);
                    missed = true;
                    break;
                }
            }
        }
    }
    let mut killed_any = false;
    for k in 0..d.count() {
        if d.processes().count() <= k {
            break;
        }
        let exited = if clean {
            tokio::select! {
                e = d.worker(k).wait() => Some(e),
                _ = sleep_until(deadline) => None,
            }
        } else {
            d.worker(k).exited()
        };
        let (exit, killed) = match exited {
            Some(e) => (e, false),
            None => {
                if clean && !missed {
                    d.missed(Phase::Exit, exit_secs);
                    missed = true;
                }
                let (pid, tag) = (d.worker(k).pid(), d.tag().to_string());
                proc_hygiene::pidfd_kill_if_marked(pid, TAG_VAR, &tag);
                (d.worker(k).wait().await, true)
            }
        };
        killed_any |= killed;
        d.push_from(
            Instant::now(),
            k,
            Event::Exited {
                code: exit.code,
                signal: exit.signal,
                killed_by_chaosrun: killed,
            },
        );
    }
    // Events printed just before the exits.
    while let Ok(next) = tokio::time::timeout(Duration::from_millis(200), d.next()).await {
        if let Next::Event(at, k, ev) = next {
            d.push_from(at, k, ev);
        }
    }
    killed_any
}

/// Run one scenario with its run directory at `root`. `start` is the moment
/// the run began (the sampler's clock too).
pub async fn observe(
    shared: &Shared,
    scenario: &Scenario,
    ids: &Ids,
    root: &Path,
    start: Instant,
    on_phase: &(dyn Fn(Phase, f64) + Sync),
) -> Observation {
    // Unique per run, even when `--seed` replays the nonces: a replay must not
    // meet the earlier run's session in a store that outlives runs (Postgres).
    let session_id = format!("chaos-{}-{}", scenario.id, ids.tag);
    let fault_message = format!(
        "Chaos scenario {}: please carry out the task for session {}.",
        scenario.id, ids.nonce
    );
    let probe_message = format!("Are you still there? Reply with [[probe:{}]]", ids.nonce);
    let workers = shared.profile.workers.max(1);
    let chaos = scenario.chaos.as_ref().map(|c| {
        let seed = super::chaos::scenario_seed(ids.seed, &scenario.id);
        crate::observe::ChaosRecord {
            seed,
            schedule: super::chaos::schedule(c, seed, workers),
        }
    });
    let probe_turn = scenario.chaos.as_ref().map_or(1, |c| c.turns);
    let mut obs = Observation {
        scenario: scenario.id.clone(),
        tag: ids.tag.clone(),
        nonce: ids.nonce.clone(),
        session_id: session_id.clone(),
        fault_message: fault_message.clone(),
        probe_message: probe_message.clone(),
        events: Vec::new(),
        recording: Default::default(),
        snapshots: Vec::new(),
        proc_samples: Vec::new(),
        provider_offset: 0.0,
        store: StoreObservation::NotConfigured,
        survivors: Vec::new(),
        stderr_tail: String::new(),
        log_tails: Vec::new(),
        stdout_other_lines: 0,
        setup_error: None,
        wall: 0.0,
        started_unix: unix_now() - start.elapsed().as_secs_f64(),
        journal: Vec::new(),
        probe_turn,
        chaos: chaos.clone(),
        workers,
    };
    let counter_tag = ids.tag.clone();
    obs.provider_offset = (Instant::now() - start).as_secs_f64();
    let provider = match Provider::start(ProviderConfig {
        port: 0,
        wire: shared.profile.wire,
        rules: scenario.responder.clone(),
        nonce: ids.nonce.clone(),
        tools: shared.profile.tools.clone(),
        process_counter: Some(Arc::new(move |needle: &str| {
            proc_hygiene::count_tagged_matching(&counter_tag, needle)
        })),
    })
    .await
    {
        Ok(p) => p,
        Err(e) => {
            obs.setup_error = Some(format!("cannot start the fault provider: {e:#}"));
            return obs;
        }
    };
    let base_url = provider.base_url();
    let mut turns = vec![fault_message];
    turns.extend((1..probe_turn).map(|k| format!("Chaos turn {k}: carry on with the task.")));
    turns.push(probe_message);
    let prepared = prepare(
        root,
        &Inputs {
            profile: &shared.profile,
            knobs: &scenario.knobs,
            base_url: &base_url,
            tag: &ids.tag,
            session_id: &session_id,
            turns: &turns,
            agent_args: &shared.agent_args,
        },
    );
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            obs.setup_error = Some(format!("cannot prepare the agent's home: {e:#}"));
            obs.recording = provider.shutdown().await;
            return obs;
        }
    };
    let child_env = env::build(
        std::env::vars(),
        &env::Fixed {
            home: &prepared.dirs.home.display().to_string(),
            tmp: &prepared.dirs.tmp.display().to_string(),
            tag: &ids.tag,
            run: &shared.run_id,
            spec: &prepared.dirs.spec.display().to_string(),
            journal: &prepared.dirs.journal.display().to_string(),
        },
        &prepared.profile_env,
    );
    let mut d = Drive::new(
        start,
        Launch {
            prepared: &prepared,
            env: &child_env,
            gate: shared.boot_gate.clone(),
            tag: &ids.tag,
        },
        workers,
        on_phase,
    );
    let driven = match &chaos {
        Some(c) => super::chaos::drive(&mut d, scenario, &c.schedule, &provider).await,
        None => super::turns::drive(&mut d, scenario, &provider).await,
    };
    let clean = match driven {
        Ok(clean) => clean,
        Err(e) if d.events.is_empty() => {
            obs.setup_error = Some(e);
            obs.recording = provider.shutdown().await;
            return obs;
        }
        Err(e) => {
            d.push(Instant::now(), Event::RestartFailed { error: e });
            false
        }
    };
    let dl = &scenario.deadlines;
    let killed = close(&mut d, clean, dl.exit).await;

    // Reap: nothing carrying the tag may survive the agent.
    // A killed agent had no chance to clean up: take the survivors as they are.
    let reap = if killed { 0.0 } else { dl.reap };
    (d.on_phase)(Phase::Reap, reap);
    let survivors = proc_hygiene::wait_none_tagged(&ids.tag, secs(reap)).await;
    if !survivors.is_empty() {
        let tag = ids.tag.clone();
        tokio::task::spawn_blocking(move || {
            proc_hygiene::sweep_marked(TAG_VAR, &tag, Duration::from_secs(10))
        })
        .await
        .ok();
    }
    obs.survivors = survivors;

    obs.store = match (&shared.profile.store, &prepared.store) {
        (Some(s), Some(StoreAt::Sqlite(path))) => {
            crate::runner::store::observe(Some(path), &s.messages_sql, &session_id)
        }
        (Some(s), Some(StoreAt::Postgres(dsn))) => {
            crate::runner::store::observe_postgres(dsn, &s.messages_sql, &session_id).await
        }
        _ => StoreObservation::NotConfigured,
    };
    obs.recording = provider.shutdown().await;
    obs.stdout_other_lines = d.other_lines();
    obs.stderr_tail = stderr_tail(&prepared.dirs.stderr_log, 20);
    obs.log_tails = prepared
        .log_paths
        .iter()
        .filter(|p| p.is_file())
        .map(|p| (p.display().to_string(), stderr_tail(p, 20)))
        .collect();
    obs.journal = read_journal(&prepared.dirs.journal);
    obs.snapshots = d.snapshots;
    obs.events = d.events;
    obs.wall = (Instant::now() - start).as_secs_f64();
    obs
}
