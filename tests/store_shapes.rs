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

#[test]
fn claude_code_blocks_fold_into_one_turn_and_the_torn_line_is_counted() {
    let (m, read) = jsonl::read_files(&spec("claude-code"), &[fixture("claude-code.jsonl")]);
    assert_eq!(summary(&m.unwrap()), expected("toolu_01A", "toolu_01B"));
    assert_eq!(read.malformed, 1, "{read:?}");
    assert!(
        read.malformed_examples[0].contains("claude-code.jsonl:12"),
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
fn a_dangling_call_in_a_transcript_fails_the_history_check() {
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
