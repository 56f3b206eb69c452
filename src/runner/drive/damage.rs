//! A row's `store_damage`, done once the agent its kill ended is gone and
//! before it is started again: the transcript damaged
//! ([`crate::store::damaged::apply`]), copied just before and right after,
//! so `collect` reads what it held and what was left intact as chaosrun's
//! reader sees them; the damaged bytes
//! are kept to tell, after the run, what the restarted agent appended to
//! them.

use super::store_kill::AtKill;
use super::Drive;
use crate::driver::home::StoreAt;
use crate::scenarios::damage::Damage;
use crate::store::damaged::{DamageRecord, Damaged};

/// Where the copy of the damaged store goes, inside the scenario's folder.
const COPY_DIR: &str = "store-after-damage";
/// Where the copy taken just before the damage goes.
const BEFORE_DIR: &str = "store-before-damage";

/// The damage done: its record (read back by `collect`), the damaged bytes
/// and the copies taken just before and right after.
pub(crate) struct DamageDone {
    pub record: DamageRecord,
    pub damaged: Option<Damaged>,
    pub before: Option<AtKill>,
    pub copy: Option<AtKill>,
}

impl Drive<'_> {
    /// Damage the agent's transcript with `kind` (the first kill's only).
    pub(super) async fn damage_store(&mut self, kind: Damage) {
        if self.damage.is_some() {
            return;
        }
        let home = self.launch.prepared.dirs.home.clone();
        let into = self.launch.prepared.dirs.root.join(COPY_DIR);
        let before_into = self.launch.prepared.dirs.root.join(BEFORE_DIR);
        let pattern = match &self.launch.prepared.store {
            Some(StoreAt::Jsonl(p)) => Some(p.clone()),
            _ => None,
        };
        let files = self.store_files();
        let done = tokio::task::spawn_blocking(move || {
            let Some(pattern) = pattern else {
                let no = Err("the profile declares no JSONL store".to_string());
                return (no, None, None);
            };
            let copy = |into: &std::path::Path| {
                files.as_ref().map(|f| crate::store::at_kill::copy(f, into))
            };
            let before = copy(&before_into);
            match crate::store::damaged::apply(&home, &pattern, kind) {
                Ok(done) => (Ok(done), before, copy(&into)),
                Err(e) => (Err(e), before, None),
            }
        })
        .await
        .unwrap_or_else(|e| (Err(format!("the damage failed: {e}")), None, None));
        let (applied, before, copy) = done;
        let (applied, damaged) = match applied {
            Ok((a, d)) => (Ok(a), Some(d)),
            Err(e) => (Err(e), None),
        };
        self.damage = Some(DamageDone {
            record: DamageRecord {
                kind,
                applied,
                before: None,
                after: None,
                tail: None,
            },
            damaged,
            before,
            copy,
        });
    }
}
