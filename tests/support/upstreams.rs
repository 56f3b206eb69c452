//! Upstreams for the proxy tests, all on 127.0.0.1: `chaosrun serve` as a
//! child, a TLS terminator in front of it with a CA and a server certificate
//! generated at test time (rcgen), and hostile HTTP upstreams written for the
//! test (one that never sends a response head, one that streams forever).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

/// A `chaosrun serve` child, stopped (SIGTERM) and reaped on drop.
pub struct Serve {
    pub child: Child,
    pub url: String,
}

impl Serve {
    pub fn start(bin: &std::path::Path, cwd: &std::path::Path, args: &[&str]) -> Serve {
        Serve::start_with_env(bin, cwd, args, &[])
    }

    /// [`Serve::start`] with these variables set in its environment.
    pub fn start_with_env(
        bin: &std::path::Path,
        cwd: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        let mut child = Command::new(bin)
            .arg("serve")
            .args(args)
            .envs(env.iter().copied())
            .current_dir(cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chaosrun serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {line:?}"))
            .to_string();
        Serve { child, url }
    }

    /// The `host:port` it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Stop it and return its summary line (`requests: N (main M, ...)`).
    pub fn stop(mut self) -> String {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child.wait().unwrap();
        out.trim().to_string()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test CA and the PEM file of its certificate.
pub struct Ca {
    pub cert: rcgen::Certificate,
    pub key: rcgen::KeyPair,
    pub pem_file: std::path::PathBuf,
}

impl Ca {
    pub fn new(dir: &std::path::Path, name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("chaosrun test CA {name}"),
        );
        let cert = params.self_signed(&key).unwrap();
        let pem_file = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&pem_file, cert.pem()).unwrap();
        Ca {
            cert,
            key,
            pem_file,
        }
    }

    /// A server certificate for `names` (DNS names or IPs), signed by this CA,
    /// expired when `expired`.
    pub fn leaf(&self, names: &[&str], expired: bool) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "chaosrun test upstream");
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert, key)
    }
}

/// A TLS listener on 127.0.0.1 that forwards each connection, decrypted, to
/// `backend`; runs on its own thread until the process ends.
pub fn tls_terminator(
    backend: SocketAddr,
    cert: &rcgen::Certificate,
    key: &rcgen::KeyPair,
) -> SocketAddr {
    let chain = vec![cert.der().clone()];
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Ok(mut back) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
                });
            }
        });
    });
    addr
}

/// What a hostile upstream does after reading a request head.
#[derive(Clone, Copy)]
pub enum Hostile {
    /// Never sends a byte back; holds the connection open.
    NoHead,
    /// Sends a streaming head, then a text event every 50 ms, forever.
    Endless,
}

/// A hostile HTTP upstream on 127.0.0.1 (its own thread); the base URL.
pub fn hostile_upstream(how: Hostile) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(hostile_conn(tcp, how));
            }
        });
    });
    format!("http://{addr}/v1")
}

async fn hostile_conn(mut tcp: tokio::net::TcpStream, how: Hostile) {
    let mut buf = vec![0u8; 65536];
    let mut seen = Vec::new();
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match tcp.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    match how {
        Hostile::NoHead => {
            // Read (and drop) whatever comes until the client goes.
            while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
        }
        Hostile::Endless => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\n";
            if tcp.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"la \"},\"finish_reason\":null}]}\n\n";
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
            loop {
                tick.tick().await;
                if tcp.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A self-signed certificate shaped like `openssl req -x509 -newkey rsa:2048
/// -nodes -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1` makes
/// (`CA:TRUE`, its own issuer, for 127.0.0.1), its key, and its PEM file.
pub fn self_signed(
    dir: &std::path::Path,
    name: &str,
) -> (rcgen::Certificate, rcgen::KeyPair, std::path::PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "127.0.0.1");
    let cert = params.self_signed(&key).unwrap();
    let pem = dir.join(format!("{name}.pem"));
    std::fs::write(&pem, cert.pem()).unwrap();
    (cert, key, pem)
}
