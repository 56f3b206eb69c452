//! Reading the agent's durable store after it exited: for SQLite (opened
//! read-only) `PRAGMA integrity_check` and the profile's query for the
//! session's active messages; for Postgres (worker mode) the query alone; for
//! JSONL transcripts the profile's record mapping ([`jsonl`]). SQL rows come
//! in one of two shapes ([`Shape`]): one row per message, or one row per item
//! ([`items`]). What the profile says about the store is [`spec`]; what the
//! read found, saved in the observation, is [`found`]. The store sits beside
//! `profile` and `scenarios`: the profile uses its types, never the reverse.

pub mod at_kill;
pub mod damaged;
pub mod found;
pub mod glob;
pub mod items;
pub mod jsonl;
pub mod mapping;
pub mod spec;
pub mod writes;

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use serde::{Deserialize, Serialize};

use crate::message::{Message, ToolCall, CONTENT_KEEP_CHARS};
pub use found::{is_placeholder_id, StoreObservation, TranscriptRead};
pub use spec::StoreSpec;

/// How a SQL store's rows map onto messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// One row per message: `role, content, tool_call_id, tool_calls`, where
    /// `tool_calls` is a JSON list of `{"id": …}` or `{"call_id": …}` objects
    /// (OpenAI's `{"id", "type", "function"}` included) and a result is a row
    /// of role `tool` whose `tool_call_id` names the call it answers.
    #[default]
    Messages,
    /// One row per item: `kind, content, call_id[, name]` (see
    /// [`items::fold`]).
    Items,
}

fn bounded(s: &str) -> (String, usize) {
    let n = s.chars().count();
    (s.chars().take(CONTENT_KEEP_CHARS).collect(), n)
}

/// Tool call ids from a `tool_calls` column: a JSON list of `{id}` or
/// `{call_id}` objects. A missing id is kept as the empty placeholder (the
/// oracle names it); a column that is not such a list is flagged.
pub fn call_ids(raw: &str) -> Vec<String> {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Array(calls)) => calls
            .iter()
            .map(|c| {
                c.get("id")
                    .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                    .or_else(|| c.get("call_id"))
                    .and_then(|v| v.as_str())
                    .unwrap_or("<missing id>")
                    .to_string()
            })
            .collect(),
        Ok(serde_json::Value::Null) => Vec::new(),
        _ => vec!["<unparseable tool_calls>".to_string()],
    }
}

/// Messages from the query's text columns, in the profile's shape.
fn build(shape: Shape, rows: Vec<[Option<String>; 4]>) -> Vec<Message> {
    match shape {
        Shape::Messages => rows
            .into_iter()
            .map(|[role, content, id, calls]| {
                let (content, content_chars) = bounded(content.as_deref().unwrap_or(""));
                Message {
                    role: role.unwrap_or_default(),
                    content,
                    content_chars,
                    tool_call_id: id.filter(|s| !s.is_empty()),
                    tool_calls: calls
                        .filter(|s| !s.trim().is_empty())
                        .map(|s| call_ids(&s).into_iter().map(ToolCall::id_only).collect())
                        .unwrap_or_default(),
                    ..Message::default()
                }
            })
            .collect(),
        Shape::Items => items::fold(
            rows.into_iter()
                .map(|[kind, content, id, _name]| items::ItemRow {
                    kind: kind.unwrap_or_default(),
                    content,
                    call_id: id,
                })
                .collect(),
        ),
    }
}

/// A column as text (blobs read as UTF-8, numbers printed; absent: None).
fn text_col(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<String>> {
    use rusqlite::types::ValueRef;
    if i >= r.as_ref().column_count() {
        return Ok(None);
    }
    Ok(match r.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
    })
}

fn query(conn: &Connection, spec: &StoreSpec, session_id: &str) -> rusqlite::Result<Vec<Message>> {
    let mut stmt = conn.prepare(&spec.messages_sql)?;
    let has_param = stmt.parameter_index(":session_id")?.is_some();
    let map = |r: &rusqlite::Row<'_>| {
        Ok([
            text_col(r, 0)?,
            text_col(r, 1)?,
            text_col(r, 2)?,
            text_col(r, 3)?,
        ])
    };
    let rows = if has_param {
        stmt.query_map(&[(":session_id", session_id)], map)?
            .collect::<rusqlite::Result<Vec<_>>>()?
    } else {
        stmt.query_map([], map)?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    Ok(build(spec.shape, rows))
}

