//! Structure rules the code must keep, checked by `scripts/fn_lengths.py`:
//! no function outside tests longer than 100 lines under src/ (no folder is
//! allowed an exception).

mod common;

use common::repo;
use std::process::Command;

fn fn_lengths(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("scripts/fn_lengths.py")).args(args);
    let out = cmd.current_dir(repo()).output().expect("python3 runs");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn no_function_outside_tests_is_over_100_lines() {
    let (code, out) = fn_lengths(&["--max", "100"]);
    assert_eq!(code, Some(0), "functions over 100 lines:\n{out}");
    assert!(out.trim().is_empty(), "{out}");
}

#[test]
fn the_scan_catches_a_long_function_and_skips_test_code() {
    let dir = tempfile::tempdir().unwrap();
    let body = |n: usize| "    let _x = 1;\n".repeat(n);
    let src = format!(
        "//! a module\n\
         /// a long one: braces in text do not end it\n\
         pub fn long_one() {{\n    let s = \"}}}}\"; // }}\n    let c = '}}';\n    let r = r#\"}}\"#;\n{}}}\n\
         fn just_100() {{\n{}}}\n\
         impl S {{\n    fn method_too_long(&self) -> u8 {{\n{}        0\n    }}\n}}\n\
         #[test]\nfn a_long_test() {{\n{}}}\n\
         #[cfg(test)]\nmod tests {{\n    fn helper_long() {{\n{}    }}\n}}\n",
        body(100),
        body(98),
        body(120),
        body(200),
        body(200),
    );
    let file = dir.path().join("sample.rs");
    std::fs::write(&file, src).unwrap();
    let (code, out) = fn_lengths(&[file.to_str().unwrap(), "--max", "100"]);
    assert_eq!(code, Some(1), "{out}");
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(names, ["method_too_long", "long_one"], "{out}");
    assert!(out.contains("  105  "), "long_one is 105 lines: {out}");
}
