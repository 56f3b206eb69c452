//! The process sampler: per tick, every running scenario's processes (the
//! members of its cgroup; in the tag fallback, one /proc scan for every
//! scenario's tag), recording how many there are, for the timeline, and the
//! distinct command lines seen (bounded), the oracle's evidence that a tool
//! really ran (the `exercised` check). Membership by cgroup also sees a tool
//! that cleared its environment, and costs a read of a few `cgroup.procs`
//! files instead of every process's environment. Each sample also holds the
//! processes' summed CPU and resident memory, read through `sysinfo` for
//! exactly those pids (never a scan of every process), and their zombie
//! children (pid, parent, start time; bounded: [`zombie_children`]), the
//! `no_zombie_children` check's evidence. Besides its ticks it samples when
//! asked ([`Sampler::sample_now`], awaited by the drive as it reads each
//! turn's end and as the agent is asked to close, answered once the sample
//! is recorded, bounded by [`ASKED_WAIT`]): the sample is taken as the turn
//! ends, not some time after a fire-and-forget nudge, so memory an agent
//! holds to its end is seen before it exits. (An agent that does not wait
//! for chaosrun between turns, the driver protocol's, which runs its turns
//! from the spec, or one whose ACP session goes on to the next prompt, may
//! still exit within the milliseconds before the sample.) It samples a
//! scenario closely (every [`CLOSE`]) while asked to (a row that bounds
//! memory growth, through its faulted turn), so a peak that lasts a fraction
//! of a second (a whole output read, then cut) is seen. [`resident`] reads
//! one figure on demand (the growth row's baseline).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::observe::{ProcSample, Zombie};
use crate::proc_hygiene::cgroup::Cgroup;
use crate::proc_hygiene::{by_value, zombie_children, ProcInfo, RunContainment, TAG_VAR};

/// The pace of close sampling ([`Sampler::closely`]).
pub const CLOSE: Duration = Duration::from_millis(50);

/// How long an asked sample is waited for: a wedged /proc read never holds
/// a scenario longer.
pub const ASKED_WAIT: Duration = Duration::from_secs(2);

/// Where an asked sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// At turn `i`'s end.
    TurnEnd(u64),
    /// As the agent is asked to close.
    Close,
}

/// One ask for a sample: its scenario, where, the agents' resident memory
/// read as it was asked, and who waits for it.
struct Ask {
    tag: String,
    at: Asked,
    agents_rss: u64,
    done: oneshot::Sender<Vec<Zombie>>,
}

/// Distinct command lines kept per tag, and characters kept of each.
pub const SEEN_KEEP: usize = 64;
pub const SEEN_KEEP_CHARS: usize = 4096; // as much as the /proc scan keeps (a tool command sits past a long wrapper prefix)

#[derive(Default)]
struct Watched {
    start: Option<Instant>,
    samples: Vec<ProcSample>,
    seen: Vec<String>,
    /// The scenario's cgroup, once it could be opened.
    cgroup: Option<Cgroup>,
}

impl Watched {
    fn saw(&mut self, cmdline: &str) {
        if self.seen.len() >= SEEN_KEEP {
            return;
        }
        let c: String = cmdline.chars().take(SEEN_KEEP_CHARS).collect();
        if !self.seen.contains(&c) {
            self.seen.push(c);
        }
    }
}

