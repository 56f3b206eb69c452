//! A finding as the user gets it: the minimal row (YAML, ready to paste under
//! `scenarios:`, with its calibrated deadlines and its signature in `about`),
//! the check it breaks, the seed that found it, how the row was verified, and
//! the `--out` file holding every finding as a valid scenarios table.

use serde_yaml::Value;

use super::calibrate::Calibration;
use super::findings::{self, Signature};
use super::generate::Trial;
use super::schedule;

/// One confirmed, shrunk failure.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The explore run's seed and the trial's number and seed.
    pub run_seed: u64,
    pub trial_no: u64,
    pub original: Trial,
    pub minimal: Trial,
    /// `invariant / check`, e.g. `reusability / probe_answered`.
    pub check: String,
    /// Its violations in the minimal row's last run.
    pub violations: Vec<String>,
    /// Runs of the minimal row that failed the same check, of `confirm`.
    pub reproduced: u32,
    pub confirm: u32,
    /// The deadlines the row was run (and is written) with.
    pub cal: Option<Calibration>,
    /// How the same script without its faults did on this agent: `Ok` it
    /// passed, `Err(what failed)`.
    pub healthy: Result<(), String>,
}

impl Finding {
    /// The row's id: the check it breaks and the trial seed, deterministic.
    pub fn id(&self) -> String {
        let name = self.check.rsplit(" / ").next().unwrap_or("check");
        format!("found_{name}_{}", self.minimal.seed)
    }

    pub fn signature(&self) -> Signature {
        Signature {
            check: self.check.clone(),
            shape: findings::shape(&self.minimal),
        }
    }

    pub fn row(&self) -> Value {
        let mut row = schedule::row(&self.minimal, &self.id(), self.cal.as_ref());
        if let Some(about) = row.get_mut("about") {
            let text = format!(
                "{}; {}{}",
                about.as_str().unwrap_or(""),
                findings::MARK,
                self.signature()
            );
            *about = text.into();
        }
        row
    }

    /// What stdout shows: the invariant, the seeds, the faults, then the row.
    pub fn render(&self) -> String {
        let mut out = format!(
            "FOUND {} breaks {}\n  found by: chaosrun explore --seed {} (trial {}, trial seed {})\n  shrunk: {} fault(s) in {} step(s), from {} fault(s) in {} step(s); reproduced {}/{}\n",
            self.id(),
            self.check,
            self.run_seed,
            self.trial_no,
            self.minimal.seed,
            self.minimal.fault_count(),
            self.minimal.steps.len(),
            self.original.fault_count(),
            self.original.steps.len(),
            self.reproduced,
            self.confirm,
        );
        out.push_str(&format!("  signature: {}\n", self.signature()));
        for v in self.violations.iter().take(3) {
            out.push_str(&format!("  violation: {v}\n"));
        }
        out.push_str(&match &self.healthy {
            Ok(()) => format!(
                "  verified: the row fails alone ({}/{}); the same script without its faults passes on this agent \
                 (explore cannot build a healthy agent: run the row against one to be sure)\n",
                self.reproduced, self.confirm
            ),
            Err(e) => format!(
                "  WARNING: the same script without its faults fails too ({e}): the faults may not be the cause\n"
            ),
        });
        out.push_str("  row (paste under `scenarios:`):\n");
        let yaml = serde_yaml::to_string(&Value::Sequence(vec![self.row()])).unwrap_or_default();
        for line in yaml.lines() {
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
        }
        out
    }
}

/// Every finding as one scenarios file.
pub fn table(findings: &[Finding]) -> String {
    let mut header = String::from(
        "Found by chaosrun explore. Each row breaks the check named in its comment.\n",
    );
    for f in findings {
        header.push_str(&format!(
            "{}: breaks {}; seed {} (trial {}, trial seed {})\n",
            f.id(),
            f.check,
            f.run_seed,
            f.trial_no,
            f.minimal.seed
        ));
    }
    let rows: Vec<Value> = findings.iter().map(Finding::row).collect();
    schedule::table_text(&header, &rows)
}

#[cfg(test)]
mod tests {
    use super::super::config::Config;
    use super::super::generate::generate;
    use super::*;

    #[test]
    fn the_out_table_loads_and_names_each_row() {
        let f = |seed| Finding {
            run_seed: 1,
            trial_no: seed,
            original: generate(seed, &Config::default(), true),
            minimal: generate(seed, &Config::default(), true),
            check: "reusability / probe_answered".into(),
            violations: vec!["the probe failed".into()],
            reproduced: 3,
            confirm: 3,
            cal: None,
            healthy: Ok(()),
        };
        let all = [f(4), f(5)];
        let text = table(&all);
        let t = crate::scenarios::load_str(&text, "found.yaml").unwrap();
        assert_eq!(t.scenarios.len(), 2);
        assert_eq!(t.scenarios[0].id, "found_probe_answered_4");
        assert!(text.starts_with("# Found by chaosrun explore"));
        let shown = all[0].render();
        assert!(
            shown.contains("breaks reusability / probe_answered"),
            "{shown}"
        );
        assert!(
            shown.contains("verified: the row fails alone (3/3)"),
            "{shown}"
        );
        // Its signature rides in `about`, so the file works as --known.
        assert!(text.contains(findings::MARK), "{text}");
        let k = findings::Known::from_table(&text, "found.yaml").unwrap();
        assert!(k.matches(&all[0].signature()).is_some());
        // The shown row is the same YAML the file holds.
        assert!(
            shown.contains("    - id: found_probe_answered_4"),
            "{shown}"
        );
    }
}
