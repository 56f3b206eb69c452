//! `chaosrun serve`: run the fault provider on its own, from a script file, to
//! reproduce a fault by hand or to benchmark it.
//!
//! The script is YAML: either a bare list of responder rules, or a map
//! `{nonce?, seed?, tools?, context_window?, endpoint_fault?, responder: [rules]}`
//! (`endpoint_fault` as a row's: every request besides a model call hangs or
//! fails, [`super::endpoints`]). `--wire` picks the wire served.
//! Prints `chaosrun provider listening on BASE_URL (WIRE)` once bound (the
//! base URL a client of that wire takes), one
//! stderr line per request (`#seq kind main_index reply`) unless quiet, and on
//! SIGINT/SIGTERM the summary `requests: N (main M, probe P, aux A)`. It
//! remembers only a ring of the last requests ([`super::RecordLimits::SERVE`]),
//! so it can serve for as long as it is left running.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::recording::{CallKind, RequestRecord};
use super::{Provider, ProviderConfig, Rule, ToolMapping};

/// Arguments of `chaosrun serve`.
#[derive(Debug, Clone, Default)]
pub struct ServeArgs {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The wire served (`--wire`).
    pub wire: super::Wire,
    /// Script file; without one every main call gets a plain `ok`.
    pub script: Option<PathBuf>,
    /// Overrides the script's nonce.
    pub nonce: Option<String>,
    /// With a tag, `wait_for` counts processes carrying `CHAOS_TAG=<tag>`.
    pub tag: Option<String>,
    /// No per-request line on stderr.
    pub quiet: bool,
    /// Proxy mode: unmatched calls and `relay` rules go here (the key is read
    /// from serve's own environment).
    pub upstream: Option<super::upstream::UpstreamSpec>,
}

/// A loaded script.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Script {
    pub nonce: Option<String>,
    /// The seed of the rules' `p` draws (0 when absent).
    pub seed: Option<u64>,
    pub tools: BTreeMap<String, ToolMapping>,
    pub rules: Vec<Rule>,
    /// Main calls over this many bytes get the context-length error.
    pub context_window: Option<super::ContextWindow>,
    /// Requests besides model calls are faulted (see [`super::endpoints`]).
    pub endpoint_fault: Option<super::EndpointFault>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptMap {
    #[serde(default)]
    nonce: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    tools: BTreeMap<String, ToolMapping>,
    #[serde(default)]
    responder: Vec<Rule>,
    #[serde(default)]
    context_window: Option<super::ContextWindow>,
    #[serde(default)]
    endpoint_fault: Option<super::EndpointFault>,
}

/// What the server counted, printed as the summary line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeSummary {
    pub requests: u64,
    pub main: u64,
    pub probe: u64,
    pub aux: u64,
}

impl std::fmt::Display for ServeSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "requests: {} (main {}, probe {}, aux {})",
            self.requests, self.main, self.probe, self.aux
        )
    }
}

/// Parse a script's text; errors read `LABEL:LINE:COL: message`.
pub fn parse_script(text: &str, label: &str) -> anyhow::Result<Script> {
    let located = |e: serde_yaml::Error| {
        let msg = e.to_string();
        let msg = match msg.rfind(" at line ") {
            Some(cut) if e.location().is_some() => msg[..cut].to_string(),
            _ => msg,
        };
        match e.location() {
            Some(loc) => anyhow::anyhow!("{label}:{}:{}: {msg}", loc.line(), loc.column()),
            None => anyhow::anyhow!("{label}: {msg}"),
        }
    };
    let shape: serde_yaml::Value = serde_yaml::from_str(text).map_err(located)?;
    match shape {
        serde_yaml::Value::Null => Ok(Script::default()),
        serde_yaml::Value::Sequence(_) => Ok(Script {
            rules: serde_yaml::from_str(text).map_err(located)?,
            ..Script::default()
        }),
        serde_yaml::Value::Mapping(_) => {
            let m: ScriptMap = serde_yaml::from_str(text).map_err(located)?;
            if let Some(e) = m.endpoint_fault.as_ref().and_then(|f| f.check().err()) {
                anyhow::bail!("{label}: {e}");
            }
            Ok(Script {
                nonce: m.nonce,
                seed: m.seed,
                tools: m.tools,
                rules: m.responder,
                context_window: m.context_window,
                endpoint_fault: m.endpoint_fault,
            })
        }
        _ => Err(anyhow::anyhow!(
            "{label}:1:1: a script is a list of rules or a map with `responder:` (and optional `nonce:`, `seed:`, `tools:`, `context_window:`, `endpoint_fault:`)"
        )),
    }
}

/// Read and parse a script file.
pub fn load_script(path: &Path) -> anyhow::Result<Script> {
    let text = crate::input::read_input_text(path, crate::input::SERVE_SCRIPT)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    parse_script(&text, &path.display().to_string())
}

/// Serve until SIGINT or SIGTERM, then print the summary.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let wire = args.wire;
    let summary = serve_until(
        args,
        |addr| {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "chaosrun provider listening on {} ({wire})",
                wire.base_url(addr)
            );
            let _ = out.flush();
        },
        stop_signal(),
    )
    .await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", crate::redact::text(&summary.to_string()))?;
    out.flush()?;
    Ok(())
}

