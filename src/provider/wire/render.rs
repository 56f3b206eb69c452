//! Plays a reply's [`Plan`] on one wire: SSE frames paced by the plan's waits
//! for a streaming request, one JSON body (or the start of one, for a reply
//! that never finishes) otherwise.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::{json_response, sse_response, Answer, Event, Meta, Wire};
use crate::provider::replies::{abort_body, script_body, wait_or_cancel, Beat, Plan, Step};

/// The response for `plan` on `wire`. Only a hang waits before returning;
/// every other wait happens inside the streaming body.
pub(crate) async fn render(
    plan: Plan,
    wire: Wire,
    stream: bool,
    meta: &Meta,
    cancel: &CancellationToken,
) -> Response {
    match plan {
        Plan::Error(e) => wire.error_response(&e),
        Plan::ErrorIn200(e) => {
            // The wire's error body, under a success status.
            let mut resp = wire.error_response(&e);
            *resp.status_mut() = StatusCode::OK;
            resp.headers_mut().remove(header::RETRY_AFTER);
            resp
        }
        Plan::Hang(d) => {
            wait_or_cancel(d, cancel).await;
            Response::new(abort_body())
        }
        Plan::Raw {
            status,
            content_type,
            body,
        } => {
            let mut resp = Response::new(axum::body::Body::from(body));
            *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            if let Ok(v) = HeaderValue::from_str(&content_type) {
                resp.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            resp
        }
        Plan::Beats(beats) if stream => {
            sse_response(script_body(streamed(wire, meta, beats), cancel.clone()))
        }
        Plan::Beats(beats) => whole(wire, meta, beats, cancel),
    }
}

/// The SSE steps of `beats` on `wire`. Events with no wait, flush or cut
/// between them go out as one body chunk (the same bytes, fewer writes).
pub(crate) fn streamed(wire: Wire, meta: &Meta, beats: Vec<Beat>) -> Vec<Step> {
    let mut enc = wire.encoder(meta);
    let mut steps = encode(&mut *enc, beats.clone());
    if let Some(Beat::Forever(round)) = beats.into_iter().find(|b| matches!(b, Beat::Forever(_))) {
        steps.push(Step::Forever(Box::new(move || {
            encode(&mut *enc, round.clone())
        })));
    }
    steps
}

/// The steps of `beats` through `enc`, up to the first [`Beat::Forever`].
fn encode(enc: &mut dyn super::Encoder, beats: Vec<Beat>) -> Vec<Step> {
    let mut steps = Vec::with_capacity(4);
    let mut out = Vec::with_capacity(1024);
    let flush = |out: &mut Vec<u8>, steps: &mut Vec<Step>| {
        if !out.is_empty() {
            steps.push(Step::Data(Bytes::from(std::mem::take(out))));
        }
    };
    for beat in beats {
        match beat {
            Beat::Emit(ev) => enc.event(&ev, &mut out),
            Beat::Wait(d) => {
                flush(&mut out, &mut steps);
                steps.push(Step::Wait(d));
            }
            Beat::Flush => {
                flush(&mut out, &mut steps);
                steps.push(Step::Flush);
            }
            Beat::Cut => {
                flush(&mut out, &mut steps);
                steps.push(Step::Cut);
            }
            Beat::Forever(_) => break,
        }
    }
    flush(&mut out, &mut steps);
    steps
}

/// A non-streaming answer: the whole body; a mid-stream error becomes the
/// wire's error response; a reply that is cut sends the start of its body,
/// then waits what the plan waits after its last event, then cuts.
fn whole(wire: Wire, meta: &Meta, beats: Vec<Beat>, cancel: &CancellationToken) -> Response {
    if beats.iter().any(|b| matches!(b, Beat::Forever(_))) {
        return whole_forever(wire, meta, beats, cancel);
    }
    let cut = beats.iter().any(|b| matches!(b, Beat::Cut));
    let last_emit = beats.iter().rposition(|b| matches!(b, Beat::Emit(_)));
    let mut events = Vec::new();
    let mut tail = Vec::new();
    for (pos, beat) in beats.into_iter().enumerate() {
        match beat {
            Beat::Emit(ev) => events.push(ev),
            Beat::Wait(d) if last_emit.is_none_or(|l| pos > l) => tail.push(Step::Wait(d)),
            _ => {}
        }
    }
    if !cut {
        if let Some(Event::Error(e)) = events.iter().find(|e| matches!(e, Event::Error(_))) {
            return wire.error_response(e);
        }
        return json_response(StatusCode::OK, &wire.whole(meta, &events));
    }
    let mut steps = Vec::new();
    if !events.is_empty() {
        let prefix = partial_body(wire, meta, &events);
        steps.push(Step::Data(Bytes::from(prefix)));
        steps.push(Step::Flush);
    }
    steps.extend(tail);
    steps.push(Step::Cut);
    let mut resp = Response::new(script_body(steps, cancel.clone()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A non-streaming reply that never ends: the start of the whole body (up to
/// the open text, as [`partial_body`] cuts it), then each round's text
/// deltas, JSON-escaped, inside that still-open string; a round with no text
/// (a keepalive) sends one space, which JSON allows before a value, so the
/// body stays valid JSON as far as it goes.
fn whole_forever(
    wire: Wire,
    meta: &Meta,
    beats: Vec<Beat>,
    cancel: &CancellationToken,
) -> Response {
    let mut events = Vec::new();
    let mut round = Vec::new();
    for beat in beats {
        match beat {
            Beat::Emit(ev) => events.push(ev),
            Beat::Forever(r) => {
                round = r;
                break;
            }
            _ => {}
        }
    }
    let mut steps = Vec::new();
    let has_text = round
        .iter()
        .any(|b| matches!(b, Beat::Emit(Event::TextDelta(_))));
    if has_text {
        // The prefix needs a non-empty text to cut at: the round's first delta.
        let first = round.iter().find_map(|b| match b {
            Beat::Emit(Event::TextDelta(t)) => Some(t.clone()),
            _ => None,
        });
        events.extend(first.map(Event::TextDelta));
        steps.push(Step::Data(Bytes::from(partial_body(wire, meta, &events))));
    }
    steps.push(Step::Forever(Box::new(move || {
        let mut out = Vec::new();
        for beat in &round {
            match beat {
                Beat::Emit(Event::TextDelta(t)) => {
                    let quoted = serde_json::Value::String(t.clone()).to_string();
                    out.push(Step::Data(Bytes::from(
                        quoted[1..quoted.len() - 1].to_string(),
                    )));
                }
                Beat::Emit(_) if !has_text => out.push(Step::Data(Bytes::from_static(b" "))),
                Beat::Wait(d) => out.push(Step::Wait(*d)),
                _ => {}
            }
        }
        out
    })));
    let mut resp = Response::new(script_body(steps, cancel.clone()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The whole body for `events`, cut just after the answer's text (before
/// its closing quote), or halfway when there is no text.
fn partial_body(wire: Wire, meta: &Meta, events: &[Event]) -> String {
    let body = wire.whole(meta, events).to_string();
    let answer = Answer::collect(events);
    let text = if answer.text.is_empty() {
        answer.reasoning.unwrap_or_default()
    } else {
        answer.text
    };
    if !text.is_empty() {
        let quoted = serde_json::Value::String(text).to_string();
        let open = &quoted[..quoted.len() - 1];
        if let Some(at) = body.find(open) {
            return body[..at + open.len()].to_string();
        }
    }
    let mut half = body.len() / 2;
    while !body.is_char_boundary(half) {
        half -= 1;
    }
    body[..half].to_string()
}
