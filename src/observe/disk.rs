//! What a row that bounds the disk (`disk_mb`) saw of the bytes its agent's
//! run added: the places measured (the scenario's HOME and work dir, and the
//! private `/tmp`, `/var/tmp`, `/dev/shm` and `/run` its mount namespace
//! gave the agent), those that could not be, the bytes before the agent
//! started, a sample about every second while it ran and one after it was
//! reaped, and the largest files at the fullest sample. Data only: the
//! runner's disk watch fills it, the oracle's `disk_written` check judges it.

use serde::{Deserialize, Serialize};

/// Samples kept; past it only the fullest and the last are kept.
pub const DISK_SAMPLES_KEEP: usize = 1200;

/// Largest files named at the fullest sample.
pub const DISK_LARGEST_KEEP: usize = 5;

/// Bytes on disk at a moment, in the places a [`DiskUse`] names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DiskSample {
    /// Seconds since the run began.
    pub at: f64,
    /// Bytes allocated to the files found (a file's blocks, not its length:
    /// a sparse file counts what it holds).
    pub bytes: u64,
}

/// A row's disk, as its run left it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DiskUse {
    /// The places measured, as the report names them (`HOME`, `work`,
    /// `/tmp`, …).
    pub places: Vec<String>,
    /// Places that were not measured, each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmeasured: Vec<String>,
    /// Bytes before the agent started (its HOME as chaosrun prepared it).
    pub baseline: u64,
    /// Samples while the agent ran and after it was reaped, oldest first
    /// (bounded: [`DISK_SAMPLES_KEEP`]).
    pub samples: Vec<DiskSample>,
    /// The sample with the most bytes (kept past the bound).
    pub fullest: Option<DiskSample>,
    /// The largest files at the fullest sample: (place-relative path such as
    /// `HOME/.agent/log.txt`, bytes), largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub largest: Vec<(String, u64)>,
    /// A walk stopped at its entry bound: its figure is a lower bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

impl DiskUse {
    /// Record a sample; `largest` are its biggest files, kept when it is
    /// the fullest so far.
    pub fn push(&mut self, sample: DiskSample, largest: Vec<(String, u64)>, cut: bool) {
        self.cut |= cut;
        if self.fullest.is_none_or(|f| sample.bytes > f.bytes) {
            self.fullest = Some(sample);
            self.largest = largest;
        }
        if self.samples.len() < DISK_SAMPLES_KEEP {
            self.samples.push(sample);
        } else if let Some(last) = self.samples.last_mut() {
            *last = sample;
        }
    }

    /// Bytes the run added at its fullest (0 when no sample exceeded the
    /// baseline).
    pub fn growth(&self) -> u64 {
        self.fullest
            .map_or(0, |f| f.bytes.saturating_sub(self.baseline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fullest_sample_and_its_files_are_kept_past_the_bound() {
        let mut d = DiskUse {
            baseline: 10,
            ..DiskUse::default()
        };
        d.push(
            DiskSample { at: 1.0, bytes: 50 },
            vec![("HOME/a".into(), 40)],
            false,
        );
        for i in 0..DISK_SAMPLES_KEEP + 5 {
            d.push(
                DiskSample {
                    at: 2.0 + i as f64,
                    bytes: 20,
                },
                vec![],
                false,
            );
        }
        assert_eq!(d.samples.len(), DISK_SAMPLES_KEEP);
        assert_eq!(d.fullest.map(|f| f.bytes), Some(50));
        assert_eq!(d.largest, vec![("HOME/a".to_string(), 40)]);
        assert_eq!(d.growth(), 40);
        assert!(!d.cut);
        d.push(DiskSample { at: 9e3, bytes: 5 }, vec![], true);
        assert!(d.cut);
        assert_eq!(d.samples.last().map(|s| s.at), Some(9e3));
    }
}
