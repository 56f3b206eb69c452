//! One relayed call: forward it, then answer the agent with the upstream's
//! reply under the rule's fault (or the replacing error), and record how it
//! went (never a header or a body byte).

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::faults::{acting, Fault};
use super::{body, Upstream};
use crate::provider::cassette::tape::{Tape, TapeStart};
use crate::provider::replies::{wait_or_cancel, ReplyCtx, ReplyKind};
use crate::provider::wire::{self, ErrorInfo, Meta, Wire};

/// Relayed calls recorded per provider (the first ones).
const RELAYS_KEEP: usize = 256;
/// Upstream failures recorded per provider (the first ones).
const ERRORS_KEEP: usize = 16;
/// Cassette entries recorded per provider (the first ones).
const TAPE_KEEP: usize = 1024;

/// One relayed call, as recorded (never a header or a body byte).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RelayRecord {
    /// The request's sequence number (see `RequestRecord::seq`).
    pub seq: u64,
    /// The upstream's status (0: never answered).
    pub status: u16,
    /// The fault applied, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
    /// Bytes relayed to the agent.
    pub bytes: u64,
    /// Events (SSE) or chunks relayed to the agent.
    pub events: u64,
    /// How the relay ended: `relayed`, `stalled`, `cut_before_terminal`,
    /// `held_after_answer`, `replaced_by_error`, `changed` (a value fault
    /// changed the answer), `upstream_failed`, `client_gone`.
    pub outcome: String,
}

/// What the relays of one provider left: per-call records and failures.
#[derive(Debug, Default)]
pub(crate) struct RelayLog {
    pub relays: Mutex<Vec<RelayRecord>>,
    pub errors: Mutex<Vec<String>>,
    /// Recorded main calls (`--record`), in order of completion.
    pub tape: Mutex<Vec<crate::provider::cassette::Entry>>,
}

impl RelayLog {
    pub(super) fn record(&self, r: RelayRecord) {
        let mut v = self.relays.lock().unwrap();
        if v.len() < RELAYS_KEEP {
            v.push(r);
        }
    }

    pub(super) fn taped(&self, e: crate::provider::cassette::Entry) {
        let mut v = self.tape.lock().unwrap();
        if v.len() < TAPE_KEEP {
            v.push(e);
        }
    }

    pub(crate) fn error(&self, e: String) {
        let mut v = self.errors.lock().unwrap();
        if v.len() < ERRORS_KEEP {
            v.push(e);
        }
    }
}

/// The request being relayed.
pub(crate) struct Call<'a> {
    pub seq: u64,
    pub wire: Wire,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub stream: bool,
    /// For a reply rendered locally (a replacing error).
    pub ctx: &'a ReplyCtx<'a>,
    pub meta: &'a Meta,
    /// Record this call (`--record`): what the server knows of it.
    pub tape: Option<TapeStart>,
}

/// Whether an upstream status means chaosrun could not run the scenario (as
/// opposed to a real answer the agent must cope with).
fn failed_status(status: u16) -> bool {
    status >= 500 || matches!(status, 401 | 403 | 404)
}

/// Whether the upstream's reply streams (SSE), and the head relayed to the
/// agent: its status and the headers an agent acts on.
fn relayed_head(resp: &reqwest::Response, status: u16) -> (bool, axum::http::response::Builder) {
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut out =
        Response::builder().status(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY));
    for name in [
        header::CONTENT_TYPE,
        header::RETRY_AFTER,
        header::CACHE_CONTROL,
    ] {
        if let Some(v) = resp.headers().get(&name) {
            if let Ok(v) = HeaderValue::from_bytes(v.as_bytes()) {
                out = out.header(name, v);
            }
        }
    }
    (sse, out)
}

/// Forward `body` upstream and relay the reply with `fault` applied.
pub(crate) async fn relay(
    up: &Upstream,
    call: Call<'_>,
    body: Vec<u8>,
    fault: Option<&Fault>,
    log: std::sync::Arc<RelayLog>,
    cancel: &CancellationToken,
) -> Response {
    let wire = call.wire;
    let replacement = acting(fault).replacement();
    let fault_name = fault.map(|f| f.kind_name().to_string());
    let mut rec = RelayRecord {
        seq: call.seq,
        fault: fault_name,
        ..RelayRecord::default()
    };
    // A slot for the whole relay (released when its body ends).
    let slot = tokio::select! {
        s = up.slots.clone().acquire_owned() => s.ok(),
        _ = cancel.cancelled() => None,
    };
    let sent = match slot {
        None => Err("the provider shut down before a relay slot was free".into()),
        Some(_) => tokio::select! {
            r = up.send(wire, &call, body) => r,
            _ = cancel.cancelled() => Err(format!(
                "upstream {} had sent no response head when the scenario ended",
                up.base
            )),
        },
    };
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            rec.outcome = "upstream_failed".into();
            log.record(rec);
            if replacement.is_none() {
                log.error(e.clone());
            }
            return wire.error_response(&ErrorInfo::new(502, format!("chaosrun: {e}")));
        }
    };
    let status = resp.status().as_u16();
    rec.status = status;
    if let Some(e) = replacement {
        drop(resp);
        rec.outcome = "replaced_by_error".into();
        log.record(rec);
        let plan = e.plan(call.ctx);
        return wire::render(plan, wire, call.stream, call.meta, cancel).await;
    }
    if failed_status(status) {
        log.error(format!(
            "upstream {} answered {status} to POST {}",
            up.base, call.path
        ));
    }
    if acting(fault).mutates() && (200..300).contains(&status) {
        let (sse, _) = relayed_head(&resp, status);
        let at = (rec, log);
        let r = super::mutated::reply(resp, sse, &call, fault, up.bounds, at, cancel);
        return r.await;
    }
    let delay = acting(fault).first_byte_delay();
    if !delay.is_zero() && !wait_or_cancel(delay, cancel).await {
        rec.outcome = "client_gone".into();
        log.record(rec);
        return Response::new(crate::provider::replies::abort_body());
    }
    let (sse, out) = relayed_head(&resp, status);
    let body = body::relay_body(
        resp,
        body::Plan {
            wire,
            sse,
            fault: fault.cloned(),
            failed: failed_status(status),
            upstream: up.base.clone(),
            bounds: up.bounds,
            _slot: slot,
            tape: call.tape.map(|t| Tape::new(t, wire, status, sse)),
        },
        rec,
        log,
        cancel.clone(),
    );
    out.body(body).unwrap_or_else(|_| {
        wire.error_response(&ErrorInfo::new(502, "chaosrun: bad upstream head"))
    })
}
