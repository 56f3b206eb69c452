//! The disk watch of a row that bounds the disk (`disk_mb`): the bytes in
//! the scenario's HOME, its work dir and the private `/tmp`, `/var/tmp`,
//! `/dev/shm` and `/run` its mount namespace gave the agent (read through
//! the fds the namespace keeps, [`MntNs::private_places`]), walked once
//! before the agent starts (the baseline), about every second while it
//! runs, and once more after it was reaped. A walk never follows a link
//! or leaves its place's file system (a folder bound back into a private
//! place is counted where it lives, once), and reads at most
//! [`WALK_ENTRIES`] entries (a figure cut there is a lower bound, and says
//! so). It records; the oracle's `disk_written` check judges.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::driver::home::Prepared;
use crate::driver::mountns::MntNs;
use crate::observe::{DiskSample, DiskUse, DISK_LARGEST_KEEP};

/// How often the places are walked while the agent runs (a walk that takes
/// longer delays the next).
pub const EVERY: Duration = Duration::from_secs(1);

/// Entries one walk reads at most, over all places.
pub const WALK_ENTRIES: usize = 200_000;

/// One place: its name in the report, and the path walked.
#[derive(Debug, Clone)]
struct Place {
    label: String,
    root: PathBuf,
}

/// A running watch; [`DiskWatch::finish`] ends it (dropped, it stops after
/// its current walk).
pub struct DiskWatch {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<DiskUse>>,
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What one walk found.
#[derive(Debug, Default)]
struct Walked {
    bytes: u64,
    largest: Vec<(String, u64)>,
    cut: bool,
}

impl DiskWatch {
    /// Walk `prepared`'s places once (the baseline), then every [`EVERY`]
    /// until [`DiskWatch::finish`]; times are seconds since `start`.
    pub async fn start(prepared: &Prepared, start: Instant) -> DiskWatch {
        let (places, unmeasured, keep) = places(prepared);
        let places = Arc::new(places);
        let baseline = walk_blocking(places.clone()).await;
        let mut disk = DiskUse {
            places: places.iter().map(|p| p.label.clone()).collect(),
            unmeasured,
            baseline: baseline.bytes,
            cut: baseline.cut,
            ..DiskUse::default()
        };
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            // The private places are read through the namespace's fds.
            let _keep = keep;
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                let last = tokio::select! {
                    _ = stopped.cancelled() => true,
                    _ = tick.tick() => false,
                };
                let w = walk_blocking(places.clone()).await;
                let at = (Instant::now() - start).as_secs_f64();
                disk.push(DiskSample { at, bytes: w.bytes }, w.largest, w.cut);
                if last {
                    return disk;
                }
            }
        });
        DiskWatch {
            stop,
            task: Some(task),
        }
    }

    /// The last walk (after the agent was reaped) and what the watch saw.
    pub async fn finish(mut self) -> DiskUse {
        self.stop.cancel();
        match self.task.take() {
            Some(task) => task.await.unwrap_or_default(),
            None => DiskUse::default(),
        }
    }
}

/// The places of a scenario, those not measured (and why), and the mount
/// namespace whose fds reach the private ones.
fn places(prepared: &Prepared) -> (Vec<Place>, Vec<String>, Option<Arc<MntNs>>) {
    let mut places = vec![Place {
        label: "HOME".into(),
        root: prepared.dirs.home.clone(),
    }];
    if !prepared.dirs.work.starts_with(&prepared.dirs.home) {
        places.push(Place {
            label: "work".into(),
            root: prepared.dirs.work.clone(),
        });
    }
    let mut unmeasured = Vec::new();
    match &prepared.mntns {
        Some(ns) => places.extend(ns.private_places().into_iter().map(|(at, root)| Place {
            label: at.display().to_string(),
            root,
        })),
        None => unmeasured.push(format!(
            "{}: the host's (no mount namespace of the scenario's own), not measured",
            crate::driver::mountns::PRIVATE.join(", ")
        )),
    }
    (places, unmeasured, prepared.mntns.clone())
}

async fn walk_blocking(places: Arc<Vec<Place>>) -> Walked {
    tokio::task::spawn_blocking(move || walk(&places))
        .await
        .unwrap_or_default()
}

/// Blocking: the bytes allocated to the regular files under `places` (a
/// file with several links once), and the largest files.
fn walk(places: &[Place]) -> Walked {
    let mut w = Walked::default();
    let mut linked = HashSet::new();
    let mut entries = 0usize;
    for place in places {
        let walker = walkdir::WalkDir::new(&place.root)
            .follow_links(false)
            .same_file_system(true);
        for entry in walker.into_iter().flatten() {
            entries += 1;
            if entries > WALK_ENTRIES {
                w.cut = true;
                return w;
            }
            let Ok(md) = entry.metadata() else {
                continue;
            };
            if !md.is_file() || (md.nlink() > 1 && !linked.insert((md.dev(), md.ino()))) {
                continue;
            }
            let bytes = md.blocks() * 512;
            w.bytes += bytes;
            let rel = entry
                .path()
                .strip_prefix(&place.root)
                .unwrap_or(entry.path());
            keep_largest(
                &mut w.largest,
                format!("{}/{}", place.label, rel.display()),
                bytes,
            );
        }
    }
    w
}

/// Keep the [`DISK_LARGEST_KEEP`] largest, largest first.
fn keep_largest(largest: &mut Vec<(String, u64)>, name: String, bytes: u64) {
    if largest.len() == DISK_LARGEST_KEEP && largest.last().is_some_and(|l| l.1 >= bytes) {
        return;
    }
    let at = largest.partition_point(|l| l.1 >= bytes);
    largest.insert(at, (name, bytes));
    largest.truncate(DISK_LARGEST_KEEP);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_counts_files_once_and_names_the_largest() {
        let d = tempfile::tempdir().unwrap();
        let big = d.path().join("big.log");
        std::fs::write(&big, vec![b'x'; 3 << 20]).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/small"), vec![b'y'; 10_000]).unwrap();
        std::fs::hard_link(&big, d.path().join("sub/big-again")).unwrap();
        std::os::unix::fs::symlink("/usr", d.path().join("link")).unwrap();
        let places = [Place {
            label: "HOME".into(),
            root: d.path().to_path_buf(),
        }];
        let w = walk(&places);
        assert!(!w.cut);
        // 3 MB once (the hard link is not counted again), 10 KB in blocks.
        assert!(
            w.bytes >= (3 << 20) + 10_000 && w.bytes < (3 << 20) + 64_000,
            "{}",
            w.bytes
        );
        assert_eq!(w.largest.len(), 2, "{:?}", w.largest);
        assert!(
            w.largest[0].0.starts_with("HOME/") && w.largest[0].1 >= 3 << 20,
            "{:?}",
            w.largest
        );
        assert_eq!(w.largest[1].0, "HOME/sub/small");
    }

    #[test]
    fn the_largest_are_kept_in_order_and_bounded() {
        let mut l = Vec::new();
        for (i, b) in [5u64, 50, 1, 20, 70, 3, 60].iter().enumerate() {
            keep_largest(&mut l, format!("f{i}"), *b);
        }
        let sizes: Vec<u64> = l.iter().map(|x| x.1).collect();
        assert_eq!(sizes, vec![70, 60, 50, 20, 5]);
    }
}
