//! Shards, merge, repeats and seeds, through the real binary: shards 1/3, 2/3
//! and 3/3 cover every scenario exactly once, their merge gives the unsharded
//! verdicts and exit code, `--repeat` reports a pass rate, and `--seed` replays
//! the same nonces.

mod common;

use common::*;
use std::collections::BTreeMap;

/// Fast scenarios; with the retry_storm bug provider_500_forever fails.
const FAST: &[&str] = &[
    "provider_500_forever",
    "provider_400_forever",
    "tool_args_garbage",
    "tool_name_unknown",
    "parallel_8_terminal_calls",
    "tool_loop_hits_turn_budget",
];

fn ids(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn shards_partition_the_full_table() {
    let mark = new_mark("shardlist");
    let all = ids(&chaosrun(&mark, &["scenarios.yaml", "--list"]));
    // The table's own row count, read from the file (it grows with the table).
    let table = std::fs::read_to_string("scenarios.yaml").unwrap();
    let rows = table.lines().filter(|l| l.starts_with("  - id:")).count();
    assert!(rows >= 32, "scenarios.yaml has {rows} rows");
    assert_eq!(all.len(), rows);
    let mut union = Vec::new();
    for k in 1..=3 {
        let part = ids(&chaosrun(
            &mark,
            &["scenarios.yaml", "--list", "--shard", &format!("{k}/3")],
        ));
        assert!(!part.is_empty());
        union.extend(part);
    }
    union.sort();
    let mut all_sorted = all.clone();
    all_sorted.sort();
    assert_eq!(union, all_sorted, "each scenario in exactly one shard");
    let bad = chaosrun(&mark, &["scenarios.yaml", "--list", "--shard", "4/3"]);
    assert_eq!(bad.status.code(), Some(2));
}

fn verdicts(report: &serde_json::Value) -> BTreeMap<String, bool> {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["passed"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn merged_shards_equal_the_unsharded_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut base: Vec<String> = vec![
        "scenarios.yaml".into(),
        "--agent-arg=--bug=retry_storm".into(),
    ];
    for id in FAST {
        base.push("--only".into());
        base.push(id.to_string());
    }
    let run = |extra: Vec<String>, json: &std::path::Path| {
        let mark = new_mark("shard");
        let mut args = base.clone();
        args.extend(extra);
        args.push("--json".into());
        args.push(json.display().to_string());
        std::thread::spawn(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            chaosrun(&mark, &refs)
        })
    };
    let whole = dir.path().join("whole.json");
    let shard_paths: Vec<_> = (1..=3)
        .map(|k| dir.path().join(format!("s{k}.json")))
        .collect();
    let mut handles = vec![run(vec![], &whole)];
    for (k, p) in shard_paths.iter().enumerate() {
        handles.push(run(vec!["--shard".into(), format!("{}/3", k + 1)], p));
    }
    for h in handles {
        let out = h.join().unwrap();
        assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    }
    let merged_path = dir.path().join("merged.json");
    let mark = new_mark("merge");
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend(shard_paths.iter().map(|p| p.display().to_string()));
    args.extend(["--json".into(), merged_path.display().to_string()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let merged_out = chaosrun(&mark, &refs);
    let stdout = String::from_utf8_lossy(&merged_out.stdout);
    assert_eq!(
        merged_out.status.code(),
        Some(1),
        "the storm fails: {stdout}"
    );
    assert!(stdout.contains("5 passed, 1 failed"), "{stdout}");
    assert!(
        stdout.contains("the faulted turn made 61 provider calls"),
        "{stdout}"
    );
    let whole = read_json(&whole);
    let merged = read_json(&merged_path);
    assert_eq!(verdicts(&merged), verdicts(&whole));
    assert_eq!(verdicts(&whole).len(), FAST.len());
    assert_eq!(whole["failed"], 1);
    // Merging a shard twice is refused.
    let twice = chaosrun(&mark, &["merge", refs[1], refs[1]]);
    assert_eq!(twice.status.code(), Some(2));
    // Each shard records K/N and the whole selection; a set missing a shard
    // is refused, naming it.
    let s2 = read_json(&shard_paths[1]);
    assert_eq!(s2["shard"], serde_json::json!({"k": 2, "n": 3}));
    assert_eq!(s2["selected"], serde_json::json!(FAST));
    let missing = chaosrun(&mark, &["merge", refs[1], refs[3]]);
    assert_eq!(missing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("shard 2/3 missing"), "{stderr}");
    // A shard whose report lost its scenarios is refused too.
    let mut emptied = read_json(&shard_paths[2]);
    emptied["scenarios"] = serde_json::json!([]);
    let emptied_path = dir.path().join("emptied.json");
    std::fs::write(&emptied_path, emptied.to_string()).unwrap();
    let e = emptied_path.display().to_string();
    let lost = chaosrun(&mark, &["merge", refs[1], refs[2], &e]);
    assert_eq!(lost.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&lost.stderr).contains("has no result for"),
        "{}",
        String::from_utf8_lossy(&lost.stderr)
    );
    // A shard whose failed check carries a status merge does not know
    // (`FAIL`, `error`, null, missing) is refused with exit 2, naming the
    // file and the scenario: it never merges to a pass.
    let storm = shard_paths
        .iter()
        .position(|p| read_json(p)["failed"] == 1)
        .expect("one shard holds the failed storm");
    let doc = read_json(&shard_paths[storm]);
    let (si, s) = doc["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .find(|(_, s)| s["verdict"] == "fail")
        .unwrap();
    let id = s["id"].as_str().unwrap().to_string();
    let ci = s["checks"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c["status"] == "fail")
        .unwrap();
    for (n, status) in [
        Some("FAIL".into()),
        Some("error".into()),
        Some(serde_json::Value::Null),
        None,
    ]
    .into_iter()
    .enumerate()
    {
        let mut bad = doc.clone();
        let check = &mut bad["scenarios"][si]["checks"][ci];
        match status {
            Some(v) => check["status"] = v,
            None => {
                check.as_object_mut().unwrap().remove("status");
            }
        }
        let bad_path = dir.path().join(format!("bad{n}.json"));
        std::fs::write(&bad_path, bad.to_string()).unwrap();
        let mut args: Vec<String> = vec!["merge".into()];
        for (k, p) in shard_paths.iter().enumerate() {
            args.push(
                if k == storm {
                    bad_path.clone()
                } else {
                    p.clone()
                }
                .display()
                .to_string(),
            );
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = chaosrun(&mark, &refs);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("{}: scenario {id} (run 1)", bad_path.display())),
            "{stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("passed,"),
            "no summary"
        );
    }
}

#[test]
fn repeat_reports_a_pass_rate_and_seed_replays_nonces() {
    let dir = tempfile::tempdir().unwrap();
    let mark = new_mark("repeat");
    let json = dir.path().join("r.json");
    let out = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--repeat",
            "3",
            "--seed",
            "42",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("seed 42"), "{stdout}");
    assert!(stdout.contains("tool_args_garbage [3/3]"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("tool_args_garbage") && l.trim_end().ends_with("3/3")),
        "{stdout}"
    );
    let report = read_json(&json);
    assert_eq!(report["seed"], 42);
    assert_eq!(report["scenarios"].as_array().unwrap().len(), 3);

    // The same seed gives the same nonces (they appear in the session ids the
    // agent persisted, kept in the artifacts).
    let nonce_of = |tag: &str| {
        let art = dir.path().join(tag);
        let out = chaosrun(
            &new_mark(tag),
            &[
                "scenarios.yaml",
                "--only",
                "tool_args_garbage",
                "--seed",
                "42",
                "--artifacts",
                art.to_str().unwrap(),
                "--keep-all",
            ],
        );
        assert_eq!(out.status.code(), Some(0));
        let obs = read_json(&art.join("tool_args_garbage/observation.json"));
        obs["nonce"].as_str().unwrap().to_string()
    };
    assert_eq!(nonce_of("one"), nonce_of("two"));
}
