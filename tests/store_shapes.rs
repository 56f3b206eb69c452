//! Store shapes: each agent family's transcript fixture (written from the
//! tools' real session formats) read through its profile mapping into the
//! message model; malformed lines counted; placeholder ids and dangling
//! calls judged by the history checks; the glob kept inside HOME.

use std::path::{Path, PathBuf};

use chaosrun::observe::{StoreObservation, StoredMessage};
use chaosrun::profile::StoreSpec;
use chaosrun::runner::store::jsonl;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/transcripts")
        .join(name)
}

fn spec(agent: &str) -> StoreSpec {
    let text = std::fs::read_to_string(fixture(&format!("{agent}.store.yaml"))).unwrap();
    let spec: StoreSpec = serde_yaml::from_str(&text).unwrap();
    spec.check_kind().unwrap();
    spec
}

/// (role, content, the id a result answers, call ids).
fn summary(m: &[StoredMessage]) -> Vec<(String, String, String, Vec<String>)> {
    m.iter()
        .map(|m| {
            (
                m.role.clone(),
                m.content.clone(),
                m.tool_call_id.clone().unwrap_or_default(),
                m.tool_call_ids.clone(),
            )
        })
        .collect()
}

fn s(v: &str) -> String {
    v.to_string()
}

/// The conversation every fixture holds: a turn with two parallel calls.
fn expected(a: &str, b: &str) -> Vec<(String, String, String, Vec<String>)> {
    vec![
        (s("user"), s("list the files"), s(""), vec![]),
        (
            s("assistant"),
            s("Running two commands."),
            s(""),
            vec![s(a), s(b)],
        ),
        (s("tool"), s("a.txt\nb.txt"), s(a), vec![]),
        (s("tool"), s("/w"), s(b), vec![]),
        (s("assistant"), s("Two files in /w."), s(""), vec![]),
    ]
}

/// A real Claude Code 2.1.328 transcript (`claude -p "list the files"`
/// against `chaosrun serve --wire anthropic`; paths rewritten to `/w`, long
/// metadata strings trimmed), with a torn copy of its last line appended as a
/// kill mid-write leaves it. Its 25 metadata records (attachments, queue
/// operations, api-request shapes, cost state) match no rule and are no
/// messages; each tool call is its own assistant record, each result its own
/// user record.
#[test]
fn claude_code_blocks_fold_into_one_turn_and_the_torn_line_is_counted() {
    let (m, read) = jsonl::read_files(&spec("claude-code"), &[fixture("claude-code.jsonl")]);
    let mut want = expected("call_049d1c_0_0", "call_049d1c_0_1");
    want[1].1 = String::new(); // The fake provider's tool call carries no text.
    want[3].1 = s("/w");
    assert_eq!(summary(&m.unwrap()), want);
    assert_eq!(read.records, 31, "{read:?}");
    assert_eq!(read.malformed, 1, "{read:?}");
    assert!(
        read.malformed_examples[0].contains("claude-code.jsonl:32"),
        "{read:?}"
    );
}

#[test]
fn codex_response_items_map_to_messages() {
    let (m, read) = jsonl::read_files(&spec("codex"), &[fixture("codex.jsonl")]);
    let m = summary(&m.unwrap());
    assert_eq!(m[0].0, "developer");
    assert!(m[1].1.contains("environment_context"));
    let mut want = expected("call_A", "call_B");
    want[1].1 = String::new(); // Codex keeps no text beside its calls here.
    assert_eq!(m[2..], want[..]);
    assert_eq!(read.malformed, 1);
    assert_eq!(read.records, 13);
}

#[test]
fn gemini_cli_document_keeps_calls_and_results_in_one_record() {
    let (m, read) = jsonl::read_files(&spec("gemini-cli"), &[fixture("gemini-cli.json")]);
    assert_eq!(
        summary(&m.unwrap()),
        expected(
            "run_shell_command-1764410401000-a",
            "run_shell_command-1764410401000-b"
        )
    );
    assert_eq!(read.malformed, 0);
}

#[test]
fn qwen_code_parts_map_to_messages_without_thoughts() {
    let (m, read) = jsonl::read_files(&spec("qwen-code"), &[fixture("qwen-code.jsonl")]);
    assert_eq!(summary(&m.unwrap()), expected("call_A", "call_B"));
    assert_eq!(read.malformed, 0);
}

fn home_with(rel: &str, text: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
    d
}

fn observe(home: &Path, agent: &str) -> StoreObservation {
    let spec = spec(agent);
    let pattern = home.join(spec.jsonl.as_deref().unwrap());
    jsonl::observe(home, &pattern, &spec)
}

