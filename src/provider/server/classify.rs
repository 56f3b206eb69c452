//! What a model call is (probe, subagent, main with its rule or over the
//! context window, auxiliary), counted; what the record says was served;
//! the record itself, kept and shown to the observer.
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::intake::RequestHead;
use super::Shared;
use crate::provider::recording::{CallKind, RequestRecord};
use crate::provider::replies::Reply;
use crate::provider::rules::{self, Rule};
use crate::provider::wire::{self, request, ErrorInfo, Wire};

/// The answer to a call no rule scripts: `alive NONCE` to a probe,
/// `subagent done NONCE` to a subagent's call, `ok` otherwise.
pub(super) fn unscripted(kind: CallKind, probe: Option<&str>, nonce: &str) -> Reply {
    let text = match kind {
        CallKind::Probe => format!("alive {}", probe.unwrap_or_default()),
        CallKind::Subagent => format!("subagent done {nonce}"),
        _ => "ok".to_string(),
    };
    Reply::plain(text)
}

/// What one model call is: its kind, main index and rule, or, for a main
/// call over the context window, the record and error that answer it.
pub(super) struct Classified<'a> {
    pub(super) kind: CallKind,
    pub(super) main_index: Option<u64>,
    pub(super) picked: Option<(usize, &'a Rule)>,
    pub(super) overflow: Option<(Served, ErrorInfo)>,
}

/// What a record says was served.
pub(super) struct Served {
    reply: String,
    error: Option<crate::provider::recording::ReplyError>,
}

impl Served {
    pub(super) fn named(reply: &str) -> Served {
        Served {
            reply: reply.to_string(),
            error: None,
        }
    }

    /// The reply's error hint as this wire delivers it: the status the wire
    /// gives a classed error, and no retry-after where the wire's mid-stream
    /// error event cannot carry one (only Gemini's error frame has
    /// `RetryInfo`).
    pub(super) fn reply(reply: &Reply, wire: Wire, stream: bool) -> Served {
        Served {
            reply: reply.kind_name().to_string(),
            error: reply.error_hint_on(wire, stream),
        }
    }
}

impl Shared {
    /// Run the turn-over hook, once, and wait until it is done (see
    /// [`super::Running::turn_over`]).
    pub(super) async fn turn_over(&self) {
        self.turn_over_done
            .get_or_init(|| async {
                let hook = self.turn_over.lock().unwrap().take();
                if let Some(hook) = hook {
                    hook().await;
                }
            })
            .await;
    }

    /// The reply a probe call gets when it is the probe turn's first call
    /// with tools and the row scripts one for it (`probe_first`); marked
    /// served.
    pub(super) fn probe_first(&self, parsed: &request::Parsed) -> Option<&Reply> {
        let first = self.probe_first.as_ref()?;
        let eligible = parsed.has_tools && !parsed.after_tool;
        (eligible && !self.probe_first_sent.swap(true, Ordering::SeqCst)).then_some(first)
    }

    pub(super) fn push(&self, record: RequestRecord) {
        if let Some(observer) = &self.observer {
            observer(&record);
        }
        self.records.lock().unwrap().push(record);
    }

    /// Record a request that is not a model call, or one refused (counted as
    /// auxiliary), answered at once.
    pub(super) fn push_other(
        &self,
        head: RequestHead,
        reply: &str,
        previous_response_id: Option<String>,
    ) {
        let at = head.at;
        self.push_aux(head, reply, previous_response_id, Some(at));
    }

    /// Record a request besides a model call that is not answered yet (a
    /// hung endpoint): its end is stamped when its answer is over
    /// ([`super::answering::Answering`]).
    pub(super) fn push_other_open(&self, head: RequestHead, reply: &str) {
        self.push_aux(head, reply, None, None);
    }

    fn push_aux(
        &self,
        head: RequestHead,
        reply: &str,
        previous_response_id: Option<String>,
        ended: Option<f64>,
    ) {
        self.aux.fetch_add(1, Ordering::SeqCst);
        self.push(RequestRecord {
            seq: head.seq,
            at: head.at,
            kind: CallKind::Aux,
            main_index: None,
            method: head.method,
            path: head.path,
            headers: head.headers,
            size: head.size,
            body_sha256: head.body_sha256,
            stream: false,
            model: None,
            tools: Vec::new(),
            messages: Vec::new(),
            messages_dropped: 0,
            truncated: false,
            reply: reply.to_string(),
            rule: None,
            previous_response_id,
            error: None,
            credential: head.credential,
            ended,
        });
    }

