//! chaosrun: chaos-test the liveness of LLM agents from the outside.
//!
//! The flow runs one way: scenario table ([`scenarios`]) → per-scenario run
//! ([`runner`], which starts a [`provider`] and an agent process through
//! [`driver`]) → an [`observe::Observation`] → the pure [`oracle`] → [`report`].

/// `eprintln!` that never panics: a closed stderr must not crash a run that
/// still has processes to clean up and a verdict to return. Control
/// characters are escaped ([`term::escape`]).
#[macro_export]
macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let text = format!($($arg)*);
        let _ = writeln!(std::io::stderr(), "{}", $crate::term::escape(&$crate::redact::text(&text)));
    }};
}

pub mod catalog;
pub mod children;
pub mod cli;
pub mod driver;
pub mod explore;
pub mod fd_limit;
pub mod history;
pub mod input;
pub mod kinds;
pub mod listen;
pub mod mcp;
pub mod message;
pub mod observe;
pub mod oracle;
pub mod output;
pub mod proc_hygiene;
pub mod profile;
pub mod provider;
pub mod redact;
pub mod report;
pub mod runner;
pub mod safe_path;
pub mod scenarios;
pub mod store;
pub mod template;
pub mod term;
pub mod units;