#[test]
fn a_dangling_call_in_a_transcript_stays_unanswered() {
    let lines = [
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}}"#,
        r#"{"type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{}","call_id":"call_X"}}"#,
        r#"{"type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"next"}]}}"#,
    ];
    let home = home_with(
        ".codex/sessions/2026/11/29/rollout-1.jsonl",
        &lines.join("\n"),
    );
    let store = observe(home.path(), "codex");
    let msgs = store.messages().expect("read");
    assert_eq!(msgs[1].tool_call_ids, ["call_X"]);
    assert!(msgs.iter().all(|m| m.role != "tool"));
}

#[test]
fn placeholder_ids_stay_placeholders_in_a_transcript() {
    let lines = [
        r#"{"type":"user","isSidechain":false,"message":{"role":"user","content":"go"}}"#,
        r#"{"type":"assistant","isSidechain":false,"message":{"content":[{"type":"tool_use","id":"__fake_id__","name":"Bash","input":{}},{"type":"tool_use","name":"Bash","input":{}}]}}"#,
        r#"{"type":"user","isSidechain":false,"message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"__fake_id__","content":"x"},{"type":"tool_result","tool_use_id":"__fake_id__","content":"y"}]}}"#,
    ];
    let home = home_with(".claude/projects/-w/s.jsonl", &lines.join("\n"));
    let store = observe(home.path(), "claude-code");
    let msgs = store.messages().expect("read");
    assert_eq!(msgs[1].tool_call_ids, ["__fake_id__", ""]);
    assert!(chaosrun::observe::is_placeholder_id(
        &msgs[1].tool_call_ids[1]
    ));
    assert_eq!(msgs[2].tool_call_id.as_deref(), Some("__fake_id__"));
}

