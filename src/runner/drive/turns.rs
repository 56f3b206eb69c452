//! A scenario's turns: boot, the faulted turn with its interrupt or process
//! fault (sent to whichever worker runs the turn), and the probe turn, each
//! through its deadline.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::{sleep_until, Instant};

use super::baseline;
use super::clock::{began, TurnClock};
use super::faults::{Hit, Landed};
use super::{Drive, Next};
use crate::observe::{Event, Phase};
use crate::proc_hygiene::Scope;
use crate::provider::Provider;
use crate::scenarios::{Landing, Scenario, Trigger};
use crate::store::writes::StoreFiles;
use crate::units::secs;

/// Resolves when a trigger (of an interrupt or a process fault) fires;
/// `since` is when the faulted turn began.
async fn trigger_fired(
    trigger: &Option<Trigger>,
    provider: &Provider,
    mcp_calls: &mut Option<tokio::sync::watch::Receiver<u64>>,
    scope: &Arc<Scope>,
    (since, store): (Instant, Option<&crate::store::writes::StoreFiles>),
) {
    match trigger {
        // Landed at the turn's end by [`faulted_turn_in`].
        None | Some(Trigger::AfterAnswer) => std::future::pending().await,
        Some(Trigger::WhenMcpCall(n)) => match mcp_calls {
            Some(w) => {
                let _ = w.wait_for(|c| *c >= *n).await;
            }
            None => std::future::pending().await,
        },
        Some(Trigger::AfterSeconds(s)) => sleep_until(since + secs(*s)).await,
        // `calls` watches the subagent's calls for `when_subagent_call`
        // (see [`calls_for`]).
        Some(Trigger::AfterCalls(n) | Trigger::WhenSubagentCall(n)) => {
            let mut calls = calls_for(trigger.as_ref(), provider);
            let _ = calls.wait_for(|c| *c >= *n).await;
        }
        // The N-th call's answer sent whole (or given up): a hang never.
        Some(Trigger::AfterReply(n)) => provider.main_answered(n.saturating_sub(1)).await,
        // Watched from the turn's start, so no write after the N-th call
        // can slip by before the watch exists; the first write reported once
        // N calls arrived fires it (under load, a write made just before the
        // N-th call and read after it may be the one). A store that cannot
        // be watched never fires: the kill is named as never landed (a
        // profile without a SQLite or JSONL store makes the row N/A).
        Some(Trigger::StoreWriteAfterCalls(n)) => {
            let calls = provider.main_calls();
            let watched = store.map(crate::store::writes::StoreWrites::of);
            let Some(Ok(mut writes)) = watched else {
                return std::future::pending().await;
            };
            while writes.next().await.is_ok() {
                if *calls.borrow() >= *n {
                    return;
                }
            }
            std::future::pending::<()>().await;
        }
        // The scenario's processes (its cgroup's members, whatever their
        // environment), read off the async workers.
        Some(Trigger::WhenProcess(needle)) => loop {
            let (scope, needle) = (scope.clone(), needle.clone());
            let seen = tokio::task::spawn_blocking(move || {
                scope.members().iter().any(|p| p.cmdline.contains(&needle))
            })
            .await
            .unwrap_or(false);
            if seen {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        },
    }
}

/// The call count a trigger waits on: the subagent's calls for
/// `when_subagent_call`, else the parent's main calls.
fn calls_for(trigger: Option<&Trigger>, provider: &Provider) -> tokio::sync::watch::Receiver<u64> {
    match trigger {
        Some(Trigger::WhenSubagentCall(_)) => provider.subagent_calls(),
        _ => provider.main_calls(),
    }
}

/// Boot, the faulted turn, and the probe turn. Returns whether the agent got
/// through them, so it is now expected to close. `Err` is a setup error.
pub(crate) async fn drive(
    d: &mut Drive<'_>,
    s: &Scenario,
    provider: &Provider,
    mcp: Option<&crate::mcp::McpServer>,
) -> Result<bool, String> {
    // A fault landed under a memory limit holds the reply to its N-th call
    // until the limit is set ([`Drive::land`] releases it); armed before
    // the boot, since an agent may start its turn as soon as it is ready.
    if let Some(f) = &s.process_fault {
        if let (Landing::MemoryLimit, Trigger::AfterCalls(n)) = (f.action.lands(), &f.at) {
            provider.hold_from(Some(n.saturating_sub(1)));
        }
    }
    // A kill aimed at a store write copies the store when its N-th call
    // arrives, the reply held meanwhile ([`super::store_kill`]).
    if let Some(n) = store_write_trigger(s) {
        provider.hold_from(Some(n.saturating_sub(1)));
    }
    baseline::arm(s, provider);
    if !d.boot_all(s.deadlines.boot).await? {
        return Ok(false);
    }
    if !faulted_turn(d, s, provider, mcp).await {
        return Ok(false);
    }
    Ok(probe_turn(d, s).await)
}

/// The faulted turn ([`faulted_turn_in`]); a kill aimed at a store write
/// keeps the copy its trigger took when it armed, and the reply held for it
/// is released however the turn ended.
async fn faulted_turn(
    d: &mut Drive<'_>,
    s: &Scenario,
    provider: &Provider,
    mcp: Option<&crate::mcp::McpServer>,
) -> bool {
    let armed = std::sync::Mutex::new(None);
    let ended = faulted_turn_in(d, s, (provider, mcp), &armed).await;
    if let Some(copy) = armed.into_inner().ok().flatten() {
        d.store_at_arm = Some(copy);
    }
    if store_write_trigger(s).is_some() {
        provider.hold_from(None);
    }
    ended
}

/// The `N` of a process fault aimed at a store write
/// (`store_write_after_calls: N`).
fn store_write_trigger(s: &Scenario) -> Option<u64> {
    match s.process_fault.as_ref().map(|f| &f.at) {
        Some(Trigger::StoreWriteAfterCalls(n)) => Some(*n),
        _ => None,
    }
}

/// The process fault's trigger (from the faulted turn's start, `working`),
/// then its delay; never, for a row without one. A kill aimed at a store
/// write arms through [`super::store_kill::armed_then_written`], which keeps
/// its copy in `armed`.
async fn fault_fired(
    s: &Scenario,
    mut working: tokio::sync::watch::Receiver<Option<Instant>>,
    (provider, mcp): (&Provider, Option<&crate::mcp::McpServer>),
    (scope, store, into): (Arc<Scope>, Option<StoreFiles>, std::path::PathBuf),
    armed: &std::sync::Mutex<Option<super::store_kill::AtKill>>,
) {
    let since = began(&mut working).await;
    let at = s.process_fault.as_ref().map(|f| f.at.clone());
    if let Some(Trigger::StoreWriteAfterCalls(n)) = &at {
        let mut calls = provider.main_calls();
        let files = (store.as_ref(), into);
        super::store_kill::armed_then_written(*n, &mut calls, files, provider, armed).await;
    } else {
        let mut mcp_calls = mcp.map(|m| m.calls_watch());
        let when = (since, store.as_ref());
        trigger_fired(&at, provider, &mut mcp_calls, &scope, when).await;
    }
    let delay = s.process_fault.as_ref().map_or(0.0, |f| f.delay);
    tokio::time::sleep(secs(delay)).await;
}

/// The faulted turn, with its interrupt or process fault sent when its
/// trigger fires: whether it ended (or, after a kill, the agent was revived)
/// within its deadline. In exec mode the deadline and the triggers run from
/// the turn's first request to the provider ([`TurnClock`]).
async fn faulted_turn_in(
    d: &mut Drive<'_>,
    s: &Scenario,
    (provider, mcp): (&Provider, Option<&crate::mcp::McpServer>),
    armed: &std::sync::Mutex<Option<super::store_kill::AtKill>>,
) -> bool {
    let dl = &s.deadlines;
    let _probes = ProbesHeld::for_turn(d, s, provider);
    let mut clock = TurnClock::start(d, 0, Phase::FaultedTurn, dl.turn, dl.boot);
    let (mut working, fault_working) = (clock.working(), clock.working());
    let scope = d.scope().clone();
    let store = d.store_files();
    let mut mcp_calls = mcp.map(|m| m.calls_watch());
    let trigger = async {
        let since = began(&mut working).await;
        let at = (since, store.as_ref());
        trigger_fired(&s.interrupt, provider, &mut mcp_calls, &scope, at).await;
    };
    tokio::pin!(trigger);
    let into = d.launch.prepared.dirs.root.join(super::store_kill::ARM_DIR);
    let fault_trigger = fault_fired(
        s,
        fault_working,
        (provider, mcp),
        (scope.clone(), store.clone(), into),
        armed,
    );
    tokio::pin!(fault_trigger);
    // Fused: once measured it is pending for good.
    let mut footprint = Box::pin(baseline::measure(s, scope.clone(), provider).fuse());
    let (mut sent, mut faulted) = (false, false);
    // The worker running the faulted turn (a single agent is worker 0).
    let mut runner = 0;
    loop {
        tokio::select! {
            next = d.next() => match next {
                Next::Eof(_) => return false,
                Next::Event(at, k, ev) => {
                    if matches!(ev, Event::TurnStart { i: 0 }) {
                        runner = k;
                    }
                    clock.on(d, at, &ev);
                    let end = matches!(&ev, Event::TurnEnd(t) if t.i == 0);
                    d.push_from(at, k, ev);
                    if end {
                        // A row's expired credential (`refresh: turn_end`),
                        // its MCP server's restart (`mcp.restart`).
                        provider.refresh_credential();
                        provider.turn_over().await;
                        return faulted_turn_over(d, s, (runner, dl.boot), provider, &clock).await;
                    }
                }
            },
            ev = &mut footprint => d.push(Instant::now(), ev),
            _ = &mut trigger, if !sent => {
                sent = true;
                let main_calls = *provider.main_calls().borrow();
                // Stamped before the write: a fast agent's `turn_end` (read
                // by another task) must never look earlier than the interrupt.
                let at = Instant::now();
                d.interrupt(runner).await;
                d.push(at, Event::InterruptSent { main_calls });
                clock.narrow(d, Phase::Interrupt, dl.interrupt);
            }
            _ = &mut fault_trigger, if !faulted => {
                faulted = true;
                let f = s.process_fault.as_ref().expect("a fault trigger fires only with a fault");
                let hit = Hit {
                    action: f.action,
                    target: f.target,
                    stop_for: f.stop_for,
                    headroom_mb: f.headroom_mb,
                    main_calls: *provider.main_calls().borrow(),
                    resume: (1, dl.boot),
                    copy_store: matches!(f.at, Trigger::StoreWriteAfterCalls(_)),
                    damage: s.store_damage.map(|d| d.kind),
                    deadline: clock.deadline,
                    provider,
                };
                match d.land(runner, hit).await {
                    Landed::Revived(revived) => return revived,
                    Landed::GoesOn => {}
                    Landed::Missed => {
                        clock.missed(d);
                        return false;
                    }
                }
            }
            _ = sleep_until(clock.deadline) => {
                clock.missed(d);
                return false;
            }
        }
    }
}

/// Probe calls held while alive ([`Provider::hold_probes`]).
struct ProbesHeld<'a>(&'a Provider);

