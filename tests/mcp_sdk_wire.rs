//! The MCP server against an independent client: runs tests/sdk/mcp_wire.py
//! (the official Python `mcp` SDK, pinned in scripts/sdk_venv.sh) against
//! `chaosrun serve --mcp` over stdio (through `chaosrun mcp-stdio`),
//! Streamable HTTP and the legacy HTTP+SSE transport, every reply kind on
//! each. scripts/test.sh makes the venv
//! and runs this test with `--include-ignored`; without the venv the test
//! fails, it never passes by skipping.

mod common;

use std::process::Command;

#[test]
#[ignore = "needs the SDK venv with the `mcp` SDK: scripts/sdk_venv.sh"]
fn every_mcp_reply_kind_on_every_transport_with_the_python_sdk() {
    let python = common::repo().join("target/sdk-venv/bin/python");
    common::require(
        "the SDK venv (target/sdk-venv)",
        python.is_file(),
        "run scripts/sdk_venv.sh (pip-installs the pinned SDKs, `mcp` among them)",
    );
    let out = Command::new(&python)
        .arg(common::repo().join("tests/sdk/mcp_wire.py"))
        .arg(common::bin())
        .output()
        .expect("run mcp_wire.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        out.status.success() && last.ends_with(" passed, 0 failed"),
        "mcp_wire.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // Per transport: initialize, tools/list, 10 kinds, 2 recording checks,
    // list_hang and its recording.
    let passed: usize = last.split(' ').next().unwrap().parse().unwrap();
    assert_eq!(passed, 3 * 16, "{last}");
}