/// Observe the store at `path` (None: the profile has none).
pub fn observe(path: Option<&Path>, spec: &StoreSpec, session_id: &str) -> StoreObservation {
    let Some(path) = path else {
        return StoreObservation::NotConfigured;
    };
    let shown = path.display().to_string();
    // Never an open that blocks (a FIFO the agent left there): vetted on an
    // open descriptor first. The agent's processes are gone by now, so
    // nothing swaps the file before SQLite opens it.
    let vetted = match crate::input::open_regular(path, crate::input::Follow::Yes) {
        Ok((file, _)) => file,
        Err(e @ crate::input::OpenError::NotRegular { .. }) => {
            return StoreObservation::NotRegular {
                path: shown,
                why: e.to_string(),
            }
        }
        Err(crate::input::OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return StoreObservation::Missing { path: shown }
        }
        Err(crate::input::OpenError::Io(e)) => {
            return StoreObservation::Unreadable {
                path: shown,
                error: e.to_string(),
            }
        }
    };
    let read = read_sqlite(path, spec, session_id, OpenFlags::SQLITE_OPEN_READ_ONLY);
    drop(vetted);
    read
}

/// Observe chaosrun's own copy of a store ([`at_kill`]): opened read-write,
/// so that SQLite may replay the copied write-ahead log as the restarted
/// agent would (the agent's own files are never opened so).
pub fn observe_copy(path: &Path, spec: &StoreSpec, session_id: &str) -> StoreObservation {
    read_sqlite(path, spec, session_id, OpenFlags::default())
}

/// `PRAGMA integrity_check` and the profile's query on the database at `path`.
fn read_sqlite(
    path: &Path,
    spec: &StoreSpec,
    session_id: &str,
    flags: OpenFlags,
) -> StoreObservation {
    let shown = path.display().to_string();
    let conn = match Connection::open_with_flags(path, flags) {
        Ok(c) => c,
        Err(e) => {
            return StoreObservation::Unreadable {
                path: shown,
                error: e.to_string(),
            }
        }
    };
    let _ = conn.busy_timeout(std::time::Duration::from_secs(10));
    let integrity = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
        .unwrap_or_else(|e| format!("integrity_check failed: {e}"));
    let messages = query(&conn, spec, session_id).map_err(|e| e.to_string());
    StoreObservation::Read {
        path: shown,
        integrity,
        messages,
    }
}

