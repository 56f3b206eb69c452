//! The JUnit XML report (`--junit FILE`) for CI systems that show test results:
//! one test suite `chaosrun` with the run's seed as a property, one test case
//! per finished scenario (classname `chaosrun.<id>`, time = its seconds), and
//! for each failed one a `<failure>` whose message is the first violation and
//! whose text lists every failed check, what was not checked, and the agent's
//! stderr tail. A scenario chaosrun could not run (`ERROR`) is an `<error>`
//! carrying its cause; an N/A one is `<skipped>` with its reason (never a
//! success). Written once, atomically (temp file + rename), when the run
//! finishes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use super::Reporter;
use crate::runner::{RunEvent, ScenarioResult, Verdict};

pub struct Junit {
    path: PathBuf,
    seed: u64,
    results: Vec<Arc<ScenarioResult>>,
}

impl Junit {
    pub fn new(path: PathBuf, seed: u64) -> Junit {
        Junit {
            path,
            seed,
            results: Vec::new(),
        }
    }
}

fn duration(seconds: f64) -> Duration {
    Duration::try_from_secs_f64(seconds).unwrap_or_default()
}

/// `label / name: line`, with a violation's further lines indented under it.
fn check_line(label: &str, name: &str, text: &str) -> String {
    let mut lines = text.lines();
    let mut s = format!("{label} / {name}: {}\n", lines.next().unwrap_or_default());
    for l in lines {
        s.push_str("    ");
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// The failure text: every violation of every failed check, then what was
/// not checked, then the agent's stderr tail.
pub fn failure_text(r: &ScenarioResult) -> String {
    let mut s = String::new();
    for c in r.failures() {
        for v in c.violations() {
            s.push_str(&check_line(c.invariant.label(), c.name, v));
        }
    }
    let mut not_checked = r.not_checked().peekable();
    if not_checked.peek().is_some() {
        s.push_str("\nnot checked:\n");
        for c in not_checked {
            s.push_str(&check_line(
                c.invariant.label(),
                c.name,
                c.not_checked_reason().unwrap_or_default(),
            ));
        }
    }
    let tail = r.observation.stderr_tail.trim_end();
    if !tail.is_empty() {
        s.push_str("\nagent stderr (tail):\n");
        s.push_str(tail);
        s.push('\n');
    }
    s
}

/// One scenario's test case.
pub fn test_case(r: &ScenarioResult) -> TestCase {
    let status = match &r.verdict {
        Verdict::Pass => TestCaseStatus::success(),
        Verdict::Error { cause } => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status
                .set_message(
                    cause
                        .to_string()
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                )
                .set_type("chaosrun error")
                .set_description(format!("chaosrun could not run the scenario: {cause}\n"));
            status
        }
        Verdict::NotApplicable { reason } => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(format!("not applicable: {reason}"));
            status
        }
        Verdict::Fail => {
            let first = r
                .failures()
                .flat_map(|c| c.violations().first().map(|v| (c, v)))
                .next();
            let message = match first {
                Some((c, v)) => format!("{} / {}: {}", c.invariant.label(), c.name, v),
                None => "the scenario failed".to_string(),
            };
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status
                .set_message(message)
                .set_type("liveness violation")
                .set_description(failure_text(r));
            status
        }
    };
    let mut case = TestCase::new(r.id.as_str(), status);
    case.set_classname(format!("chaosrun.{}", r.id))
        .set_time(duration(r.seconds));
    if r.attempts > 1 {
        case.add_property(Property::new(
            "attempt",
            format!("{}/{}", r.attempt, r.attempts),
        ));
    }
    if let Some(dir) = &r.artifacts {
        case.set_system_out(format!("artifacts: {}\n", dir.display()));
    }
    case
}

/// The whole report as XML.
pub fn render(results: &[Arc<ScenarioResult>], seed: u64, wall: Option<f64>) -> String {
    let mut suite = TestSuite::new("chaosrun");
    suite.add_property(Property::new("seed", seed.to_string()));
    suite.add_test_cases(results.iter().map(|r| test_case(r)));
    if let Some(wall) = wall {
        suite.set_time(duration(wall));
    }
    let mut report = Report::new("chaosrun");
    report.add_test_suite(suite);
    if let Some(wall) = wall {
        report.set_time(duration(wall));
    }
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- chaosrun: cannot serialize the JUnit report: {e} -->\n"))
}

