//! `chaosrun serve --mcp RULES.yaml`: the scripted MCP server alone (both
//! transports), for a client written by hand or a wire test. RULES.yaml is a
//! row's `mcp:` section (`{linger?, rules: [...], upstream?}`), checked like
//! a table's; with `upstream` it is the MCP proxy in front of that server.
//! Prints `chaosrun MCP server: socket PATH url URL` once both listen; a
//! client reaches stdio by running `chaosrun mcp-stdio --socket PATH`. On
//! SIGINT/SIGTERM it prints the recording as one JSON line and exits 0.

use std::io::Write;
use std::path::Path;

use super::{McpConfig, McpServer, McpSpec, Transport};

/// Load and check a rules file.
pub fn load(path: &Path) -> anyhow::Result<McpSpec> {
    let text = crate::input::read_input_text(path, crate::input::MCP_RULES)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let spec: McpSpec = serde_yaml::from_str(&text).map_err(|e| {
        let (l, c) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
        let msg = e.to_string();
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        anyhow::anyhow!("{}:{l}:{c}: {msg}", path.display())
    })?;
    spec.check()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(spec)
}

/// Serve until SIGINT/SIGTERM.
pub async fn run(rules: &Path, nonce: Option<String>) -> anyhow::Result<()> {
    let spec = load(rules)?;
    let dir = tempfile::Builder::new()
        .prefix("chaosrun-mcp-")
        .tempdir_in("/tmp")?;
    let server = McpServer::start(McpConfig {
        rules: spec.rules,
        nonce: nonce.unwrap_or_else(|| "nonce".into()),
        linger: spec.linger,
        withhold_endpoint: spec.withhold_endpoint,
        transport: spec.transport.unwrap_or(Transport::Stdio),
        dir: dir.path().to_path_buf(),
        start: tokio::time::Instant::now(),
        bind: None,
        upstream: spec.upstream,
        host: None,
    })
    .await?;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "chaosrun MCP server: socket {} url {}",
            server.socket().display(),
            server.url()
        );
        let _ = out.flush();
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let rec = server.shutdown().await;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", serde_json::to_string(&rec)?);
    let _ = out.flush();
    Ok(())
}
