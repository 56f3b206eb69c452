//! A kill aimed at a store write (`at: {store_write_after_calls: N}`): the
//! agent's SQLite store the trigger watches, and the copy of its files taken
//! once the killed agent is gone and before it is started again, which
//! `collect` reads beside the final store.

use std::path::PathBuf;

use super::Drive;
use crate::driver::home::StoreAt;

/// The store as the kill left it: the copied database (`None`: the agent
/// had not created its store yet), or why no copy could be taken.
pub(crate) type AtKill = Result<Option<PathBuf>, String>;

/// Where the copy goes, inside the scenario's own folder.
const COPY_DIR: &str = "store-at-kill";

impl Drive<'_> {
    /// The agent's SQLite store, if the profile declares one.
    pub(crate) fn sqlite_store(&self) -> Option<PathBuf> {
        match &self.launch.prepared.store {
            Some(StoreAt::Sqlite(path)) => Some(path.clone()),
            _ => None,
        }
    }

    /// Copy the store's files (the agent is dead) into the scenario's
    /// folder, off the async workers. The first kill's copy is kept.
    pub(crate) async fn copy_store_at_kill(&mut self) {
        if self.store_at_kill.is_some() {
            return;
        }
        let dirs = &self.launch.prepared.dirs;
        let (home, into) = (dirs.home.clone(), dirs.root.join(COPY_DIR));
        let copied = match self.sqlite_store() {
            None => Err("the profile declares no SQLite store".to_string()),
            Some(db) => tokio::task::spawn_blocking(move || {
                crate::store::at_kill::copy_sqlite(&home, &db, &into)
            })
            .await
            .unwrap_or_else(|e| Err(format!("the copy failed: {e}"))),
        };
        self.store_at_kill = Some(copied);
    }
}
