//! What a profile's `store:` section says: where the agent keeps its
//! messages (a SQLite file, a Postgres database, or JSONL transcripts under
//! HOME), the query or record mapping that reads them back, and the checks
//! made at load (one kind, a query that binds the session id and nothing
//! else, a mapping that can apply).

use serde::{Deserialize, Serialize};

use super::mapping::RecordRule;
use super::Shape;

/// Where the agent keeps its messages: a SQLite file, a Postgres database,
/// or JSONL transcripts under HOME (see README "The agent's store").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSpec {
    /// SQLite file, relative to HOME (templated).
    #[serde(default)]
    pub path: Option<String>,
    /// Postgres connection string (libpq key=value or URL; templated).
    #[serde(default)]
    pub postgres: Option<String>,
    /// SQL stores: with `shape: messages`, returns `role, content,
    /// tool_call_id, tool_calls` of a session's active messages, oldest
    /// first; with `shape: items`, `kind, content, call_id[, name]` of its
    /// items. The session id is bound as `:session_id` (SQLite) or `$1`
    /// (Postgres). Not used by a JSONL store.
    #[serde(default)]
    pub messages_sql: String,
    /// How the SQL rows map onto messages.
    #[serde(default)]
    pub shape: Shape,
    /// JSONL transcripts: a glob relative to HOME (templated; `*`, `?`, `**`).
    #[serde(default)]
    pub jsonl: Option<String>,
    /// JSONL transcripts: which records are messages and where their parts
    /// live (data, not code: see [`RecordRule`]).
    #[serde(default)]
    pub records: Vec<RecordRule>,
    /// A transcript that is one JSON document (Gemini CLI's `.json` chats):
    /// the path of its list of records. Absent: one record per line.
    #[serde(default)]
    pub document: Option<String>,
}

/// Whether `sql` holds the parameter `name` as a whole token (`:session_id`
/// but not `:session_idx`; `$1` but not `$12`).
fn binds(sql: &str, name: &str) -> bool {
    sql.match_indices(name).any(|(i, _)| {
        sql[i + name.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

/// Parameter markers a query may hold, other than the session id's.
fn other_markers(sql: &str, sqlite: bool) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = sql.chars().collect();
    let mut quoted = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quoted {
            Some(q) if c == q => quoted = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quoted = Some(c),
            None if matches!(c, '?' | '$' | ':' | '@') => {
                let mut j = i + 1;
                while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                let marker: String = chars[i..j].iter().collect();
                // `::type` casts (Postgres) and a bare `:` are not parameters.
                let cast =
                    c == ':' && (chars.get(i + 1) == Some(&':') || (i > 0 && chars[i - 1] == ':'));
                let ours = if sqlite {
                    marker == ":session_id"
                } else {
                    marker == "$1"
                };
                let param = match c {
                    '?' => true,
                    '$' => j > i + 1,
                    _ => sqlite && j > i + 1 && !cast,
                };
                if param && !ours && !cast {
                    out.push(marker);
                }
                i = j.max(i + 1);
                continue;
            }
            None => {}
        }
        i += 1;
    }
    out
}

impl StoreSpec {
    /// Exactly one of `path`, `postgres`, `jsonl`, each with what it needs:
    /// a SQL store a query binding the session id, a JSONL store a mapping.
    pub fn check_kind(&self) -> Result<(), String> {
        let kinds = [
            self.path.is_some(),
            self.postgres.is_some(),
            self.jsonl.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(
                "`store` takes one of `path` (SQLite), `postgres` (a DSN) or `jsonl` (a glob of transcripts under HOME)"
                    .into(),
            );
        }
        if self.jsonl.is_some() {
            if !self.messages_sql.is_empty() || self.shape != Default::default() {
                return Err(
                    "a `jsonl` store takes `records` (a mapping), not `messages_sql` or `shape`"
                        .into(),
                );
            }
            return super::mapping::check_rules(&self.records);
        }
        if !self.records.is_empty() || self.document.is_some() {
            return Err("`records` and `document` belong to a `jsonl` store".into());
        }
        self.check_binding()
    }

    /// The messages query must bind the session id, and nothing else: as
    /// `:session_id` for SQLite, as `$1` for Postgres.
    pub fn check_binding(&self) -> Result<(), String> {
        let sqlite = self.postgres.is_none();
        let (want, example) = if sqlite {
            (":session_id", "WHERE session_id = :session_id")
        } else {
            ("$1", "WHERE session_id = $1")
        };
        let kind = if sqlite { "SQLite" } else { "Postgres" };
        let others = other_markers(&self.messages_sql, sqlite);
        if !binds(&self.messages_sql, want) || !others.is_empty() {
            let used = if others.is_empty() {
                "it binds no session id".to_string()
            } else {
                format!("it uses {}", others.join(", "))
            };
            return Err(format!(
                "`store.messages_sql` must bind the session id as `{want}` ({kind}), e.g. `{example}`; {used}"
            ));
        }
        Ok(())
    }
}
