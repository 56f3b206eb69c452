//! A relayed answer changed by a value fault (`cut_for_length`,
//! `empty_answer`, `refused_answer`, `drop_tool_calls`, `break_tool_args`,
//! `reuse_call_id`, `duplicate_frames`): the upstream's reply is
//! read to its end within the upstream's bounds (SSE events one by one
//! through the splitter, or a whole JSON body up to [`WHOLE_CAP`]), decoded
//! into wire-neutral events as a cassette records them (bounded the same
//! way), changed by the fault, and sent as chaosrun's own reply on the
//! wire, paced as it came. Such a call is not taped (`--record` keeps real
//! answers only).

use std::time::{Duration, Instant};

use axum::response::Response;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::client::Bounds;
use super::faults::{acting, Fault};
use super::relay::{Call, RelayLog, RelayRecord};
use super::sse::Splitter;
use crate::provider::cassette::decode::Decoder;
use crate::provider::cassette::{Entry, MatchKey};
use crate::provider::wire::{self, ErrorInfo};

/// The most bytes of a whole (non-streaming) JSON answer read.
pub(crate) const WHOLE_CAP: usize = 16 << 20;

/// Read `resp` to its end into the decoder; `Err` names why it stopped.
async fn read(
    resp: reqwest::Response,
    sse: bool,
    dec: &mut Decoder,
    bounds: Bounds,
    cancel: &CancellationToken,
) -> Result<(), String> {
    let start = Instant::now();
    let mut body = resp.bytes_stream();
    let mut splitter = Splitter::default();
    let mut whole = Vec::new();
    loop {
        let left = bounds.reply.saturating_sub(start.elapsed());
        let wait = bounds.idle.min(left).max(Duration::from_millis(1));
        let next = tokio::select! {
            n = tokio::time::timeout(wait, body.next()) => n,
            _ = cancel.cancelled() => return Err("the scenario ended".into()),
        };
        match next {
            Err(_) => return Err("the upstream's reply went silent or past its bound".into()),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(format!("the upstream's reply broke: {e}")),
            Ok(Some(Ok(chunk))) if sse => {
                for ev in splitter.push(&chunk) {
                    dec.sse_event(&ev);
                }
            }
            Ok(Some(Ok(chunk))) => {
                if whole.len() + chunk.len() > WHOLE_CAP {
                    return Err(format!("the upstream's answer is over {WHOLE_CAP} bytes"));
                }
                whole.extend_from_slice(&chunk);
            }
        }
    }
    if sse {
        if let Some(rest) = splitter.finish() {
            dec.sse_event(&rest);
        }
    } else {
        dec.whole(&whole);
    }
    Ok(())
}

/// The upstream's answer `resp` (a 2xx), changed by `fault` and sent as
/// chaosrun's own reply.
pub(crate) async fn reply(
    resp: reqwest::Response,
    sse: bool,
    call: &Call<'_>,
    fault: Option<&Fault>,
    bounds: Bounds,
    (mut rec, log): (RelayRecord, std::sync::Arc<RelayLog>),
    cancel: &CancellationToken,
) -> Response {
    let mut dec = Decoder::new(call.wire);
    if let Err(e) = read(resp, sse, &mut dec, bounds, cancel).await {
        rec.outcome = "upstream_failed".into();
        log.record(rec);
        log.error(e.clone());
        return call
            .wire
            .error_response(&ErrorInfo::new(502, format!("chaosrun: {e}")));
    }
    let (events, truncated) = dec.finish();
    rec.outcome = "changed".into();
    log.record(rec);
    let entry = Entry {
        call: 0,
        key: MatchKey::default(),
        status: 200,
        events,
        error: None,
        truncated,
        request: Vec::new(),
    };
    let plan = crate::provider::cassette::player::plan(&entry, call.ctx.nonce, acting(fault));
    wire::render(plan, call.wire, call.stream, call.meta, cancel).await
}
