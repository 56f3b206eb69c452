//! `chaosrun judge` over saved folders tampered with after their run. Every
//! folder is judged or named as unreadable, and any unreadable one makes
//! the exit code 2 while the others are still judged; an observation that
//! lost a section its run wrote, or one its row needs, is refused (never a
//! pass). Each test copies goldens (tests/golden) into a fresh folder.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn golden_dir() -> PathBuf {
    repo().join("tests/golden")
}

fn judge(args: &[&str]) -> Output {
    Command::new(bin())
        .arg("judge")
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

/// A copy of golden `name` as `to/as_name`.
fn copy_case(name: &str, to: &Path, as_name: &str) -> PathBuf {
    let dest = to.join(as_name);
    std::fs::create_dir_all(&dest).unwrap();
    for f in ["observation.json", "row.json", "checks.json"] {
        std::fs::copy(golden_dir().join(name).join(f), dest.join(f)).unwrap();
    }
    dest
}

/// The goldens recorded with a reference-agent bug: each fails.
fn failing_goldens() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(golden_dir())
        .unwrap()
        .flatten()
        .filter(|e| !read_json(&e.path().join("golden.json"))["bug"].is_null())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    assert!(out.len() >= 20, "only {} failing goldens", out.len());
    out
}

/// `judge --json DIR`: exit code, the document, stderr.
fn judge_json(dir: &Path) -> (Option<i32>, Value, String) {
    let out = judge(&[dir.to_str().unwrap(), "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON document ({e}); stderr: {stderr}"));
    (out.status.code(), doc, stderr)
}

/// The `unreadable` entry of `doc` for `folder`, its error.
fn unreadable_error<'a>(doc: &'a Value, folder: &Path) -> Option<&'a str> {
    doc["unreadable"]
        .as_array()?
        .iter()
        .find(|u| u["folder"].as_str() == folder.to_str())
        .and_then(|u| u["error"].as_str())
}

