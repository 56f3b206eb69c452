//! The second stage of a scenario run: the agent's processes and their
//! script. One process, or N workers sharing one store (an adapter's
//! `workers: N`). Their events arrive on one merged stream and are recorded
//! with their times (and worker, in worker mode); a worker is started inside
//! the scenario's containment [`Scope`], booted through the boot gate,
//! signalled (its own process through its pidfd; the whole tree through the
//! scope: `cgroup.kill` and `cgroup.freeze`), and restarted on the same HOME
//! after a kill. [`Drive::run`] plays the script ([`turns`] or a [`chaos`]
//! run) and then closes every process; the lifecycle's
//! ends (`close`, the worker kill, `bury`) are all here. Its state is its
//! own: only `new` and `run` are the crate's; the scripts (and the turn
//! clock) read and record events, boot, interrupt and land a process fault
//! through one operation ([`faults`]: `Drive::land`), which alone signals,
//! buries and revives; it hands on a [`Driven`].

mod baseline;
pub(super) mod bound;
mod chaos;
mod clock;
mod damage;
mod faults;
mod oom;
mod store_kill;
mod turns;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep_until, Instant};

use crate::driver::agent;
use crate::driver::{Agent, Budget, Exit, Line, Prepared, Sink, Tagged};
use crate::mcp::McpServer;
use crate::observe::{Capped, ChaosRecord, Event, Phase, Snapshot, Timed};
use crate::proc_hygiene::Scope;
use crate::provider::Provider;
use crate::scenarios::Scenario;
use crate::units::secs;

use super::sampler::{Asked, Sampler};

/// What the next line was.
pub(crate) enum Next {
    Event(Instant, usize, Event),
    /// The current incarnation of this worker closed its stdout.
    Eof(usize),
}

/// How a wait ended.
pub(crate) enum Waited {
    Found,
    /// A worker's stdout closed: it exited or closed it.
    Eof,
    Deadline,
}

/// What starting a process needs.
pub(crate) struct Launch<'a> {
    pub prepared: &'a Prepared,
    pub env: &'a BTreeMap<String, String>,
    pub gate: Arc<Semaphore>,
    /// The scenario's containment: every worker is started inside it.
    pub scope: Arc<Scope>,
    /// The provider's request count (exec mode: a turn's first request
    /// starts its deadline).
    pub requests: tokio::sync::watch::Receiver<u64>,
    /// The run's sampler and the scenario's tag: a sample is awaited at each
    /// turn's end and at the close ([`Drive::turn_ended`]).
    pub sampler: (&'a Sampler, &'a str),
}

pub(crate) struct Drive<'a> {
    start: Instant,
    launch: Launch<'a>,
    /// The current incarnation of each worker (None before its first start).
    workers: Vec<Option<Agent>>,
    incarnation: Vec<u32>,
    /// Unbounded, but fed at most `output::MAX_EVENTS` events (plus one EOF
    /// per incarnation) by the readers: the budget caps it.
    lines: mpsc::UnboundedReceiver<Tagged>,
    sink: mpsc::UnboundedSender<Tagged>,
    budget: Arc<Budget>,
    events: Vec<Timed>,
    snapshots: Vec<Snapshot>,
    on_phase: &'a (dyn Fn(Phase, f64) + Sync),
    /// The copy of the store taken after a kill aimed at a store write
    /// ([`store_kill`]).
    store_at_kill: Option<store_kill::AtKill>,
    /// The copy taken when that kill's trigger armed (the reference).
    store_at_arm: Option<store_kill::AtKill>,
    /// The row's `store_damage`, once done ([`damage`]).
    damage: Option<damage::DamageDone>,
}

/// What the script needs besides the scenario: a chaos run's schedule (none:
/// the turns), the provider, the MCP server.
pub(crate) type Script<'s> = (Option<&'s ChaosRecord>, &'s Provider, Option<&'s McpServer>);

/// What driving left: the events and snapshots, the agents (their output
/// counters) and the output budget, and whether chaosrun had to kill any
/// process at the close.
pub(crate) struct Driven {
    events: Vec<Timed>,
    snapshots: Vec<Snapshot>,
    agents: Vec<Agent>,
    budget: Arc<Budget>,
    killed: bool,
    /// Why the drive was stopped at its bound, if it was.
    overran: Option<String>,
    /// The session id the agent's store is read under (see
    /// [`agent::store_session`]).
    store_session: Result<Option<String>, String>,
    store_at_kill: Option<store_kill::AtKill>,
    store_at_arm: Option<store_kill::AtKill>,
    damage: Option<damage::DamageDone>,
}

