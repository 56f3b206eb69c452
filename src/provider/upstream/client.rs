//! The HTTP client that reaches the upstream: rustls TLS with the Mozilla
//! roots compiled in (webpki-roots) plus an optional private CA or the
//! upstream's own certificate (`upstream.ca` / `--upstream-ca`; see
//! [`super::trust`]), the upstream's time bounds, and what a failed call is
//! called in a report (a certificate problem by name, a time bound by its
//! setting).

use std::path::Path;
use std::time::Duration;

/// How long the upstream may take to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of a CA file read (a bundle of a few hundred certificates).
pub(super) const CA_FILE_CAP: u64 = 4 << 20;

/// Default `upstream.first_byte_timeout`: seconds until the response head.
pub const FIRST_BYTE_TIMEOUT: f64 = 60.0;
/// Default `upstream.idle_timeout`: seconds of silence inside a reply.
pub const IDLE_TIMEOUT: f64 = 60.0;
/// Default `upstream.reply_timeout`: seconds a whole relayed reply may last.
pub const REPLY_TIMEOUT: f64 = 300.0;

/// The time bounds of one upstream call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// From sending the request to the response head.
    pub first_byte: Duration,
    /// Longest silence between two chunks of the reply.
    pub idle: Duration,
    /// The whole reply, from its head to its end.
    pub reply: Duration,
}

/// The client: no proxy from the environment, no redirects, rustls.
pub(super) fn build(ca: Option<&Path>) -> Result<reqwest::Client, String> {
    let given = match ca {
        Some(path) => read_ca(path)?,
        None => Vec::new(),
    };
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .no_proxy()
        .use_preconfigured_tls(super::trust::client_config(given)?)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the upstream client: {e}"))
}

/// The certificates of a PEM file (one CA, a bundle, or the upstream's own
/// certificate), bounded in size.
fn read_ca(path: &Path) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    use std::io::Read;
    let shown = path.display();
    // Checked before opening: opening a FIFO would block.
    let meta = std::fs::metadata(path).map_err(|e| format!("upstream CA {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("upstream CA {shown}: not a regular file"));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("upstream CA {shown}: {e}"))?;
    let mut pem = Vec::new();
    file.take(CA_FILE_CAP + 1)
        .read_to_end(&mut pem)
        .map_err(|e| format!("upstream CA {shown}: {e}"))?;
    if pem.len() as u64 > CA_FILE_CAP {
        return Err(format!(
            "upstream CA {shown}: over the {CA_FILE_CAP}-byte limit of a CA file"
        ));
    }
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("upstream CA {shown}: not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "upstream CA {shown}: no `BEGIN CERTIFICATE` block in it"
        ));
    }
    Ok(certs)
}

/// Every message of an error and its sources, joined.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// What a failed send to `base` is called: a certificate problem by name,
/// else the error's own chain.
pub(super) fn describe(base: &str, e: &reqwest::Error) -> String {
    let chain = error_chain(e);
    match certificate_problem(&chain) {
        Some(problem) => format!("upstream {base}: TLS certificate problem: {problem} ({chain})"),
        None => format!("upstream {base} unreachable: {chain}"),
    }
}

/// The certificate problem a rustls error chain names, said plainly.
fn certificate_problem(chain: &str) -> Option<&'static str> {
    let lower = chain.to_ascii_lowercase();
    if !lower.contains("certificate") {
        return None;
    }
    Some(
        if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
            "unknown issuer: the certificate is not signed by a CA chaosrun trusts \
             (for a private CA give --upstream-ca FILE or the profile's upstream.ca)"
        } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
            "name mismatch: the certificate is not valid for the upstream's host name"
        } else if lower.contains("expired") {
            "expired: the certificate's validity period has ended"
        } else if lower.contains("notvalidyet") || lower.contains("not valid yet") {
            "not yet valid: the certificate's validity period has not begun"
        } else if lower.contains("revoked") {
            "revoked"
        } else {
            "the certificate was refused"
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_problems_are_named() {
        let p = |s| certificate_problem(s).unwrap_or("none");
        assert!(p("invalid peer certificate: UnknownIssuer").starts_with("unknown issuer"));
        assert!(p("invalid peer certificate: NotValidForName").starts_with("name mismatch"));
        assert!(p("invalid peer certificate: certificate expired: verification time 5, but certificate is not valid after 4").starts_with("expired"));
        assert_eq!(p("connection refused"), "none");
    }

    #[test]
    fn a_ca_file_must_hold_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let e = build(Some(&f)).unwrap_err();
        assert!(
            e.contains("no `BEGIN CERTIFICATE`") || e.contains("not PEM"),
            "{e}"
        );
        let e = build(Some(dir.path())).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = build(Some(&dir.path().join("missing.pem"))).unwrap_err();
        assert!(e.contains("missing.pem"), "{e}");
    }
}
