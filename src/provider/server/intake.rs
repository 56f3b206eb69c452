//! A request's intake: its body read within [`super::BODY_LIMIT`] and hashed,
//! its head (sequence number, time, headers with credentials redacted),
//! routing by the wire, and a model call parsed (a Responses call's stored
//! conversation prepended) or refused (too large, malformed, a relay loop).
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;

use super::answer::generate;
use super::answering::Answering;
use super::{Shared, BODY_LIMIT};
use crate::provider::recording::{BodyHash, HEADERS_KEEP_BYTES};
use crate::provider::wire::{json_response, request, ErrorInfo, Route};
use crate::provider::CallKind;

/// What every record takes from the request line and headers.
pub(super) struct RequestHead {
    pub(super) seq: u64,
    pub(super) at: f64,
    pub(super) method: String,
    pub(super) path: String,
    pub(super) headers: Vec<String>,
    pub(super) size: usize,
    pub(super) body_sha256: String,
    /// The credential the request carries (compared, never recorded).
    pub(super) key: Option<String>,
    /// Its fingerprint, recorded on a row with a `credential:`.
    pub(super) credential: Option<String>,
}

impl Shared {
    /// A request that came back to this proxy: 508, and the scenario is an
    /// ERROR (the upstream leads back here).
    fn refuse_loop(&self, head: RequestHead) -> Response {
        let base = self.upstream.as_ref().map_or("", |u| u.base());
        let message = format!(
            "chaosrun: this request came back to the proxy that relayed it: upstream {base} \
             leads back here (a relay loop)"
        );
        self.relays.error(message.clone());
        self.push_other(head, "relay_loop", None);
        self.wire.error_response(&ErrorInfo::new(508, message))
    }

    fn head(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &ReadBody,
    ) -> RequestHead {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let key = crate::provider::credential::of_request(headers, uri.query());
        let credential = self
            .credential
            .as_ref()
            .and(key.as_deref())
            .map(crate::provider::credential::fingerprint);
        self.seq_tx.send_modify(|v| *v = (*v).max(seq + 1));
        RequestHead {
            seq,
            at: self.started.elapsed().as_secs_f64(),
            method: method.to_string(),
            path: uri.path().to_string(),
            headers: bounded_headers(headers),
            size: body.size,
            body_sha256: body.sha256.clone(),
            key,
            credential,
        }
    }
}

/// Request headers whose values are credentials (kept out of recordings).
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "cookie",
];

fn bounded_headers(headers: &HeaderMap) -> Vec<String> {
    let mut out = Vec::new();
    let mut used = 0;
    for (name, value) in headers {
        // A credential is never recorded, only that one was sent.
        let line = if CREDENTIAL_HEADERS.contains(&name.as_str()) {
            format!("{name}: <redacted, {} bytes>", value.len())
        } else {
            format!("{}: {}", name, String::from_utf8_lossy(value.as_bytes()))
        };
        if used + line.len() > HEADERS_KEEP_BYTES {
            break;
        }
        used += line.len();
        out.push(line);
    }
    out
}

/// A request body read within [`BODY_LIMIT`].
#[derive(Default)]
pub(super) struct ReadBody {
    /// The bytes, or None when the body was longer than the limit.
    bytes: Option<Vec<u8>>,
    /// Its full length.
    size: usize,
    /// SHA-256 of the whole body, hex (empty for an empty body).
    sha256: String,
}

/// Read a body to its end, holding at most [`BODY_LIMIT`] bytes of it.
pub(super) async fn read_body(body: Body, headers: &HeaderMap) -> ReadBody {
    use futures_util::StreamExt;
    let hint = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    let mut bytes = Some(Vec::with_capacity(hint.min(BODY_LIMIT)));
    let mut size = 0;
    let mut hash = BodyHash::default();
    let mut stream = body.into_data_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        size += chunk.len();
        hash.update(&chunk);
        if let Some(b) = bytes.as_mut() {
            if b.len() + chunk.len() > BODY_LIMIT {
                bytes = None;
            } else {
                b.extend_from_slice(&chunk);
            }
        }
    }
    ReadBody {
        bytes,
        size,
        sha256: hash.finish(),
    }
}

