//! `wait_for` rules: a call held until enough processes run (counted off
//! the async workers), the rule's timeout passes or the provider shuts
//! down; how each wait ended is kept.
use std::time::{Duration, Instant};

use super::Shared;
use crate::provider::recording::WaitOutcome;
use crate::provider::replies::{secs, wait_or_cancel};
use crate::provider::rules::{Rule, WaitFor};

/// `wait_for` outcomes kept per provider (the first ones; the rest dropped).
const WAITS_KEEP: usize = 256;
/// How often a `wait_for` rule re-counts processes.
const WAIT_FOR_POLL: Duration = Duration::from_millis(50);

impl Shared {
    /// Hold until the counter reports enough processes, the rule's timeout
    /// passes, or the provider shuts down: (enough were seen, the most seen).
    async fn wait_for(&self, w: &WaitFor) -> (bool, usize) {
        let limit = secs(w.timeout);
        let Some(counter) = &self.process_counter else {
            wait_or_cancel(limit, &self.cancel).await;
            return (false, 0);
        };
        let deadline = Instant::now() + limit;
        let mut most = 0;
        loop {
            let counter = counter.clone();
            let needle = w.cmdline.clone();
            // A real counter scans /proc: keep it off the async workers.
            let n = tokio::task::spawn_blocking(move || counter(&needle))
                .await
                .unwrap_or(0);
            most = most.max(n);
            if n >= w.count {
                return (true, most);
            }
            let now = Instant::now();
            if now >= deadline {
                return (false, most);
            }
            if !wait_or_cancel(WAIT_FOR_POLL.min(deadline - now), &self.cancel).await {
                return (false, most);
            }
        }
    }

    /// Hold a call whose rule has `wait_for`, and keep how the wait ended.
    pub(super) async fn hold(&self, picked: Option<(usize, &Rule)>, main_index: Option<u64>) {
        let Some((i, w)) = picked.and_then(|(i, r)| Some((i, r.wait_for.as_ref()?))) else {
            return;
        };
        let (satisfied, seen) = self.wait_for(w).await;
        let mut waits = self.waits.lock().unwrap();
        if waits.len() < WAITS_KEEP {
            waits.push(WaitOutcome {
                rule: i,
                main_index: main_index.unwrap_or(0),
                satisfied,
                seen,
            });
        }
    }
}
