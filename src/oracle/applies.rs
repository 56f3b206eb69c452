//! Whether a row applies, decided by the oracle before it runs: a pure
//! function of the row, the adapter profile (its capabilities, see
//! [`crate::profile::needs`]) and the host facts the runner gathered for the
//! needs [`host_needs`] names. An N/A carries a typed [`NotApplicable`]
//! cause; its text is the verdict's `reason`.

pub use super::cause::{HostNeed, NotApplicable};
use crate::profile::Profile;
use crate::scenarios::{Landing, Scenario};

/// What the runner found missing on the host, for the needs a row named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// Each need the host lacks, with why.
    pub missing: Vec<(HostNeed, String)>,
}

/// What row `s` needs from the host (the runner gathers these facts).
pub fn host_needs(s: &Scenario) -> Vec<HostNeed> {
    let oom = s
        .process_fault
        .as_ref()
        .is_some_and(|f| f.action.lands() == Landing::MemoryLimit);
    oom.then_some(HostNeed::MemoryController)
        .into_iter()
        .collect()
}

/// Why row `s` cannot apply to `profile` on a host with `host`'s gaps, if
/// so: the profile's gaps first, then the host's.
pub fn not_applicable(profile: &Profile, s: &Scenario, host: &HostFacts) -> Option<NotApplicable> {
    if let Some(reason) = crate::profile::needs::not_applicable(profile, s) {
        return Some(NotApplicable::Profile(reason));
    }
    host_needs(s).into_iter().find_map(|need| {
        host.missing
            .iter()
            .find(|(n, _)| *n == need)
            .map(|(n, why)| NotApplicable::Host(*n, why.clone()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::fixtures::scenario;

    fn profile() -> Profile {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p.yaml");
        std::fs::write(&p, "command: [sh]\n").unwrap();
        Profile::resolve_uninstalled(p.to_str().unwrap()).unwrap()
    }

    /// The runner used to decide this itself (`runner::oom_gap`); the oracle
    /// now says it from the host facts it is given.
    #[test]
    fn an_oom_row_on_a_host_without_a_memory_controller_is_not_applicable() {
        let profile = profile();
        let oom = scenario("expect: killed\nprocess_fault: {action: oom, at: {after_calls: 1}}");
        assert_eq!(host_needs(&oom), vec![HostNeed::MemoryController]);
        assert_eq!(host_needs(&scenario("expect: error")), vec![]);
        assert_eq!(not_applicable(&profile, &oom, &HostFacts::default()), None);
        let host = HostFacts {
            missing: vec![(HostNeed::MemoryController, "no memory controller".into())],
        };
        assert_eq!(
            not_applicable(&profile, &scenario("expect: error"), &host),
            None
        );
        let na = not_applicable(&profile, &oom, &host).expect("N/A");
        assert!(matches!(
            na,
            NotApplicable::Host(HostNeed::MemoryController, _)
        ));
        assert!(na.to_string().starts_with(
            "this row has the kernel OOM-kill the agent under a memory cgroup limit: no memory controller;"
        ));
    }
}