/// Shared handle; cheap to clone.
#[derive(Clone)]
pub struct Sampler {
    tags: Arc<Mutex<HashMap<String, Watched>>>,
    task: Arc<tokio::task::JoinHandle<()>>,
    asked: tokio::sync::mpsc::UnboundedSender<Ask>,
    /// Tags sampled every [`CLOSE`] besides the ticks.
    close: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

impl Sampler {
    /// Start sampling every `every`, finding each scenario's processes
    /// through `containment`.
    pub fn start(every: Duration, containment: Arc<RunContainment>) -> Sampler {
        let tags: Arc<Mutex<HashMap<String, Watched>>> = Default::default();
        let shared = tags.clone();
        let meter: Arc<Mutex<Meter>> = Default::default();
        let (asked, mut woken) = tokio::sync::mpsc::unbounded_channel::<Ask>();
        let close: Arc<Mutex<std::collections::BTreeSet<String>>> = Default::default();
        let closely = close.clone();
        let task = tokio::spawn(async move {
            // Ticks at a steady pace whatever the asks do.
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut fast = tokio::time::interval(CLOSE);
            fast.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // A tick samples every scenario; an ask only the one that
                // asked; a close tick each scenario sampled closely.
                let (only, ask): (Vec<String>, Option<Ask>) = tokio::select! {
                    _ = tick.tick() => (Vec::new(), None),
                    Some(ask) = woken.recv() => (vec![ask.tag.clone()], Some(ask)),
                    _ = fast.tick() => {
                        let close: Vec<String> = lock(&closely).iter().cloned().collect();
                        if close.is_empty() {
                            continue;
                        }
                        (close, None)
                    }
                };
                let only = (!only.is_empty()).then_some(only.as_slice());
                let at = ask.as_ref().map(|a| (a.at, a.agents_rss));
                sample(&shared, &containment, &meter, (only, at)).await;
                if let Some(ask) = ask {
                    let zombies = last_zombies(&shared, &ask.tag);
                    let _ = ask.done.send(zombies);
                }
            }
        });
        Sampler {
            tags,
            task: Arc::new(task),
            asked,
            close,
        }
    }

    /// Sample scenario `tag` every [`CLOSE`] (besides the ticks) while `on`.
    pub fn closely(&self, tag: &str, on: bool) {
        let mut close = lock(&self.close);
        if on {
            close.insert(tag.to_string());
        } else {
            close.remove(tag);
        }
    }

    /// Take a sample of scenario `tag` now, marked as taken `at`, and wait
    /// (at most [`ASKED_WAIT`]) until it is recorded: the zombie children
    /// it saw, or `None` when it did not land in time. The resident memory
    /// of `agents` (the agent processes' pids) is read first, before the
    /// sample waits for the sampler: the sample holds at least that much
    /// (a fast agent may have exited by the time its members are read).
    pub async fn sample_now(&self, tag: &str, at: Asked, agents: Vec<i32>) -> Option<Vec<Zombie>> {
        let agents_rss = tokio::task::spawn_blocking(move || resident(&agents).unwrap_or(0))
            .await
            .unwrap_or(0);
        let (done, landed) = oneshot::channel();
        let ask = Ask {
            tag: tag.to_string(),
            at,
            agents_rss,
            done,
        };
        self.asked.send(ask).ok()?;
        tokio::time::timeout(ASKED_WAIT, landed).await.ok()?.ok()
    }

    /// Begin recording `tag`, with times relative to `start`.
    pub fn watch(&self, tag: &str, start: Instant) {
        self.tags.lock().unwrap_or_else(|e| e.into_inner()).insert(
            tag.to_string(),
            Watched {
                start: Some(start),
                ..Watched::default()
            },
        );
    }

