//! A model call's answer: classified and recorded, held by its rule's
//! `wait_for`, then planned and played on the wire, replayed from a
//! cassette, or relayed upstream with its fault.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::response::Response;

use super::classify::{record, unscripted, Served};
use super::intake::{parse_call, Forward, ReadBody, RequestHead};
use super::Shared;
use crate::message::Message;
use crate::provider::replies::{Plan, Reply, ReplyCtx, Source};
use crate::provider::rules::Rule;
use crate::provider::wire::{self, Meta};
use crate::provider::CallKind;

pub(super) async fn generate(
    shared: Arc<Shared>,
    head: RequestHead,
    body: ReadBody,
    stream: Option<bool>,
    model: Option<String>,
    forward: Forward,
) -> Response {
    let wire = shared.wire;
    let (head, parsed, upstream_body) =
        match parse_call(&shared, head, body, stream, model, &forward) {
            Ok(call) => call,
            Err(resp) => return resp,
        };
    let (seq, size) = (head.seq, head.size);
    let class = shared.classify(&parsed, head.size);
    let (kind, main_index, picked) = (class.kind, class.main_index, class.picked);
    if kind == CallKind::Probe {
        // The faulted turn is over at the latest now.
        shared.turn_over().await;
    }
    let rule = picked.map(|(_, r)| r);
    let default_reply;
    let probe_first = (kind == CallKind::Probe)
        .then(|| shared.probe_first(&parsed))
        .flatten();
    let reply: &Reply = match (rule, probe_first) {
        (Some(rule), _) => &rule.reply,
        (None, Some(first)) => first,
        (None, None) => {
            default_reply = unscripted(kind, parsed.probe.as_deref(), &shared.nonce);
            &default_reply
        }
    };
    if let Some(refusal) = shared.refuse_credential(&head, kind, main_index) {
        shared.push(record(head, parsed, kind, main_index, None, refusal.0));
        shared.answered(seq);
        return refusal.1;
    }
    if let Some(overflow) = class.overflow {
        shared.push(record(head, parsed, kind, main_index, None, overflow.0));
        shared.answered(seq);
        return wire.error_response(&overflow.1);
    }

    // Proxy mode: unmatched calls and `relay` rules go upstream.
    let relayed = match (&shared.upstream, reply.source()) {
        (Some(_), Source::Upstream { fault }) => Some(fault.cloned()),
        (Some(_), _) if rule.is_none() => Some(None),
        _ => None,
    };
    let (key, tape) = shared.cassette_key(reply, relayed.is_some(), kind, main_index, &parsed);
    // Responses: what this reply's conversation is, to continue it later.
    let history = wire
        .format()
        .keeps_conversations()
        .then(|| parsed.messages.clone());
    let path = head.path.clone();
    let served = match &relayed {
        Some(_) => Served::named(Reply::RELAYED),
        None => Served::reply(reply, wire, parsed.stream),
    };
    let (stream, model) = (parsed.stream, parsed.model.clone());
    shared.push(record(
        head,
        parsed,
        kind,
        main_index,
        picked.map(|(i, _)| i),
        served,
    ));
    let answering = super::answering::Answering::new(shared.clone(), seq, kind, main_index);

    shared.hold(picked, main_index).await;
    shared.subagents_closed(kind).await;
    let call = Accepted {
        reply,
        picked,
        main_index,
        key,
        tape,
        relayed,
        history,
        path,
        stream,
        model,
        seq,
        size,
    };
    let resp = answer(&shared, call, upstream_body, &forward).await;
    answering.until_sent(resp)
}

