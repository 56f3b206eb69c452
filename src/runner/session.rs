//! The first stage of a scenario run: [`Session::open`] starts what the
//! agent depends on (the fault provider on the profile's wire, the row's MCP
//! server), renders its HOME, builds its environment and opens the scenario's
//! containment scope; on a failure it closes what it had opened and hands
//! back why. [`Session::close`] is the one teardown of the servers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tokio::time::Instant;

use super::plan::{Ids, Plan, Shared};
use crate::driver::home::{prepare, Inputs};
use crate::driver::{env, Prepared};
use crate::mcp::{McpRecording, McpServer};
use crate::proc_hygiene::{Containment, Scope};
use crate::provider::cassette::TapeHandle;
use crate::provider::{Provider, ProviderConfig, Recording};
use crate::scenarios::Scenario;

/// Everything a scenario's agent runs against, open.
pub(crate) struct Session {
    pub(crate) provider: Provider,
    pub(crate) mcp: Option<McpServer>,
    pub(crate) prepared: Prepared,
    /// The agent's whole environment.
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) scope: Arc<Scope>,
    /// Whether the agent runs in a network namespace of its own.
    pub(crate) network: crate::listen::Network,
}

/// What the servers recorded, once closed.
pub(crate) struct Closed {
    pub(crate) recording: Recording,
    pub(crate) mcp: Option<McpRecording>,
    /// The relayed calls (proxy mode), for `--record`.
    pub(crate) tape: Option<TapeHandle>,
}

/// Why a session could not be opened (or driven at all), with what its
/// servers recorded before they were closed.
pub(crate) struct Failed {
    pub(crate) error: String,
    pub(crate) closed: Closed,
    /// The scope's record, when the scope was opened.
    pub(crate) containment: Containment,
}

impl Closed {
    fn nothing() -> Closed {
        Closed {
            recording: Recording::default(),
            mcp: None,
            tape: None,
        }
    }
}

