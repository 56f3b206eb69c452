//! The bundled reference agent (`examples/reference/`), embedded in the binary
//! so `chaosrun scenarios.yaml` works from any directory without `--agent`.

use std::path::{Path, PathBuf};

const AGENT_PY: &str = include_str!("../../examples/reference/agent.py");
const AGENT_YAML: &str = include_str!("../../examples/reference/agent.yaml");
const MCP_CLIENT_PY: &str = include_str!("../../examples/reference/mcp_client.py");
const ACP_PY: &str = include_str!("../../examples/reference/acp.py");
const AGENT_ACP_YAML: &str = include_str!("../../examples/reference/agent-acp.yaml");

/// Write the reference agent into `dir` (its ACP mode and profile,
/// `agent-acp.yaml`, beside it) and return its profile's path.
pub fn materialize(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let py = dir.join("agent.py");
    std::fs::write(&py, AGENT_PY)?;
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(dir.join("mcp_client.py"), MCP_CLIENT_PY)?;
    std::fs::write(dir.join("acp.py"), ACP_PY)?;
    std::fs::write(dir.join("agent-acp.yaml"), AGENT_ACP_YAML)?;
    let yaml = dir.join("agent.yaml");
    std::fs::write(&yaml, AGENT_YAML)?;
    Ok(yaml)
}

/// The agent a run uses: `--agent PATH` as given, or the bundled reference
/// agent written into a fresh temp dir, returned with it so it lives as long
/// as the run.
pub fn agent_or_bundled(
    agent: Option<&str>,
) -> Result<(String, Option<tempfile::TempDir>), String> {
    if let Some(a) = agent {
        return Ok((a.to_string(), None));
    }
    let written = tempfile::Builder::new()
        .prefix("chaosrun-agent-")
        .tempdir()
        .and_then(|d| materialize(d.path()).map(|p| (p.display().to_string(), d)));
    match written {
        Ok((path, dir)) => Ok((path, Some(dir))),
        Err(e) => Err(format!("cannot write the bundled agent: {e}")),
    }
}