/// A DSN as shown in reports: any password replaced.
fn redact(dsn: &str) -> String {
    dsn.split_whitespace()
        .map(|kv| {
            if kv.to_ascii_lowercase().starts_with("password=") {
                "password=***"
            } else {
                kv
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Observe a Postgres store: the profile's query with the session id as `$1`
/// (its columns as text, in the profile's shape).
pub async fn observe_postgres(dsn: &str, spec: &StoreSpec, session_id: &str) -> StoreObservation {
    let messages = async {
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let conn = tokio::spawn(connection);
        let rows = client
            .query(spec.messages_sql.as_str(), &[&session_id])
            .await
            .map_err(|e| format!("the messages query failed: {e}"));
        drop(client);
        let _ = conn.await;
        let mut out = Vec::new();
        for r in rows? {
            let get = |i: usize| -> Result<Option<String>, String> {
                if i >= r.len() {
                    return Ok(None);
                }
                r.try_get::<_, Option<String>>(i)
                    .map_err(|e| format!("column {i}: {e}"))
            };
            out.push([get(0)?, get(1)?, get(2)?, get(3)?]);
        }
        Ok(build(spec.shape, out))
    }
    .await;
    StoreObservation::Postgres {
        dsn: redact(dsn),
        messages,
    }
}

/// A SQL store spec for tests and tools: `messages_sql` in `shape`.
pub fn sql_spec(sql: &str, shape: Shape) -> StoreSpec {
    StoreSpec {
        path: None,
        postgres: None,
        messages_sql: sql.to_string(),
        shape,
        jsonl: None,
        records: Vec::new(),
        document: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_session_rows_in_order_with_call_ids() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("s.db");
        let c = Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE messages(id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT,
               tool_call_id TEXT, tool_calls TEXT, active INTEGER DEFAULT 1);
             INSERT INTO messages(session_id, role, content, tool_calls) VALUES
               ('s1','user','hi',NULL),
               ('s1','assistant',NULL,'[{\"id\":\"c1\"},{\"call_id\":\"c2\"}]'),
               ('s2','user','other',NULL);
             INSERT INTO messages(session_id, role, content, tool_call_id) VALUES ('s1','tool','out','c1');",
        )
        .unwrap();
        drop(c);
        let sql = "SELECT role, content, tool_call_id, tool_calls FROM messages WHERE session_id = :session_id AND active = 1 ORDER BY id";
        match observe(Some(&db), &sql_spec(sql, Shape::Messages), "s1") {
            StoreObservation::Read {
                integrity,
                messages,
                ..
            } => {
                assert_eq!(integrity, "ok");
                let m = messages.unwrap();
                assert_eq!(m.len(), 3);
                assert_eq!(m[1].call_ids(), ["c1", "c2"]);
                assert_eq!(m[2].tool_call_id.as_deref(), Some("c1"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_and_unconfigured_stores_are_told_apart() {
        let spec = sql_spec("", Shape::Messages);
        assert_eq!(observe(None, &spec, "s"), StoreObservation::NotConfigured);
        assert!(matches!(
            observe(Some(Path::new("/nonexistent/x.db")), &spec, "s"),
            StoreObservation::Missing { .. }
        ));
        // A FIFO nobody writes to: an open that waited for a writer would
        // never return.
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("store.db");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(
            observe(Some(&fifo), &spec, "s"),
            StoreObservation::NotRegular {
                path: fifo.display().to_string(),
                why: "is a fifo, not a regular file".into()
            }
        );
    }

    #[test]
    fn passwords_are_redacted_from_shown_dsns() {
        assert_eq!(
            redact("host=h password=s3cret user=u"),
            "host=h password=*** user=u"
        );
    }

    #[tokio::test]
    async fn unreachable_postgres_is_an_error_not_a_panic() {
        // Port 1 on loopback: nothing listens there.
        match observe_postgres(
            "host=127.0.0.1 port=1 user=x connect_timeout=2",
            &sql_spec("select 1", Shape::Messages),
            "s",
        )
        .await
        {
            StoreObservation::Postgres {
                messages: Err(e), ..
            } => assert!(e.contains("cannot connect"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unparseable_tool_calls_are_flagged() {
        assert_eq!(call_ids("{{nope"), ["<unparseable tool_calls>"]);
        assert!(call_ids("null").is_empty());
        assert_eq!(
            call_ids(r#"[{"id":"","call_id":"c9"},{"type":"function"}]"#),
            ["c9", "<missing id>"]
        );
    }

    #[test]
    fn item_rows_fold_into_turns_with_several_calls() {
        let d = tempfile::tempdir().unwrap();
        let db = d.path().join("items.db");
        let c = Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE items(seq INTEGER PRIMARY KEY, session TEXT, type TEXT, body TEXT, call_id TEXT, name TEXT);
             INSERT INTO items(session, type, body, call_id, name) VALUES
               ('s1','user','list files',NULL,NULL),
               ('s1','function_call','{\"cmd\":\"ls\"}','call_a','exec'),
               ('s1','function_call','{\"cmd\":\"pwd\"}','call_b','exec'),
               ('s1','function_call_output','a.txt','call_a',NULL),
               ('s1','function_call_output','/w','call_b',NULL),
               ('s1','assistant','done',NULL,NULL),
               ('s2','user','other',NULL,NULL);",
        )
        .unwrap();
        drop(c);
        let sql =
            "SELECT type, body, call_id, name FROM items WHERE session = :session_id ORDER BY seq";
        let m = observe(Some(&db), &sql_spec(sql, Shape::Items), "s1");
        let m = m.messages().unwrap();
        assert_eq!(m.len(), 5, "{m:?}");
        assert_eq!(m[1].call_ids(), ["call_a", "call_b"]);
        assert_eq!(m[3].tool_call_id.as_deref(), Some("call_b"));
        assert_eq!(m[3].content, "/w");
    }
}