impl Session {
    /// Open the scenario's session in `root`; `start` is the run's clock.
    pub(crate) async fn open(
        shared: &Shared,
        scenario: &Scenario,
        ids: &Ids,
        root: &Path,
        start: Instant,
        plan: &Plan,
    ) -> Result<Session, Failed> {
        let failed = |error: String, closed: Closed| Failed {
            error,
            closed,
            containment: Containment::default(),
        };
        // The agent's network: a namespace of its own where the scenario's
        // servers bind (the upstream is reached by chaosrun, on the host).
        let (netns, network) = open_netns(shared).await;
        let bind = netns.as_ref().map(crate::driver::netns::NetNs::binder);
        test_slow_setup().await;
        let provider = start_provider(shared, scenario, ids, bind.clone())
            .await
            .map_err(|e| failed(e, Closed::nothing()))?;
        let mcp = match start_mcp(shared, scenario, ids, root, start, bind).await {
            Ok(m) => m,
            Err(e) => return Err(failed(e, close(provider, None, false).await)),
        };
        if let (Some(m), Some(_)) = (&mcp, scenario.mcp.as_ref().and_then(|s| s.restart)) {
            provider.on_turn_over(m.restarter());
        }
        let mcp_vars = mcp.as_ref().map(|m| m.vars()).unwrap_or_default();
        let inputs = Inputs {
            profile: &shared.profile,
            knobs: &scenario.knobs,
            base_url: &provider.base_url(),
            tag: &ids.tag,
            session_id: &plan.session_id,
            turns: &plan.turns,
            agent_args: &shared.agent_args,
            mcp: &mcp_vars,
            api_key: &crate::provider::credential::key(&ids.nonce, 1),
            agent_sandbox: scenario.agent_sandbox.is_some(),
            client: &scenario.client,
            queue_after: scenario.queue_prompt.map(|q| q.after_seconds),
        };
        let prepared = match prepare(root, &inputs) {
            Ok(p) => {
                if let Some(hook) = crate::driver::home::credential_rewriter(&inputs, &p.dirs) {
                    provider.on_credential_refresh(hook);
                }
                let seccomp = crate::driver::seccomp::Policy {
                    allow_setns: shared.profile.allow_setns,
                    deny_namespaces: scenario
                        .agent_sandbox
                        .as_ref()
                        .is_some_and(|a| a.denies_namespaces()),
                };
                let mut p = Prepared {
                    netns,
                    seccomp,
                    ..p
                };
                if let Some(exec) = p.exec.as_mut() {
                    exec.credential = provider.credential();
                }
                p
            }
            Err(e) => {
                let error = format!("cannot prepare the agent's home: {e:#}");
                return Err(failed(error, close(provider, mcp, false).await));
            }
        };
        let env = env::build(
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
        let mut prepared = prepared;
        match own_mounts(shared, root, &prepared, &env, mcp.as_ref()).await {
            Ok(ns) => prepared.mntns = ns,
            Err(error) => return Err(failed(error, close(provider, mcp, false).await)),
        }
        let scope = Arc::new(shared.containment.scope(&ids.tag));
        Ok(Session {
            provider,
            mcp,
            prepared,
            env,
            scope,
            network,
        })
    }

    /// Close the servers (after the reap and the sweep: a lingering stdio
    /// MCP relay was judged as a survivor first; closing its socket now ends
    /// any that is left).
    pub(crate) async fn close(self) -> Closed {
        close(self.provider, self.mcp, true).await
    }

    /// Close a session whose agent never started: why, and what the servers saw.
    pub(crate) async fn fail(self, error: String) -> Failed {
        let containment = self.scope.record(Vec::new());
        Failed {
            error,
            closed: close(self.provider, self.mcp, false).await,
            containment,
        }
    }
}

/// The scenario's mount namespace (None where chaosrun is not root). As
/// root the agent's mounts are always its own: a namespace that cannot be
/// made is the scenario's ERROR, never a silent fallback.
async fn own_mounts(
    shared: &Shared,
    root: &Path,
    prepared: &Prepared,
    env: &BTreeMap<String, String>,
    mcp: Option<&McpServer>,
) -> Result<Option<Arc<crate::driver::mountns::MntNs>>, String> {
    use crate::driver::mountns::{MntNs, Mounts};
    let reach = reach(shared, root, prepared, env, mcp);
    // A thread of its own makes it (mounts take a few ms): off the runtime.
    let made = tokio::task::spawn_blocking(move || MntNs::for_scenario(&reach))
        .await
        .unwrap_or_else(|_| (None, Mounts::Shared("its thread panicked".into())));
    match made {
        (Some(ns), _) => Ok(Some(ns)),
        (None, Mounts::Shared(why)) if crate::driver::mountns::required() => Err(format!(
            "cannot give the agent its own /tmp and /run: {why}"
        )),
        (None, _) => Ok(None),
    }
}

/// What the scenario's mount namespace keeps visible: its folder, its MCP
/// socket, and every absolute path the agent is given (its argv, each exec
/// template that renders now, the ACP command, its environment's values and `PATH`, the
/// profile's folder, chaosrun's own binary).
fn reach(
    shared: &Shared,
    root: &Path,
    prepared: &Prepared,
    env: &BTreeMap<String, String>,
    mcp: Option<&McpServer>,
) -> crate::driver::mountns::Reach {
    let mut paths: Vec<std::path::PathBuf> = prepared.argv.iter().map(Into::into).collect();
    if let Some(exec) = &prepared.exec {
        let templates = [&exec.spec.first, &exec.spec.next, &exec.spec.resume];
        for t in templates.into_iter().flatten() {
            if let Ok(a) = crate::template::render(t, &exec.vars) {
                paths.push(a.into());
            }
        }
    }
    if let Some(acp) = &prepared.acp {
        paths.extend(acp.argv.iter().map(Into::into));
    }
    paths.extend(env.values().flat_map(|v| v.split(':')).map(Into::into));
    paths.extend(mcp.map(|m| m.socket().to_path_buf()));
    paths.push(shared.profile.dir.clone());
    paths.extend(std::env::current_exe().ok());
    crate::driver::mountns::Reach {
        scenario: root.to_path_buf(),
        artifacts: shared.artifacts.clone(),
        paths,
    }
}

/// Shut the provider (keeping its tape when asked) and the MCP server down.
async fn close(provider: Provider, mcp: Option<McpServer>, keep_tape: bool) -> Closed {
    let tape = keep_tape.then(|| provider.tape());
    let recording = provider.shutdown().await;
    let mcp = match mcp {
        Some(m) => Some(m.shutdown().await),
        None => None,
    };
    Closed {
        recording,
        mcp,
        tape,
    }
}

/// The scenario's network namespace (loopback only), unless the profile
/// says `network: host` or none can be made; the record says which.
async fn open_netns(
    shared: &Shared,
) -> (
    Option<Arc<crate::driver::netns::NetNs>>,
    crate::listen::Network,
) {
    let host = shared.profile.network == crate::profile::NetworkMode::Host;
    crate::driver::netns::NetNs::for_scenario_async(host).await
}

/// Debug builds only: `CHAOSRUN_TEST_SLOW_SETUP=<seconds>` holds every
/// session's setup that long before its provider starts, as a loaded
/// machine does (what tests/process_faults.rs checks: request times stay
/// on the run's clock). Nothing otherwise.
async fn test_slow_setup() {
    let slow = std::env::var("CHAOSRUN_TEST_SLOW_SETUP")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| cfg!(debug_assertions) && s.is_finite() && *s > 0.0);
    if let Some(s) = slow {
        tokio::time::sleep(crate::units::secs(s)).await;
    }
}

