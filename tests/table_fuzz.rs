//! Table fuzzing: a seeded generator mutates the rows of `scenarios.yaml`
//! (huge, negative, NaN, infinite and string numbers, wrong types, unknown and
//! deleted keys, deep nesting, bad UTF-8, huge counts). Every mutated table is
//! given to `chaosrun TABLE --list`, and a bounded subset of those that load
//! is run for real with tiny deadlines against the bundled agent. Every case
//! must exit 0, 1 or 2: never a panic (101, "panicked"), never a hang (a
//! per-case timeout kills it and fails the test). The tally is printed.
//!
//! `CHAOSRUN_FUZZ_SEED` replays another seed; the default is fixed.

mod common;

use common::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const CASES: usize = 300;
const REAL_RUNS: usize = 20;
const LIST_TIMEOUT: Duration = Duration::from_secs(20);
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// A step into a YAML value: a mapping key or a sequence index.
#[derive(Clone, Debug)]
enum Step {
    Key(Value),
    Index(usize),
}

fn paths(v: &Value, here: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(here.clone());
    match v {
        Value::Mapping(m) => {
            for (k, x) in m {
                here.push(Step::Key(k.clone()));
                paths(x, here, out);
                here.pop();
            }
        }
        Value::Sequence(s) => {
            for (i, x) in s.iter().enumerate() {
                here.push(Step::Index(i));
                paths(x, here, out);
                here.pop();
            }
        }
        Value::Tagged(t) => paths(&t.value, here, out),
        _ => {}
    }
}

