//! One scenario run as a pipeline, one direction: the [`Plan`] (pure: the
//! session id, the turns' messages, a chaos schedule) →
//! [`Session::open`](super::session::Session::open) (servers, HOME,
//! environment, containment scope) → [`Drive`](super::drive::Drive) (the
//! agent's processes and its script, closed at the end) →
//! [`collect`](super::collect::collect) (reap, sweep, store, the servers'
//! recordings, tails, journal) → [`Observation::assemble`]. Each stage hands
//! the next one a value; it judges nothing. Every wait has a deadline.

use std::path::Path;

use tokio::time::Instant;

use super::collect::collect;
use super::drive::{Drive, Launch};
use super::plan::{Ids, Plan, Shared};
use super::sampler::Sampler;
use super::session::Session;
use crate::observe::{Observation, Phase};
use crate::scenarios::Scenario;

/// Run one scenario with its run directory at `root`. `start` is the moment
/// the run began (the sampler's clock too): the `sampler` watches the
/// scenario's processes from here, and `collect` takes what it saw.
pub async fn observe(
    shared: &Shared,
    scenario: &Scenario,
    ids: &Ids,
    root: &Path,
    start: Instant,
    sampler: &Sampler,
    on_phase: &(dyn Fn(Phase, f64) + Sync),
) -> Observation {
    sampler.watch(&ids.tag, start);
    // The drive awaits a sample at each turn's end and as the agent is
    // asked to close (`Drive::turn_ended`, `Drive::close`): what it holds
    // then is seen while it still runs, which a tick twice a second can
    // miss. A row that bounds memory growth is sampled closely through its
    // faulted turn, where its output lands; a long session that bounds
    // growth per turn, through its whole conversation.
    let growth = scenario.memory_growth_mb.is_some() || scenario.memory_per_turn_mb.is_some();
    let on_phase = &|phase: Phase, seconds: f64| {
        if growth && phase == Phase::FaultedTurn {
            sampler.closely(&ids.tag, true);
        }
        if matches!(phase, Phase::Probe | Phase::Exit) {
            sampler.closely(&ids.tag, false);
        }
        on_phase(phase, seconds)
    };
    let plan = Plan::new(shared, scenario, ids, start);
    let provider_offset = (Instant::now() - start).as_secs_f64();
    let session = match Session::open(shared, scenario, ids, root, start, &plan).await {
        Ok(s) => s,
        Err(failed) => return Observation::setup_failed(plan, provider_offset, failed),
    };
    // A request's `at` counts from the provider's own start, which comes
    // after the namespace and the provider are set up: seconds later than
    // the line above on a loaded machine. Measured from there, every
    // request would look that much earlier than it was (a restarted
    // agent's job charged to the incarnation killed before it).
    let provider_offset = session
        .provider
        .started()
        .saturating_duration_since(start.into_std())
        .as_secs_f64();
    // A row that bounds the disk: its places walked from before the agent
    // starts to after it was reaped.
    let disk = match scenario.disk_mb {
        Some(_) => Some(super::disk::DiskWatch::start(&session.prepared, start).await),
        None => None,
    };
    let launch = Launch {
        prepared: &session.prepared,
        env: &session.env,
        gate: shared.boot_gate.clone(),
        scope: session.scope.clone(),
        requests: session.provider.requests(),
        sampler: (sampler, &ids.tag),
    };
    let drive = Drive::new(start, launch, plan.workers, on_phase);
    let script = (plan.chaos.as_ref(), &session.provider, session.mcp.as_ref());
    let driven = match drive.run(scenario, script).await {
        Ok(d) => d,
        Err(e) => {
            let failed = session.fail(e).await;
            return Observation::setup_failed(plan, provider_offset, failed);
        }
    };
    let model = crate::driver::agent::turn_model(&session.prepared);
    let collected = collect(shared, scenario, &plan, session, &driven, sampler, on_phase).await;
    let mut obs = Observation::assemble(plan, provider_offset, driven, collected, start);
    obs.turn_model = Some(model);
    if let Some(watch) = disk {
        obs.disk = Some(watch.finish().await);
    }
    obs
}