#[test]
fn no_transcript_is_missing_and_a_mapping_that_matches_nothing_is_an_error() {
    let home = tempfile::tempdir().unwrap();
    assert!(matches!(
        observe(home.path(), "codex"),
        StoreObservation::Missing { .. }
    ));
    let home = home_with(
        ".codex/sessions/r/rollout-1.jsonl",
        "{\"type\":\"other\"}\n",
    );
    match observe(home.path(), "codex") {
        StoreObservation::Jsonl {
            messages: Err(e), ..
        } => assert!(e.contains("no record of 1"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_symlink_out_of_home_is_not_read_and_long_lines_are_malformed() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.jsonl"), "{\"type\":\"user\"}\n").unwrap();
    let home = home_with(".qwen/projects/w/chats/a.jsonl", "");
    let mut text =
        String::from("{\"type\":\"user\",\"message\":{\"parts\":[{\"text\":\"hi\"}]}}\n");
    text.push_str(&"x".repeat(jsonl::MAX_LINE_BYTES + 1));
    text.push('\n');
    std::fs::write(home.path().join(".qwen/projects/w/chats/a.jsonl"), text).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.jsonl"),
        home.path().join(".qwen/projects/w/chats/b.jsonl"),
    )
    .unwrap();
    match observe(home.path(), "qwen-code") {
        StoreObservation::Jsonl { read, messages, .. } => {
            assert_eq!(read.files.len(), 1, "{read:?}");
            assert_eq!(read.outside.len(), 1, "{read:?}");
            assert_eq!(read.malformed, 1, "{read:?}");
            assert!(read.malformed_examples[0].contains("longer than"));
            assert_eq!(messages.unwrap().len(), 1);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_mapping_is_checked_when_the_profile_loads() {
    let bad: StoreSpec =
        serde_yaml::from_str("jsonl: a/*.jsonl\nrecords: [{when: {type: user}}]\n").unwrap();
    assert!(bad.check_kind().unwrap_err().contains("`role`"));
    let none: StoreSpec = serde_yaml::from_str("jsonl: a/*.jsonl\n").unwrap();
    assert!(none.check_kind().unwrap_err().contains("records"));
    let both: StoreSpec =
        serde_yaml::from_str("jsonl: a/*.jsonl\npath: s.db\nmessages_sql: x\n").unwrap();
    assert!(both.check_kind().is_err());
    assert!(
        serde_yaml::from_str::<StoreSpec>("jsonl: a\nrecords: [{role: user, txt: x}]\n").is_err()
    );
}

// ---- Real runs: the reference agent's store read through the new shapes ----

mod common;

/// The reference agent's profile with its `store:` block replaced.
fn variant(dir: &Path, name: &str, command: &str, store: &str) -> PathBuf {
    let repo = common::repo();
    let text = std::fs::read_to_string(repo.join("examples/reference/agent.yaml")).unwrap();
    let mut out = String::new();
    let mut in_store = false;
    for line in text.lines() {
        if line.starts_with("store:") {
            in_store = true;
            out.push_str(store);
            continue;
        }
        if in_store && line.starts_with("  ") {
            continue;
        }
        in_store = false;
        if line.starts_with("command:") {
            out.push_str(command);
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, out).unwrap();
    path
}

/// The reference agent's messages as item rows: each message, then one
/// `function_call` row per entry of its `tool_calls`.
const ITEMS_STORE: &str = r#"store:
  path: .refagent/state.db
  shape: items
  messages_sql: >-
    SELECT kind, content, call_id FROM (
      SELECT id, -1 AS sub, role AS kind, content, tool_call_id AS call_id
        FROM messages WHERE session_id = :session_id AND active = 1
      UNION ALL
      SELECT m.id, j.key, 'function_call', json_extract(j.value, '$.function.arguments'), json_extract(j.value, '$.id')
        FROM messages m, json_each(m.tool_calls) j
        WHERE m.session_id = :session_id AND m.active = 1 AND m.tool_calls IS NOT NULL
    ) ORDER BY id, sub
"#;

fn store_check(report: &serde_json::Value, id: &str) -> serde_json::Value {
    common::scenario(report, id)["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "store_tool_results")
        .cloned()
        .expect("a store_tool_results check")
}

#[test]
fn a_dangling_call_is_caught_through_the_items_shape_and_a_jsonl_mirror() {
    let dir = tempfile::tempdir().unwrap();
    let repo = common::repo();
    let agent = repo.join("examples/reference/agent.py");
    let mirror = repo.join("tests/fixtures/agents/codex_mirror.py");
    let items = variant(
        dir.path(),
        "items",
        &format!("command: [\"python3\", \"{}\"]", agent.display()),
        ITEMS_STORE,
    );
    let codex = std::fs::read_to_string(fixture("codex.store.yaml")).unwrap();
    let jsonl_store = format!(
        "store:\n{}",
        codex
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    let jsonl = variant(
        dir.path(),
        "jsonl",
        &format!(
            "command: [\"python3\", \"{}\", \"{}\"]",
            mirror.display(),
            agent.display()
        ),
        &jsonl_store,
    );
    let scenario = "kill_during_tool_side_effect";
    let runs: Vec<_> = [
        (&items, false),
        (&items, true),
        (&jsonl, false),
        (&jsonl, true),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (profile, bug))| {
        let json = dir.path().join(format!("r{i}.json"));
        let mark = common::new_mark(&format!("stores{i}"));
        let (j, m, p) = (json.clone(), mark.clone(), profile.clone());
        let h = std::thread::spawn(move || {
            let mut args = vec![
                "process_faults.yaml".to_string(),
                "--only".into(),
                scenario.into(),
                "--agent".into(),
                p.display().to_string(),
                "--json".into(),
                j.display().to_string(),
            ];
            if bug {
                args.push("--agent-arg=--bug=lost_result_on_restart".into());
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            common::chaosrun(&m, &args)
        });
        (profile.clone(), bug, json, mark, h)
    })
    .collect();
    let mut problems = Vec::new();
    for (profile, bug, json, mark, h) in runs {
        let out = h.join().unwrap();
        common::kill_marked(&mark);
        let what = format!("{} bug={bug}", profile.display());
        if !json.exists() {
            problems.push(format!(
                "{what}: no report\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let report = common::read_json(&json);
        let c = store_check(&report, scenario);
        if bug {
            let v = c["violations"].to_string();
            if c["status"] != "fail" || !v.contains("with no result right after it") {
                problems.push(format!(
                    "{what}: the dangling call was not caught: {c}\n{}",
                    String::from_utf8_lossy(&out.stdout)
                ));
            }
        } else if c["status"] != "pass" || out.status.code() != Some(0) {
            problems.push(format!(
                "{what}: the store check did not pass: {c}\n{}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        if profile.ends_with("jsonl.yaml") {
            let integrity = common::scenario(&report, scenario)["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == "integrity_check")
                .cloned()
                .unwrap();
            let why = integrity["reason"].to_string();
            if integrity["status"] != "not_checked" || !why.contains("1 malformed line") {
                problems.push(format!(
                    "{what}: the torn line was not reported: {integrity}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

#[test]
fn the_readme_shows_each_mapping_as_tested() {
    let readme = std::fs::read_to_string(common::repo().join("README.md")).unwrap();
    for agent in ["claude-code", "codex", "gemini-cli", "qwen-code"] {
        let text = std::fs::read_to_string(fixture(&format!("{agent}.store.yaml"))).unwrap();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                readme.contains(&format!("    {line}\n")),
                "README lacks {agent}'s mapping line {line:?}"
            );
        }
    }
}
