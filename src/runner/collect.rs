//! The third stage of a scenario run: once the agent's processes are
//! closed, [`collect`] reaps (nothing of the scenario may survive the agent:
//! its cgroup must empty, or the tag fallback must find nothing), sweeps,
//! reads the agent's store back, closes the servers ([`Session::close`]),
//! and reads what the run left in files (stderr's and the logs' tails, the
//! side-effect journal, the files the row's `write_file` calls name),
//! every read bounded. [`Observation::assemble`] then
//! puts the stages' values together. It judges nothing.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::drive::Driven;
use super::plan::{Plan, Shared};
use super::session::{Closed, Failed, Session};
use crate::driver::home::StoreAt;
use crate::input::{open_regular, Follow, OpenError};
use crate::observe::{Capped, FileLeft, Observation, Phase, StoreObservation};
use crate::proc_hygiene::{Containment, Kind, ProcInfo};
use crate::scenarios::Scenario;
use crate::units::secs;

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
    files: Vec<FileLeft>,
}

/// The files `paths` (relative to the work dir `work`) as the run left
/// them: read beneath it, never through a symlink, bounded.
fn read_files(work: &Path, paths: &[String]) -> Vec<FileLeft> {
    let one = |path: &String| {
        let rel = Path::new(path);
        let read = if rel.is_absolute()
            || rel
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            Err(std::io::Error::other("not a path inside the work dir"))
        } else {
            crate::output::read_beneath(work, rel, crate::observe::FILE_KEEP_BYTES)
        };
        let (content, error) = match read {
            Ok(bytes) => (Some(String::from_utf8_lossy(&bytes).into_owned()), None),
            Err(e) => (None, Some(crate::units::clip(&e.to_string(), 200))),
        };
        FileLeft {
            path: path.clone(),
            content,
            error,
        }
    };
    paths.iter().map(one).collect()
}

/// Read the tails, the journal and the files the row's `write_file` calls
/// name (`written`), off the async workers.
async fn read_leftovers(prepared: &crate::driver::Prepared, written: Vec<String>) -> Leftovers {
    let work = prepared.dirs.work.clone();
    let stderr = prepared.dirs.stderr_log.clone();
    let logs = prepared.log_paths.clone();
    let journal = prepared.dirs.journal.clone();
    let home = prepared.dirs.home.clone();
    let read = move || {
        let (journal, journal_bytes, journal_read) = read_journal(&journal);
        let files = read_files(&work, &written);
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
                            let tail = match crate::safe_path::resolve_inside(&home, &p) {
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
            files,
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
            files: Vec::new(),
        })
}

/// What the third stage found.
pub(crate) struct Collected {
    survivors: Vec<ProcInfo>,
    containment: Containment,
    network: crate::listen::Network,
    store: StoreObservation,
    store_at_kill: Option<StoreObservation>,
    store_at_arm: Option<StoreObservation>,
    store_damage: Option<crate::store::damaged::DamageRecord>,
    closed: Closed,
    /// What the sampler saw of the scenario's processes (CPU and RSS over
    /// time, every command line).
    samples: (Vec<crate::observe::ProcSample>, Vec<String>),
    /// The scenario cgroup's `memory.peak`, where the kernel keeps one.
    memory_peak: Option<u64>,
    /// A capture the store query needed that never matched, or a
    /// `--record` cassette that could not be written.
    cassette_error: Option<String>,
    left: Leftovers,
}

