//! Distinct findings: a finding's signature is its check id plus the shape
//! of its shrunk schedule (fault kinds and where they sit; never delays,
//! seeds or ids). `--keep-going` reports each signature once with its hit
//! count; `--known FILE` names failures already known (a table run's JSON
//! report: its failed checks; or an explore `--out` table: each row's
//! signature, kept in its `about`), and a trial matching one is a known hit,
//! not a finding. Pure except for reading the `--known` file.

use super::generate::{Action, Trial};
use super::schedule::kind_name;
use crate::oracle::Invariant;

/// A check id and a schedule shape.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Signature {
    pub check: String,
    pub shape: String,
}

impl std::fmt::Display for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} @ {}", self.check, self.shape)
    }
}

/// The marker an emitted row's `about` carries its signature after.
pub const MARK: &str = "signature: ";

/// The shape of `t`: each step's faults (`500>`, `429+interrupt>`,
/// `hang×>` for a fault that lasts then clears, `500∞>` for one that never
/// does, `kill>`, `stop>`) before its action (`tool`, `batch`, `bg`,
/// `answer`), steps separated by spaces.
pub fn shape(t: &Trial) -> String {
    let mut steps = Vec::new();
    for s in &t.steps {
        let mut out = String::new();
        if s.kill_before {
            out.push_str("kill>");
        }
        if s.stop_for.is_some() {
            out.push_str("stop>");
        }
        for f in &s.faults {
            out.push_str(kind_name(f.kind));
            if f.interrupt {
                out.push_str("+interrupt");
            }
            out.push('>');
        }
        if let Some(p) = s.persist {
            out.push_str(kind_name(p.kind));
            out.push(if p.clears() { '×' } else { '∞' });
            out.push('>');
        }
        out.push_str(match &s.action {
            Action::Tools { secs } if secs.len() == 1 => "tool",
            Action::Tools { .. } => "batch",
            Action::Background => "bg",
            Action::Final { .. } => "answer",
        });
        steps.push(out);
    }
    steps.join(" ")
}

/// What `--known` names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Known {
    /// From a JSON report: a check id known to fail, whatever the schedule.
    pub checks: Vec<String>,
    /// From an explore table: exact signatures.
    pub signatures: Vec<Signature>,
}

/// The check id (`label / name`) of a report's `invariant` and `name`.
fn check_id(invariant: Invariant, name: &str) -> Option<String> {
    use Invariant::*;
    let counted = [
        Termination,
        ProviderCalls,
        Reusability,
        HistoryIntegrity,
        ProcessHygiene,
        StoreIntegrity,
        SideEffects,
        Memory,
    ];
    counted
        .contains(&invariant)
        .then(|| format!("{} / {name}", invariant.label()))
}

impl Known {
    /// Read `--known FILE`: a JSON report (`chaosrun --json`) or a scenarios
    /// table whose rows carry explore signatures.
    pub fn load(path: &std::path::Path) -> Result<Known, String> {
        let shown = path.display().to_string();
        let text = crate::input::read_input_text(path, crate::input::KNOWN)
            .map_err(|e| format!("--known {e}"))?;
        if text.trim_start().starts_with('{') {
            Self::from_report(&text).map_err(|e| format!("--known {shown}: {e}"))
        } else {
            Self::from_table(&text, &shown)
        }
    }

    /// The failed checks of a JSON report (read as
    /// [`crate::report::document`] types).
    pub fn from_report(text: &str) -> Result<Known, String> {
        let doc = crate::report::document::parse(text, "the report")
            .map_err(|e| format!("not a chaosrun JSON report: {e}"))?;
        let mut k = Known::default();
        for r in &doc.scenarios {
            for c in &r.checks {
                if !matches!(c.status, crate::oracle::Status::Fail { .. }) {
                    continue;
                }
                if let Some(id) = check_id(c.invariant, &c.name) {
                    if !k.checks.contains(&id) {
                        k.checks.push(id);
                    }
                }
            }
        }
        Ok(k)
    }

    pub fn from_table(text: &str, shown: &str) -> Result<Known, String> {
        crate::scenarios::load_str(text, shown).map_err(|e| format!("--known {e}"))?;
        let doc: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| format!("--known {shown}: {e}"))?;
        let mut k = Known::default();
        for row in doc["scenarios"].as_sequence().into_iter().flatten() {
            let about = row["about"].as_str().unwrap_or("");
            if let Some((_, sig)) = about.split_once(MARK) {
                if let Some((check, shape)) = sig.split_once(" @ ") {
                    k.signatures.push(Signature {
                        check: check.trim().into(),
                        shape: shape.trim().into(),
                    });
                }
            }
        }
        if k.signatures.is_empty() {
            return Err(format!(
                "--known {shown}: no row carries an explore signature (`{MARK}CHECK @ SHAPE` in its about); \
                 for a hand-written table give the JSON report of a run of it (chaosrun TABLE --json REPORT.json)"
            ));
        }
        Ok(k)
    }

    /// What `sig` matches, if it is known.
    pub fn matches(&self, sig: &Signature) -> Option<String> {
        if self.signatures.contains(sig) {
            return Some(format!("known signature {sig}"));
        }
        self.checks
            .iter()
            .find(|c| **c == sig.check)
            .map(|c| format!("known failed check {c} (from the report)"))
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty() && self.signatures.is_empty()
    }
}