/// Write `text` to `path` through an exclusive temp file beside it and a
/// rename ([`crate::output::write_atomic`]).
pub(crate) fn write_atomically(path: &std::path::Path, text: &str, _ext: &str) {
    if let Err(e) = crate::output::write_atomic(path, text.as_bytes()) {
        crate::say_err!("chaosrun: cannot write {}: {e}", path.display());
    }
}

impl Reporter for Junit {
    fn on(&mut self, event: &RunEvent) {
        match event {
            RunEvent::ScenarioFinished(r) => self.results.push(r.clone()),
            RunEvent::Finished { wall, .. } => {
                let xml = render(&self.results, self.seed, Some(*wall));
                write_atomically(&self.path, &xml, "xml.tmp");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::{feed, sample_results, sample_with_error, VIOLATION};

    #[test]
    fn an_error_is_a_junit_error_with_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.xml");
        let mut junit = Junit::new(path.clone(), 1);
        feed(&mut junit, sample_with_error());
        let xml = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let suite = doc
            .descendants()
            .find(|n| n.has_tag_name("testsuite"))
            .unwrap();
        assert_eq!(suite.attribute("tests"), Some("3"));
        assert_eq!(suite.attribute("errors"), Some("1"));
        assert_eq!(suite.attribute("failures"), Some("1"));
        let case = doc
            .descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some("crashed_one"))
            .unwrap();
        let error = case.children().find(|n| n.has_tag_name("error")).unwrap();
        assert!(error.attribute("message").unwrap().contains("<boom>"));
    }

    #[test]
    fn writes_one_case_per_scenario_and_a_failure_naming_the_violation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.xml");
        let mut junit = Junit::new(path.clone(), 42);
        feed(&mut junit, sample_results());
        assert!(!path.with_extension("xml.tmp").exists());
        let xml = std::fs::read_to_string(&path).unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();

        let suite = doc
            .descendants()
            .find(|n| n.has_tag_name("testsuite"))
            .unwrap();
        assert_eq!(suite.attribute("name"), Some("chaosrun"));
        assert_eq!(suite.attribute("tests"), Some("2"));
        assert_eq!(suite.attribute("failures"), Some("1"));
        let seed = doc
            .descendants()
            .find(|n| n.has_tag_name("property") && n.attribute("name") == Some("seed"))
            .unwrap();
        assert_eq!(seed.attribute("value"), Some("42"));

        let cases: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases.len(), 2);
        let ok = cases
            .iter()
            .find(|c| c.attribute("name") == Some("healthy_one"))
            .unwrap();
        assert_eq!(ok.attribute("classname"), Some("chaosrun.healthy_one"));
        assert_eq!(ok.attribute("time"), Some("4.000"));
        assert!(!ok.children().any(|n| n.has_tag_name("failure")));

        let bad = cases
            .iter()
            .find(|c| c.attribute("name") == Some("storm<&>"))
            .unwrap();
        assert_eq!(bad.attribute("time"), Some("31.250"));
        let failure = bad.children().find(|n| n.has_tag_name("failure")).unwrap();
        let message = failure.attribute("message").unwrap();
        assert!(message.contains(VIOLATION), "{message}");
        assert!(message.starts_with("bounded provider calls / call_bound: "));
        let text = failure.text().unwrap();
        assert!(text.contains(&format!("bounded provider calls / call_bound: {VIOLATION}")));
        assert!(text.contains("history integrity / history: a second violation"));
        assert!(text.contains("store integrity / integrity_check: no store"));
        assert!(text.contains("Traceback <boom>"), "{text}");
        let out = bad
            .children()
            .find(|n| n.has_tag_name("system-out"))
            .unwrap();
        assert!(out.text().unwrap().contains("/tmp/art/storm"));
    }
}