impl<'a> ProbesHeld<'a> {
    /// Held through the faulted turn where the agent goes on to the probe
    /// turn by itself (the driver protocol runs its turns from the spec):
    /// its calls wait until the turn is done here, so the turn-end sample
    /// finds the agent alive (a fast agent's exit never leaves memory
    /// unsampled), and on a row whose fault lands after the answer, so the
    /// fault lands before the next turn is answered.
    fn for_turn(d: &Drive<'_>, s: &Scenario, provider: &'a Provider) -> Option<Self> {
        let protocol = d.turn_model() == crate::observe::TurnModel::DRIVER_PROTOCOL && !d.multi();
        (protocol || after_answer(s).is_some()).then(|| {
            provider.hold_probes(true);
            ProbesHeld(provider)
        })
    }
}

impl Drop for ProbesHeld<'_> {
    fn drop(&mut self) {
        self.0.hold_probes(false);
    }
}

/// The process fault timed `at: after_answer`, if the row has one.
fn after_answer(s: &Scenario) -> Option<&crate::scenarios::ProcessFault> {
    s.process_fault
        .as_ref()
        .filter(|f| f.at == Trigger::AfterAnswer)
}

/// The faulted turn answered: sampled, its after-answer fault landed, and
/// the agent told the turn is done (an ACP session's next prompt waits for
/// that: no prompt is in flight when a fault after the answer lands).
/// Whether the agent got through it.
async fn faulted_turn_over(
    d: &mut Drive<'_>,
    s: &Scenario,
    (runner, boot): (usize, f64),
    provider: &Provider,
    clock: &TurnClock,
) -> bool {
    let Some(f) = after_answer(s) else {
        d.turn_ended(Some(0)).await;
        return true;
    };
    d.turn_sampled(Some(0)).await;
    let revived = land_after_answer(d, s, (runner, f, boot), provider, clock).await;
    d.turn_done(0);
    revived
}