impl Shared {
    /// On a row with a `credential:`: a main call at or past the expiry
    /// expires the first key, and a call whose key is not the current one
    /// gets the wire's 401 (`auth_expired`; an `at_refusal` refresh is made
    /// before it is sent). What the record says and the response, or None.
    fn refuse_credential(
        &self,
        head: &RequestHead,
        kind: crate::provider::CallKind,
        main_index: Option<u64>,
    ) -> Option<(Served, Response)> {
        let credential = self.credential.as_ref()?;
        if let (crate::provider::CallKind::Main, Some(i)) = (kind, main_index) {
            credential.note_main(i);
        }
        let later_turn = kind == crate::provider::CallKind::Probe;
        if !credential.refuses(head.key.as_deref(), later_turn) {
            return None;
        }
        let reply = Reply::credential_refusal();
        let served = Served::reply(&reply, self.wire, false);
        let error = wire::ErrorInfo::of_class(wire::ErrorClass::Auth);
        credential.refused(later_turn);
        Some((served, self.wire.error_response(&error)))
    }
}

/// A recorded call, ready to be answered.
struct Accepted<'a> {
    reply: &'a Reply,
    picked: Option<(usize, &'a Rule)>,
    main_index: Option<u64>,
    key: Option<crate::provider::cassette::MatchKey>,
    tape: Option<crate::provider::cassette::tape::TapeStart>,
    /// Relayed upstream, with this fault (or none).
    relayed: Option<Option<crate::provider::upstream::faults::Fault>>,
    /// Responses: the conversation, to continue it later.
    history: Option<Vec<Message>>,
    path: String,
    stream: bool,
    model: Option<String>,
    seq: u64,
    size: usize,
}

/// Plan and play the reply of `call` (or relay it upstream).
async fn answer(
    shared: &Shared,
    call: Accepted<'_>,
    upstream_body: Option<Vec<u8>>,
    forward: &Forward,
) -> Response {
    let wire = shared.wire;
    if let Some(i) = call.main_index {
        let mut held = shared.held.subscribe();
        tokio::select! {
            _ = held.wait_for(|h| h.is_none_or(|k| i < k)) => {}
            _ = shared.cancel.cancelled() => {}
        }
    }
    let reply_seq = shared.reply_seq.fetch_add(1, Ordering::SeqCst);
    let call_id_prefix = format!("call_{}_{reply_seq}", shared.prefix);
    let ctx = ReplyCtx {
        nonce: &shared.nonce,
        request_bytes: call.size,
        main_index: call.main_index.unwrap_or(0),
        tools: &shared.tools,
        call_id_prefix: &call_id_prefix,
    };
    let planned = match (call.reply.source(), call.picked, &call.key) {
        (Source::Replayed { .. }, Some((i, _)), Some(key)) => {
            shared.replay(i, call.reply, call.main_index.unwrap_or(0), key, &ctx)
        }
        _ => call.reply.plan(&ctx),
    };
    // The faulted turn's calls (main and subagent), not a probe turn's
    // (`probe_first`), which no check of the faulted turn counts.
    if !planned.issued.is_empty() && call.main_index.is_some() {
        shared.issued.lock().unwrap().extend(planned.issued);
    }
    let meta = Meta {
        id: format!("{}{}{reply_seq}", wire.id_prefix(), shared.prefix),
        created: crate::units::unix_now() as u64,
        model: call.model.unwrap_or_else(|| "chaosrun".into()),
        request_bytes: call.size,
    };
    if let (Some(fault), Some(up), Some(body)) = (call.relayed, &shared.upstream, upstream_body) {
        let relayed = crate::provider::upstream::Call {
            seq: call.seq,
            wire,
            path: &call.path,
            query: forward.query.as_deref(),
            headers: &forward.headers,
            stream: call.stream,
            ctx: &ctx,
            meta: &meta,
            tape: call.tape,
        };
        let log = shared.relays.clone();
        return crate::provider::upstream::relay(
            up,
            relayed,
            body,
            fault.as_ref(),
            log,
            &shared.cancel,
        )
        .await;
    }
    if let (Some(history), Plan::Beats(beats)) = (call.history, &planned.plan) {
        shared.remember(&meta.id, history, beats);
    }
    let resp = wire::render(planned.plan, wire, call.stream, &meta, &shared.cancel).await;
    let sleep = (shared.sleeps.subscribe(), shared.silenced.clone());
    super::asleep::gate(resp, sleep, shared.cancel.clone())
}