pub(super) async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let body = read_body(body, &headers).await;
    let head = shared.head(&method, &uri, &headers, &body);
    let wire = shared.wire;
    let route = wire.route(method.as_str(), uri.path());
    if let (Some(fault), false) = (
        shared.endpoint_fault,
        matches!(route, Route::Generate { .. }),
    ) {
        drop(body);
        return endpoint_faulted(&shared, head, fault).await;
    }
    match route {
        Route::NotServed => {
            drop(body);
            let message = format!(
                "chaosrun: no route for {} {} on the {wire} wire",
                head.method, head.path
            );
            shared.push_other(head, "not_found", None);
            wire.error_response(&ErrorInfo::new(404, message))
        }
        Route::Models => {
            drop(body);
            shared.push_other(head, "models", None);
            json_response(
                StatusCode::OK,
                &wire.models(crate::units::unix_now() as u64),
            )
        }
        Route::Generate { stream, model } => {
            let call = Forward {
                query: uri.query().map(String::from),
                headers,
            };
            generate(shared, head, body, stream, model, call).await
        }
    }
}

/// A request besides a model call under the row's `endpoint_fault`
/// ([`crate::provider::endpoints`]): recorded, then never answered (until the
/// provider stops) or answered with the fault's status.
async fn endpoint_faulted(
    shared: &Arc<Shared>,
    head: RequestHead,
    fault: crate::provider::EndpointFault,
) -> Response {
    use crate::provider::endpoints::{RECORDED_ERROR, RECORDED_HANG};
    use crate::provider::EndpointFault;
    let path = head.path.clone();
    match fault {
        EndpointFault::Hang {} => {
            // Over when the agent gives the request up (this future is
            // dropped with its connection) or the provider stops.
            let seq = head.seq;
            shared.push_other_open(head, RECORDED_HANG);
            let _answering = Answering::new(shared.clone(), seq, CallKind::Aux, None);
            shared.cancel.cancelled().await;
            let message = format!("chaosrun: {path} was never answered (the provider stopped)");
            shared.wire.error_response(&ErrorInfo::new(503, message))
        }
        EndpointFault::Error { status } => {
            shared.push_other(head, RECORDED_ERROR, None);
            let message = format!("chaosrun injected endpoint error ({status}) on {path}");
            shared.wire.error_response(&ErrorInfo::new(status, message))
        }
    }
}

/// What proxy mode forwards besides the body.
pub(super) struct Forward {
    pub(super) query: Option<String>,
    pub(super) headers: HeaderMap,
}

/// The request parsed (and, on Responses, its stored conversation
/// prepended), with the raw body kept only for an upstream; or the error
/// response that refuses it (too large, malformed, unknown previous id).
#[allow(clippy::result_large_err)]
pub(super) fn parse_call(
    shared: &Shared,
    head: RequestHead,
    body: ReadBody,
    stream: Option<bool>,
    model: Option<String>,
    forward: &Forward,
) -> Result<(RequestHead, request::Parsed, Option<Vec<u8>>), Response> {
    let wire = shared.wire;
    let Some(bytes) = body.bytes else {
        let message = format!(
            "chaosrun: request body of {} bytes is over the {BODY_LIMIT}-byte limit",
            head.size
        );
        shared.push_other(head, "too_large", None);
        return Err(wire.error_response(&ErrorInfo::new(413, message)));
    };
    if shared
        .upstream
        .as_ref()
        .is_some_and(|u| u.is_loop(&forward.headers))
    {
        return Err(shared.refuse_loop(head));
    }
    let parsed = request::parse(wire, &bytes, stream, model, &shared.nonce);
    // Never keep the raw body after parsing, unless it goes upstream.
    let upstream_body = shared.upstream.is_some().then_some(bytes);
    let mut parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            shared.push_other(head, "bad_request", None);
            let message = format!("chaosrun: malformed request body: {e}");
            return Err(wire.error_response(&ErrorInfo::new(400, message)));
        }
    };
    if let Some(previous) = parsed.previous_response_id.clone() {
        match shared.conversation(&previous) {
            Some(mut earlier) => {
                earlier.append(&mut parsed.messages);
                parsed.messages = earlier;
            }
            // Proxy mode: the upstream may know it (it answered that call).
            None if shared.upstream.is_some() => {}
            None => {
                shared.push_other(head, "bad_request", Some(previous.clone()));
                let mut e = ErrorInfo::new(
                    400,
                    format!("Previous response with id '{previous}' not found."),
                );
                e.code = Some("previous_response_not_found".into());
                return Err(wire.error_response(&e));
            }
        }
    }

    Ok((head, parsed, upstream_body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_recorded_redacted() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer sk-secret".parse().unwrap());
        h.insert("x-goog-api-key", "sk-secret".parse().unwrap());
        h.insert("content-type", "application/json".parse().unwrap());
        let lines = bounded_headers(&h);
        assert!(lines.iter().all(|l| !l.contains("sk-secret")), "{lines:?}");
        assert!(lines.contains(&"authorization: <redacted, 16 bytes>".to_string()));
        assert!(lines.contains(&"content-type: application/json".to_string()));
    }
}
