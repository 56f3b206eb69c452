//! A kill aimed at a store write (`at: {store_write_after_calls: N}`): the
//! agent's store files the trigger watches (SQLite or JSONL), and the copy of its files taken
//! once the killed agent is gone and before it is started again, which
//! `collect` reads beside the final store.

use std::path::PathBuf;

use super::Drive;
use crate::driver::home::StoreAt;
use crate::store::writes::StoreFiles;

/// The store as the kill left it: the copy (the database, or the folder
/// standing for HOME that holds the transcripts; `None`: the agent had not
/// created its store yet), or why no copy could be taken.
pub(crate) type AtKill = Result<Option<PathBuf>, String>;

/// Where the copy goes, inside the scenario's own folder.
const COPY_DIR: &str = "store-at-kill";

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
