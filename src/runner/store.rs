//! Reading the agent's durable store after it exited: for SQLite (opened
//! read-only) `PRAGMA integrity_check` and the profile's query for the
//! session's active messages; for Postgres (worker mode) the query alone.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::observe::{StoreObservation, StoredMessage};
use crate::provider::recording::CONTENT_KEEP_CHARS;

fn bounded(s: &str) -> (String, usize) {
    let n = s.chars().count();
    (s.chars().take(CONTENT_KEEP_CHARS).collect(), n)
}

/// Tool call ids from a `tool_calls` column: a JSON list of `{id}` or
/// `{call_id}` objects.
pub fn call_ids(raw: &str) -> Vec<String> {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Array(calls)) => calls
            .iter()
            .filter_map(|c| c.as_object())
            .map(|c| {
                c.get("id")
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

fn query(conn: &Connection, sql: &str, session_id: &str) -> rusqlite::Result<Vec<StoredMessage>> {
    let mut stmt = conn.prepare(sql)?;
    let has_param = stmt.parameter_index(":session_id")?.is_some();
    let map = |r: &rusqlite::Row<'_>| {
        let role: String = r.get(0)?;
        let content: Option<String> = r.get(1).or_else(|_| {
            r.get::<_, Option<Vec<u8>>>(1)
                .map(|b| b.map(|b| String::from_utf8_lossy(&b).into_owned()))
        })?;
        let tool_call_id: Option<String> = r.get(2)?;
        let tool_calls: Option<String> = r.get(3)?;
        let (content, content_chars) = bounded(content.as_deref().unwrap_or(""));
        Ok(StoredMessage {
            role,
            content,
            content_chars,
            tool_call_id: tool_call_id.filter(|s| !s.is_empty()),
            tool_call_ids: tool_calls
                .filter(|s| !s.trim().is_empty())
                .map(|s| call_ids(&s))
                .unwrap_or_default(),
        })
    };
    let rows = if has_param {
        stmt.query_map(&[(":session_id", session_id)], map)?
            .collect::<rusqlite::Result<Vec<_>>>()?
    } else {
        stmt.query_map([], map)?
            .collect::<rusqlite::Result<Vec<_>>>()?
    };
    Ok(rows)
}

/// Observe the store at `path` (None: the profile has none).
pub fn observe(path: Option<&Path>, sql: &str, session_id: &str) -> StoreObservation {
    let Some(path) = path else {
        return StoreObservation::NotConfigured;
    };
    let shown = path.display().to_string();
    if !path.is_file() {
        return StoreObservation::Missing { path: shown };
    }
    let conn = match Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY) {
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
    let messages = query(&conn, sql, session_id).map_err(|e| e.to_string());
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
/// (columns role, content, tool_call_id, tool_calls as text).
pub async fn observe_postgres(dsn: &str, sql: &str, session_id: &str) -> StoreObservation {
    let messages = async {
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let conn = tokio::spawn(connection);
        let rows = client
            .query(sql, &[&session_id])
            .await
            .map_err(|e| format!("the messages query failed: {e}"));
        drop(client);
        let _ = conn.await;
        let mut out = Vec::new();
        for r in rows? {
            let get = |i: usize| -> Result<Option<String>, String> {
                r.try_get::<_, Option<String>>(i)
                    .map_err(|e| format!("column {i}: {e}"))
            };
            let (content, content_chars) = bounded(get(1)?.as_deref().unwrap_or(""));
            out.push(StoredMessage {
                role: get(0)?.unwrap_or_default(),
                content,
                content_chars,
                tool_call_id: get(2)?.filter(|s| !s.is_empty()),
                tool_call_ids: get(3)?
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| call_ids(&s))
                    .unwrap_or_default(),
            });
        }
        Ok(out)
    }
    .await;
    StoreObservation::Postgres {
        dsn: redact(dsn),
        messages,
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
        match observe(Some(&db), sql, "s1") {
            StoreObservation::Read {
                integrity,
                messages,
                ..
            } => {
                assert_eq!(integrity, "ok");
                let m = messages.unwrap();
                assert_eq!(m.len(), 3);
                assert_eq!(m[1].tool_call_ids, ["c1", "c2"]);
                assert_eq!(m[2].tool_call_id.as_deref(), Some("c1"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_and_unconfigured_stores_are_told_apart() {
        assert_eq!(observe(None, "", "s"), StoreObservation::NotConfigured);
        assert!(matches!(
            observe(Some(Path::new("/nonexistent/x.db")), "", "s"),
            StoreObservation::Missing { .. }
        ));
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
            "select 1",
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
    }
}
