//! The run-wide budget of recorded requests held in memory at once. While a
//! scenario runs, its provider keeps each request's messages and headers on
//! disk ([`super::spool`]); they come back into memory only to be judged,
//! and a scenario waits for room in this one budget, shared by every
//! scenario of the run, before they do. The room is a [`Lease`]: it moves
//! with the requests into the scenario's observation and is given back when
//! the judged observation is slimmed ([`super::Recording::slim`]) or dropped.
//! So 55 scenarios at once of an agent sending 60 KB requests hold one
//! budget's worth of them, not 55 times a scenario's.

use std::sync::{Arc, OnceLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Recorded requests (as spooled JSON bytes) the run holds in memory at
/// once: 16 MiB. A scenario with more waits until it is the only one.
pub const RUN_RECORD_BYTES: u64 = 16 << 20;
/// The budget's unit.
const UNIT: u64 = 1024;
/// The longest wait for room: past it the requests are read back anyway
/// (over the budget, never a scenario stuck behind another's).
pub const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn run() -> Arc<Semaphore> {
    static RUN: OnceLock<Arc<Semaphore>> = OnceLock::new();
    RUN.get_or_init(|| Arc::new(Semaphore::new((RUN_RECORD_BYTES / UNIT) as usize)))
        .clone()
}

/// Room held in the run's budget, given back on drop. A clone holds none
/// (the original keeps it), and leases compare equal: a recording's value
/// is what it recorded, never the room it holds.
#[derive(Debug, Default)]
pub struct Lease(Option<OwnedSemaphorePermit>);

impl Lease {
    /// Wait for room for `bytes` (all of the budget when it is larger).
    pub async fn room(bytes: u64) -> Lease {
        Lease::room_in(run(), bytes).await
    }

    async fn room_in(budget: Arc<Semaphore>, bytes: u64) -> Lease {
        let all = (RUN_RECORD_BYTES / UNIT) as u32;
        let units = bytes.div_ceil(UNIT).clamp(1, all as u64) as u32;
        let room = tokio::time::timeout(WAIT, budget.acquire_many_owned(units)).await;
        Lease(room.ok().and_then(Result::ok))
    }

    /// Room it holds, in bytes.
    pub fn bytes(&self) -> u64 {
        self.0.as_ref().map_or(0, |p| p.num_permits() as u64 * UNIT)
    }
}

impl Clone for Lease {
    fn clone(&self) -> Lease {
        Lease::default()
    }
}

impl PartialEq for Lease {
    fn eq(&self, _: &Lease) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_lease_waits_until_the_first_is_given_back() {
        let budget = Arc::new(Semaphore::new((RUN_RECORD_BYTES / UNIT) as usize));
        let first = Lease::room_in(budget.clone(), RUN_RECORD_BYTES * 3).await;
        assert_eq!(
            first.bytes(),
            RUN_RECORD_BYTES,
            "capped at the whole budget"
        );
        assert_eq!(first.clone().bytes(), 0, "a copy holds no room");
        assert_eq!(budget.available_permits(), 0, "no room while it is held");
        let second = tokio::spawn(Lease::room_in(budget.clone(), 10));
        drop(first);
        let second = second.await.unwrap();
        assert_eq!(second.bytes(), UNIT);
        assert_eq!(
            budget.available_permits() as u64,
            RUN_RECORD_BYTES / UNIT - 1
        );
    }
}
