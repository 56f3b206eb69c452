//! The client side chaosrun serves the agent: `fs/read_text_file` and
//! `fs/write_text_file` confined to the scenario's work dir (an absolute path
//! inside it, symlinks resolved; anything else is refused with -32602 and
//! nothing is read or written; a missing file is -32002), and never followed
//! through a symlink planted after the check; `session/request_permission`
//! answered with the profile's `permission` choice (`cancelled` once the
//! turn was cancelled); `terminal/*` handed to [`Terminals`]; anything else
//! -32601. Each answer also gives the outcome the drive records.

use std::path::{Component, Path, PathBuf};

use serde_json::{json, Value};

use super::rpc::{clip, RpcError};
use super::terminal::Terminals;
use crate::profile::acp::Permission;

/// The most of a file `fs/read_text_file` reads (and answers with).
pub const MAX_READ: u64 = 4 << 20;

/// The client side of one agent process.
pub struct Client {
    /// The work dir, absolute (not yet resolved: it is resolved per call).
    pub workdir: PathBuf,
    pub permission: Permission,
    pub terminals: Terminals,
}

/// What one request was answered with, and the outcome recorded for it.
pub struct Answer {
    pub result: Result<Value, RpcError>,
    pub outcome: String,
}

impl From<Result<Value, RpcError>> for Answer {
    fn from(result: Result<Value, RpcError>) -> Answer {
        let outcome = match &result {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("error {}: {}", e.code, clip(&e.message, 200)),
        };
        Answer { result, outcome }
    }
}

impl Client {
    /// Answer the agent's request `method`; `cancelled`: the running turn
    /// was cancelled (a permission request is then answered `cancelled`).
    pub async fn handle(&self, method: &str, params: &Value, cancelled: bool) -> Answer {
        match method {
            "fs/read_text_file" => self.read(params).into(),
            "fs/write_text_file" => self.write(params).into(),
            "session/request_permission" => self.permission(params, cancelled),
            m if m.starts_with("terminal/") => self.terminals.handle(m, params).await.into(),
            m => Err(RpcError::not_found(m)).into(),
        }
    }

    fn permission(&self, params: &Value, cancelled: bool) -> Answer {
        let options = params.get("options").and_then(Value::as_array);
        let Some(options) = options else {
            return Err(RpcError::invalid(
                "session/request_permission without `options`",
            ))
            .into();
        };
        let chosen = (!cancelled)
            .then(|| {
                self.permission.kinds().iter().find_map(|kind| {
                    options.iter().find_map(|o| {
                        let id = o.get("optionId").filter(|i| i.is_string())?;
                        (o.get("kind").and_then(Value::as_str) == Some(kind))
                            .then(|| (id.clone(), kind.to_string()))
                    })
                })
            })
            .flatten();
        match chosen {
            Some((id, kind)) => Answer {
                result: Ok(json!({"outcome": {"outcome": "selected", "optionId": id}})),
                outcome: kind,
            },
            None => Answer {
                result: Ok(json!({"outcome": {"outcome": "cancelled"}})),
                outcome: "cancelled".into(),
            },
        }
    }

