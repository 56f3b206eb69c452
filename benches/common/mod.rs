//! What the benchmarks share: finding the release binary they measure.

use std::path::PathBuf;

/// The `chaosrun` binary cargo built for this bench (or, run by hand from
/// `target/release/deps/`, the one beside it).
pub fn chaosrun_bin() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_chaosrun") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    dir.join("chaosrun")
}