/// Serve until `stop` completes; `on_ready` gets the bound address.
pub async fn serve_until(
    args: ServeArgs,
    on_ready: impl FnOnce(SocketAddr),
    stop: impl Future<Output = ()>,
) -> anyhow::Result<ServeSummary> {
    let script = match &args.script {
        Some(path) => load_script(path)?,
        None => Script::default(),
    };
    let process_counter: Option<super::ProcessCounter> = args.tag.clone().map(|tag| {
        Arc::new(move |needle: &str| crate::proc_hygiene::count_tagged_matching(&tag, needle))
            as super::ProcessCounter
    });
    let upstream = match &args.upstream {
        Some(spec) => Some(Arc::new(
            super::upstream::Upstream::resolve(spec, |n| std::env::var(n).ok())
                .map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    let config = ProviderConfig {
        port: args.port,
        wire: args.wire,
        rules: script.rules,
        nonce: args.nonce.or(script.nonce).unwrap_or_default(),
        seed: script.seed.unwrap_or_default(),
        tools: script.tools,
        process_counter,
        record: super::RecordLimits::SERVE,
        upstream,
        context_window: script.context_window,
        endpoint_fault: script.endpoint_fault,
        bind: None,
        credential: None,
        main_without_tools: false,
        aux_markers: Vec::new(),
        probe_first: None,
    };
    let provider = if args.quiet {
        Provider::start(config).await?
    } else {
        Provider::start_observed(config, Arc::new(log_request)).await?
    };
    on_ready(provider.addr());
    stop.await;
    let requests = provider.request_count();
    let tape = provider.tape();
    let rec = provider.shutdown().await;
    // `--record FILE`: the relayed main calls as one cassette.
    if let Some((file, up)) = args
        .upstream
        .as_ref()
        .and_then(|u| Some((u.record.as_ref()?, u)))
    {
        tape.save(file, args.wire, &up.url, None)
            .map_err(anyhow::Error::msg)?;
    }
    Ok(ServeSummary {
        requests,
        main: rec.main_calls,
        probe: rec.probe_calls,
        aux: rec.aux_calls,
    })
}

fn log_request(r: &RequestRecord) {
    let kind = match r.kind {
        CallKind::Main => "main",
        CallKind::Probe => "probe",
        CallKind::Aux => "aux",
        CallKind::Subagent => "subagent",
    };
    let index = r.main_index.map_or("-".to_string(), |i| i.to_string());
    crate::say_err!(
        "#{} {} {} {kind} {index} {}",
        r.seq,
        r.method,
        r.path,
        r.reply
    );
}

/// SIGINT or SIGTERM. Both are registered now, before the caller announces
/// it is listening, so a signal sent right after that line is never missed.
fn stop_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_list_and_map_forms() {
        let s = parse_script("- {reply: {kind: error, status: 500}}\n", "s.yaml").unwrap();
        assert_eq!(s.rules.len(), 1);
        let s = parse_script(
            "nonce: N\ntools: {shell: {name: terminal, args: {cmd: command}}}\nresponder:\n  - {reply: {kind: hang}}\n",
            "s.yaml",
        )
        .unwrap();
        assert_eq!(s.nonce.as_deref(), Some("N"));
        assert_eq!(s.tools["shell"].name, "terminal");
        assert_eq!(s.rules[0].reply.kind_name(), "hang");
    }

    #[test]
    fn an_endpoint_fault_is_read_and_its_status_bounded() {
        let s = parse_script("endpoint_fault: {kind: hang}\nresponder: []\n", "s.yaml").unwrap();
        assert_eq!(s.endpoint_fault, Some(super::super::EndpointFault::Hang {}));
        let e = parse_script("endpoint_fault: {kind: error, status: 302}\n", "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("s.yaml") && e.contains("400 to 599"), "{e}");
        assert!(parse_script("endpoint_fault: {kind: hang, after: 2}\n", "s.yaml").is_err());
    }

    #[test]
    fn errors_carry_file_line_col() {
        let e = parse_script("responder:\n  - reply: {kind: nope}\n", "s.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("s.yaml:2:"), "{e}");
        assert!(e.contains("nope"), "{e}");
        assert!(!e.contains(" at line "), "{e}");
        let e = parse_script("a: [\n", "t.yaml").unwrap_err().to_string();
        assert!(e.starts_with("t.yaml:"), "{e}");
    }

    #[tokio::test]
    async fn serves_until_stopped_and_counts() {
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let args = ServeArgs {
            quiet: true,
            ..ServeArgs::default()
        };
        let server = tokio::spawn(serve_until(
            args,
            move |addr| {
                let _ = addr_tx.send(addr);
            },
            async move {
                let _ = stop_rx.await;
            },
        ));
        let addr = addr_rx.await.unwrap();
        // One raw HTTP request: a GET to an unknown path.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 404"));
        stop_tx.send(()).unwrap();
        let summary = server.await.unwrap().unwrap();
        assert_eq!(summary.requests, 1);
        assert_eq!(summary.to_string(), "requests: 1 (main 0, probe 0, aux 1)");
    }

    /// A body over the limit is drained and refused, never held; the
    /// recording still has its full length and hash.
    #[tokio::test]
    async fn an_oversized_body_is_counted_hashed_and_refused() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let provider = Provider::start(ProviderConfig::default()).await.unwrap();
        let size = super::super::server::BODY_LIMIT + 4096;
        let mut s = tokio::net::TcpStream::connect(provider.addr())
            .await
            .unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {size}\r\nconnection: close\r\n\r\n"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let chunk = vec![b' '; 1 << 20];
        let mut hash = super::super::recording::BodyHash::default();
        let mut sent = 0;
        while sent < size {
            let n = chunk.len().min(size - sent);
            s.write_all(&chunk[..n]).await.unwrap();
            hash.update(&chunk[..n]);
            sent += n;
        }
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        let out = String::from_utf8_lossy(&out);
        assert!(out.starts_with("HTTP/1.1 413"), "{out}");
        let rec = provider.shutdown().await;
        assert_eq!(rec.requests.len(), 1);
        assert_eq!(rec.requests[0].size, size);
        assert_eq!(rec.requests[0].reply, "too_large");
        assert_eq!(rec.requests[0].body_sha256, hash.finish());
    }
}