fn at<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for step in path {
        cur = match (step, cur) {
            (Step::Key(k), Value::Mapping(m)) => m.get_mut(k)?,
            (Step::Index(i), Value::Sequence(s)) => s.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn number(text: &str) -> Value {
    serde_yaml::from_str(text).unwrap()
}

/// A hostile replacement value.
fn hostile(rng: &mut StdRng) -> Value {
    let nested = |depth: usize| {
        let mut v = Value::Number(1.into());
        for _ in 0..depth {
            v = Value::Sequence(vec![v]);
        }
        v
    };
    match rng.gen_range(0..18) {
        0 => number("1e30"),
        1 => number("-1"),
        2 => number(".nan"),
        3 => number(".inf"),
        4 => number("-.inf"),
        5 => number("1e300"),
        6 => number("18446744073709551615"),
        7 => number("100000000"),
        8 => number("0"),
        9 => number("0.000001"),
        10 => Value::String("5".into()),
        11 => Value::String("{{nonce}}{{i}}{{nope}}".into()),
        12 => Value::Bool(true),
        13 => Value::Null,
        14 => nested(rng.gen_range(2..200)),
        15 => {
            let mut m = Mapping::new();
            m.insert("kind".into(), "hang".into());
            m.insert("seconds".into(), number("604801"));
            Value::Mapping(m)
        }
        16 => Value::String("x".repeat(rng.gen_range(1..10_000))),
        _ => number("-0.5"),
    }
}

/// One mutation of `scenario` (a row).
fn mutate(row: &mut Value, rng: &mut StdRng) {
    let mut all = Vec::new();
    paths(row, &mut Vec::new(), &mut all);
    let path = all[rng.gen_range(0..all.len())].clone();
    match rng.gen_range(0..10) {
        // Delete the key (or element) at the path.
        0 | 1 if !path.is_empty() => {
            let (last, parent) = path.split_last().unwrap();
            match (last, at(row, parent)) {
                (Step::Key(k), Some(Value::Mapping(m))) => {
                    m.remove(k);
                }
                (Step::Index(i), Some(Value::Sequence(s))) if *i < s.len() => {
                    s.remove(*i);
                }
                _ => {}
            }
        }
        // An unknown key beside it.
        2 => {
            if let Some(Value::Mapping(m)) = at(row, &path) {
                m.insert("unknown_key".into(), hostile(rng));
            }
        }
        // A huge count where counts live.
        3 => {
            if let Some(Value::Mapping(m)) = at(row, &path) {
                let key = ["repeat", "turns", "min_faults", "count", "max", "exactly"]
                    [rng.gen_range(0..6)];
                m.insert(key.into(), number("4294967296000"));
            }
        }
        // Replace the value.
        _ => {
            if let Some(v) = at(row, &path) {
                *v = hostile(rng);
            }
        }
    }
}

/// A mutated table's bytes: 1 to 3 rows of the seed table, each mutated 0 to
/// 3 times; sometimes the text itself is damaged (bad UTF-8, deep nesting).
fn case(seed_table: &Value, rng: &mut StdRng) -> Vec<u8> {
    let rows = seed_table["scenarios"].as_sequence().unwrap();
    let mut table = seed_table.clone();
    let mut picked = Vec::new();
    for _ in 0..rng.gen_range(1..=3) {
        let mut row = rows[rng.gen_range(0..rows.len())].clone();
        for _ in 0..rng.gen_range(0..=3) {
            mutate(&mut row, rng);
        }
        if let Value::Mapping(m) = &mut row {
            m.insert("id".into(), format!("case_{}", picked.len()).into());
        }
        picked.push(row);
    }
    table["scenarios"] = Value::Sequence(picked);
    if rng.gen_ratio(1, 5) {
        let mut defaults = table["defaults"].clone();
        mutate(&mut defaults, rng);
        table["defaults"] = defaults;
    }
    let mut text = serde_yaml::to_string(&table).unwrap().into_bytes();
    match rng.gen_range(0..20) {
        0 => {
            let i = rng.gen_range(0..text.len());
            text.splice(i..i, [0xff, 0xfe, 0xc3]);
        }
        1 => {
            let depth = rng.gen_range(100..5_000);
            text.extend(b"extra: ");
            text.extend(std::iter::repeat_n(b'[', depth));
            text.extend(std::iter::repeat_n(b']', depth));
            text.push(b'\n');
        }
        2 => text.truncate(rng.gen_range(0..text.len())),
        _ => {}
    }
    text
}

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Exit(i32),
    Panicked(i32),
    Signal,
    Hung,
}

fn finish(mut child: Child, limit: Duration) -> (Outcome, String) {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait().unwrap() {
            Some(status) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                let outcome = match status.code() {
                    Some(c) if c == 101 || err.contains("panicked") => Outcome::Panicked(c),
                    Some(c) => Outcome::Exit(c),
                    None => Outcome::Signal,
                };
                return (outcome, err);
            }
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return (Outcome::Hung, String::new());
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn spawn(mark: &str, args: &[&str]) -> Child {
    // stderr is read after exit: keep it small (--no-progress, errors only)
    // by sending stdout away; chaosrun's errors are a few lines.
    command(mark, args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chaosrun starts")
}

#[test]
fn mutated_tables_never_panic_or_hang() {
    let seed: u64 = std::env::var("CHAOSRUN_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0007_ab1e_f022);
    let text = std::fs::read_to_string(repo().join("scenarios.yaml")).unwrap();
    let seed_table: Value = serde_yaml::from_str(&text).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mark = new_mark("fuzz");
    let tables: Vec<PathBuf> = (0..CASES)
        .map(|i| {
            let p = dir.path().join(format!("case{i:03}.yaml"));
            std::fs::write(&p, case(&seed_table, &mut rng)).unwrap();
            p
        })
        .collect();

    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut loaded = Vec::new();
    // Two at a time (the machine has two cores).
    for pair in tables.chunks(2) {
        let children: Vec<(&PathBuf, Child)> = pair
            .iter()
            .map(|p| (p, spawn(&mark, &[p.to_str().unwrap(), "--list"])))
            .collect();
        for (p, child) in children {
            let (outcome, err) = finish(child, LIST_TIMEOUT);
            *tally.entry(format!("--list {outcome:?}")).or_default() += 1;
            match outcome {
                Outcome::Exit(0) => loaded.push(p.clone()),
                Outcome::Exit(1 | 2) => {}
                other => bad.push(format!("{}: {other:?}\n{err}", p.display())),
            }
        }
    }

    for pair in loaded.iter().take(REAL_RUNS).collect::<Vec<_>>().chunks(2) {
        let children: Vec<(&&PathBuf, Child)> = pair
            .iter()
            .map(|p| {
                let args = [
                    p.to_str().unwrap(),
                    "--deadline-scale",
                    "0.02",
                    "--no-progress",
                ];
                (p, spawn(&mark, &args))
            })
            .collect();
        for (p, child) in children {
            let (outcome, err) = finish(child, RUN_TIMEOUT);
            *tally.entry(format!("run {outcome:?}")).or_default() += 1;
            if !matches!(outcome, Outcome::Exit(0..=2)) {
                bad.push(format!("run {}: {outcome:?}\n{err}", p.display()));
            }
        }
    }
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);

    eprintln!(
        "table fuzz, seed {seed}: {CASES} cases, {} loaded",
        loaded.len()
    );
    for (k, n) in &tally {
        eprintln!("  {k:<24} {n}");
    }
    if !bad.is_empty() {
        // Keep the failing tables for a look.
        let keep = repo().join("target/test-artifacts/table-fuzz");
        let _ = std::fs::create_dir_all(&keep);
        for b in &bad {
            if let Some(p) = b.split(':').next().map(|s| s.trim_start_matches("run ")) {
                let p = Path::new(p);
                if let Some(name) = p.file_name() {
                    let _ = std::fs::copy(p, keep.join(name));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} bad cases:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(
        loaded.len() >= REAL_RUNS,
        "the generator should leave some tables valid: {tally:?}"
    );
    assert!(left.is_empty(), "left behind: {left:?}");
}
