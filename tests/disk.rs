//! The disk a row bounds (`disk_mb`, the `disk_written` check, issue 44.7),
//! measured where the agent put its bytes: a file a tool writes to the
//! private `/tmp` the scenario's mount namespace gave the agent (which
//! chaosrun's own `/tmp` does not show) counts, and still counts when it is
//! deleted before the turn ends (the watch walks about every second), while
//! small files in HOME and the work dir stay within the bound. Found by the
//! check's own report, the file named by its place (`/tmp/big.bin`).

mod common;

use common::*;

const TABLE: &str = r#"
defaults:
  knobs: {model: fake-model, stale_timeout: 3, request_timeout: 5, api_max_retries: 2, max_turns: 8, tool_timeout: 20}
  deadlines: {boot: 30, turn: 30, interrupt: 15, probe: 30, exit: 15, reap: 10}
  max_calls: 8
scenarios:
  - id: tmp_file_deleted_before_the_end
    about: a tool writes 48 MB to the agent's /tmp, keeps it 3 s, deletes it
    disk_mb: 20
    responder:
      - when: {call: 0}
        reply: {kind: tool_call, calls: [{tool: shell, args: {command: "head -c 50331648 /dev/zero > /tmp/big.bin; python3 -c 'import time; time.sleep(3)'; rm /tmp/big.bin; echo wrote"}}]}
      - reply: {kind: text, text: "done {{nonce}}"}
    expect: {answer: "done {{nonce}}"}
  - id: small_files_in_home_and_work
    about: 1 MB in HOME and 2 MB in the work dir, within 20 MB
    disk_mb: 20
    responder:
      - when: {call: 0}
        reply: {kind: tool_call, calls: [{tool: shell, args: {command: "head -c 1048576 /dev/urandom > \"$HOME/small.bin\"; head -c 2097152 /dev/urandom > small-work.bin; echo wrote"}}]}
      - reply: {kind: text, text: "done {{nonce}}"}
    expect: {answer: "done {{nonce}}"}
"#;

#[test]
fn a_file_in_the_private_tmp_counts_even_once_deleted() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    require(
        "root (the agent's private /tmp is a mount namespace of its own)",
        root,
        "run the tests as root, as CI does",
    );
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("disk.yaml");
    std::fs::write(&table, TABLE).unwrap();
    let (report, stdout, code) = run_report("disk", "openai-chat", &[table.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("1 passed, 1 failed"), "{stdout}");
    let big = "tmp_file_deleted_before_the_end";
    assert_eq!(failed_checks(&report, big), ["disk_written"], "{stdout}");
    let v = violations(&report, big).join("\n");
    assert!(v.contains("more than the 20 MB the row allows"), "{v}");
    assert!(v.contains("largest files then: /tmp/big.bin 48 MB"), "{v}");
    // Judged, not skipped: the small files were measured and are within it.
    assert!(
        skipped_checks(&report, &[]).is_empty(),
        "{:#?}",
        skipped_checks(&report, &[])
    );
    let small = "small_files_in_home_and_work";
    assert_eq!(
        check_status(&report, small, "disk_written"),
        "pass",
        "{:#}",
        scenario(&report, small)
    );
}