/// Reap, sweep, read the store, close the servers, read the leftovers.
pub(crate) async fn collect(
    shared: &Shared,
    scenario: &Scenario,
    plan: &Plan,
    session: Session,
    driven: &Driven,
    sampler: &super::sampler::Sampler,
    on_phase: &(dyn Fn(Phase, f64) + Sync),
) -> Collected {
    // A killed agent had no chance to clean up: take the survivors as they are.
    let reap = if driven.killed() {
        0.0
    } else {
        scenario.deadlines.reap
    };
    on_phase(Phase::Reap, reap);
    let (survivors, containment, memory_peak) = reap_and_sweep(&session, reap).await;
    // Every process of the scenario is gone: the sampler has seen them all.
    let samples = sampler.take(plan.tag());
    // Exec mode may bind a value captured from the agent (its own session id).
    let (session_id, capture_error) = match driven.store_session() {
        Ok(id) => (id.unwrap_or_else(|| plan.session_id.clone()), None),
        Err(e) => (plan.session_id.clone(), Some(e)),
    };
    let store = read_store(shared, &session, &session_id).await;
    let store_at_kill = match (driven.store_at_kill(), &shared.profile.store) {
        (Some(at), Some(spec)) => {
            Some(read_copy((at, "the agent was killed"), spec, &session, &session_id).await)
        }
        _ => None,
    };
    let store_at_arm = match (driven.store_at_arm(), &shared.profile.store) {
        (Some(at), Some(spec)) => Some(
            read_copy(
                (at, "the kill's trigger armed"),
                spec,
                &session,
                &session_id,
            )
            .await,
        ),
        _ => None,
    };
    let store_damage = read_damage(driven, shared, &session, &session_id).await;
    let network = session.network.clone();
    let prepared = session.prepared.clone();
    let closed = session.close().await;
    let cassette_error = capture_error.or_else(|| {
        closed
            .tape
            .as_ref()
            .and_then(|tape| record_cassette(&shared.profile, scenario, tape))
    });
    // The pipe readers finish when the last holder of stdout/stderr is gone.
    driven.drained(Duration::from_secs(1)).await;
    let written = crate::oracle::files_written::asked(scenario, &plan.nonce)
        .into_iter()
        .map(|a| a.path)
        .collect();
    let left = read_leftovers(&prepared, written).await;
    Collected {
        survivors,
        containment,
        network,
        store,
        store_at_kill,
        store_at_arm,
        store_damage,
        closed,
        samples,
        memory_peak,
        cassette_error,
        left,
    }
}

/// The scope's survivors after `reap` seconds, the scope's record, then the
/// sweep of whatever is left.
async fn reap_and_sweep(session: &Session, reap: f64) -> (Vec<ProcInfo>, Containment, Option<u64>) {
    let scope = session.scope.clone();
    let survivors = scope.survivors(secs(reap)).await;
    // Read while the scenario's cgroup is still there.
    let s = scope.clone();
    let memory_peak = tokio::task::spawn_blocking(move || s.memory_peak())
        .await
        .ok()
        .flatten();
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
    (survivors, scope.record(unattributed), memory_peak)
}

