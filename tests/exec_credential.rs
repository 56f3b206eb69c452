//! A credential that expires, in exec mode: the one-shot fixture CLI takes its
//! API key from its environment (`ONESHOT_API_KEY: "{{api_key}}"` in
//! tests/fixtures/agents/oneshot_key_env.yaml), fixed for each turn's process.
//! On `credential_expires_mid_turn` the faulted turn's 401 is surfaced and not
//! retried, and chaosrun refreshes the key when that turn ends, before it
//! starts the next turn's process with the new key rendered into its env: the
//! probe is answered. `credential_refreshed_mid_turn` (a key refreshed
//! mid-turn) is N/A for it, and both are N/A for a driver-protocol profile
//! whose key is only in `env:` (its process cannot be given a new one).

mod common;

use common::*;
use std::time::Duration;

fn run(profile: &str, ids: &[&str]) -> (i32, serde_json::Value, String) {
    let mark = new_mark("cred");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut args = vec![
        "scenarios.yaml",
        "--agent",
        profile,
        "--json",
        json.to_str().unwrap(),
    ];
    for id in ids {
        args.extend(["--only", id]);
    }
    let out = chaosrun(&mark, &args);
    let left = wait_unmarked(&mark, Duration::from_secs(10));
    kill_marked(&mark);
    assert!(left.is_empty(), "processes outlived chaosrun: {left:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    (out.status.code().unwrap_or(-1), read_json(&json), stdout)
}

#[test]
#[cfg_attr(not(target_os = "linux"), ignore = "needs Linux /proc")]
fn an_exec_cli_gets_the_refreshed_key_in_its_next_turns_env() {
    let id = "credential_expires_mid_turn";
    let (code, report, stdout) = run(
        "tests/fixtures/agents/oneshot_key_env.yaml",
        &[id, "credential_refreshed_mid_turn"],
    );
    assert_eq!(code, 0, "{stdout}\n{:?}", violations(&report, id));
    // A key refreshed mid-turn cannot reach a running process through its env.
    let mid = scenario(&report, "credential_refreshed_mid_turn").to_string();
    assert!(mid.contains("cannot carry into a running process"), "{mid}");
    let s = scenario(&report, id);
    let check = |name: &str| {
        s["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {s}"))["status"]
            .clone()
    };
    assert_eq!(check("no_retry_without_new_credential"), "pass");
    assert_eq!(check("probe_answered"), "pass");
    assert_eq!(check("credential_expired"), "pass");
}

#[test]
fn a_driver_profile_with_the_key_only_in_env_is_not_applicable() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("p.yaml");
    let agent = repo().join("examples/reference/agent.py");
    std::fs::write(
        &profile,
        format!(
            "command: [python3, {}]\nenv: {{API_KEY: \"{{{{api_key}}}}\"}}\ntools:\n  shell: {{name: shell, args: {{command: command, timeout: timeout}}}}\n",
            agent.display()
        ),
    )
    .unwrap();
    let (code, report, stdout) = run(profile.to_str().unwrap(), &["credential_expires_mid_turn"]);
    assert_eq!(code, 0, "{stdout}");
    let s = scenario(&report, "credential_expires_mid_turn");
    let text = s.to_string();
    assert!(
        text.contains("no `home_files` template renders `{{api_key}}`"),
        "{text}"
    );
}
