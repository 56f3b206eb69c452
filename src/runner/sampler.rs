//! The process sampler: per tick, every running scenario's processes (the
//! members of its cgroup; in the tag fallback, one /proc scan for every
//! scenario's tag), recording how many there are, for the timeline, and the
//! distinct command lines seen (bounded), the oracle's evidence that a tool
//! really ran (the `exercised` check). Membership by cgroup also sees a tool
//! that cleared its environment, and costs a read of a few `cgroup.procs`
//! files instead of every process's environment. Each sample also holds the
//! processes' summed CPU and resident memory, read through `sysinfo` for
//! exactly those pids (never a scan of every process). Besides its ticks it
//! samples when nudged (at each phase of a scenario: a turn's end, the close),
//! so memory an agent holds to its end is seen before it exits, and it
//! samples a scenario closely (every [`CLOSE`]) while asked to (a row that
//! bounds memory growth, through its faulted turn), so a peak that lasts a
//! fraction of a second (a whole output read, then cut) is seen.
//! [`resident`] reads one figure on demand (the growth row's baseline).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use tokio::time::Instant;

use crate::observe::ProcSample;
use crate::proc_hygiene::cgroup::Cgroup;
use crate::proc_hygiene::{by_value, ProcInfo, RunContainment, TAG_VAR};

/// The pace of close sampling ([`Sampler::closely`]).
pub const CLOSE: Duration = Duration::from_millis(50);

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
    nudged: tokio::sync::mpsc::UnboundedSender<String>,
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
        let (nudged, mut woken) = tokio::sync::mpsc::unbounded_channel::<String>();
        let close: Arc<Mutex<std::collections::BTreeSet<String>>> = Default::default();
        let closely = close.clone();
        let task = tokio::spawn(async move {
            // Ticks at a steady pace whatever the nudges do.
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut fast = tokio::time::interval(CLOSE);
            fast.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // A tick samples every scenario; a nudge only the one that
                // asked; a close tick each scenario sampled closely.
                let only: Vec<String> = tokio::select! {
                    _ = tick.tick() => Vec::new(),
                    Some(tag) = woken.recv() => vec![tag],
                    _ = fast.tick() => {
                        let close: Vec<String> = lock(&closely).iter().cloned().collect();
                        if close.is_empty() {
                            continue;
                        }
                        close
                    }
                };
                let only = (!only.is_empty()).then_some(only.as_slice());
                sample(&shared, &containment, &meter, only).await;
            }
        });
        Sampler {
            tags,
            task: Arc::new(task),
            nudged,
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

    /// Take a sample of scenario `tag` now rather than at the next tick.
    pub fn nudge(&self, tag: &str) {
        let _ = self.nudged.send(tag.to_string());
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

/// One sample of every watched scenario, or of `only` those: their
/// processes, their CPU and memory, the command lines seen.
async fn sample(
    shared: &Arc<Mutex<HashMap<String, Watched>>>,
    containment: &Arc<RunContainment>,
    meter: &Arc<Mutex<Meter>>,
    only: Option<&[String]>,
) {
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
    let (counts, usage, opened) = tokio::task::spawn_blocking(move || {
        let (found, opened) = members(&containment, targets);
        let usage = lock(&meter).usage(&found);
        (found, usage, opened)
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
            rss,
        });
        for p in procs {
            w.saw(&p.cmdline);
        }
    }
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
