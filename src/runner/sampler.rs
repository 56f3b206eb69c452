//! The process sampler: one /proc scan per tick for every running scenario,
//! recording how many processes carry each watched tag, for the timeline, and
//! the distinct command lines seen (bounded), the oracle's evidence that a
//! tool really ran (the `exercised` check).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::observe::ProcSample;
use crate::proc_hygiene::{by_value, TAG_VAR};

/// Distinct command lines kept per tag, and characters kept of each.
pub const SEEN_KEEP: usize = 64;
pub const SEEN_KEEP_CHARS: usize = 256;

#[derive(Default)]
struct Watched {
    start: Option<Instant>,
    samples: Vec<ProcSample>,
    seen: Vec<String>,
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
}

impl Sampler {
    /// Start sampling every `every`.
    pub fn start(every: Duration) -> Sampler {
        let tags: Arc<Mutex<HashMap<String, Watched>>> = Default::default();
        let shared = tags.clone();
        let task = tokio::spawn(async move {
            loop {
                let any = !shared.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
                if any {
                    let now = Instant::now();
                    let counts = tokio::task::spawn_blocking(|| by_value(TAG_VAR))
                        .await
                        .unwrap_or_default();
                    let mut tags = shared.lock().unwrap_or_else(|e| e.into_inner());
                    for (tag, w) in tags.iter_mut() {
                        if let Some(start) = w.start {
                            let procs = counts.get(tag).map(Vec::as_slice).unwrap_or_default();
                            w.samples.push(ProcSample {
                                at: (now - start).as_secs_f64(),
                                count: procs.len(),
                            });
                            for p in procs {
                                w.saw(&p.cmdline);
                            }
                        }
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
        Sampler {
            tags,
            task: Arc::new(task),
        }
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
