//! Record and replay and the TLS proxy, measured.
//!
//! `cargo bench --bench replay` runs `chaosrun serve` processes on 127.0.0.1:
//!
//! 1. replayed vs scripted: one server answers every main call with a
//!    scripted `text` reply, another with `{kind: cassette}` replaying a
//!    recorded answer of the same text (same chunks, no pacing); each is
//!    driven by `CONNS` concurrent clients for `CALLS` streamed calls, and
//!    calls/s, p50 and p99 are printed with the replayed/scripted ratio;
//! 2. the TLS proxy's added latency: `chaosrun serve` as the upstream behind a
//!    TLS terminator (a CA made here with rcgen), and `chaosrun serve
//!    --upstream https://… --upstream-ca` in front of it; `SEQ` calls one at a
//!    time straight to the upstream, then through the proxy; p50/p99 of each
//!    and the p99 the proxy adds are printed.
//!
//! Targets: replayed calls within 1.5x of scripted ones; the proxy adds
//! under 5 ms at p99 on a local upstream. Figures are printed, never asserted.

mod common;
#[path = "../tests/support/upstreams.rs"]
mod upstreams;

use common::chaosrun_bin;
use std::time::{Duration, Instant};

const CONNS: usize = 32;
const CALLS: usize = 10_000;
const SEQ: usize = 2_000;
const TEXT: &str = "The quick brown fox jumps over the lazy dog, then rests a while.";
const BODY: &str = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"type":"function","function":{"name":"t","parameters":{}}}]}"#;

fn serve(args: &[&str]) -> upstreams::Serve {
    let cwd = std::env::current_dir().unwrap();
    upstreams::Serve::start(&chaosrun_bin(), &cwd, args)
}

/// The cassette of one answer: TEXT in 16-character chunks, unpaced.
fn cassette() -> String {
    let mut events: Vec<serde_json::Value> = TEXT
        .as_bytes()
        .chunks(16)
        .map(|c| serde_json::json!({"type": "text", "at": 0, "text": String::from_utf8_lossy(c)}))
        .collect();
    events.push(serde_json::json!({"type": "finish", "at": 0, "reason": "stop"}));
    let entry =
        serde_json::json!({"call": 0, "match": {"role": "user"}, "status": 200, "events": events});
    format!("{{\"cassette\":1,\"wire\":\"openai-chat\"}}\n{entry}\n")
}

/// One streamed call; its latency.
async fn call(client: &reqwest::Client, url: &str) -> Duration {
    let t = Instant::now();
    let r = client
        .post(url)
        .header("content-type", "application/json")
        .body(BODY)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(r.status(), 200);
    let body = r.bytes().await.expect("the body ends");
    assert!(body.ends_with(b"data: [DONE]\n\n"), "a whole answer");
    t.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// `CALLS` calls over `CONNS` clients: calls/s and the sorted latencies.
fn drive(
    rt: &tokio::runtime::Runtime,
    url: &str,
    conns: usize,
    calls: usize,
) -> (f64, Vec<Duration>) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(conns)
        .build()
        .unwrap();
    let t = Instant::now();
    let mut lat: Vec<Duration> = rt.block_on(async {
        let per = calls / conns;
        let tasks: Vec<_> = (0..conns)
            .map(|_| {
                let (client, url) = (client.clone(), url.to_string());
                tokio::spawn(async move {
                    let mut v = Vec::with_capacity(per);
                    for _ in 0..per {
                        v.push(call(&client, &url).await);
                    }
                    v
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let rps = lat.len() as f64 / t.elapsed().as_secs_f64();
    lat.sort();
    (rps, lat)
}

fn print(label: &str, rps: f64, lat: &[Duration]) {
    println!(
        "{label:<34} {rps:>9.0} calls/s   p50 {:>8.2?}   p99 {:>8.2?}",
        percentile(lat, 0.5),
        percentile(lat, 0.99)
    );
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scripted = dir.path().join("scripted.yaml");
    std::fs::write(
        &scripted,
        format!("- reply: {{kind: text, text: '{TEXT}', chunk_chars: 16}}\n"),
    )
    .unwrap();
    let tape = dir.path().join("tape.jsonl");
    std::fs::write(&tape, cassette()).unwrap();
    let replayed = dir.path().join("replayed.yaml");
    std::fs::write(
        &replayed,
        format!("- reply: {{kind: cassette, file: '{}'}}\n", tape.display()),
    )
    .unwrap();

    println!("1. replayed vs scripted ({CALLS} streamed calls, {CONNS} clients)");
    let s = serve(&["--quiet", "--script", scripted.to_str().unwrap()]);
    let (s_rps, s_lat) = drive(&rt, &format!("{}/chat/completions", s.url), CONNS, CALLS);
    print("scripted text", s_rps, &s_lat);
    drop(s);
    let r = serve(&["--quiet", "--script", replayed.to_str().unwrap()]);
    let (r_rps, r_lat) = drive(&rt, &format!("{}/chat/completions", r.url), CONNS, CALLS);
    print("replayed cassette", r_rps, &r_lat);
    drop(r);
    println!(
        "replayed / scripted throughput: {:.2}x (target ≥ 0.67x)\n",
        r_rps / s_rps
    );

    println!("2. TLS proxy against a local upstream ({SEQ} calls, one at a time)");
    let ca = upstreams::Ca::new(dir.path(), "bench");
    let (leaf, key) = ca.leaf(&["127.0.0.1"], false);
    let up = serve(&["--quiet", "--script", scripted.to_str().unwrap()]);
    let tls = upstreams::tls_terminator(up.addr(), &leaf, &key);
    let upstream = format!("https://127.0.0.1:{}/v1", tls.port());
    let proxy = serve(&[
        "--quiet",
        "--upstream",
        &upstream,
        "--upstream-ca",
        ca.pem_file.to_str().unwrap(),
    ]);
    let (d_rps, d_lat) = drive(&rt, &format!("{}/chat/completions", up.url), 1, SEQ);
    print("upstream direct (http)", d_rps, &d_lat);
    let (p_rps, p_lat) = drive(&rt, &format!("{}/chat/completions", proxy.url), 1, SEQ);
    print("through the proxy (https upstream)", p_rps, &p_lat);
    let added = percentile(&p_lat, 0.99).saturating_sub(percentile(&d_lat, 0.99));
    let added50 = percentile(&p_lat, 0.5).saturating_sub(percentile(&d_lat, 0.5));
    println!("added by the TLS proxy: p50 {added50:.2?}, p99 {added:.2?} (target < 5 ms)");
    let summary = proxy.stop();
    println!("proxy: {summary}");
}
