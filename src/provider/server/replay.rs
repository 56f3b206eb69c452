//! Cassettes on the scripted provider: each `cassette` rule's player loaded
//! once, a call's match key (replayed, or taped by `--record`), and a
//! replayed call's plan (the entry's answer with the rule's fault, or a 500
//! on a miss).
use std::sync::Arc;

use super::Shared;
use crate::provider::recording::CallKind;
use crate::provider::replies::{Plan, Reply, ReplyCtx, Source};
use crate::provider::rules::Rule;
use crate::provider::wire::{request, ErrorInfo};

/// The cassette of each `cassette` rule, loaded once (a file two rules name
/// is one player: its entries are used once across both; the parsed file is
/// shared with other providers replaying it, see
/// [`crate::provider::cassette::shared`]).
pub(super) fn load_players(
    rules: &[Rule],
) -> Result<Vec<Option<Arc<crate::provider::cassette::Player>>>, String> {
    let mut by_file: Vec<(std::path::PathBuf, Arc<crate::provider::cassette::Player>)> = Vec::new();
    let mut out = Vec::with_capacity(rules.len());
    for rule in rules {
        let Source::Replayed { file, .. } = rule.reply.source() else {
            out.push(None);
            continue;
        };
        if let Some((_, p)) = by_file.iter().find(|(f, _)| f == file) {
            out.push(Some(p.clone()));
            continue;
        }
        let cassette = crate::provider::cassette::shared::get(file)?;
        let p = Arc::new(crate::provider::cassette::Player::new(
            file.display().to_string(),
            cassette,
        ));
        by_file.push((file.to_path_buf(), p.clone()));
        out.push(Some(p));
    }
    Ok(out)
}

impl Shared {
    /// Cassettes: the call's match key when a `cassette` rule replays it or
    /// `--record` records it, and what the recording starts from.
    pub(super) fn cassette_key(
        &self,
        reply: &Reply,
        relayed: bool,
        kind: CallKind,
        main_index: Option<u64>,
        parsed: &request::Parsed,
    ) -> (
        Option<crate::provider::cassette::MatchKey>,
        Option<crate::provider::cassette::tape::TapeStart>,
    ) {
        let taped =
            relayed && kind == CallKind::Main && self.upstream.as_ref().is_some_and(|u| u.tape);
        if !taped && !matches!(reply.source(), Source::Replayed { .. }) {
            return (None, None);
        }
        let key = crate::provider::cassette::key_of(&parsed.messages, &self.nonce);
        let tape = taped.then(|| crate::provider::cassette::tape::TapeStart {
            main_index: main_index.unwrap_or(0),
            key: key.clone(),
            request: parsed.messages.clone(),
            nonce: self.nonce.clone(),
        });
        (Some(key), tape)
    }

    /// The reply of a `cassette` rule (rule `i`) to main call `index`: the
    /// matching entry's answer with the rule's fault, or, on a miss, a 500
    /// naming the call (and the scenario is an ERROR).
    pub(super) fn replay(
        &self,
        i: usize,
        reply: &Reply,
        index: u64,
        key: &crate::provider::cassette::MatchKey,
        ctx: &ReplyCtx<'_>,
    ) -> crate::provider::replies::Planned {
        use crate::provider::replies::ReplyKind;
        let Some(player) = self.players.get(i).and_then(Option::as_ref) else {
            return reply.plan(ctx);
        };
        let fault = match reply.source() {
            Source::Replayed { fault, .. } => fault,
            _ => None,
        };
        let fault = crate::provider::upstream::faults::acting(fault);
        let plan = match (player.take(index, key), fault.replacement()) {
            (Ok(_), Some(e)) => e.plan(ctx),
            (Ok(entry), None) => {
                crate::provider::cassette::player::plan(&entry, &self.nonce, fault)
            }
            (Err(miss), _) => {
                self.relays.error(miss.clone());
                Plan::Error(ErrorInfo::new(500, format!("chaosrun: {miss}")))
            }
        };
        crate::provider::replies::Planned {
            plan,
            issued: Vec::new(),
        }
    }
}
