//! One scenario run: start the provider, prepare the agent's HOME, drive its
//! turns (or a chaos run) through [`super::drive`] inside the scenario's
//! containment scope (its own cgroup, or the tag fallback), wait for `closed`
//! and every process's exit, reap (survivors are the scope's members), sweep,
//! read the store and the journal, and hand back the [`Observation`]. It judges
//! nothing. Every wait has a deadline.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{sleep_until, Instant};

use super::drive::{secs, Drive, Launch, Next};
use crate::driver::env;
use crate::driver::home::{prepare, Inputs, StoreAt};
use crate::driver::Exit;
use crate::input::{open_regular, Follow, OpenError};
use crate::observe::{Capped, Event, Observation, Phase, StoreObservation};
use crate::proc_hygiene::{self, Kind};
use crate::profile::Profile;
use crate::provider::{Provider, ProviderConfig};
use crate::scenarios::Scenario;

/// What every scenario of a run shares.
pub struct Shared {
    pub profile: Profile,
    pub agent_args: Vec<String>,
    /// Marks every process of this chaosrun invocation.
    pub run_id: String,
    /// How the run contains its processes (a cgroup per scenario, or the
    /// tag fallback).
    pub containment: Arc<proc_hygiene::RunContainment>,
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

/// Journal lines read at most.
pub const JOURNAL_MAX_LINES: usize = 10_000;
/// Journal bytes read at most (from the start: 4 MiB).
pub const JOURNAL_MAX_BYTES: u64 = 4 << 20;
/// Characters kept of one journal line.
const JOURNAL_LINE_CHARS: usize = 500;
/// Bytes read from the end of a log for its tail.
const TAIL_BYTES: u64 = 64 * 1024;

/// The journal's first lines (at most [`JOURNAL_MAX_LINES`], within
/// [`JOURNAL_MAX_BYTES`], each cut to 500 chars), the file's size and the
/// bytes read. A line cut by the byte cap is left out.
fn read_journal(path: &Path) -> (Vec<String>, u64, u64) {
    use std::io::Read;
    // The agent can write in the run folder: a symlink it planted is not
    // followed, and only a regular file is read (never a blocking open).
    let Ok((file, meta)) = open_regular(path, Follow::No) else {
        return (Vec::new(), 0, 0);
    };
    let size = meta.len();
    let mut text = Vec::new();
    let _ = file.take(JOURNAL_MAX_BYTES).read_to_end(&mut text);
    let whole = (text.len() as u64) >= size;
    let mut lines = Vec::new();
    let mut read = 0u64;
    for part in text.split_inclusive(|&b| b == b'\n') {
        if lines.len() >= JOURNAL_MAX_LINES || (!whole && !part.ends_with(b"\n")) {
            break;
        }
        read += part.len() as u64;
        let line = part.strip_suffix(b"\n").unwrap_or(part);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        lines.push(
            String::from_utf8_lossy(line)
                .chars()
                .take(JOURNAL_LINE_CHARS)
                .collect(),
        );
    }
    (lines, size, read)
}

/// The last `max_lines` lines of a file, read from its last 64 KiB only
/// (empty when it is missing; why not, when it is not a regular file).
fn tail(path: &Path, follow: Follow, max_lines: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let (mut file, meta) = match open_regular(path, follow) {
        Ok(f) => f,
        Err(e @ OpenError::NotRegular { .. }) => {
            return format!("(not read: {} {e})", path.display())
        }
        Err(OpenError::Io(e)) if e.raw_os_error() == Some(libc::ELOOP) => {
            return format!("(not read: {} is a symbolic link)", path.display())
        }
        Err(OpenError::Io(_)) => return String::new(),
    };
    let size = meta.len();
    let from = size.saturating_sub(TAIL_BYTES);
    if file.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(TAIL_BYTES).read_to_end(&mut bytes);
    let mut text = &bytes[..];
    if from > 0 {
        // Started mid-line: drop the partial first line.
        if let Some(nl) = text.iter().position(|&b| b == b'\n') {
            text = &text[nl + 1..];
        }
    }
    let text = String::from_utf8_lossy(text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

/// What the run left in files: stderr's and the logs' tails, the journal.
struct Leftovers {
    stderr_tail: String,
    log_tails: Vec<(String, String)>,
    logs_missing: Vec<String>,
    journal: Vec<String>,
    journal_bytes: u64,
    journal_read: u64,
}

/// Read the tails and the journal, off the async workers.
async fn read_leftovers(prepared: &crate::driver::Prepared) -> Leftovers {
    let stderr = prepared.dirs.stderr_log.clone();
    let logs = prepared.log_paths.clone();
    let journal = prepared.dirs.journal.clone();
    let home = prepared.dirs.home.clone();
    let read = move || {
        let (journal, journal_bytes, journal_read) = read_journal(&journal);
        let logs_missing = logs
            .iter()
            .filter(|p| crate::driver::home::expand_log(&home, p).is_empty())
            // Relative to HOME (which differs per scenario), as the profile wrote it.
            .map(|p| p.strip_prefix(&home).unwrap_or(p).display().to_string())
            .collect();
        Leftovers {
            logs_missing,
            // Not through a symlink the agent planted in its run folder.
            stderr_tail: tail(&stderr, Follow::No, 20),
            // A `logs:` entry may be a glob; one that matched nothing is
            // kept with that said, so the evidence shows the log never came.
            log_tails: logs
                .iter()
                .flat_map(|pattern| {
                    let found = crate::driver::home::expand_log(&home, pattern);
                    if found.is_empty() {
                        return vec![(
                            pattern.display().to_string(),
                            "(declared in the profile's `logs:`, but no such file ever appeared)"
                                .to_string(),
                        )];
                    }
                    found
                        .into_iter()
                        .map(|p| {
                            let tail = match crate::driver::home::resolve_inside(&home, &p) {
                                Ok(real) => tail(&real, Follow::Yes, 20),
                                Err(e) => format!("(not read: {e})"),
                            };
                            (p.display().to_string(), tail)
                        })
                        .collect()
                })
                .collect(),
            journal,
            journal_bytes,
            journal_read,
        }
    };
    tokio::task::spawn_blocking(read)
        .await
        .unwrap_or_else(|_| Leftovers {
            stderr_tail: String::new(),
            log_tails: Vec::new(),
            logs_missing: Vec::new(),
            journal: Vec::new(),
            journal_bytes: 0,
            journal_read: 0,
        })
}

/// Workers that said `closed` (0 for a single agent's events).
fn closed_workers(d: &Drive<'_>) -> BTreeSet<usize> {
    d.events
        .iter()
        .filter(|t| matches!(t.event, Event::Closed))
        .map(|t| t.worker.unwrap_or(0))
        .collect()
}

/// Kill worker `k` and wait, bounded, for its exit; if it is still not
/// reaped, the scenario's whole scope is killed
/// ([`crate::driver::Agent::kill_and_wait`]).
async fn kill_worker(d: &mut Drive<'_>, k: usize) -> Exit {
    let scope = d.scope().clone();
    d.worker(k).kill_and_wait(Some(scope)).await
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
                (kill_worker(d, k).await, true)
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
    // Events printed just before the exits (bounded: a leftover process may
    // hold stdout open and keep writing).
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let quiet = until.min(Instant::now() + Duration::from_millis(200));
        match tokio::time::timeout_at(quiet, d.next()).await {
            Ok(Next::Event(at, k, ev)) => d.push_from(at, k, ev),
            Ok(Next::Eof(_)) => {}
            Err(_) => break,
        }
    }
    killed_any
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
) -> Result<Option<crate::mcp::McpServer>, String> {
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
    crate::mcp::McpServer::start(crate::mcp::McpConfig {
        rules: spec.rules.clone(),
        nonce: ids.nonce.clone(),
        linger: spec.linger && transport == crate::mcp::Transport::Stdio,
        transport,
        dir: root.to_path_buf(),
        start,
        bind,
    })
    .await
    .map(Some)
    .map_err(|e| format!("cannot start the MCP server: {e:#}"))
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
        processes_seen: Vec::new(),
        provider_offset: 0.0,
        store: StoreObservation::NotConfigured,
        survivors: Vec::new(),
        containment: Default::default(),
        network: Default::default(),
        stderr_tail: String::new(),
        log_tails: Vec::new(),
        logs_missing: Vec::new(),
        stdout_other_lines: 0,
        setup_error: None,
        wall: 0.0,
        started_unix: unix_now() - start.elapsed().as_secs_f64(),
        journal: Vec::new(),
        probe_turn,
        chaos: chaos.clone(),
        workers,
        capped: Default::default(),
        mcp: None,
    };
    let counter_tag = ids.tag.clone();
    obs.provider_offset = (Instant::now() - start).as_secs_f64();
    let upstream = match &shared.profile.upstream {
        Some(spec) => {
            match crate::provider::upstream::Upstream::resolve(spec, |n| std::env::var(n).ok()) {
                Ok(u) => Some(Arc::new(u)),
                Err(e) => {
                    obs.setup_error = Some(e);
                    return obs;
                }
            }
        }
        None => None,
    };
    // The agent's network: a namespace of its own where the scenario's
    // servers bind (the upstream is reached by chaosrun, on the host).
    let host = shared.profile.network == crate::profile::NetworkMode::Host;
    let (netns, network) =
        tokio::task::spawn_blocking(move || crate::driver::netns::NetNs::for_scenario(host))
            .await
            .unwrap_or_else(|e| {
                let reason = Some(format!("cannot create a network namespace: {e}"));
                let net = crate::listen::Network {
                    contained: false,
                    reason,
                };
                (None, net)
            });
    obs.network = network;
    let bind = netns.as_ref().map(crate::driver::netns::NetNs::binder);
    let provider = match Provider::start(ProviderConfig {
        port: 0,
        wire: shared.profile.wire,
        rules: scenario.responder.clone(),
        nonce: ids.nonce.clone(),
        tools: shared.profile.tools.clone(),
        process_counter: Some(Arc::new(move |needle: &str| {
            proc_hygiene::count_tagged_matching(&counter_tag, needle)
        })),
        record: Default::default(),
        upstream,
        context_window: scenario.context_window,
        bind: bind.clone(),
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
    let mcp = match start_mcp(shared, scenario, ids, root, start, bind).await {
        Ok(m) => m,
        Err(e) => {
            obs.setup_error = Some(e);
            obs.recording = provider.shutdown().await;
            return obs;
        }
    };
    let mcp_vars = mcp.as_ref().map(|m| m.vars()).unwrap_or_default();
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
            mcp: &mcp_vars,
        },
    );
    let prepared = match prepared {
        Ok(p) => crate::driver::Prepared { netns, ..p },
        Err(e) => {
            obs.setup_error = Some(format!("cannot prepare the agent's home: {e:#}"));
            obs.recording = provider.shutdown().await;
            if let Some(m) = mcp {
                obs.mcp = Some(m.shutdown().await);
            }
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
    let scope = Arc::new(shared.containment.scope(&ids.tag));
    obs.containment = scope.record(Vec::new());
    let mut d = Drive::new(
        start,
        Launch {
            prepared: &prepared,
            env: &child_env,
            gate: shared.boot_gate.clone(),
            scope: scope.clone(),
        },
        workers,
        on_phase,
    );
    let driven = match &chaos {
        Some(c) => super::chaos::drive(&mut d, scenario, &c.schedule, &provider).await,
        None => super::turns::drive(&mut d, scenario, &provider, mcp.as_ref()).await,
    };
    let clean = match driven {
        Ok(clean) => clean,
        Err(e) if d.events.is_empty() => {
            obs.setup_error = Some(e);
            obs.recording = provider.shutdown().await;
            if let Some(m) = mcp {
                obs.mcp = Some(m.shutdown().await);
            }
            return obs;
        }
        Err(e) => {
            d.push(Instant::now(), Event::RestartFailed { error: e });
            false
        }
    };
    let dl = &scenario.deadlines;
    let killed = close(&mut d, clean, dl.exit).await;

    // Reap: nothing of the scenario may survive the agent (its cgroup must
    // empty, or the fallback must find nothing). A killed agent had no
    // chance to clean up: take the survivors as they are.
    let reap = if killed { 0.0 } else { dl.reap };
    (d.on_phase)(Phase::Reap, reap);
    let survivors = scope.survivors(secs(reap)).await;
    let unattributed = match scope.kind() {
        Kind::Cgroup => Vec::new(),
        Kind::Tag => {
            let s = scope.clone();
            tokio::task::spawn_blocking(move || s.unattributed())
                .await
                .unwrap_or_default()
        }
    };
    let sweeper = scope.clone();
    tokio::task::spawn_blocking(move || sweeper.sweep())
        .await
        .ok();
    obs.survivors = survivors;
    obs.containment = scope.record(unattributed);

    // Exec mode may bind a value captured from the agent (its own session id).
    let session_id =
        crate::driver::exec::store_session(&prepared, &session_id).unwrap_or_else(|e| {
            obs.setup_error.get_or_insert(e);
            session_id.clone()
        });
    obs.store = match (&shared.profile.store, &prepared.store) {
        (Some(s), Some(StoreAt::Sqlite(path))) => {
            let (home, path) = (prepared.dirs.home.clone(), path.clone());
            let (spec, id) = (s.clone(), session_id.clone());
            tokio::task::spawn_blocking(move || {
                match crate::driver::home::resolve_inside(&home, &path) {
                    Ok(real) => crate::runner::store::observe(Some(&real), &spec, &id),
                    Err(_) if !path.exists() && path.symlink_metadata().is_err() => {
                        crate::runner::store::observe(Some(&path), &spec, &id)
                    }
                    Err(error) => StoreObservation::Unreadable {
                        path: path.display().to_string(),
                        error,
                    },
                }
            })
            .await
            .unwrap_or_else(|e| StoreObservation::Unreadable {
                path: String::new(),
                error: format!("the store read failed: {e}"),
            })
        }
        (Some(s), Some(StoreAt::Postgres(dsn))) => {
            crate::runner::store::observe_postgres(dsn, s, &session_id).await
        }
        (Some(s), Some(StoreAt::Jsonl(pattern))) => {
            let (home, pattern, spec) = (prepared.dirs.home.clone(), pattern.clone(), s.clone());
            tokio::task::spawn_blocking(move || {
                crate::runner::store::jsonl::observe(&home, &pattern, &spec)
            })
            .await
            .unwrap_or_else(|e| StoreObservation::Unreadable {
                path: String::new(),
                error: format!("the transcript read failed: {e}"),
            })
        }
        _ => StoreObservation::NotConfigured,
    };
    let tape = provider.tape();
    obs.recording = provider.shutdown().await;
    record_cassette(&shared.profile, scenario, &tape, &mut obs);
    // After the reap and the sweep: a lingering stdio relay was judged as a
    // survivor first; closing the socket now ends any that is left.
    if let Some(m) = mcp {
        obs.mcp = Some(m.shutdown().await);
    }
    obs.stdout_other_lines = d.other_lines();
    // The pipe readers finish when the last holder of stdout/stderr is gone.
    d.budget.drained(Duration::from_secs(1)).await;
    let left = read_leftovers(&prepared).await;
    obs.stderr_tail = left.stderr_tail;
    obs.log_tails = left.log_tails;
    obs.logs_missing = left.logs_missing;
    obs.journal = left.journal;
    obs.capped = Capped {
        journal_bytes: left.journal_bytes,
        journal_read: left.journal_read,
        ..d.budget.capped()
    };
    obs.snapshots = d.snapshots;
    obs.events = d.events;
    obs.wall = (Instant::now() - start).as_secs_f64();
    obs
}

/// `--record DIR` (proxy mode): the scenario's relayed main calls, written as
/// `DIR/<id>.jsonl`; a cassette that cannot be written makes it an ERROR.
fn record_cassette(
    profile: &crate::profile::Profile,
    scenario: &Scenario,
    tape: &crate::provider::cassette::TapeHandle,
    obs: &mut Observation,
) {
    let Some(up) = &profile.upstream else { return };
    let Some(dir) = &up.record else { return };
    let path = crate::profile::cassettes::file_for(dir, &scenario.id);
    if let Err(e) = tape.save(&path, profile.wire, &up.url, Some(&scenario.id)) {
        obs.setup_error.get_or_insert(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_tail_reads_only_the_end_of_a_huge_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("stderr.log");
        let mut f = std::fs::File::create(&p).unwrap();
        // 8 MiB sparse hole, then lines: only the end may be read.
        f.set_len(8 << 20).unwrap();
        use std::io::Seek;
        f.seek(std::io::SeekFrom::End(0)).unwrap();
        for i in 0..30 {
            writeln!(f, "line {i}").unwrap();
        }
        let t = tail(&p, Follow::No, 3);
        assert_eq!(t, "line 27\nline 28\nline 29");
        assert_eq!(tail(&d.path().join("nope"), Follow::No, 3), "");
        // A single line longer than the window: its partial start is dropped.
        std::fs::write(&p, "x".repeat(200_000) + "\nlast").unwrap();
        assert_eq!(tail(&p, Follow::No, 20), "last");
        // A FIFO with no writer: refused at once, never a blocking open.
        let fifo = d.path().join("agent.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(
            tail(&fifo, Follow::Yes, 3),
            format!(
                "(not read: {} is a fifo, not a regular file)",
                fifo.display()
            )
        );
        let link = d.path().join("link.log");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(tail(&link, Follow::No, 3).contains("is a symbolic link"));
        assert_eq!(read_journal(&fifo), (Vec::new(), 0, 0));
    }

    #[test]
    fn the_journal_is_read_up_to_its_caps() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("journal");
        std::fs::write(&p, "a\nb\r\nc").unwrap();
        assert_eq!(
            read_journal(&p),
            (vec!["a".into(), "b".into(), "c".into()], 6, 6)
        );
        // More lines than the cap.
        let many: String = (0..JOURNAL_MAX_LINES + 5)
            .map(|i| format!("{i}\n"))
            .collect();
        std::fs::write(&p, &many).unwrap();
        let (lines, size, read) = read_journal(&p);
        assert_eq!(lines.len(), JOURNAL_MAX_LINES);
        assert_eq!(size, many.len() as u64);
        assert!(read < size);
        // More bytes than the cap: a long line is cut, the partial last one left out.
        let mut f = std::fs::File::create(&p).unwrap();
        writeln!(f, "{}", "t".repeat(10_000)).unwrap();
        let row = "y".repeat(1000) + "\n";
        for _ in 0..(JOURNAL_MAX_BYTES as usize / row.len() + 10) {
            f.write_all(row.as_bytes()).unwrap();
        }
        drop(f);
        let (lines, size, read) = read_journal(&p);
        assert_eq!(lines[0].len(), JOURNAL_LINE_CHARS);
        assert!(read <= JOURNAL_MAX_BYTES && size > JOURNAL_MAX_BYTES);
        assert!(
            lines.iter().all(|l| l.len() == JOURNAL_LINE_CHARS),
            "no partial line"
        );
    }
}