/// Land `f` just after the faulted turn's answer: whether the agent got
/// through it (revived after a kill or a hangup).
async fn land_after_answer(
    d: &mut Drive<'_>,
    s: &Scenario,
    (runner, f, boot): (usize, &crate::scenarios::ProcessFault, f64),
    provider: &Provider,
    clock: &TurnClock,
) -> bool {
    tokio::time::sleep(secs(f.delay)).await;
    let hit = Hit {
        action: f.action,
        target: f.target,
        stop_for: f.stop_for,
        headroom_mb: f.headroom_mb,
        main_calls: *provider.main_calls().borrow(),
        resume: (1, boot),
        copy_store: false,
        damage: s.store_damage.map(|d| d.kind),
        deadline: clock.deadline,
        provider,
    };
    match d.land(runner, hit).await {
        Landed::Revived(revived) => revived,
        Landed::GoesOn => true,
        Landed::Missed => false,
    }
}

/// The probe turn: whether it started and ended within its deadline (in
/// exec mode, its start-up within the boot deadline, then the probe deadline
/// from its first request to the provider).
async fn probe_turn(d: &mut Drive<'_>, s: &Scenario) -> bool {
    let dl = &s.deadlines;
    let probe_ended = |e: &Event| matches!(e, Event::TurnEnd(t) if t.i == 1);
    // Workers revived one after another: the first may have run the probe
    // turn already while the others booted.
    if d.seen(probe_ended) {
        return true;
    }
    let mut clock = TurnClock::start(d, 1, Phase::Probe, dl.probe, dl.boot);
    let mut started = d.seen(|e| matches!(e, Event::TurnStart { i: 1 }));
    if started {
        d.snapshot("probe_turn_start").await;
    }
    loop {
        tokio::select! {
            next = d.next() => match next {
                Next::Eof(_) => return false,
                Next::Event(at, k, ev) => {
                    clock.on(d, at, &ev);
                    let (start, end) = (matches!(ev, Event::TurnStart { i: 1 }), probe_ended(&ev));
                    d.push_from(at, k, ev);
                    if end {
                        d.turn_ended(Some(1)).await;
                        return true;
                    }
                    if start && !started {
                        started = true;
                        d.snapshot("probe_turn_start").await;
                    }
                }
            },
            _ = sleep_until(clock.deadline) => {
                clock.missed(d);
                return false;
            }
        }
    }
}