    /// The latest user message holds one of the profile's `aux_calls` texts.
    fn aux_marked(&self, parsed: &request::Parsed) -> bool {
        let latest = parsed.messages.iter().rev().find(|m| m.role == "user");
        latest.is_some_and(|m| {
            self.aux_markers
                .iter()
                .any(|t| m.content.contains(t.as_str()))
        })
    }

    /// Probe, main (with its rule, or over the context window) or auxiliary,
    /// counted.
    pub(super) fn classify(&self, parsed: &request::Parsed, size: usize) -> Classified<'_> {
        let mut out = Classified {
            kind: CallKind::Aux,
            main_index: None,
            picked: None,
            overflow: None,
        };
        if parsed.probe.is_some() {
            self.probe.fetch_add(1, Ordering::SeqCst);
            out.kind = CallKind::Probe;
            return out;
        }
        if parsed.subagent {
            let index = self.subagent.fetch_add(1, Ordering::SeqCst);
            self.subagent_tx.send_modify(|v| *v = (*v).max(index + 1));
            out.kind = CallKind::Subagent;
            out.main_index = Some(index);
            // `within` counts from the faulted turn's first main call (a
            // subagent runs inside it: the parent called first).
            let elapsed = self
                .first_main
                .get()
                .map_or(0.0, |t| t.elapsed().as_secs_f64());
            let call = rules::Call {
                index,
                after_tool: parsed.after_tool,
                subagent: true,
                elapsed,
                seed: self.seed,
            };
            out.picked = rules::pick(&self.rules, &call);
            if let Some((i, _)) = out.picked {
                self.rule_hits[i].fetch_add(1, Ordering::SeqCst);
            }
            return out;
        }
        if (!parsed.has_tools && !self.main_without_tools) || self.aux_marked(parsed) {
            self.aux.fetch_add(1, Ordering::SeqCst);
            return out;
        }
        let index = self.main.fetch_add(1, Ordering::SeqCst);
        self.main_tx.send_modify(|v| *v = (*v).max(index + 1));
        out.kind = CallKind::Main;
        out.main_index = Some(index);
        let elapsed = self.first_main.get_or_init(Instant::now).elapsed();
        let first = *self.first_main_bytes.get_or_init(|| size);
        let window = self.context_window.map(|w| w.limit(first));
        if let Some(max) = window.filter(|max| size > *max) {
            let class = wire::ErrorClass::ContextLength {
                tokens: (size as u64).div_ceil(4),
                max_tokens: (max as u64) / 4,
            };
            let e = self.wire.shape_error(&ErrorInfo::of_class(class));
            let served = Served {
                reply: crate::provider::context_window::RECORDED.into(),
                error: Some(crate::provider::recording::ReplyError {
                    status: e.status,
                    retry_after: None,
                    retryable: false,
                }),
            };
            out.overflow = Some((served, e));
            return out;
        }
        let call = rules::Call {
            index,
            after_tool: parsed.after_tool,
            subagent: false,
            elapsed: elapsed.as_secs_f64(),
            seed: self.seed,
        };
        out.picked = rules::pick(&self.rules, &call);
        if let Some((i, _)) = out.picked {
            self.rule_hits[i].fetch_add(1, Ordering::SeqCst);
        }
        out
    }
}

/// The record of a model call.
pub(super) fn record(
    head: RequestHead,
    parsed: request::Parsed,
    kind: CallKind,
    main_index: Option<u64>,
    rule: Option<usize>,
    served: Served,
) -> RequestRecord {
    RequestRecord {
        seq: head.seq,
        at: head.at,
        kind,
        main_index,
        method: head.method,
        path: head.path,
        headers: head.headers,
        size: head.size,
        body_sha256: head.body_sha256,
        stream: parsed.stream,
        model: parsed.model,
        tools: parsed.tools,
        messages: parsed.messages,
        messages_dropped: 0,
        truncated: parsed.truncated,
        reply: served.reply,
        rule,
        previous_response_id: parsed.previous_response_id,
        error: served.error,
        credential: head.credential,
        ended: None,
    }
}
