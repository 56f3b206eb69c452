//! Which certificates an upstream may present. Trusted as roots: the
//! Mozilla roots compiled in (webpki-roots) and every certificate of
//! `--upstream-ca` / `upstream.ca`. Trusted as itself: a server that
//! presents exactly one of the `--upstream-ca` certificates, byte for byte,
//! as its own (a self-signed certificate made with `openssl req -x509`,
//! which marks it `CA:TRUE`, is refused by path validation as
//! `CaUsedAsEndEntity`; curl, Python and Node accept it as its own trust
//! anchor). Its name must still match the upstream's host, and the
//! handshake's signatures are verified as always. A certificate refused
//! either way fails with what to give instead.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, Error, RootCertStore, SignatureScheme};

/// The TLS set-up of the upstream client: the roots above and the verifier
/// that also trusts a given certificate as itself.
pub(super) fn client_config(
    given: Vec<CertificateDer<'static>>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in &given {
        // A certificate that is no CA cannot be a root; it can still be
        // trusted as itself below.
        let _ = roots.add(cert.clone());
    }
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| format!("cannot build the upstream's certificate check: {e}"))?;
    let verifier = Arc::new(Verifier {
        inner,
        given,
        provider: provider.clone(),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS for the upstream: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(config)
}

#[derive(Debug)]
struct Verifier {
    inner: Arc<WebPkiServerVerifier>,
    /// The `--upstream-ca` certificates, each also trusted as itself.
    given: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

/// What to do about a refused certificate, for the error: `given` says
/// whether `--upstream-ca` gave any certificate.
fn hint(e: &Error, given: bool) -> String {
    let fix = if given {
        "give with --upstream-ca exactly the certificate the upstream presents (it is then trusted as itself), or the CA that signed it; its name must match the upstream's host"
    } else {
        "give the upstream's own certificate (a self-signed one is trusted as itself) or the CA that signed it with --upstream-ca (`upstream.ca` in a profile)"
    };
    format!("{e}; {fix}")
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if self.given.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            let cert = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&cert, server_name)
                .map_err(|e| Error::General(hint(&e, true)))?;
            return Ok(ServerCertVerified::assertion());
        }
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            .map_err(|e| Error::General(hint(&e, !self.given.is_empty())))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