/// The distinct findings of one search, with how many trials hit each.
#[derive(Debug, Default)]
pub struct Distinct {
    pub seen: Vec<(Signature, u64)>,
}

impl Distinct {
    /// Count a hit on `sig`; true when it is new.
    pub fn hit(&mut self, sig: &Signature) -> bool {
        if let Some((_, n)) = self.seen.iter_mut().find(|(s, _)| s == sig) {
            *n += 1;
            false
        } else {
            self.seen.push((sig.clone(), 1));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::Config;
    use super::super::generate::{generate, trial_seed, Fault, FaultKind, Persist, Step};
    use super::*;

    fn trial(tool_secs: f64, persist: Option<Persist>) -> Trial {
        Trial {
            seed: 1,
            steps: vec![
                Step {
                    action: Action::Tools {
                        secs: vec![tool_secs],
                    },
                    faults: vec![Fault {
                        kind: FaultKind::Error429,
                        interrupt: false,
                    }],
                    ..Step::answer(0.0)
                },
                Step {
                    persist,
                    ..Step::answer(0.3)
                },
            ],
        }
    }

    #[test]
    fn the_shape_keeps_kinds_and_places_not_delays_or_seeds() {
        let p = Some(Persist {
            kind: FaultKind::Hang,
            calls: None,
        });
        let a = trial(0.01, p);
        let mut b = trial(0.9, p);
        b.seed = 99;
        assert_eq!(shape(&a), shape(&b));
        assert_eq!(shape(&a), "429>tool hang∞>answer");
        let c = trial(
            0.01,
            Some(Persist {
                kind: FaultKind::Hang,
                calls: Some(2),
            }),
        );
        assert_ne!(shape(&a), shape(&c));
        // Distinct shapes across generated trials.
        let c = Config::default();
        let shapes: std::collections::BTreeSet<String> = (0..200)
            .map(|n| shape(&generate(trial_seed(4, n), &c, true)))
            .collect();
        assert!(shapes.len() > 50, "{}", shapes.len());
    }

    #[test]
    fn a_signature_is_counted_once_with_its_hits() {
        let s = |check: &str| Signature {
            check: check.into(),
            shape: "tool 500∞>answer".into(),
        };
        let mut d = Distinct::default();
        assert!(d.hit(&s("a / b")));
        assert!(!d.hit(&s("a / b")));
        assert!(d.hit(&s("a / c")));
        assert_eq!(d.seen, vec![(s("a / b"), 2), (s("a / c"), 1)]);
    }

    #[test]
    fn known_reads_a_report_and_an_explore_table() {
        let report = r#"{"schema": "chaosrun-report/2", "agent": "a", "selected": ["provider_hang"], "scenarios": [
            {"id": "provider_hang", "verdict": "fail", "checks": [
              {"invariant": "termination", "name": "faulted_turn_ends", "status": "fail", "violations": ["x"]},
              {"invariant": "reusability", "name": "probe_answered", "status": "pass"},
              {"invariant": "exercised", "name": "fault_landed", "status": "fail", "violations": ["x"]}]}]}"#;
        let k = Known::from_report(report).unwrap();
        assert_eq!(k.checks, vec!["bounded termination / faulted_turn_ends"]);
        let sig = Signature {
            check: "bounded termination / faulted_turn_ends".into(),
            shape: "tool hang∞>answer".into(),
        };
        assert!(k.matches(&sig).is_some());
        let other = Signature {
            check: "reusability / probe_answered".into(),
            ..sig.clone()
        };
        assert!(k.matches(&other).is_none());
        assert!(Known::from_report("[1]").is_err());
        // Read through the report's types: another schema, or a check
        // status the run never writes, is refused, not skimmed.
        let schema9 = report.replace("chaosrun-report/2", "chaosrun-report/9");
        let e = Known::from_report(&schema9).unwrap_err();
        assert!(e.contains("not a chaosrun-report/2 report"), "{e}");
        let bad = report.replace(r#""status": "pass""#, r#""status": "passed""#);
        assert!(Known::from_report(&bad).is_err());

        let table = format!(
            "scenarios:\n  - id: found_x\n    about: \"explore trial seed 1: x; {MARK}{sig}\"\n    responder: [{{reply: {{kind: text, text: hi}}}}]\n    expect: ended\n"
        );
        let k = Known::from_table(&table, "k.yaml").unwrap();
        assert_eq!(k.signatures, vec![sig.clone()]);
        assert!(k.matches(&sig).is_some());
        assert!(k.matches(&other).is_none());
        let plain =
            "scenarios:\n  - id: a\n    responder: [{reply: {kind: text, text: hi}}]\n    expect: ended\n";
        let e = Known::from_table(plain, "k.yaml").unwrap_err();
        assert!(e.contains("no row carries an explore signature"), "{e}");
        let bad = "scenarios:\n  - id: a\n    nope: 1\n";
        assert!(Known::from_table(bad, "k.yaml")
            .unwrap_err()
            .contains("k.yaml:"));
    }
}