/// The agent's store read back (off the async workers; never through a
/// symlink that leaves HOME).
async fn read_store(shared: &Shared, session: &Session, session_id: &str) -> StoreObservation {
    let prepared = &session.prepared;
    match (&shared.profile.store, &prepared.store) {
        (Some(s), Some(StoreAt::Sqlite(path))) => {
            let (home, path) = (prepared.dirs.home.clone(), path.clone());
            let (spec, id) = (s.clone(), session_id.to_string());
            tokio::task::spawn_blocking(move || {
                match crate::safe_path::resolve_inside(&home, &path) {
                    Ok(real) => crate::store::observe(Some(&real), &spec, &id),
                    Err(_) if !path.exists() && path.symlink_metadata().is_err() => {
                        crate::store::observe(Some(&path), &spec, &id)
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
            crate::store::observe_postgres(dsn, s, session_id).await
        }
        (Some(s), Some(StoreAt::Jsonl(pattern))) => {
            let (home, pattern, spec) = (prepared.dirs.home.clone(), pattern.clone(), s.clone());
            tokio::task::spawn_blocking(move || {
                crate::store::jsonl::observe(&home, &pattern, &spec)
            })
            .await
            .unwrap_or_else(|e| StoreObservation::Unreadable {
                path: String::new(),
                error: format!("the transcript read failed: {e}"),
            })
        }
        _ => StoreObservation::NotConfigured,
    }
}

/// A copy of the store taken for a kill aimed at a store write (`when`: as
/// the kill left it, or when its trigger armed), read as the restarted
/// agent would find it; why not, when no copy could be taken.
async fn read_copy(
    (at, when): (&Result<Option<std::path::PathBuf>, String>, &str),
    spec: &crate::store::StoreSpec,
    session: &Session,
    session_id: &str,
) -> StoreObservation {
    let prepared = &session.prepared;
    match at {
        Err(error) => StoreObservation::Unreadable {
            path: String::new(),
            error: error.clone(),
        },
        Ok(None) => StoreObservation::Missing {
            path: format!("(no store when {when})"),
        },
        Ok(Some(copy)) => {
            let (copy, spec, id) = (copy.clone(), spec.clone(), session_id.to_string());
            // A JSONL copy is a folder standing for HOME: the glob moves there.
            let jsonl = match &prepared.store {
                Some(StoreAt::Jsonl(pattern)) => pattern
                    .strip_prefix(&prepared.dirs.home)
                    .ok()
                    .map(|rel| copy.join(rel)),
                _ => None,
            };
            tokio::task::spawn_blocking(move || match jsonl {
                Some(pattern) => crate::store::jsonl::observe(&copy, &pattern, &spec),
                None => crate::store::observe_copy(&copy, &spec, &id),
            })
            .await
            .unwrap_or_else(|e| StoreObservation::Unreadable {
                path: String::new(),
                error: format!("the store read failed: {e}"),
            })
        }
    }
}

/// The row's `store_damage`, completed: the damaged transcript's copy read
/// (what was left intact) and what the restarted agent wrote after the
/// damaged tail.
async fn read_damage(
    driven: &Driven,
    shared: &Shared,
    session: &Session,
    session_id: &str,
) -> Option<crate::store::damaged::DamageRecord> {
    let done = driven.damage()?;
    let mut record = done.record.clone();
    if let Some(spec) = &shared.profile.store {
        if let Some(copy) = &done.before {
            let when = (copy, "the store was about to be damaged");
            record.before = Some(read_copy(when, spec, session, session_id).await);
        }
        if let Some(copy) = &done.copy {
            let when = (copy, "the store was damaged");
            record.after = Some(read_copy(when, spec, session, session_id).await);
        }
    }
    if let Some(damaged) = done.damaged.clone() {
        let home = session.prepared.dirs.home.clone();
        record.tail =
            tokio::task::spawn_blocking(move || crate::store::damaged::tail(&home, &damaged))
                .await
                .ok();
    }
    Some(record)
}

/// `--record DIR` (proxy mode): the scenario's relayed main calls, written as
/// `DIR/<id>.jsonl`; why not, when the cassette cannot be written (an ERROR).
fn record_cassette(
    profile: &crate::profile::Profile,
    scenario: &Scenario,
    tape: &crate::provider::cassette::TapeHandle,
) -> Option<String> {
    let up = profile.upstream.as_ref()?;
    let dir = up.record.as_ref()?;
    let path = crate::profile::cassettes::file_for(dir, &scenario.id);
    tape.save(&path, profile.wire, &up.url, Some(&scenario.id))
        .err()
}

impl Observation {
    /// One scenario run's observation from its stages' values: the plan,
    /// when the provider started (`provider_offset`, on the run's clock),
    /// and what driving and collecting found.
    pub(crate) fn assemble(
        plan: Plan,
        provider_offset: f64,
        driven: Driven,
        c: Collected,
        start: Instant,
    ) -> Observation {
        let mut obs = plan.observation(provider_offset);
        obs.survivors = c.survivors;
        obs.containment = c.containment;
        obs.network = c.network;
        obs.store = c.store;
        obs.store_at_kill = c.store_at_kill;
        obs.store_at_arm = c.store_at_arm;
        obs.store_damage = c.store_damage;
        obs.recording = c.closed.recording;
        (obs.proc_samples, obs.processes_seen) = c.samples;
        obs.memory_peak = c.memory_peak;
        // A real MCP server that failed (proxy mode) makes the row an ERROR.
        let upstream_error = c.closed.mcp.as_ref().and_then(|m| m.upstream_error.clone());
        obs.run_error = driven.overran().or(c.cassette_error).or(upstream_error);
        obs.mcp = c.closed.mcp;
        obs.stdout_other_lines = driven.other_lines();
        obs.stderr_tail = c.left.stderr_tail;
        obs.log_tails = c.left.log_tails;
        obs.logs_missing = c.left.logs_missing;
        obs.journal = c.left.journal;
        obs.files = c.left.files;
        obs.capped = Capped {
            journal_bytes: c.left.journal_bytes,
            journal_read: c.left.journal_read,
            ..driven.capped()
        };
        (obs.events, obs.snapshots) = driven.into_records();
        obs.wall = (Instant::now() - start).as_secs_f64();
        obs
    }

    /// The observation of a run that could not be set up (or whose agent
    /// never started): why, and what the servers saw.
    pub(crate) fn setup_failed(plan: Plan, provider_offset: f64, f: Failed) -> Observation {
        let mut obs = plan.observation(provider_offset);
        obs.setup_error = Some(f.error);
        obs.recording = f.closed.recording;
        obs.mcp = f.closed.mcp;
        obs.containment = f.containment;
        obs
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
