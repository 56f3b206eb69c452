//! A kill aimed at a store write (`at: {store_write_after_calls: N}`): the
//! agent's store files the trigger watches (SQLite or JSONL), the trigger
//! itself ([`armed_then_written`]), and the two copies of the store's files
//! `collect` reads beside the final store: the reference, taken when the
//! trigger arms (before the write the kill is aimed at), and the store as
//! the kill left it, taken once the killed agent is gone and before it is
//! started again.

use std::path::PathBuf;
use std::sync::Mutex;

use tokio::sync::watch;

use super::Drive;
use crate::driver::home::StoreAt;
use crate::provider::Provider;
use crate::store::writes::{StoreFiles, StoreWrites};

/// The store as the kill left it: the copy (the database, or the folder
/// standing for HOME that holds the transcripts; `None`: the agent had not
/// created its store yet), or why no copy could be taken.
pub(crate) type AtKill = Result<Option<PathBuf>, String>;

/// Where the copy goes, inside the scenario's own folder.
const COPY_DIR: &str = "store-at-kill";
/// Where the copy taken when the trigger arms goes.
pub(super) const ARM_DIR: &str = "store-at-arm";

/// The trigger of a kill aimed at a store write. The store is watched from
/// the turn's start (no write can slip by before the watch exists); the
/// provider holds the reply to the `n`-th main call from the boot on
/// ([`Provider::hold_from`]), so when that call arrives the agent waits on
/// it: the store is copied into `into` then (the reference, kept in
/// `armed`), the writes reported so far are forgotten and the reply
/// released. Resolves at the next write, the one the kill is aimed at. A
/// store that cannot be watched never resolves: the kill is named as never
/// landed (a profile without a SQLite or JSONL store makes the row N/A).
pub(super) async fn armed_then_written(
    n: u64,
    calls: &mut watch::Receiver<u64>,
    (files, into): (Option<&StoreFiles>, PathBuf),
    provider: &Provider,
    armed: &Mutex<Option<AtKill>>,
) {
    let mut watched = files.map(StoreWrites::of);
    let _ = calls.wait_for(|c| *c >= n).await;
    let copy = match files.cloned() {
        None => Err("the profile declares no SQLite or JSONL store".to_string()),
        Some(files) => {
            tokio::task::spawn_blocking(move || crate::store::at_kill::copy(&files, &into))
                .await
                .unwrap_or_else(|e| Err(format!("the copy failed: {e}")))
        }
    };
    if let Ok(mut slot) = armed.lock() {
        *slot = Some(copy);
    }
    if let Some(Ok(writes)) = &mut watched {
        writes.drain();
    }
    provider.hold_from(None);
    let Some(Ok(mut writes)) = watched else {
        return std::future::pending().await;
    };
    if writes.next().await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Drive<'_> {
    /// The agent's store on disk (SQLite or JSONL), if the profile
    /// declares one.
    pub(super) fn store_files(&self) -> Option<StoreFiles> {
        let home = self.launch.prepared.dirs.home.clone();
        match &self.launch.prepared.store {
            Some(StoreAt::Sqlite(db)) => Some(StoreFiles::Sqlite {
                home,
                db: db.clone(),
            }),
            Some(StoreAt::Jsonl(pattern)) => Some(StoreFiles::Jsonl {
                home,
                pattern: pattern.clone(),
            }),
            _ => None,
        }
    }

    /// Copy the store's files (the agent is dead) into the scenario's
    /// folder, off the async workers. The first kill's copy is kept.
    pub(super) async fn copy_store_at_kill(&mut self) {
        if self.store_at_kill.is_some() {
            return;
        }
        let into = self.launch.prepared.dirs.root.join(COPY_DIR);
        let copied = match self.store_files() {
            None => Err("the profile declares no SQLite or JSONL store".to_string()),
            Some(files) => {
                tokio::task::spawn_blocking(move || crate::store::at_kill::copy(&files, &into))
                    .await
                    .unwrap_or_else(|e| Err(format!("the copy failed: {e}")))
            }
        };
        self.store_at_kill = Some(copied);
    }
}