impl Driven {
    /// Why chaosrun stopped the drive at its bound (chaosrun itself was
    /// stuck), if it did.
    pub(crate) fn overran(&self) -> Option<String> {
        self.overran.clone()
    }

    /// The session id the agent's store is read under: the agent's own (an
    /// exec-mode CLI's captured value) or `None` for the scenario's; `Err`
    /// names a value the agent never printed.
    pub(crate) fn store_session(&self) -> Result<Option<String>, String> {
        self.store_session.clone()
    }

    /// The copy of the store a kill aimed at a store write left, if the row
    /// has one.
    pub(crate) fn store_at_kill(&self) -> Option<&store_kill::AtKill> {
        self.store_at_kill.as_ref()
    }

    /// The copy of the store taken when that kill's trigger armed, if the
    /// row has one.
    pub(crate) fn store_at_arm(&self) -> Option<&store_kill::AtKill> {
        self.store_at_arm.as_ref()
    }

    /// The row's `store_damage`, if it was done.
    pub(crate) fn damage(&self) -> Option<&damage::DamageDone> {
        self.damage.as_ref()
    }

    /// Whether chaosrun killed a process that did not exit by itself.
    pub(crate) fn killed(&self) -> bool {
        self.killed
    }

    /// Wait, bounded, until the pipe readers have finished.
    pub(crate) async fn drained(&self, within: Duration) {
        self.budget.drained(within).await;
    }

    /// Lines on stdout that were not events, over every last process.
    pub(crate) fn other_lines(&self) -> u64 {
        self.agents.iter().map(Agent::other_lines).sum()
    }

    /// What the output caps dropped.
    pub(crate) fn capped(&self) -> Capped {
        self.budget.capped()
    }

    /// The recorded events and snapshots.
    pub(crate) fn into_records(self) -> (Vec<Timed>, Vec<Snapshot>) {
        (self.events, self.snapshots)
    }
}