    /// Stop recording `tag`: its samples and the command lines seen.
    pub fn take(&self, tag: &str) -> (Vec<ProcSample>, Vec<String>) {
        self.closely(tag, false);
        self.tags
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(tag)
            .map(|w| (w.samples, w.seen))
            .unwrap_or_default()
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

/// One sample of every watched scenario, or of `only` those (marked as
/// asked `at`, holding at least the agents' resident memory read then):
/// their processes, their CPU and memory, their zombie children, the
/// command lines seen.
async fn sample(
    shared: &Arc<Mutex<HashMap<String, Watched>>>,
    containment: &Arc<RunContainment>,
    meter: &Arc<Mutex<Meter>>,
    (only, asked): (Option<&[String]>, Option<(Asked, u64)>),
) {
    let (at, floor) = asked.map_or((None, 0), |(at, rss)| (Some(at), rss));
    let now = Instant::now();
    let wanted = |tag: &str| only.is_none_or(|o| o.iter().any(|t| t == tag));
    let targets: Vec<(String, Option<Cgroup>)> = lock(shared)
        .iter()
        .filter(|(tag, _)| wanted(tag))
        .map(|(tag, w)| (tag.clone(), w.cgroup.clone()))
        .collect();
    if targets.is_empty() {
        return;
    }
    let (containment, meter) = (containment.clone(), meter.clone());
    let (counts, usage, zombies, opened) = tokio::task::spawn_blocking(move || {
        let (found, opened) = members(&containment, targets);
        let usage = lock(&meter).usage(&found);
        let zombies: HashMap<String, Vec<Zombie>> = found
            .iter()
            .map(|(tag, procs)| {
                let parents: Vec<(i32, &str)> =
                    procs.iter().map(|p| (p.pid, p.cmdline.as_str())).collect();
                (tag.clone(), zombie_children(&parents))
            })
            .collect();
        (found, usage, zombies, opened)
    })
    .await
    .unwrap_or_default();
    let mut tags = lock(shared);
    for (tag, cg) in opened {
        if let Some(w) = tags.get_mut(&tag) {
            w.cgroup = Some(cg);
        }
    }
    for (tag, w) in tags.iter_mut() {
        let Some(start) = w.start.filter(|_| wanted(tag)) else {
            continue;
        };
        let procs = counts.get(tag).map(Vec::as_slice).unwrap_or_default();
        let (cpu, rss) = usage.get(tag).copied().unwrap_or_default();
        w.samples.push(ProcSample {
            at: (now - start).as_secs_f64(),
            count: procs.len(),
            cpu,
            rss: rss.max(floor),
            turn_end: match at {
                Some(Asked::TurnEnd(i)) => Some(i),
                _ => None,
            },
            close: at == Some(Asked::Close),
            zombies: Some(zombies.get(tag).cloned().unwrap_or_default()),
        });
        for p in procs {
            w.saw(&p.cmdline);
        }
    }
}

/// The zombies scenario `tag`'s latest sample saw.
fn last_zombies(shared: &Arc<Mutex<HashMap<String, Watched>>>, tag: &str) -> Vec<Zombie> {
    lock(shared)
        .get(tag)
        .and_then(|w| w.samples.last())
        .and_then(|s| s.zombies.clone())
        .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Blocking: the resident memory of processes `pids`, summed, in bytes,
/// through `sysinfo` (only these pids are read); `Err` when `sysinfo`
/// cannot start.
pub fn resident(pids: &[i32]) -> Result<u64, String> {
    let mut sys = System::new().map_err(|e| format!("sysinfo: {e}"))?;
    let pids: Vec<Pid> = pids.iter().map(|p| Pid::from_u32(*p as u32)).collect();
    let kind = ProcessRefreshKind::nothing().with_memory().without_tasks();
    sys.refresh_processes_specifics(ProcessesToUpdate::Some(&pids), true, kind);
    Ok(pids
        .iter()
        .filter_map(|p| sys.process(*p))
        .map(|p| p.memory())
        .sum())
}

/// CPU and resident memory of given processes, through `sysinfo` (its
/// per-process CPU is the time used since that process's previous refresh).
/// Where `sysinfo` cannot start, usage reads as zero.
struct Meter {
    sys: Option<System>,
}

impl Default for Meter {
    fn default() -> Meter {
        Meter {
            sys: System::new().ok(),
        }
    }
}

impl Meter {
    /// Each tag's (CPU percent of one core, RSS bytes), summed over its
    /// processes; only these pids are read.
    fn usage(&mut self, found: &HashMap<String, Vec<ProcInfo>>) -> HashMap<String, (f32, u64)> {
        let pids: Vec<Pid> = found
            .values()
            .flatten()
            .map(|p| Pid::from_u32(p.pid as u32))
            .collect();
        let kind = ProcessRefreshKind::nothing()
            .with_cpu()
            .with_memory()
            .without_tasks();
        let Some(sys) = self.sys.as_mut() else {
            return HashMap::new();
        };
        sys.refresh_processes_specifics(ProcessesToUpdate::Some(&pids), true, kind);
        found
            .iter()
            .map(|(tag, procs)| {
                let sum = procs
                    .iter()
                    .filter_map(|p| sys.process(Pid::from_u32(p.pid as u32)))
                    .fold((0.0, 0), |(c, m), p| (c + p.cpu_usage(), m + p.memory()));
                (tag.clone(), sum)
            })
            .collect()
    }
}

/// Each tag's live processes.
type Found = HashMap<String, Vec<ProcInfo>>;

/// Each tag's live processes: from its cgroup (opened once, through the
/// handle kept from an earlier tick), or (in the tag fallback) one /proc
/// scan for all of them. Also the cgroups opened this time, to keep.
fn members(
    containment: &RunContainment,
    targets: Vec<(String, Option<Cgroup>)>,
) -> (Found, Vec<(String, Cgroup)>) {
    let mut out = HashMap::new();
    let mut opened = Vec::new();
    if !containment.has_cgroups() {
        for (tag, procs) in by_value(TAG_VAR) {
            out.insert(tag, procs);
        }
        return (out, opened);
    }
    for (tag, cg) in targets {
        let cg = cg.or_else(|| {
            let cg = containment.cgroup_of(&tag)?;
            opened.push((tag.clone(), cg.clone()));
            Some(cg)
        });
        // A cgroup not made yet (or gone) has no members.
        let procs = cg.as_ref().map(RunContainment::members_in);
        out.insert(tag, procs.unwrap_or_default());
    }
    (out, opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// An asked sample is recorded before `sample_now` returns (a
    /// fire-and-forget nudge was not: a short row could end first and keep
    /// no sample of its agent), marked with its turn, holding the resident
    /// memory of the scenario's process and its zombie child.
    #[tokio::test]
    async fn an_asked_sample_is_recorded_before_it_returns_with_its_zombies() {
        let tag = format!("sampler-asked-{}", std::process::id());
        let run = Arc::new(RunContainment::new(&tag));
        let scope = run.scope(&tag);
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "/bin/true & exec sleep 30"])
            .env(TAG_VAR, &tag)
            .stdout(Stdio::null());
        let mut child = crate::children::spawn_owned(&mut cmd).unwrap();
        let pid = child.id() as i32;
        if let Some(mut procs) = scope.procs_file().unwrap() {
            write!(procs, "{pid}").unwrap();
        }
        // The shell became `sleep` and its child exited (bounded).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while zombie_children(&[(pid, "")]).is_empty() {
            assert!(std::time::Instant::now() < deadline, "no zombie appeared");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Ticks an hour apart: only the asked sample can be there.
        let sampler = Sampler::start(Duration::from_secs(3600), run.clone());
        sampler.watch(&tag, Instant::now());
        let seen = sampler.sample_now(&tag, Asked::TurnEnd(0), vec![]).await;
        let (samples, _) = sampler.take(&tag);
        sampler.stop();
        let _ = child.kill();
        let _ = child.wait();
        drop(scope);
        run.end(); // the run's cgroup goes with it (no chaosrun-sampler-asked-PID left)
        let seen = seen.expect("the asked sample landed in time");
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!((seen[0].ppid, seen[0].name.as_str()), (pid, "true"));
        let asked: Vec<&ProcSample> = samples.iter().filter(|s| s.turn_end == Some(0)).collect();
        assert_eq!(asked.len(), 1, "{samples:?}");
        assert!(asked[0].count >= 1 && asked[0].rss > 0, "{asked:?}");
        assert_eq!(asked[0].zombies.as_deref(), Some(seen.as_slice()));
    }
}
