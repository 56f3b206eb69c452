//! `chaosrun serve`: the fault provider alone (one wire, a responder script,
//! optionally relaying to a real upstream), or the scripted MCP server
//! (`--mcp RULES`), for probing an agent by hand. Exit 0 when stopped, 2 a
//! bad script, rule file or flag (a `--record` onto a file serve reads).

use std::path::PathBuf;
use std::process::ExitCode;

use super::usage;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Port on 127.0.0.1 (0 picks one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Responder script: a list of rules, or {nonce, tools, responder}.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Substituted for {{nonce}}.
    #[arg(long)]
    pub nonce: Option<String>,
    /// CHAOS_TAG value whose processes `wait_for` rules count.
    #[arg(long)]
    pub tag: Option<String>,
    /// Do not log each request on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// The wire to serve: openai-chat, openai-responses, anthropic, gemini.
    #[arg(long, default_value = "openai-chat")]
    pub wire: crate::provider::Wire,
    /// Proxy mode: relay unmatched calls and `relay` rules to this server.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// The variable in serve's environment holding the upstream's API key.
    #[arg(long = "upstream-key-env", value_name = "NAME", requires = "upstream")]
    pub upstream_key_env: Option<String>,
    /// A PEM file of CA certificates to trust for an https:// upstream.
    #[arg(long = "upstream-ca", value_name = "FILE", requires = "upstream")]
    pub upstream_ca: Option<PathBuf>,
    /// Write the relayed main calls as a cassette when stopped.
    #[arg(long, value_name = "FILE", requires = "upstream")]
    pub record: Option<PathBuf>,
    /// Serve the scripted MCP server instead (a row's `mcp:` section as
    /// YAML): stdio through `chaosrun mcp-stdio --socket PATH`, and HTTP.
    #[arg(long, value_name = "RULES", conflicts_with_all = ["script", "wire", "port", "tag", "upstream"])]
    pub mcp: Option<PathBuf>,
}

/// `chaosrun serve`.
pub fn main(a: Args) -> ExitCode {
    let names: Vec<String> = a.upstream_key_env.iter().cloned().collect();
    let urls: Vec<&str> = a.upstream.iter().map(String::as_str).collect();
    crate::profile::install_redactor(None, &names, &urls);
    if let Err(e) = record_target(&a) {
        return usage(e);
    }
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    if let Some(rules) = a.mcp {
        return match rt.block_on(crate::mcp::serve::run(&rules, a.nonce)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => usage(format!("{e:#}")),
        };
    }
    let upstream = a
        .upstream
        .map(|url| crate::provider::upstream::UpstreamSpec {
            url,
            key_env: a.upstream_key_env,
            ca: a.upstream_ca,
            record: a.record,
            ..Default::default()
        });
    let args = crate::provider::serve::ServeArgs {
        port: a.port,
        script: a.script,
        nonce: a.nonce,
        tag: a.tag,
        quiet: a.quiet,
        wire: a.wire,
        upstream,
    };
    match rt.block_on(crate::provider::serve::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => usage(format!("{e:#}")),
    }
}

/// `--record FILE` checked before serving: never a file serve reads (its
/// script, the upstream CA, chaosrun itself; compared by device and inode,
/// so a hard link, a symlink or another spelling is caught), and a regular
/// file in a writable directory.
fn record_target(a: &Args) -> Result<(), String> {
    let Some(record) = &a.record else {
        return Ok(());
    };
    let inputs: Vec<PathBuf> = [&a.script, &a.upstream_ca]
        .into_iter()
        .flatten()
        .cloned()
        .chain(std::env::current_exe().ok())
        .collect();
    crate::output::check_target("--record", record, &inputs).map(|_| ())
}