/// (id, verdict) of every judged scenario in `doc`.
fn verdicts(doc: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = doc["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["artifacts"].as_str().unwrap().to_string(),
                s["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Replace `dir/observation.json` by `how` (`elsewhere`: a folder outside
/// the judged one).
fn replace_observation(dir: &Path, how: &str, elsewhere: &Path) {
    let obs = dir.join("observation.json");
    let copy = elsewhere.join("observation.json");
    std::fs::copy(&obs, &copy).unwrap();
    std::fs::remove_file(&obs).unwrap();
    match how {
        "directory" => std::fs::create_dir(&obs).unwrap(),
        "fifo" => {
            nix::unistd::mkfifo(&obs, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        }
        // The same observation, intact, but behind a link.
        "symlink" => std::os::unix::fs::symlink(&copy, &obs).unwrap(),
        "dangling" => std::os::unix::fs::symlink(elsewhere.join("gone"), &obs).unwrap(),
        "deleted" => {}
        _ => unreachable!(),
    }
}

#[test]
fn a_folder_whose_observation_is_not_a_file_is_named_and_the_others_judged() {
    let failing = "tool_background_swarm--leaked_background";
    for (how, says) in [
        ("directory", "observation.json is a directory"),
        ("fifo", "observation.json is a fifo"),
        ("symlink", "observation.json is a symbolic link"),
        ("dangling", "observation.json is a symbolic link"),
        ("deleted", "no observation.json"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (set, elsewhere) = (tmp.path().join("set"), tmp.path().join("elsewhere"));
        std::fs::create_dir_all(&elsewhere).unwrap();
        let a = copy_case("provider_500_forever", &set, "a");
        let b = copy_case("provider_400_forever", &set, "b");
        let bad = copy_case(failing, &set, "c");
        replace_observation(&bad, how, &elsewhere);

        let (code, doc, stderr) = judge_json(&set);
        assert_eq!(code, Some(2), "{how}: {doc}\n{stderr}");
        let judged = verdicts(&doc);
        assert_eq!(
            judged,
            [
                (a.to_str().unwrap().to_string(), "pass".to_string()),
                (b.to_str().unwrap().to_string(), "pass".to_string())
            ],
            "{how}: the readable folders are still judged"
        );
        let err = unreadable_error(&doc, &bad).unwrap_or_else(|| panic!("{how}: {doc}"));
        assert!(err.contains(says), "{how}: {err}");
        assert!(stderr.starts_with("chaosrun: error: 1 saved folder(s) could not be read"));
        assert!(stderr.contains(bad.to_str().unwrap()), "{how}: {stderr}");

        let out = judge(&[set.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(2), "{how}: {text}");
        assert!(text.contains("2 passed, 0 failed"), "{how}: {text}");
        assert!(
            text.contains("could not be read, so were not judged"),
            "{how}: {text}"
        );
        assert!(text.contains(says), "{how}: {text}");
    }
}

#[test]
fn a_linked_scenario_folder_is_named_not_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    copy_case("provider_500_forever", &set, "a");
    let real = copy_case(
        "tool_background_swarm--leaked_background",
        tmp.path(),
        "real",
    );
    std::os::unix::fs::symlink(&real, set.join("b")).unwrap();
    let (code, doc, stderr) = judge_json(&set);
    assert_eq!(code, Some(2), "{doc}\n{stderr}");
    assert_eq!(verdicts(&doc).len(), 1, "{doc}");
    let err = unreadable_error(&doc, &set.join("b")).unwrap_or_else(|| panic!("{doc}"));
    assert!(err.contains("is a symbolic link"), "{err}");
}

/// Write `obs` as `dir/observation.json`.
fn write_obs(dir: &Path, obs: &Value) {
    std::fs::write(dir.join("observation.json"), obs.to_string()).unwrap();
}

/// A tampered folder and what its unreadable error must say.
type Variant = (PathBuf, String);

/// Golden `case` copied into `set` (as `CASE--TAG`), its observation
/// changed by `edit`.
fn variant(set: &Path, case: &str, tag: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let dir = copy_case(case, set, &format!("{case}--{tag}"));
    let mut obs = read_json(&dir.join("observation.json"));
    edit(&mut obs);
    write_obs(&dir, &obs);
    dir
}

/// Judge `set` (a passing golden among `variants`): exit 2, the passing one
/// judged PASS, each variant named as unreadable with what it must say.
fn assert_all_refused(set: &Path, variants: &[Variant]) {
    let pass = copy_case("provider_500_forever", set, "0-passing");
    let (code, doc, stderr) = judge_json(set);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        verdicts(&doc),
        [(pass.to_str().unwrap().to_string(), "pass".to_string())],
        "only the untouched golden is judged"
    );
    let mut problems = Vec::new();
    for (dir, says) in variants {
        match unreadable_error(&doc, dir) {
            Some(err) if err.contains(says.as_str()) => {}
            other => problems.push(format!("{}: {other:?}, not {says:?}", dir.display())),
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn a_failing_observation_missing_a_section_its_row_needs_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    let mut variants = Vec::new();
    let mut mcp_cases = 0;
    for case in failing_goldens() {
        let row = read_json(&golden_dir().join(&case).join("row.json"));
        if !row["row"]["mcp"].is_null() {
            mcp_cases += 1;
            let needs = "lacks `mcp`, which the row needs (the row's `mcp:` section)";
            let dir = variant(&set, &case, "no-mcp", |o| {
                o.as_object_mut().unwrap().remove("mcp");
            });
            variants.push((dir, needs.to_string()));
            // The record and its sections both gone: the row still needs it.
            let dir = variant(&set, &case, "no-mcp-unlisted", |o| {
                o.as_object_mut().unwrap().remove("mcp");
                let listed = o["sections"].as_array_mut().unwrap();
                listed.retain(|s| !s.as_str().unwrap().starts_with("mcp"));
            });
            variants.push((dir, needs.to_string()));
            let dir = variant(&set, &case, "mcp-emptied", |o| {
                o["mcp"]["exchanges"] = Value::Array(vec![]);
            });
            variants.push((dir, "the run wrote `mcp.exchanges` but".to_string()));
        }
        let dir = variant(&set, &case, "no-events", |o| {
            o["events"] = Value::Array(vec![]);
        });
        variants.push((dir, "lacks `events`, which the row needs".to_string()));
    }
    assert!(mcp_cases >= 6, "only {mcp_cases} failing goldens with MCP");
    assert_all_refused(&set, &variants);
}

#[test]
fn a_failing_observation_with_a_section_emptied_or_added_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    let mut variants = Vec::new();
    let mut survivor_cases = 0;
    for case in failing_goldens() {
        let obs = read_json(&golden_dir().join(&case).join("observation.json"));
        if obs["survivors"].as_array().is_some_and(|s| !s.is_empty()) {
            survivor_cases += 1;
            let dir = variant(&set, &case, "no-survivors", |o| {
                o["survivors"] = Value::Array(vec![]);
            });
            variants.push((dir, "the run wrote `survivors` but".to_string()));
        }
        if obs["journal"].as_array().is_some_and(Vec::is_empty) {
            let dir = variant(&set, &case, "journal-added", |o| {
                o["journal"] = serde_json::json!(["tool 1"]);
            });
            variants.push((
                dir,
                "holds `journal` that the run did not write".to_string(),
            ));
        }
        let dir = variant(&set, &case, "unversioned", |o| {
            let o = o.as_object_mut().unwrap();
            o.remove("schema_version");
            o.remove("sections");
        });
        variants.push((dir, "no `schema_version`".to_string()));
    }
    assert!(survivor_cases >= 2, "only {survivor_cases} with survivors");
    assert_all_refused(&set, &variants);
}

/// One hand edit: the key at `path` deleted, or (`empty`) its list emptied.
struct Edit {
    path: Vec<String>,
    empty: bool,
}

impl Edit {
    fn tag(&self) -> String {
        format!(
            "{}-{}",
            if self.empty { "empty" } else { "del" },
            self.path.join(".")
        )
    }

    fn apply(&self, obs: &mut Value) {
        let (last, parents) = self.path.split_last().unwrap();
        let mut at = obs;
        for p in parents {
            at = &mut at[p.as_str()];
        }
        match self.empty {
            true => at[last.as_str()] = Value::Array(vec![]),
            false => {
                at.as_object_mut().unwrap().remove(last);
            }
        }
    }
}

/// Each key of the observation and of its records, deleted, and each
/// non-empty list emptied: the ways a hand edit drops what a check reads.
fn edits(obs: &Value) -> Vec<Edit> {
    let mut out = Vec::new();
    let mut add = |path: Vec<String>, v: &Value| {
        if v.as_array().is_some_and(|a| !a.is_empty()) {
            out.push(Edit {
                path: path.clone(),
                empty: true,
            });
        }
        out.push(Edit { path, empty: false });
    };
    for (k, v) in obs.as_object().unwrap() {
        add(vec![k.clone()], v);
        for (k2, v2) in v.as_object().into_iter().flatten() {
            add(vec![k.clone(), k2.clone()], v2);
        }
    }
    out
}

/// Before sections were recorded, 13 such single edits turned a failing
/// golden into a pass (deleting `mcp` or emptying `mcp.exchanges` on four
/// MCP rows, emptying `survivors` on two, deleting `store_at_kill`,
/// `recording.subagent_calls` or `proc_samples`, emptying
/// `recording.issued_tool_calls`). Now each such folder is refused or
/// judged a failure still.
#[test]
fn no_deleted_or_emptied_field_turns_a_failing_golden_into_a_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    let mut made = 0;
    for case in failing_goldens() {
        let obs = read_json(&golden_dir().join(&case).join("observation.json"));
        for edit in edits(&obs) {
            let dir = set.join(format!("{case}--{}", edit.tag()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::copy(
                golden_dir().join(&case).join("row.json"),
                dir.join("row.json"),
            )
            .unwrap();
            let mut o = obs.clone();
            edit.apply(&mut o);
            write_obs(&dir, &o);
            made += 1;
        }
    }
    assert!(made > 1000, "only {made} edits");
    let (code, doc, stderr) = judge_json(&set);
    assert_eq!(code, Some(2), "{stderr}");
    let judged = verdicts(&doc);
    let refused = doc["unreadable"].as_array().unwrap().len();
    assert_eq!(judged.len() + refused, made, "every folder judged or named");
    let passed: Vec<&String> = judged
        .iter()
        .filter(|(_, v)| v != "fail")
        .map(|(dir, _)| dir)
        .collect();
    assert!(
        passed.is_empty(),
        "edits judged other than a failure: {passed:?}"
    );
    for flip in [
        "interrupt_mcp_call--mcp_no_cancel--del-mcp",
        "interrupt_mcp_call--mcp_no_cancel--empty-mcp.exchanges",
        "mcp_call_hangs--mcp_timeout_no_cancel--del-mcp",
        "mcp_call_hangs--mcp_timeout_no_cancel--empty-mcp.exchanges",
        "mcp_http_unauthorized--mcp_retry_unauthorized--del-mcp",
        "mcp_tool_schema_changes--mcp_stale_schema--del-mcp",
        "mcp_stdio_server_outlives_agent--mcp_leak_server--empty-survivors",
        "tool_background_swarm--leaked_background--empty-survivors",
        "kill_at_store_write--resume_rolls_back_turn--del-store_at_kill",
        "interrupt_subagent--orphan_subagent--del-recording.subagent_calls",
        "tool_output_memory--memory_leak--del-proc_samples",
        "tool_output_memory--memory_leak--empty-proc_samples",
        "parallel_8_terminal_calls--lost_parallel_result--empty-recording.issued_tool_calls",
    ] {
        assert!(
            unreadable_error(&doc, &set.join(flip)).is_some(),
            "{flip} was judged"
        );
    }
}

/// A recorded process fault whose action is no action (`kil`, `oom!`) is
/// refused by name, never judged as a kill that never fired. (Before the
/// actions were typed, `kil` was read as some other fault and the row
/// judged FAIL, exit 1.)
#[test]
fn a_recorded_process_fault_with_an_unknown_action_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let set = tmp.path().join("set");
    let rename = |obs: &mut Value, to: &str| {
        let events = obs["events"].as_array_mut().unwrap();
        let fault = events
            .iter_mut()
            .find(|e| e["ev"] == "process_fault")
            .expect("the golden records its kill");
        fault["action"] = Value::from(to);
    };
    let variants = vec![
        (
            variant(&set, "kill_mid_stream", "kil", |o| rename(o, "kil")),
            "unknown process fault `kil`, expected one of kill, stop, suspend, oom, hangup, cont"
                .to_string(),
        ),
        (
            variant(&set, "kill_mid_stream", "upper", |o| rename(o, "KILL")),
            "unknown process fault `KILL`".to_string(),
        ),
    ];
    assert_all_refused(&set, &variants);
}
