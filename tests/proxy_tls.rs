//! Proxy mode against TLS and hostile upstreams, all on 127.0.0.1:
//!
//! * the seed table through a proxy whose upstream is `chaosrun serve` behind
//!   a TLS terminator (a CA generated at test time, `--upstream-ca`) gives the
//!   direct verdicts (every row passes on the healthy reference agent);
//! * an unknown issuer, a name mismatch and an expired certificate are each
//!   the scenario's ERROR naming the problem;
//! * an upstream that never sends a response head, and one that streams
//!   forever, are the scenario's ERROR naming the upstream and the bound,
//!   well before the turn deadline that would otherwise fail the agent;
//! * an upstream that is the proxy itself is refused (exit 2), a relay loop
//!   through two proxies ends at the first hop back (508), and relayed calls
//!   in flight are capped.

mod common;
#[path = "support/upstreams.rs"]
mod upstreams;

use common::*;
use std::time::{Duration, Instant};
use upstreams::*;

fn serve(args: &[&str]) -> Serve {
    Serve::start(&bin(), &repo(), args)
}

/// Each scenario's verdict, by id.
fn verdicts(report: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_seed_table_through_a_tls_proxy_gives_the_direct_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "seed");
    let (leaf, key) = ca.leaf(&["127.0.0.1", "localhost"], false);
    let up = serve(&["--quiet"]);
    let tls = tls_terminator(up.addr(), &leaf, &key);
    let mark = new_mark("proxy-tls-table");
    let json = dir.path().join("r.json");
    let url = format!("https://127.0.0.1:{}/v1", tls.port());
    let out = chaosrun(
        &mark,
        &[
            "scenarios.yaml",
            "--upstream",
            &url,
            "--upstream-ca",
            ca.pem_file.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = read_json(&json);
    let v = verdicts(&report);
    let rows = std::fs::read_to_string(repo().join("scenarios.yaml"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("  - id: "))
        .count();
    assert_eq!(v.len(), rows);
    // The direct verdicts of the healthy reference agent: every row passes
    // (tests/proxy.rs compares them with a direct run row by row).
    for (id, verdict) in &v {
        assert_eq!(
            verdict,
            "pass",
            "{id}: {:?}\n{stdout}",
            violations(&report, id)
        );
    }
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // The judged probes went through TLS to the upstream (see
    // relayed_probes_agree for the one a credential row may answer itself).
    let summary = up.stop();
    if let Err(e) = relayed_probes_agree(&report, &summary) {
        panic!("{e}");
    }
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "left behind: {survivors:?}");
}

#[test]
fn certificate_problems_are_errors_that_name_them() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "good");
    let up = serve(&["--quiet"]);
    let ca_file = ca.pem_file.to_str().unwrap().to_string();
    // (what, the leaf's names, expired, --upstream-ca?, the expected words)
    let cases = [
        (
            "unknown-issuer",
            &["127.0.0.1"][..],
            false,
            false,
            "unknown issuer",
        ),
        (
            "name-mismatch",
            &["other.example"][..],
            false,
            true,
            "name mismatch",
        ),
        ("expired", &["127.0.0.1"][..], true, true, "expired"),
    ];
    let mark = new_mark("proxy-tls-cert");
    std::thread::scope(|s| {
        for (what, names, expired, with_ca, words) in cases {
            let (leaf, key) = ca.leaf(names, expired);
            let tls = tls_terminator(up.addr(), &leaf, &key);
            let (mark, dir, ca_file) = (&mark, dir.path(), &ca_file);
            s.spawn(move || {
                let json = dir.join(format!("{what}.json"));
                let url = format!("https://127.0.0.1:{}/v1", tls.port());
                let mut args = vec![
                    "scenarios.yaml",
                    "--only",
                    "tool_args_garbage",
                    "--upstream",
                    &url,
                    "--json",
                    json.to_str().unwrap(),
                ];
                if with_ca {
                    args.extend(["--upstream-ca", ca_file.as_str()]);
                }
                let out = chaosrun(mark, &args);
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert_eq!(out.status.code(), Some(1), "{what}: {stdout}");
                let report = read_json(&json);
                let sc = scenario(&report, "tool_args_garbage");
                assert_eq!(sc["verdict"], "error", "{what}: {sc}");
                let cause = sc["cause"].as_str().unwrap_or_default();
                assert!(cause.contains("TLS certificate problem"), "{what}: {cause}");
                assert!(cause.contains(words), "{what}: {cause}");
                assert!(cause.contains(&url), "{what}: {cause}");
            });
        }
    });
    kill_marked(&mark);
}