/// The fault provider on the profile's wire (relaying the profile's
/// upstream, in proxy mode), bound inside the scenario's namespace when
/// `bind` says so.
async fn start_provider(
    shared: &Shared,
    scenario: &Scenario,
    ids: &Ids,
    bind: Option<crate::listen::Binder>,
) -> Result<Provider, String> {
    let upstream = match &shared.profile.upstream {
        Some(spec) => Some(Arc::new(crate::provider::upstream::Upstream::resolve(
            spec,
            |n| std::env::var(n).ok(),
        )?)),
        None => None,
    };
    let counter_tag = ids.tag.clone();
    Provider::start(ProviderConfig {
        port: 0,
        wire: shared.profile.wire,
        rules: scenario.responder.clone(),
        nonce: ids.nonce.clone(),
        seed: super::plan::scenario_seed(ids.seed, &scenario.id),
        tools: shared.profile.tools.clone(),
        process_counter: Some(Arc::new(move |needle: &str| {
            crate::proc_hygiene::count_tagged_matching(&counter_tag, needle)
        })),
        record: Default::default(),
        upstream,
        context_window: scenario.context_window,
        endpoint_fault: scenario.endpoint_fault,
        credential: scenario.credential.clone(),
        main_without_tools: !shared.profile.tool_calls,
        aux_markers: shared.profile.aux_calls.clone(),
        probe_first: restart_probe(scenario),
        bind,
    })
    .await
    .map_err(|e| format!("cannot start the fault provider: {e:#}"))
}

/// A row whose MCP server restarts between turns: the probe turn's first
/// call asks for the MCP tool again (`text: again-NONCE`).
fn restart_probe(scenario: &Scenario) -> Option<crate::provider::Reply> {
    scenario.mcp.as_ref()?.restart?;
    let text = format!("{}{{{{nonce}}}}", crate::mcp::AGAIN);
    let reply = serde_json::json!({
        "kind": crate::provider::Reply::TOOL_CALLS,
        "calls": [{"tool": "mcp_probe", "args": {crate::mcp::jsonrpc::PROBE_ARG: text}}],
    });
    Some(serde_json::from_value(reply).expect("a tool_call reply"))
}

/// The scenario's MCP server, when its row has an `mcp:` section, on the
/// transport the row pins or the profile's first.
async fn start_mcp(
    shared: &Shared,
    scenario: &Scenario,
    ids: &Ids,
    root: &Path,
    start: Instant,
    bind: Option<crate::listen::Binder>,
) -> Result<Option<McpServer>, String> {
    let Some(spec) = &scenario.mcp else {
        return Ok(None);
    };
    let registered = match &shared.profile.mcp {
        crate::mcp::McpSupport::Transports(t) => t.as_slice(),
        _ => &[],
    };
    let Some(transport) = spec.transport_for(registered) else {
        return Err(format!(
            "the adapter profile `{}` registers no MCP transport this row can use",
            shared.profile.source
        ));
    };
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(root)
            .and_then(|()| std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| format!("cannot make {}: {e}", root.display()))?;
    }
    McpServer::start(crate::mcp::McpConfig {
        rules: spec.rules.clone(),
        nonce: ids.nonce.clone(),
        linger: spec.linger && transport == crate::mcp::Transport::Stdio,
        withhold_endpoint: spec.withhold_endpoint,
        transport,
        dir: root.to_path_buf(),
        start,
        bind,
        // The row's real server, else the profile's (proxy mode).
        upstream: spec
            .upstream
            .clone()
            .or(shared.profile.mcp_upstream.clone()),
        host: Some(upstream_host(&shared.run_id)),
    })
    .await
    .map(Some)
    .map_err(|e| format!("cannot start the MCP server: {e:#}"))
}

/// What a real MCP server (proxy mode) gets: the agent's environment
/// allow-list (none of the caller's secrets, no proxy), the run marker (the
/// run's guard sweeps it if chaosrun dies).
fn upstream_host(run_id: &str) -> crate::mcp::upstream::Host {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| env::is_allowed(k) && !env::is_proxy(k))
        .collect();
    env.insert("NO_PROXY".into(), env::LOOPBACK_NO_PROXY.into());
    env.insert(crate::proc_hygiene::RUN_VAR.into(), run_id.into());
    crate::mcp::upstream::Host { env }
}
