//! One scenario run: start the provider, prepare and spawn the agent, drive the
//! faulted turn (sending `interrupt` when its trigger fires) and the probe turn
//! through their deadlines, wait for `closed` and the exit, reap, read the
//! store, and hand back the [`Observation`]. It judges nothing.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use crate::driver::home::{prepare, Inputs};
use crate::driver::{env, AgentProcess, Line};
use crate::observe::{Event, Observation, Phase, Snapshot, StoreObservation, Timed};
use crate::proc_hygiene::{self, TAG_VAR};
use crate::profile::Profile;
use crate::provider::{Provider, ProviderConfig};
use crate::scenarios::{FaultAction, FaultTarget, Scenario, Trigger};

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

pub(crate) fn secs(d: f64) -> Duration {
    Duration::from_secs_f64(d.max(0.0))
}

/// How a wait ended.
enum Waited {
    Found,
    /// stdout closed: the agent exited or closed it.
    Eof,
    Deadline,
}

pub(crate) struct Drive<'a> {
    start: Instant,
    pub(crate) agent: AgentProcess,
    events: Vec<Timed>,
    pub(crate) snapshots: Vec<Snapshot>,
    pub(crate) on_phase: &'a (dyn Fn(Phase, f64) + Sync),
}

impl Drive<'_> {
    pub(crate) fn at(&self, i: Instant) -> f64 {
        (i - self.start).as_secs_f64()
    }

    pub(crate) fn push(&mut self, at: Instant, event: Event) {
        let at = self.at(at);
        self.events.push(Timed { at, event });
    }

    /// Read events until `want` matches one, stdout closes, or `deadline`.
    async fn until(&mut self, deadline: Instant, want: impl Fn(&Event) -> bool) -> Waited {
        loop {
            tokio::select! {
                line = self.agent.next_line() => match line {
                    None => return Waited::Eof,
                    Some((at, Line::Event(ev))) => {
                        let hit = want(&ev);
                        self.push(at, ev);
                        if hit {
                            return Waited::Found;
                        }
                    }
                },
                _ = sleep_until(deadline) => return Waited::Deadline,
            }
        }
    }

    pub(crate) fn missed(&mut self, phase: Phase, seconds: f64) {
        self.push(Instant::now(), Event::DeadlineMissed { phase, seconds });
    }
}

/// Resolves when a trigger (of an interrupt or a process fault) fires;
/// `since` is when the faulted turn began.
async fn trigger_fired(
    trigger: &Option<Trigger>,
    calls: &mut tokio::sync::watch::Receiver<u64>,
    tag: &str,
    since: Instant,
) {
    match trigger {
        None => std::future::pending().await,
        Some(Trigger::AfterSeconds(s)) => sleep_until(since + secs(*s)).await,
        Some(Trigger::AfterCalls(n)) => {
            let _ = calls.wait_for(|c| *c >= *n).await;
        }
        Some(Trigger::WhenProcess(needle)) => loop {
            if proc_hygiene::count_tagged_matching(tag, needle) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        },
    }
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

/// What a restart after a kill needs.
pub(crate) struct Relaunch<'a> {
    prepared: &'a crate::driver::Prepared,
    env: &'a std::collections::BTreeMap<String, String>,
    gate: Arc<tokio::sync::Semaphore>,
}

