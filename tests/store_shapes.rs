//! Store shapes: each agent family's transcript fixture (written from the
//! tools' real session formats) read through its profile mapping into the
//! message model; malformed lines counted; placeholder ids and dangling
//! calls judged by the history checks; the glob kept inside HOME.

use std::path::{Path, PathBuf};

use chaosrun::message::Message;
use chaosrun::observe::StoreObservation;
use chaosrun::profile::StoreSpec;
use chaosrun::store::jsonl;

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
fn summary(m: &[Message]) -> Vec<(String, String, String, Vec<String>)> {
    m.iter()
        .map(|m| {
            (
                m.role.clone(),
                m.content.clone(),
                m.tool_call_id.clone().unwrap_or_default(),
                m.call_ids().iter().map(|s| s.to_string()).collect(),
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

/// Claude Code's own nudges after a reply with no valid tool call are user
/// records marked `isMeta` (two here, as a tool-calls finish with no calls
/// leaves them): not the user's turns, so the store holds one user turn (the
/// model's records between them fold into one turn).
#[test]
fn claude_code_meta_nudges_are_not_user_turns() {
    let (m, read) = jsonl::read_files(&spec("claude-code"), &[fixture("claude-code-meta.jsonl")]);
    let roles: Vec<String> = summary(&m.unwrap()).into_iter().map(|r| r.0).collect();
    // Without the isMeta rule: user, assistant, user, assistant, user.
    assert_eq!(roles, ["user", "assistant"], "{read:?}");
    assert_eq!((read.records, read.malformed), (5, 0), "{read:?}");
}

#[test]
fn codex_response_items_map_to_messages() {
    // A real Codex CLI 0.169.0 rollout (trimmed): `codex exec "list the
    // files"` against chaosrun's provider answering two parallel
    // `exec_command` calls, then text; a torn line appended.
    let (m, read) = jsonl::read_files(&spec("codex"), &[fixture("codex.jsonl")]);
    let m = summary(&m.unwrap());
    assert_eq!(m[0].0, "developer");
    assert!(m[1].1.contains("environment_context"), "{m:?}");
    let (a, b) = (s("call_30b12c_0_0"), s("call_30b12c_0_1"));
    assert_eq!(m[2], (s("user"), s("list the files"), s(""), vec![]));
    // Codex keeps no text beside its calls here.
    assert_eq!(
        m[3],
        (s("assistant"), s(""), s(""), vec![a.clone(), b.clone()])
    );
    assert_eq!((m[4].0.as_str(), m[4].2.as_str()), ("tool", a.as_str()));
    assert!(m[4].1.ends_with("Output:\na.txt\nb.txt\n"), "{:?}", m[4].1);
    assert_eq!((m[5].0.as_str(), m[5].2.as_str()), ("tool", b.as_str()));
    assert!(m[5].1.ends_with("Output:\n/w\n"), "{:?}", m[5].1);
    assert_eq!(
        m[6..],
        [(
            s("assistant"),
            s("Two files in the workdir."),
            s(""),
            vec![]
        )]
    );
    assert_eq!(read.malformed, 1);
    assert_eq!(read.records, 22);
}

/// A real Gemini CLI 0.61.0 transcript (a chaosrun run of
/// parallel_8_terminal_calls, trimmed to two of its eight calls): the header
/// and `$set` lines are not messages, the `gemini` record written twice (once
/// without, once with its calls) folds into one turn, and the `<tool>__`
/// prefix is taken off the stored call ids.
#[test]
fn gemini_cli_jsonl_records_map_to_the_wire_ids() {
    let (m, read) = jsonl::read_files(&spec("gemini-cli"), &[fixture("gemini-cli.jsonl")]);
    let m = summary(&m.unwrap());
    let (a, b) = (s("call_842492_0_0"), s("call_842492_0_1"));
    let prompt =
        "Chaos scenario parallel_8_terminal_calls: please carry out the task for session 247e5f86.";
    assert_eq!(m[0], (s("user"), s(prompt), s(""), vec![]));
    assert_eq!(
        m[1],
        (s("assistant"), s(""), s(""), vec![a.clone(), b.clone()])
    );
    assert_eq!((m[2].0.as_str(), &m[2].2), ("tool", &a));
    assert!(m[2].1.contains("TOK0-247e5f86"), "{:?}", m[2]);
    assert_eq!((m[3].0.as_str(), &m[3].2), ("tool", &b));
    assert!(m[3].1.contains("TOK1-247e5f86"), "{:?}", m[3]);
    assert_eq!(
        m[4],
        (s("assistant"), s("tools settled 247e5f86"), s(""), vec![])
    );
    assert_eq!(
        m[5],
        (
            s("user"),
            s("Are you still there? Reply with [[probe:247e5f86]]"),
            s(""),
            vec![]
        )
    );
    assert_eq!(m[6], (s("assistant"), s("alive 247e5f86"), s(""), vec![]));
    assert_eq!(m.len(), 7, "{m:?}");
    assert_eq!(read.malformed, 0);
}

/// A transcript that is one JSON document (`document: messages`), in the
/// shape of Gemini CLI's `.json` chats (written by hand after the JSONL
/// fixture's records): the session header around the list is no record, and
/// the results each call carries under `result` answer it.
#[test]
fn gemini_cli_one_document_transcript_maps_to_messages() {
    let spec = spec("gemini-cli-json");
    let (m, read) = jsonl::read_files(&spec, &[fixture("gemini-cli.json")]);
    assert_eq!(summary(&m.unwrap()), expected("call_A", "call_B"));
    assert_eq!((read.records, read.malformed), (3, 0), "{read:?}");
    // Read line by line instead (no `document:`), the same file is no
    // transcript: its lines are not JSON records.
    let lines = StoreSpec {
        document: None,
        ..spec
    };
    let (_, read) = jsonl::read_files(&lines, &[fixture("gemini-cli.json")]);
    assert_eq!(read.records, 0, "{read:?}");
    assert!(read.malformed > 0, "{read:?}");
}

#[test]
fn qwen_code_parts_map_to_messages_without_thoughts() {
    let (m, read) = jsonl::read_files(&spec("qwen-code"), &[fixture("qwen-code.jsonl")]);
    assert_eq!(summary(&m.unwrap()), expected("call_A", "call_B"));
    assert_eq!(read.malformed, 0);
}

/// A real pydantic-ai 2.62 transcript (examples/pydantic-ai/agent.py under
/// parallel_8_terminal_calls, trimmed to two of its eight calls): one
/// serialized `ModelMessage` per line, the calls' results in one request.
#[test]
fn pydantic_ai_messages_map_parts_to_turns() {
    let (m, read) = jsonl::read_files(&spec("pydantic-ai"), &[fixture("pydantic-ai.jsonl")]);
    let (a, b) = ("call_fe2219_0_0", "call_fe2219_0_1");
    assert_eq!(
        summary(&m.unwrap()),
        vec![
            (
                s("user"),
                s("Chaos scenario parallel_8_terminal_calls: please carry out the task for session f9681a64."),
                s(""),
                vec![]
            ),
            (s("assistant"), s(""), s(""), vec![s(a), s(b)]),
            (s("tool"), s("exit code 0\nTOK0-f9681a64\n"), s(a), vec![]),
            (s("tool"), s("exit code 0\nTOK1-f9681a64\n"), s(b), vec![]),
            (s("assistant"), s("tools settled f9681a64"), s(""), vec![]),
            (
                s("user"),
                s("Are you still there? Reply with [[probe:f9681a64]]"),
                s(""),
                vec![]
            ),
            (s("assistant"), s("alive f9681a64"), s(""), vec![]),
        ]
    );
    assert_eq!((read.records, read.malformed), (6, 0), "{read:?}");
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
    assert_eq!(msgs[1].call_ids(), ["call_X"]);
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
    assert_eq!(msgs[1].call_ids(), ["__fake_id__", ""]);
    assert!(chaosrun::observe::is_placeholder_id(msgs[1].call_ids()[1]));
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
fn a_symlink_out_of_home_is_not_read_and_long_lines_are_counted_unread() {
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
            assert_eq!(read.malformed, 0, "{read:?}");
            assert_eq!(
                read.unread_lines, 1,
                "a line past the cap is unread, not torn"
            );
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
            let why = integrity["violations"].to_string();
            let torn = integrity["status"] == "fail" && why.contains("1 line(s)");
            let clean = integrity["status"] == "pass";
            if (bug && !torn) || (!bug && !clean) {
                problems.push(format!(
                    "{what}: the torn line (written with the bug only) was misjudged: {integrity}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n\n"));
}

#[test]
fn the_docs_show_each_mapping_as_tested() {
    let readme = std::fs::read_to_string(common::repo().join("docs/profiles.md")).unwrap();
    for agent in [
        "claude-code",
        "codex",
        "gemini-cli",
        "qwen-code",
        "pydantic-ai",
        "gemini-cli-json",
    ] {
        let text = std::fs::read_to_string(fixture(&format!("{agent}.store.yaml"))).unwrap();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                readme.contains(&format!("    {line}\n")),
                "docs/profiles.md lacks {agent}'s mapping line {line:?}"
            );
        }
    }
}

/// The store mapping a shipped example profile declares.
fn profile_store(example: &str) -> StoreSpec {
    let path = common::repo().join("examples").join(example);
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let spec: StoreSpec = serde_yaml::from_value(doc["store"].clone()).unwrap();
    spec.check_kind().unwrap();
    spec
}

/// A real qwen-code 0.24.4 transcript (parallel_8_terminal_calls, trimmed),
/// read through the mapping examples/qwen-code/qwen-code.yaml ships: its
/// telemetry `system` records are not messages, each of the 8 parallel calls
/// has its own result, and the probe turn follows.
#[test]
fn qwen_code_real_transcript_reads_through_the_shipped_profile() {
    let spec = profile_store("qwen-code/qwen-code.yaml");
    let (m, read) = jsonl::read_files(&spec, &[fixture("qwen-code.real.jsonl")]);
    assert_eq!((read.records, read.malformed), (26, 0), "{read:?}");
    let m = m.unwrap();
    let roles: Vec<&str> = m.iter().map(|m| m.role.as_str()).collect();
    let mut want = vec!["user", "assistant"];
    want.extend(["tool"; 8]);
    want.extend(["assistant", "user", "assistant"]);
    assert_eq!(roles, want, "{m:#?}");
    let calls = m[1].call_ids();
    assert_eq!(calls.len(), 8);
    let answered: Vec<&str> = m[2..10]
        .iter()
        .filter_map(|t| t.tool_call_id.as_deref())
        .collect();
    assert_eq!(answered, calls);
    assert!(
        m[11].content.contains("Are you still there?"),
        "{:?}",
        m[11]
    );
}

/// Saved runs from before the one message model stored a persisted
/// message's calls as `tool_call_ids`: a golden observation in that shape is
/// read with every such id as a call of the message (so re-judging it pairs
/// the same calls), and written back in the one model's `tool_calls` shape.
#[test]
fn older_saved_store_messages_keep_their_call_ids() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        // The golden mcp_tool_schema_changes--mcp_stale_schema as saved
        // before the goldens were regenerated (still `tool_call_ids`).
        .join("tests/fixtures/older-observation-tool-call-ids.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let raw: serde_json::Value = serde_json::from_str(&text).unwrap();
    let saved: Vec<Vec<String>> = raw["store"]["messages"]["Ok"]
        .as_array()
        .expect("a read store")
        .iter()
        .map(|m| {
            m["tool_call_ids"]
                .as_array()
                .map(|ids| {
                    ids.iter()
                        .map(|i| i.as_str().unwrap().to_string())
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect();
    assert!(saved.iter().filter(|ids| !ids.is_empty()).count() >= 2);
    let obs: chaosrun::observe::Observation = serde_json::from_str(&text).unwrap();
    let msgs = obs.store.messages().expect("read");
    let read: Vec<Vec<String>> = msgs
        .iter()
        .map(|m| m.call_ids().iter().map(|s| s.to_string()).collect())
        .collect();
    assert_eq!(read, saved);
    let again = serde_json::to_value(&obs).unwrap();
    let first = again["store"]["messages"]["Ok"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m.get("tool_calls").is_some())
        .expect("calls written as tool_calls");
    assert!(first.get("tool_call_ids").is_none(), "{first}");
    let back: chaosrun::observe::Observation = serde_json::from_value(again).unwrap();
    assert_eq!(back.store, obs.store);
}