impl<'a> Drive<'a> {
    pub(crate) fn new(
        start: Instant,
        launch: Launch<'a>,
        workers: usize,
        on_phase: &'a (dyn Fn(Phase, f64) + Sync),
    ) -> Drive<'a> {
        let (sink, lines) = mpsc::unbounded_channel();
        Drive {
            start,
            launch,
            workers: (0..workers.max(1)).map(|_| None).collect(),
            incarnation: vec![0; workers.max(1)],
            lines,
            sink,
            budget: Budget::new(workers),
            events: Vec::new(),
            snapshots: Vec::new(),
            on_phase,
            store_at_kill: None,
            store_at_arm: None,
            damage: None,
        }
    }

    /// Play the scenario's script, then close every process (one that does
    /// not exit by itself within the exit deadline is killed). `Err`: the
    /// first process could not be started, so nothing ran (a setup error).
    /// The whole drive is bounded ([`bound`]): past it the script is
    /// dropped, the agent closed (killed when it does not exit) and the
    /// overrun handed on (the scenario is an error: chaosrun itself was
    /// stuck).
    pub(crate) async fn run(mut self, s: &Scenario, script: Script<'_>) -> Result<Driven, String> {
        let (chaos, provider, mcp) = script;
        let stuck = bound::test_stuck(&s.id);
        let limit = stuck.unwrap_or_else(|| {
            bound::seconds(s, self.count(), chaos.map(|c| c.schedule.as_slice()))
        });
        let play = async {
            if stuck.is_some() {
                let _ = self.boot_all(s.deadlines.boot).await;
                return std::future::pending().await;
            }
            match chaos {
                Some(c) => chaos::drive(&mut self, s, c, provider).await,
                None => turns::drive(&mut self, s, provider, mcp).await,
            }
        };
        let (played, overran) = match tokio::time::timeout(secs(limit), play).await {
            Ok(played) => (played, None),
            Err(_) => (Ok(false), Some(bound::overran(limit))),
        };
        let clean = match played {
            Ok(clean) => clean,
            Err(e) if self.events.is_empty() => return Err(e),
            Err(e) => {
                self.push(Instant::now(), Event::RestartFailed { error: e });
                false
            }
        };
        let killed = self.close(clean, s.deadlines.exit).await;
        let store_session = agent::store_session(self.launch.prepared);
        Ok(Driven {
            store_session,
            store_at_kill: self.store_at_kill,
            store_at_arm: self.store_at_arm,
            damage: self.damage,
            events: self.events,
            snapshots: self.snapshots,
            agents: self.workers.into_iter().flatten().collect(),
            budget: self.budget,
            killed,
            overran,
        })
    }

    /// Await a sample of the scenario's processes (bounded:
    /// [`super::sampler::ASKED_WAIT`]) at turn `i`'s end, or with None as
    /// the agent is asked to close, then tell the agent the turn is done.
    /// An ACP session waits for that before its next prompt (bounded); the
    /// driver-protocol agent, which runs its turns from the spec, is held
    /// instead at its probe turn's model call (`ProbesHeld` in turns.rs).
    async fn turn_ended(&self, i: Option<u64>) {
        self.turn_sampled(i).await;
        if let Some(i) = i {
            self.turn_done(i);
        }
    }

    /// The awaited sample of [`Drive::turn_ended`] alone (a fault after the
    /// answer tells the agent the turn is done only once it has landed).
    async fn turn_sampled(&self, i: Option<u64>) {
        let (sampler, tag) = self.launch.sampler;
        let at = i.map_or(Asked::Close, Asked::TurnEnd);
        let agents = self.processes().map(Agent::pid).collect();
        let _ = sampler.sample_now(tag, at, agents).await;
    }

    /// Tell the agents turn `i` is done here ([`Agent::turn_done`]).
    fn turn_done(&self, i: u64) {
        self.processes().for_each(|a| a.turn_done(i));
    }

    /// Tell the run's listener a phase began, with its deadline.
    fn phase(&self, phase: Phase, seconds: f64) {
        (self.on_phase)(phase, seconds);
    }

    /// How many workers (1 for a single agent).
    fn count(&self) -> usize {
        self.workers.len()
    }

    fn multi(&self) -> bool {
        self.workers.len() > 1
    }

    /// How the agent's turns run ([`agent::turn_model`]): where a turn's
    /// deadline counts from, whether it starts up first.
    fn turn_model(&self) -> crate::observe::TurnModel {
        agent::turn_model(self.launch.prepared)
    }

    /// Whether worker `k`'s running turn is still starting up (exec mode:
    /// its process has not reached the provider yet).
    fn starting_up(&self, k: usize) -> bool {
        self.workers[k].as_ref().is_some_and(Agent::starting_up)
    }

    /// Worker `k`'s current process.
    fn worker(&mut self, k: usize) -> &mut Agent {
        self.workers[k].as_mut().expect("the worker was started")
    }

    /// Ask worker `k` to interrupt its turn (best effort: a worker that is
    /// gone cannot be asked).
    async fn interrupt(&mut self, k: usize) {
        let _ = self.worker(k).interrupt().await;
    }

    /// Every started worker's current process.
    fn processes(&self) -> impl Iterator<Item = &Agent> {
        self.workers.iter().flatten()
    }

    fn at(&self, i: Instant) -> f64 {
        (i - self.start).as_secs_f64()
    }

    /// Record a chaosrun-side event.
    fn push(&mut self, at: Instant, event: Event) {
        let at = self.at(at);
        self.events.push(Timed {
            at,
            worker: None,
            event,
        });
    }

    /// Record an event of worker `k`.
    fn push_from(&mut self, at: Instant, k: usize, event: Event) {
        let at = self.at(at);
        let worker = self.multi().then_some(k);
        self.events.push(Timed { at, worker, event });
    }

    fn missed(&mut self, phase: Phase, seconds: f64) {
        self.push(Instant::now(), Event::DeadlineMissed { phase, seconds });
    }

    /// The next event (recorded by the caller) or a current worker's EOF. A
    /// dead incarnation's late events are still events; its EOF is not news.
    async fn next(&mut self) -> Next {
        loop {
            let t = self.lines.recv().await.expect("the drive holds a sender");
            match t.line {
                Line::Event(ev) => return Next::Event(t.at, t.worker, ev),
                Line::Eof if t.incarnation == self.incarnation[t.worker] => {
                    return Next::Eof(t.worker)
                }
                Line::Eof => {}
            }
        }
    }

    /// Whether worker `k`'s current incarnation said `closed` (its stdout
    /// closing next is its exit, not a crash).
    fn said_closed(&self, k: usize) -> bool {
        let w = self.multi().then_some(k);
        self.events
            .iter()
            .rev()
            .filter(|t| t.worker == w)
            .take_while(|t| !matches!(t.event, Event::Spawned { .. } | Event::Restarted { .. }))
            .any(|t| matches!(t.event, Event::Closed))
    }

    /// The recorded events from turn `turn`'s latest `turn_start` on, with
    /// their instants (none if it has not started).
    fn recorded_since_spawn(&self, turn: u64) -> Vec<(Instant, Event)> {
        let from = self
            .events
            .iter()
            .rposition(|t| matches!(t.event, Event::TurnStart { i } if i == turn));
        let Some(from) = from else { return Vec::new() };
        self.events[from..]
            .iter()
            .map(|t| (self.start + secs(t.at), t.event.clone()))
            .collect()
    }

    /// Whether an event matching `want` was already recorded (in worker mode
    /// the others keep running while one boots, so what a later wait looks
    /// for may have come in already).
    fn seen(&self, want: impl Fn(&Event) -> bool) -> bool {
        self.events.iter().any(|t| want(&t.event))
    }

    /// Record events until one from worker `from` (any, if None) matches
    /// `want`, a worker's stdout closes, or `deadline`. While waiting on one
    /// worker, another that said `closed` and exited is not news.
    async fn until(
        &mut self,
        deadline: Instant,
        from: Option<usize>,
        want: impl Fn(&Event) -> bool,
    ) -> Waited {
        loop {
            tokio::select! {
                next = self.next() => match next {
                    Next::Eof(k) if from.is_some_and(|f| f != k) && self.said_closed(k) => {}
                    Next::Eof(_) => return Waited::Eof,
                    Next::Event(at, k, ev) => {
                        let hit = from.is_none_or(|f| f == k) && want(&ev);
                        self.push_from(at, k, ev);
                        if hit {
                            return Waited::Found;
                        }
                    }
                },
                _ = sleep_until(deadline) => return Waited::Deadline,
            }
        }
    }

    /// Start worker `k` (a restart with `start_turn` when `resume` is Some),
    /// holding a boot-gate permit until it is ready.
    async fn start_worker(
        &mut self,
        k: usize,
        resume: Option<u64>,
    ) -> anyhow::Result<OwnedSemaphorePermit> {
        let permit = self.launch.gate.clone().acquire_owned().await?;
        self.incarnation[k] += 1;
        let sink = Sink {
            tx: self.sink.clone(),
            worker: k,
            incarnation: self.incarnation[k],
            budget: self.budget.clone(),
        };
        let launch = agent::Launch {
            prepared: self.launch.prepared,
            env: self.launch.env,
            scope: &self.launch.scope,
            requests: &self.launch.requests,
            workers: self.count(),
        };
        let agent = Agent::start(&launch, k, sink, resume)?;
        Ok(self.started(k, agent, resume, permit))
    }

    /// Record worker `k`'s start (or restart).
    fn started(
        &mut self,
        k: usize,
        agent: Agent,
        resume: Option<u64>,
        permit: OwnedSemaphorePermit,
    ) -> OwnedSemaphorePermit {
        let pid = agent.pid();
        self.workers[k] = Some(agent);
        let event = if resume.is_some() {
            Event::Restarted {
                pid,
                start_turn: resume,
            }
        } else {
            Event::Spawned { pid }
        };
        self.push_from(Instant::now(), k, event);
        permit
    }

    /// Wait for worker `k`'s `ready` within `seconds`, then let the next boot.
    async fn boot(&mut self, k: usize, seconds: f64, permit: OwnedSemaphorePermit) -> bool {
        self.phase(Phase::Boot, seconds);
        let ready = |e: &Event| matches!(e, Event::Ready);
        let booted = self
            .until(Instant::now() + secs(seconds), Some(k), ready)
            .await;
        drop(permit);
        match booted {
            Waited::Found => true,
            Waited::Eof => false,
            Waited::Deadline => {
                self.missed(Phase::Boot, seconds);
                false
            }
        }
    }

    /// Start and boot every worker, one after another. `Err` when the first
    /// process cannot be started at all (a setup error, not a verdict).
    async fn boot_all(&mut self, seconds: f64) -> Result<bool, String> {
        for k in 0..self.count() {
            let permit = match self.start_worker(k, None).await {
                Ok(p) => p,
                Err(e) if k == 0 => return Err(format!("{e:#}")),
                Err(e) => {
                    self.push(
                        Instant::now(),
                        Event::RestartFailed {
                            error: format!("{e:#}"),
                        },
                    );
                    return Ok(false);
                }
            };
            if !self.boot(k, seconds, permit).await {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The scenario's containment.
    fn scope(&self) -> &Arc<Scope> {
        &self.launch.scope
    }

    /// After a kill: wait for worker `k` to die and record its exit (chaosrun
    /// killed it). Its incarnation is retired, so its stdout closing is not
    /// news. Bounded by [`Agent::kill_and_wait`] (only this worker is killed
    /// again: the others keep running).
    async fn bury(&mut self, k: usize) {
        let exit = self.worker(k).kill_and_wait(None).await;
        self.retire(k, &exit, true);
    }

    /// Retire worker `k`'s dead incarnation (its stdout closing is not news)
    /// and record its exit.
    fn retire(&mut self, k: usize, exit: &Exit, killed_by_chaosrun: bool) {
        self.incarnation[k] += 1;
        self.push_from(
            Instant::now(),
            k,
            Event::Exited {
                code: exit.code,
                signal: exit.signal,
                killed_by_chaosrun,
            },
        );
    }

    /// Start the buried worker `k` again on the same HOME and session with
    /// `resume` and `start_turn`, and boot it.
    async fn revive(&mut self, k: usize, start_turn: u64, boot_seconds: f64) -> bool {
        match self.start_worker(k, Some(start_turn)).await {
            Ok(permit) => self.boot(k, boot_seconds, permit).await,
            Err(e) => {
                self.push_from(
                    Instant::now(),
                    k,
                    Event::RestartFailed {
                        error: format!("{e:#}"),
                    },
                );
                false
            }
        }
    }

    /// Workers that said `closed` (0 for a single agent's events).
    fn closed_workers(&self) -> BTreeSet<usize> {
        self.events
            .iter()
            .filter(|t| matches!(t.event, Event::Closed))
            .map(|t| t.worker.unwrap_or(0))
            .collect()
    }

    /// Kill worker `k` and wait, bounded, for its exit; if it is still not
    /// reaped, the scenario's whole scope is killed
    /// ([`crate::driver::Agent::kill_and_wait`]).
    async fn kill_worker(&mut self, k: usize) -> Exit {
        let scope = self.scope().clone();
        self.worker(k).kill_and_wait(Some(scope)).await
    }

    /// After the script: every process must say `closed` and exit by itself
    /// within the exit deadline; one that does not (or a run that did not get
    /// through its script) is killed. Returns whether chaosrun had to kill any.
    async fn close(&mut self, clean: bool, exit_secs: f64) -> bool {
        if clean {
            self.turn_ended(None).await;
        }
        let deadline = Instant::now() + secs(exit_secs);
        let mut missed = false;
        if clean {
            self.phase(Phase::Exit, exit_secs);
            while self.closed_workers().len() < self.count() {
                tokio::select! {
                    next = self.next() => match next {
                        Next::Event(at, k, ev) => self.push_from(at, k, ev),
                        Next::Eof(_) => {}
                    },
                    _ = sleep_until(deadline) => {
                        self.missed(Phase::Exit, exit_secs);
                        missed = true;
                        break;
                    }
                }
            }
        }
        let mut killed_any = false;
        for k in 0..self.count() {
            if self.processes().count() <= k {
                break;
            }
            let exited = if clean {
                tokio::select! {
                    e = self.worker(k).wait() => Some(e),
                    _ = sleep_until(deadline) => None,
                }
            } else {
                self.worker(k).exited()
            };
            let (exit, killed) = match exited {
                Some(e) => (e, false),
                None => {
                    if clean && !missed {
                        self.missed(Phase::Exit, exit_secs);
                        missed = true;
                    }
                    (self.kill_worker(k).await, true)
                }
            };
            killed_any |= killed;
            self.push_from(
                Instant::now(),
                k,
                Event::Exited {
                    code: exit.code,
                    signal: exit.signal,
                    killed_by_chaosrun: killed,
                },
            );
        }
        self.late_events().await;
        killed_any
    }

    /// Events printed just before the exits (bounded: a leftover process may
    /// hold stdout open and keep writing).
    async fn late_events(&mut self) {
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            let quiet = until.min(Instant::now() + Duration::from_millis(200));
            match tokio::time::timeout_at(quiet, self.next()).await {
                Ok(Next::Event(at, k, ev)) => self.push_from(at, k, ev),
                Ok(Next::Eof(_)) => {}
                Err(_) => break,
            }
        }
    }

    /// Take a snapshot of the scenario's processes (its cgroup's members, or
    /// what the fallback finds).
    async fn snapshot(&mut self, label: &str) {
        let at = self.at(Instant::now());
        let scope = self.launch.scope.clone();
        let procs = tokio::task::spawn_blocking(move || scope.members())
            .await
            .unwrap_or_default();
        self.snapshots.push(Snapshot {
            at,
            label: label.into(),
            procs,
        });
    }
}