/// A self-signed upstream certificate (what `openssl req -x509` makes for an
/// internal gateway: `CA:TRUE`, which path validation refuses as
/// `CaUsedAsEndEntity`) given with `--upstream-ca` is trusted as itself:
/// the row passes through the relay. Another self-signed certificate given
/// instead is refused, and the cause says what to give.
#[test]
fn a_self_signed_upstream_given_with_upstream_ca_is_trusted_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let up = serve(&["--quiet"]);
    let (cert, key, pem) = self_signed(dir.path(), "gateway");
    let (_, _, other) = self_signed(dir.path(), "other");
    let tls = tls_terminator(up.addr(), &cert, &key);
    let url = format!("https://127.0.0.1:{}/v1", tls.port());
    let mark = new_mark("proxy-tls-self-signed");
    for (given, passes) in [(&pem, true), (&other, false)] {
        let json = dir.path().join("r.json");
        let args = [
            "scenarios.yaml",
            "--only",
            "tool_args_garbage",
            "--upstream",
            &url,
            "--upstream-ca",
            given.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ];
        let out = chaosrun(&mark, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report = read_json(&json);
        let sc = scenario(&report, "tool_args_garbage");
        if passes {
            assert_eq!(out.status.code(), Some(0), "{stdout}");
            assert_eq!(sc["verdict"], "pass", "{sc}");
        } else {
            assert_eq!(sc["verdict"], "error", "{sc}");
            let cause = sc["cause"].as_str().unwrap_or_default();
            assert!(cause.contains("TLS certificate problem"), "{cause}");
            assert!(
                cause.contains(
                    "give with --upstream-ca exactly the certificate the upstream presents"
                ),
                "{cause}"
            );
        }
    }
    kill_marked(&mark);
}