fn stderr_tail(path: &Path, max_lines: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let tail_bytes = &text[text.len().saturating_sub(64 * 1024)..];
    let text = String::from_utf8_lossy(tail_bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
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
    let session_id = format!("chaos-{}-{}", scenario.id, ids.nonce);
    let fault_message = format!(
        "Chaos scenario {}: please carry out the task for session {}.",
        scenario.id, ids.nonce
    );
    let probe_message = format!("Are you still there? Reply with [[probe:{}]]", ids.nonce);
    let chaos = scenario.chaos.as_ref().map(|c| {
        let seed = super::chaos::scenario_seed(ids.seed, &scenario.id);
        crate::observe::ChaosRecord {
            seed,
            schedule: super::chaos::schedule(c, seed),
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
    };
    let counter_tag = ids.tag.clone();
    obs.provider_offset = (Instant::now() - start).as_secs_f64();
    let provider = match Provider::start(ProviderConfig {
        port: 0,
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
    let boot_permit = shared.boot_gate.clone().acquire_owned().await.ok();
    let agent = match AgentProcess::spawn(&prepared, &child_env) {
        Ok(a) => a,
        Err(e) => {
            obs.setup_error = Some(format!("{e:#}"));
            obs.recording = provider.shutdown().await;
            return obs;
        }
    };
    let mut d = Drive {
        start,
        events: Vec::new(),
        snapshots: Vec::new(),
        on_phase,
        agent,
    };
    d.push(Instant::now(), Event::Spawned { pid: d.agent.pid() });
    let relaunch = Relaunch {
        prepared: &prepared,
        env: &child_env,
        gate: shared.boot_gate.clone(),
    };
    let clean = match &chaos {
        Some(c) => {
            super::chaos::drive(
                &mut d,
                scenario,
                &c.schedule,
                &provider,
                &ids.tag,
                boot_permit,
                &relaunch,
            )
            .await
        }
        None => {
            drive_turns(
                &mut d,
                scenario,
                &provider,
                &ids.tag,
                boot_permit,
                &relaunch,
            )
            .await
        }
    };

    // Exit: after `closed`, the process must exit by itself.
    let dl = &scenario.deadlines;
    let exit_deadline = Instant::now() + secs(dl.exit);
    let mut killed = false;
    if clean {
        (d.on_phase)(Phase::Exit, dl.exit);
        let closed = d.until(exit_deadline, |e| matches!(e, Event::Closed)).await;
        if matches!(closed, Waited::Deadline) {
            d.missed(Phase::Exit, dl.exit);
        }
    }
    let exit = if clean {
        tokio::select! {
            e = d.agent.wait() => Some(e),
            _ = sleep_until(exit_deadline) => None,
        }
    } else {
        d.agent.exited()
    };
    let exit = match exit {
        Some(e) => e,
        None => {
            if clean {
                d.missed(Phase::Exit, dl.exit);
            }
            killed = true;
            proc_hygiene::pidfd_kill_if_marked(d.agent.pid(), TAG_VAR, &ids.tag);
            d.agent.wait().await
        }
    };
    d.push(
        Instant::now(),
        Event::Exited {
            code: exit.code,
            signal: exit.signal,
            killed_by_chaosrun: killed,
        },
    );
    // Drain events the agent printed before it exited.
    while let Ok(Some((at, Line::Event(ev)))) =
        tokio::time::timeout(Duration::from_millis(200), d.agent.next_line()).await
    {
        d.push(at, ev);
    }

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

    obs.store = match &shared.profile.store {
        Some(s) => crate::runner::store::observe(
            prepared.store_path.as_deref(),
            &s.messages_sql,
            &session_id,
        ),
        None => StoreObservation::NotConfigured,
    };
    obs.recording = provider.shutdown().await;
    obs.stdout_other_lines = d.agent.other_lines();
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

/// Wait for `ready` within the boot deadline, then let the next agent boot.
pub(crate) async fn boot(
    d: &mut Drive<'_>,
    seconds: f64,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
) -> bool {
    (d.on_phase)(Phase::Boot, seconds);
    let ready = |e: &Event| matches!(e, Event::Ready);
    let booted = d.until(Instant::now() + secs(seconds), ready).await;
    drop(permit);
    match booted {
        Waited::Found => true,
        Waited::Eof => false,
        Waited::Deadline => {
            d.missed(Phase::Boot, seconds);
            false
        }
    }
}

/// Send a process fault's signal to its target; records the event.
pub(crate) fn fault_signal(
    d: &mut Drive<'_>,
    target: FaultTarget,
    sig: i32,
    action: &str,
    main_calls: u64,
    tag: &str,
) {
    let signalled = match target {
        FaultTarget::Agent => usize::from(proc_hygiene::pidfd_signal_if_marked(
            d.agent.pid(),
            sig,
            TAG_VAR,
            tag,
        )),
        FaultTarget::Tree => proc_hygiene::signal_marked(sig, TAG_VAR, tag),
    };
    d.push(
        Instant::now(),
        Event::ProcessFault {
            action: action.into(),
            signalled,
            main_calls,
        },
    );
}

/// After a kill: wait for the dead agent, then start it again on the same
/// HOME and session with `resume: true` and `start_turn`. Returns the boot
/// permit of the new incarnation, or `None` if it could not be started.
pub(crate) async fn restart(
    d: &mut Drive<'_>,
    r: &Relaunch<'_>,
    start_turn: u64,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let exit = d.agent.wait().await;
    d.push(
        Instant::now(),
        Event::Exited {
            code: exit.code,
            signal: exit.signal,
            killed_by_chaosrun: false,
        },
    );
    while let Ok(Some((at, Line::Event(ev)))) =
        tokio::time::timeout(Duration::from_millis(200), d.agent.next_line()).await
    {
        d.push(at, ev);
    }
    let permit = r.gate.clone().acquire_owned().await.ok();
    let spawned =
        crate::driver::home::resume_spec(r.prepared, start_turn).and_then(|(argv, spec)| {
            let mut env = r.env.clone();
            env.insert("CHAOS_SPEC".into(), spec.display().to_string());
            AgentProcess::spawn_argv(r.prepared, &argv, &env)
        });
    match spawned {
        Ok(agent) => {
            d.agent = agent;
            d.push(Instant::now(), Event::Restarted { pid: d.agent.pid() });
            permit
        }
        Err(e) => {
            d.push(
                Instant::now(),
                Event::RestartFailed {
                    error: format!("{e:#}"),
                },
            );
            None
        }
    }
}

/// Boot, the faulted turn (with its interrupt or process fault), and the probe
/// turn. Returns whether the agent got through them, so it is now expected to
/// close.
async fn drive_turns(
    d: &mut Drive<'_>,
    s: &Scenario,
    provider: &Provider,
    tag: &str,
    boot_permit: Option<tokio::sync::OwnedSemaphorePermit>,
    relaunch: &Relaunch<'_>,
) -> bool {
    let dl = &s.deadlines;
    if !boot(d, dl.boot, boot_permit).await {
        return false;
    }

    (d.on_phase)(Phase::FaultedTurn, dl.turn);
    let turn_started = Instant::now();
    let mut deadline = turn_started + secs(dl.turn);
    let (mut phase, mut phase_secs) = (Phase::FaultedTurn, dl.turn);
    let mut calls = provider.main_calls();
    let trigger = trigger_fired(&s.interrupt, &mut calls, tag, turn_started);
    tokio::pin!(trigger);
    let mut fault_calls = provider.main_calls();
    let fault_at = s.process_fault.as_ref().map(|f| f.at.clone());
    let fault_delay = s.process_fault.as_ref().map_or(0.0, |f| f.delay);
    let fault_trigger = async {
        trigger_fired(&fault_at, &mut fault_calls, tag, turn_started).await;
        tokio::time::sleep(secs(fault_delay)).await;
    };
    tokio::pin!(fault_trigger);
    let (mut sent, mut faulted) = (false, false);
    loop {
        tokio::select! {
            line = d.agent.next_line() => match line {
                None => return false,
                Some((at, Line::Event(ev))) => {
                    let end = matches!(&ev, Event::TurnEnd(t) if t.i == 0);
                    d.push(at, ev);
                    if end {
                        break;
                    }
                }
            },
            _ = &mut trigger, if !sent => {
                sent = true;
                let main_calls = *provider.main_calls().borrow();
                let _ = d.agent.interrupt().await;
                d.push(Instant::now(), Event::InterruptSent { main_calls });
                (d.on_phase)(Phase::Interrupt, dl.interrupt);
                let by = Instant::now() + secs(dl.interrupt);
                if by < deadline {
                    (deadline, phase, phase_secs) = (by, Phase::Interrupt, dl.interrupt);
                }
            }
            _ = &mut fault_trigger, if !faulted => {
                faulted = true;
                let f = s.process_fault.as_ref().expect("a fault trigger fires only with a fault");
                let main_calls = *provider.main_calls().borrow();
                match f.action {
                    FaultAction::Kill => {
                        fault_signal(d, f.target, libc::SIGKILL, "kill", main_calls, tag);
                        let Some(permit) = restart(d, relaunch, 1).await else {
                            return false;
                        };
                        if !boot(d, dl.boot, Some(permit)).await {
                            return false;
                        }
                        break;
                    }
                    FaultAction::Stop => {
                        fault_signal(d, f.target, libc::SIGSTOP, "stop", main_calls, tag);
                        tokio::time::sleep(secs(f.stop_for)).await;
                        fault_signal(d, f.target, libc::SIGCONT, "cont", main_calls, tag);
                    }
                }
            }
            _ = sleep_until(deadline) => {
                d.missed(phase, phase_secs);
                return false;
            }
        }
    }

    (d.on_phase)(Phase::Probe, dl.probe);
    let deadline = Instant::now() + secs(dl.probe);
    let waited = d
        .until(deadline, |e| matches!(e, Event::TurnStart { i: 1 }))
        .await;
    if matches!(waited, Waited::Found) {
        let at = d.at(Instant::now());
        d.snapshots.push(Snapshot {
            at,
            label: "probe_turn_start".into(),
            procs: proc_hygiene::tagged(tag),
        });
        let waited = d
            .until(deadline, |e| matches!(e, Event::TurnEnd(t) if t.i == 1))
            .await;
        if matches!(waited, Waited::Found) {
            return true;
        }
        if matches!(waited, Waited::Deadline) {
            d.missed(Phase::Probe, dl.probe);
        }
        return false;
    }
    if matches!(waited, Waited::Deadline) {
        d.missed(Phase::Probe, dl.probe);
    }
    false
}
