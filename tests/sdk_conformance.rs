//! The provider's wires against the official SDKs: runs tests/sdk/conformance.py
//! (every reply kind × each SDK: `openai` for openai-chat and
//! openai-responses, `anthropic`, `google-genai`, streaming and not) with the
//! venv that scripts/sdk_venv.sh makes under target/. scripts/test.sh makes
//! the venv and runs this test with `--include-ignored`; without the venv the
//! test fails, it never passes by skipping.

mod common;

use std::process::Command;

#[test]
#[ignore = "needs the SDK venv: scripts/sdk_venv.sh"]
fn every_reply_kind_on_every_wire_with_the_official_sdks() {
    let python = common::repo().join("target/sdk-venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/sdk_venv.sh (pip-installs the pinned openai, anthropic and google-genai)",
        python.display()
    );
    let out = Command::new(&python)
        .arg(common::repo().join("tests/sdk/conformance.py"))
        .arg(common::bin())
        .output()
        .expect("run conformance.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        out.status.success() && last.ends_with(" passed, 0 failed"),
        "conformance failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // Each wire × each kind ran: 24 cases per wire.
    let passed: usize = last.split(' ').next().unwrap().parse().unwrap();
    assert_eq!(passed, 4 * 24, "{last}");
}
