//! `disk_written` (bounded disk): on a row that declares `disk_mb`, the
//! bytes the agent's run added to its HOME, its work dir and the private
//! `/tmp`, `/var/tmp`, `/dev/shm` and `/run` its mount namespace gave it,
//! at the fullest the disk watch saw them (about every second while the
//! agent ran, and once after it was reaped), over what they held before it
//! started, may be at most the bound (claude-code #35121, #41737: a task's
//! output file that grows until the disk is full; codex #23722). The
//! violation names the growth, its time and the largest files then. Pure
//! over [`Observation::disk`]; `not checked` when nothing was measured
//! while the agent ran, and a pass is `not checked` when a walk stopped at
//! its entry bound (its figure is a lower bound) or a place could not be
//! measured (not root: the agent's `/tmp` is the host's).

use super::{Check, Invariant};
use crate::observe::Observation;
use crate::scenarios::Scenario;

pub const NAME: &str = "disk_written";

const MB: f64 = 1024.0 * 1024.0;

pub fn check(s: &Scenario, obs: &Observation) -> Option<Check> {
    let allowed = s.disk_mb?;
    let inv = Invariant::Disk;
    let Some((disk, fullest)) = obs.disk.as_ref().and_then(|d| d.fullest.map(|f| (d, f))) else {
        let why = "the disk was never measured while the agent ran (the run did not start, or the observation predates `disk_mb`)";
        return Some(Check::skipped(inv, NAME, why));
    };
    let growth = disk.growth() as f64 / MB;
    if growth <= allowed as f64 {
        let partial = if disk.cut {
            Some(format!("the agent's run added {growth:.0} MB, but a walk of its places stopped at its entry bound: that is a lower bound"))
        } else if !disk.unmeasured.is_empty() {
            Some(format!(
                "the agent's run added {growth:.0} MB to {}, but not all its places were measured: {}",
                disk.places.join(", "),
                disk.unmeasured.join("; ")
            ))
        } else {
            None
        };
        return Some(super::unless_partial(
            Check::new(inv, NAME, vec![]),
            partial,
        ));
    }
    let largest: Vec<String> = disk
        .largest
        .iter()
        .map(|(path, bytes)| format!("{path} {:.0} MB", *bytes as f64 / MB))
        .collect();
    let mut v = format!(
        "the agent's run added {growth:.0} MB to {}, more than the {allowed} MB the row allows (`disk_mb`): {:.0} MB before the agent started, {:.0} MB at {:.1} s",
        disk.places.join(", "),
        disk.baseline as f64 / MB,
        fullest.bytes as f64 / MB,
        fullest.at
    );
    if !largest.is_empty() {
        v.push_str(&format!("; largest files then: {}", largest.join(", ")));
    }
    if disk.cut {
        v.push_str(" (at least: a walk stopped at its entry bound)");
    }
    Some(Check::new(inv, NAME, vec![v]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{DiskSample, DiskUse};
    use crate::oracle::fixtures::{end, healthy, scenario};
    use crate::oracle::Status;

    const M: u64 = 1 << 20;

    /// A run whose places held `base` MB, then `samples` (at, MB), the
    /// fullest one's largest file `big` MB.
    fn run(base: u64, samples: &[(f64, u64)], big: u64, cut: bool) -> Observation {
        let s = scenario("expect: error\ndisk_mb: 600");
        let mut o = healthy(&s, end(0, false, true, ""));
        let mut d = DiskUse {
            places: vec!["HOME".into(), "work".into(), "/tmp".into()],
            baseline: base * M,
            ..DiskUse::default()
        };
        for (at, mb) in samples {
            let files = vec![("/tmp/claude-0/tasks/x.output".to_string(), big * M)];
            d.push(
                DiskSample {
                    at: *at,
                    bytes: mb * M,
                },
                files,
                cut,
            );
        }
        o.disk = Some(d);
        o
    }

    #[test]
    fn one_copy_of_the_output_passes_and_two_fail_naming_the_file() {
        let s = scenario("expect: error\ndisk_mb: 600");
        let one = run(2, &[(1.0, 100), (50.0, 362), (99.0, 362)], 360, false);
        assert_eq!(check(&s, &one).unwrap().status, Status::Pass);
        // Two copies, then deleted at exit: the fullest sample counts.
        let two = run(2, &[(1.0, 100), (90.0, 722), (99.0, 2)], 360, false);
        let c = check(&s, &two).unwrap();
        let Status::Fail { violations } = &c.status else {
            panic!("{c:?}")
        };
        let v = &violations[0];
        assert!(
            v.contains("added 720 MB to HOME, work, /tmp, more than the 600 MB"),
            "{v}"
        );
        assert!(
            v.contains("2 MB before the agent started, 722 MB at 90.0 s"),
            "{v}"
        );
        assert!(
            v.contains("largest files then: /tmp/claude-0/tasks/x.output 360 MB"),
            "{v}"
        );
    }

    #[test]
    fn a_cut_walk_never_passes_and_no_measure_is_not_checked() {
        let s = scenario("expect: error\ndisk_mb: 600");
        let cut = run(2, &[(1.0, 100)], 90, true);
        let c = check(&s, &cut).unwrap();
        assert!(
            matches!(c.status, Status::NotChecked { ref reason } if reason.contains("lower bound")),
            "{c:?}"
        );
        let over = run(2, &[(1.0, 900)], 90, true);
        let c = check(&s, &over).unwrap();
        assert!(
            matches!(c.status, Status::Fail { ref violations } if violations[0].contains("(at least")),
            "{c:?}"
        );
        let mut none = run(2, &[], 0, false);
        assert!(matches!(
            check(&s, &none).unwrap().status,
            Status::NotChecked { .. }
        ));
        // Not root: the host's /tmp was not measured, so a pass is partial.
        let mut shared = run(2, &[(1.0, 100)], 90, false);
        shared.disk.as_mut().unwrap().unmeasured = vec!["/tmp: the host's".into()];
        let c = check(&s, &shared).unwrap();
        assert!(
            matches!(c.status, Status::NotChecked { ref reason } if reason.contains("not all its places were measured: /tmp")),
            "{c:?}"
        );
        none.disk = None;
        assert!(matches!(
            check(&s, &none).unwrap().status,
            Status::NotChecked { .. }
        ));
        assert!(check(&scenario("expect: error"), &none).is_none());
    }
}