/// The reference agent's profile with `upstream:` at `url` under tight bounds.
fn bounded_profile(dir: &std::path::Path, url: &str) -> String {
    let text = std::fs::read_to_string(repo().join("examples/reference/agent.yaml")).unwrap();
    let agent = repo().join("examples/reference/agent.py");
    let text = text.replace("{{profile_dir}}/agent.py", agent.to_str().unwrap());
    let text = format!(
        "{text}\nupstream: {{url: \"{url}\", first_byte_timeout: 2, idle_timeout: 2, reply_timeout: 3}}\n"
    );
    let path = dir.join("bounded.yaml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A row that relays its calls to an agent that waits as long as it takes
/// (its own timeouts are ten minutes): only chaosrun's bounds end a hung call.
const PATIENT_TABLE: &str = r#"
defaults:
  knobs: {model: fake-model, stale_timeout: 600, request_timeout: 600, api_max_retries: 1, max_turns: 4, tool_timeout: 3}
  deadlines: {boot: 120, turn: 60, interrupt: 15, probe: 60, exit: 30, reap: 15}
scenarios:
  - id: relayed
    responder: [{reply: {kind: relay}}]
    expect: {answer: "ok"}
    calls: {max: 8}
"#;

#[test]
fn a_silent_or_endless_upstream_is_an_error_naming_it_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("patient.yaml");
    std::fs::write(&table, PATIENT_TABLE).unwrap();
    let mark = new_mark("proxy-hostile-up");
    for (how, bound) in [
        (Hostile::NoHead, "first_byte_timeout"),
        (Hostile::Endless, "reply_timeout"),
    ] {
        let url = hostile_upstream(how);
        let profile = bounded_profile(dir.path(), &url);
        let json = dir.path().join(format!("{bound}.json"));
        let started = Instant::now();
        let out = chaosrun(
            &mark,
            &[
                table.to_str().unwrap(),
                "--agent",
                &profile,
                "--json",
                json.to_str().unwrap(),
            ],
        );
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bound}: {stdout}\n{stderr}");
        let report = read_json(&json);
        let sc = scenario(&report, "relayed");
        assert_eq!(sc["verdict"], "error", "{bound}: {sc}");
        let cause = sc["cause"].as_str().unwrap_or_default();
        assert!(cause.contains(&url), "{bound}: {cause}");
        assert!(cause.contains(bound), "{bound}: {cause}");
        // Without the bound, the turn deadline (60 s) would have failed the
        // agent; with it, the run ends long before.
        assert!(took < Duration::from_secs(45), "{bound}: took {took:?}");
    }
    let survivors = wait_unmarked(&mark, Duration::from_secs(5));
    kill_marked(&mark);
    assert!(survivors.is_empty(), "left behind: {survivors:?}");
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn an_upstream_that_is_the_proxy_itself_is_refused_and_a_loop_ends_at_once() {
    let port = free_port().to_string();
    for host in ["127.0.0.1", "localhost"] {
        let out = std::process::Command::new(bin())
            .args(["serve", "--port", &port, "--upstream"])
            .arg(format!("http://{host}:{port}/v1"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{host}: {err}");
        assert!(err.contains("this proxy's own address"), "{host}: {err}");
    }
    // A -> B -> A: B is started first, pointing at A's port-to-be.
    let a_port = free_port().to_string();
    let b = serve(&[
        "--quiet",
        "--upstream",
        &format!("http://127.0.0.1:{a_port}/v1"),
    ]);
    let a = serve(&["--quiet", "--port", &a_port, "--upstream", &b.url]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("{}/chat/completions", a.url))
            .header("content-type", "application/json")
            .body(r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t","parameters":{}}}]}"#)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(status, 508);
    // One request in, one back: no multiplication.
    let (a_sum, b_sum) = (a.stop(), b.stop());
    assert!(a_sum.starts_with("requests: 2 "), "A: {a_sum}");
    assert!(b_sum.starts_with("requests: 1 "), "B: {b_sum}");
}

/// An upstream that answers each call after 200 ms and reports the most calls
/// it ever held at once.
fn counting_upstream() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let max = Arc::new(AtomicUsize::new(0));
    let now = Arc::new(AtomicUsize::new(0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let max2 = max.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((mut tcp, _)) = listener.accept().await {
                let (max, now) = (max2.clone(), now.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let mut seen = Vec::new();
                        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tcp.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                        }
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        max.fetch_max(n, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if tcp.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
    });
    (format!("http://{addr}/v1"), max)
}

#[test]
fn relayed_calls_in_flight_are_capped() {
    let (url, max) = counting_upstream();
    let proxy = serve(&["--quiet", "--upstream", &url]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let target = format!("{}/chat/completions", proxy.url);
    let statuses: Vec<u16> = rt.block_on(async {
        let calls = (0..150).map(|_| {
            let (client, target) = (client.clone(), target.clone());
            async move {
                let r = client
                    .post(&target)
                    .header("content-type", "application/json")
                    .body(r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"t","parameters":{}}}]}"#)
                    .send()
                    .await
                    .unwrap();
                let status = r.status().as_u16();
                let _ = r.bytes().await;
                status
            }
        });
        futures_util::future::join_all(calls).await
    });
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let most = max.load(std::sync::atomic::Ordering::SeqCst);
    // 64 = RELAYS_IN_FLIGHT; the calls did overlap (not one at a time).
    assert!(
        (16..=64).contains(&most),
        "the upstream held {most} calls at once"
    );
    assert!(proxy.stop().contains("main 150,"));
}