    /// The work dir resolved, and `path` (from the request's params) as a
    /// path relative to it, once every symlink is resolved: refused when it
    /// is not absolute or lies outside. `must_exist: false` resolves the
    /// parent only (a file to create).
    fn confine(&self, params: &Value, must_exist: bool) -> Result<(PathBuf, PathBuf), RpcError> {
        let raw = params
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid("no `path`"))?;
        let path = Path::new(raw);
        let outside = || {
            RpcError::invalid(format!(
                "{} is outside the session's work dir; refused",
                clip(raw, 300)
            ))
        };
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return Err(outside());
        }
        let work = std::fs::canonicalize(&self.workdir)
            .map_err(|e| RpcError::new(-32603, format!("the work dir: {e}")))?;
        // Lexically inside first: nothing outside is even looked at.
        let lexical_work = std::path::absolute(&self.workdir).unwrap_or(self.workdir.clone());
        if !path.starts_with(&lexical_work) && !path.starts_with(&work) {
            return Err(outside());
        }
        let not_found = || RpcError::new(-32002, format!("Resource not found: {}", clip(raw, 300)));
        let real = if must_exist {
            std::fs::canonicalize(path).map_err(|_| not_found())?
        } else {
            let (parent, name) = (path.parent(), path.file_name());
            let (Some(parent), Some(name)) = (parent, name) else {
                return Err(outside());
            };
            let parent = std::fs::canonicalize(parent).map_err(|_| not_found())?;
            match std::fs::canonicalize(parent.join(name)) {
                Ok(target) => target,
                Err(_) => parent.join(name),
            }
        };
        match real.strip_prefix(&work) {
            Ok(rel) if !rel.as_os_str().is_empty() => Ok((work.clone(), rel.to_path_buf())),
            _ => Err(outside()),
        }
    }

    fn read(&self, params: &Value) -> Result<Value, RpcError> {
        let (work, rel) = self.confine(params, true)?;
        // Beneath the resolved work dir, following no link: one planted
        // since the check is refused, not followed.
        let bytes = crate::output::read_beneath(&work, &rel, MAX_READ)
            .map_err(|e| RpcError::new(-32603, clip(&e.to_string(), 300)))?;
        let text = String::from_utf8_lossy(&bytes);
        let line = params.get("line").and_then(Value::as_u64).unwrap_or(1);
        let limit = params.get("limit").and_then(Value::as_u64);
        let content = if line <= 1 && limit.is_none() {
            text.into_owned()
        } else {
            let lines = text
                .split_inclusive('\n')
                .skip(line.saturating_sub(1) as usize);
            lines
                .take(limit.map_or(usize::MAX, |l| l as usize))
                .collect()
        };
        Ok(json!({ "content": content }))
    }

    fn write(&self, params: &Value) -> Result<Value, RpcError> {
        let content = params
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid("no `content`"))?;
        let (work, rel) = self.confine(params, false)?;
        crate::output::write_run_file(&work, &rel, content.as_bytes())
            .map_err(|e| RpcError::new(-32603, clip(&e.to_string(), 300)))?;
        Ok(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    /// A client on `work/work` (its containment ended by the caller).
    fn client(
        work: &Path,
        permission: Permission,
    ) -> (crate::proc_hygiene::RunContainment, Client) {
        let dirs = crate::driver::home::RunDirs::create(&work.join("run")).unwrap();
        let prep = crate::driver::Prepared {
            dirs,
            argv: vec![],
            profile_env: BTreeMap::new(),
            store: None,
            log_paths: vec![],
            exec: None,
            acp: None,
            netns: None,
            mntns: None,
            seccomp: Default::default(),
            tty: false,
        };
        let id = format!("acpclient{}{}", std::process::id(), permission.kinds()[0]);
        let run = crate::proc_hygiene::RunContainment::new(&id);
        let scope = Arc::new(run.scope("s0"));
        let client = Client {
            workdir: work.join("work"),
            permission,
            terminals: Terminals::new(&prep, &BTreeMap::new(), scope),
        };
        (run, client)
    }

    fn code(a: &Answer) -> i64 {
        a.result.as_ref().unwrap_err().code
    }

    #[tokio::test]
    async fn fs_stays_inside_the_work_dir() {
        let d = tempfile::tempdir().unwrap();
        let work = d.path().join("work");
        std::fs::create_dir_all(work.join("sub")).unwrap();
        std::fs::write(d.path().join("secret"), "pw").unwrap();
        std::os::unix::fs::symlink(d.path(), work.join("up")).unwrap();
        let (run, c) = client(d.path(), Permission::AllowOnce);
        let at = |p: &Path| json!({"sessionId": "s", "path": p.display().to_string()});
        let secret = d.path().join("secret");
        for outside in [
            secret.clone(),
            work.join("up/secret"),
            work.join("../secret"),
            PathBuf::from("secret"),
        ] {
            let a = c.handle("fs/read_text_file", &at(&outside), false).await;
            assert_eq!(code(&a), -32602, "{}", outside.display());
            assert!(a.outcome.contains("outside"), "{}", a.outcome);
        }
        let missing = at(&work.join("missing.txt"));
        let a = c.handle("fs/read_text_file", &missing, false).await;
        assert_eq!(code(&a), -32002);
        let mut w = at(&work.join("up/new.txt"));
        w["content"] = json!("x");
        assert_eq!(
            code(&c.handle("fs/write_text_file", &w, false).await),
            -32602
        );
        assert!(!d.path().join("new.txt").exists());
        let mut w = at(&work.join("sub/new.txt"));
        w["content"] = json!("a\nb\nc\n");
        let a = c.handle("fs/write_text_file", &w, false).await;
        assert_eq!((a.result.unwrap(), a.outcome.as_str()), (Value::Null, "ok"));
        let mut r = at(&work.join("sub/new.txt"));
        r["line"] = json!(2);
        let a = c.handle("fs/read_text_file", &r, false).await;
        assert_eq!(a.result.unwrap(), json!({"content": "b\nc\n"}));
        let a = c.handle("session/set_mode", &json!({}), false).await;
        assert_eq!(code(&a), -32601);
        drop(c);
        run.end();
    }

    #[tokio::test]
    async fn permission_picks_the_profiles_kind_or_cancels() {
        let d = tempfile::tempdir().unwrap();
        let options = json!({"options": [
            {"optionId": "a", "name": "Always", "kind": "allow_always"},
            {"optionId": "r", "name": "No", "kind": "reject_once"},
        ]});
        let pick = |p: Permission, cancelled: bool| {
            let (run, c) = client(d.path(), p);
            let options = options.clone();
            async move {
                let a = c
                    .handle("session/request_permission", &options, cancelled)
                    .await;
                drop(c);
                run.end();
                a
            }
        };
        let a = pick(Permission::AllowOnce, false).await;
        assert_eq!(a.outcome, "allow_always", "allow_once falls back");
        assert_eq!(a.result.unwrap()["outcome"]["optionId"], "a");
        let a = pick(Permission::RejectOnce, false).await;
        assert_eq!(a.result.unwrap()["outcome"]["optionId"], "r");
        let a = pick(Permission::AllowOnce, true).await;
        assert_eq!(
            a.result.unwrap(),
            json!({"outcome": {"outcome": "cancelled"}})
        );
    }
}
