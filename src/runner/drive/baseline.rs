//! The agent's own footprint on a row that bounds memory growth
//! (`memory_growth_mb`): the reply to the faulted turn's first main call is
//! held (armed before the boot, as an agent may start its turn as soon as it
//! is ready) until the resident memory of the scenario's processes is read,
//! so the figure is the agent's as it asked for the output, before any of
//! it exists. Recorded as [`Event::MemoryBaseline`]; the oracle judges the
//! samples after it against it.

use std::sync::Arc;

use crate::observe::Event;
use crate::proc_hygiene::Scope;
use crate::provider::Provider;
use crate::scenarios::Scenario;

/// Hold the reply to the first main call when the row bounds growth.
pub(super) fn arm(s: &Scenario, provider: &Provider) {
    if s.memory_growth_mb.is_some() {
        provider.hold_from(Some(0));
    }
}

/// Once the first main call arrived: the footprint, read while its reply is
/// held, then the reply let go. Never resolves on a row without a bound.
pub(super) async fn measure(s: &Scenario, scope: Arc<Scope>, provider: &Provider) -> Event {
    if s.memory_growth_mb.is_none() {
        return std::future::pending().await;
    }
    let mut calls = provider.main_calls();
    let _ = calls.wait_for(|c| *c >= 1).await;
    let read = tokio::task::spawn_blocking(move || {
        let pids: Vec<i32> = scope.members().iter().map(|p| p.pid).collect();
        let rss = crate::runner::sampler::resident(&pids);
        (pids.len(), rss)
    })
    .await;
    provider.hold_from(None);
    let (processes, rss) = read.unwrap_or_else(|e| (0, Err(e.to_string())));
    match rss {
        Ok(rss) if processes > 0 => Event::MemoryBaseline {
            rss,
            processes,
            error: None,
        },
        Ok(_) => Event::MemoryBaseline {
            rss: 0,
            processes: 0,
            error: Some("no process of the scenario was found".into()),
        },
        Err(error) => Event::MemoryBaseline {
            rss: 0,
            processes,
            error: Some(error),
        },
    }
}
