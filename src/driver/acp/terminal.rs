//! The client side's terminals: `terminal/create`, `output`,
//! `wait_for_exit`, `kill` and `release`, served to the agent. A terminal's
//! command is the agent's untrusted code, so it runs contained exactly like
//! the agent ([`command`]: the scenario's cgroup, network and mount
//! namespaces, seccomp program, no privileges, the agent's hermetic
//! environment plus what the request adds, a process group of its own).
//! This module owns the requests' checks (a cwd inside the scenario's work
//! dir, the variables chaosrun sets left alone, at most [`MAX_RUNNING`]
//! commands running and [`MAX_KEPT`] terminals kept), the terminals' ids,
//! and the kill of every terminal's process tree ([`Terminals::kill_all`],
//! also on drop). Output is kept per [`output`]. stdin is `/dev/null`, or
//! an open pipe nobody writes under the client fault `stdin_open`
//! ([`Terminals::create_stdin_open`]).

mod command;
mod output;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{json, Value};

use super::rpc::RpcError;
use crate::proc_hygiene::Scope;
use command::{Command, Launch};
pub use command::{Sandbox, MARK_VAR};
pub use output::HARD_CAP;

/// Commands running at once; one more is refused (a hostile agent cannot
/// fork-bomb through the client).
pub const MAX_RUNNING: usize = 16;
/// Terminals kept (running or exited, not released) at once; one more is
/// refused (each keeps up to [`HARD_CAP`] bytes of output).
pub const MAX_KEPT: usize = 32;

const INVALID_PARAMS: i64 = -32602;
const METHOD_NOT_FOUND: i64 = -32601;
const INTERNAL: i64 = -32603;

fn error(code: i64, message: impl Into<String>) -> RpcError {
    RpcError {
        code,
        message: message.into(),
    }
}

/// `terminal/create`'s params.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateParams {
    command: String,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<Vec<EnvVariable>>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    output_byte_limit: Option<u64>,
}

#[derive(Deserialize)]
struct EnvVariable {
    name: String,
    value: String,
}

/// The other methods' params.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminalParams {
    terminal_id: String,
}

fn params<'a, T: Deserialize<'a>>(method: &str, p: &'a Value) -> Result<T, RpcError> {
    T::deserialize(p).map_err(|e| error(INVALID_PARAMS, format!("{method}: {e}")))
}

/// One ACP session's terminals.
pub struct Terminals {
    sandbox: Sandbox,
    terms: Mutex<BTreeMap<String, Arc<Command>>>,
    /// One create at a time: the caps are checked and the terminal kept
    /// under it.
    creating: tokio::sync::Mutex<()>,
    next: AtomicU64,
    /// Unique to this instance: the prefix of its terminals' markers.
    instance: String,
}

impl Terminals {
    /// `prep`: the scenario's Prepared (its netns, mntns, seccomp policy,
    /// dirs: commands run contained exactly like the agent); `env`: the
    /// agent's hermetic env; `scope`: the scenario's process scope (cgroup)
    /// every terminal process joins.
    pub fn new(
        prep: &crate::driver::Prepared,
        env: &BTreeMap<String, String>,
        scope: Arc<Scope>,
    ) -> Terminals {
        Terminals::contained(Sandbox {
            work: prep.dirs.work.clone(),
            env: env.clone(),
            netns: prep.netns.clone(),
            mntns: prep.mntns.clone(),
            seccomp: prep.seccomp,
            scope,
        })
    }

    /// Terminals whose commands run in `sandbox`.
    pub fn contained(sandbox: Sandbox) -> Terminals {
        static INSTANCES: AtomicU64 = AtomicU64::new(0);
        let n = INSTANCES.fetch_add(1, Ordering::Relaxed);
        Terminals {
            sandbox,
            terms: Mutex::new(BTreeMap::new()),
            creating: tokio::sync::Mutex::new(()),
            next: AtomicU64::new(0),
            instance: format!("{}.{n}", std::process::id()),
        }
    }

    /// Serve one `terminal/*` request (method = "terminal/create", ...;
    /// params = the request's params).
    pub async fn handle(&self, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            "terminal/create" => self.create(self::params(method, params)?, false).await,
            "terminal/output" => Ok(self.get(method, params)?.output()),
            "terminal/wait_for_exit" => {
                let t = self.get(method, params)?;
                match t.wait().await {
                    Some(exit) => Ok(command::exit_status(exit)),
                    None => Err(error(
                        INTERNAL,
                        "the terminal was released before its command exited",
                    )),
                }
            }
            "terminal/kill" => {
                self.get(method, params)?.kill().await;
                Ok(json!({}))
            }
            "terminal/release" => {
                let id = self::params::<TerminalParams>(method, params)?.terminal_id;
                let t = self.lock().remove(&id).ok_or_else(|| unknown(&id))?;
                t.kill().await;
                Ok(json!({}))
            }
            _ => Err(error(
                METHOD_NOT_FOUND,
                format!("method not found: {method}"),
            )),
        }
    }

    /// Kill every terminal's process tree (session end, a kill of the
    /// agent, chaosrun's cleanup). Idempotent.
    pub fn kill_all(&self) {
        let terms: Vec<Arc<Command>> = self.lock().values().cloned().collect();
        for t in &terms {
            t.signal_group();
        }
        let prefix = format!("{}.", self.instance);
        for _ in 0..3 {
            if command::sweep(|v| v.starts_with(&prefix)).is_empty() {
                break;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Command>>> {
        self.terms.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The terminal a request names.
    fn get(&self, method: &str, p: &Value) -> Result<Arc<Command>, RpcError> {
        let id = params::<TerminalParams>(method, p)?.terminal_id;
        self.lock().get(&id).cloned().ok_or_else(|| unknown(&id))
    }

    /// `terminal/create` with the command's stdin an open pipe nobody
    /// writes (the client fault `stdin_open`): a command that reads its
    /// input waits forever.
    pub async fn create_stdin_open(&self, params: &Value) -> Result<Value, RpcError> {
        self.create(self::params("terminal/create", params)?, true)
            .await
    }

    async fn create(&self, p: CreateParams, stdin_open: bool) -> Result<Value, RpcError> {
        if p.command.is_empty() {
            return Err(error(INVALID_PARAMS, "terminal/create: an empty command"));
        }
        let cwd = self.cwd(p.cwd.as_deref())?;
        let _one = self.creating.lock().await;
        self.room()?;
        let id = format!("term-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let marker = format!("{}.{id}", self.instance);
        let env = self.env(p.env.unwrap_or_default(), &marker)?;
        let argv = match p.args.filter(|a| !a.is_empty()) {
            Some(args) => std::iter::once(p.command).chain(args).collect(),
            // A command line, as editors run it: through the shell.
            None => vec!["/bin/sh".into(), "-c".into(), p.command],
        };
        let launch = Launch {
            argv,
            env,
            cwd,
            limit: p.output_byte_limit,
            marker,
            stdin_open,
        };
        let started =
            Command::start(&self.sandbox, launch).map_err(|e| error(INTERNAL, format!("{e:#}")))?;
        self.lock().insert(id.clone(), Arc::new(started));
        Ok(json!({ "terminalId": id }))
    }

    /// Refused past [`MAX_RUNNING`] running or [`MAX_KEPT`] kept.
    fn room(&self) -> Result<(), RpcError> {
        let terms = self.lock();
        let running = terms.values().filter(|t| t.running()).count();
        if running >= MAX_RUNNING {
            return Err(error(
                INTERNAL,
                format!("{running} terminal commands are running, chaosrun's limit: wait for or kill one"),
            ));
        }
        if terms.len() >= MAX_KEPT {
            return Err(error(
                INTERNAL,
                format!(
                    "{} terminals are kept, chaosrun's limit: release one",
                    terms.len()
                ),
            ));
        }
        Ok(())
    }

    /// The command's cwd: the work dir, or an absolute path inside it
    /// (symlinks resolved).
    fn cwd(&self, asked: Option<&Path>) -> Result<PathBuf, RpcError> {
        let work = std::fs::canonicalize(&self.sandbox.work)
            .map_err(|e| error(INTERNAL, format!("the work dir: {e}")))?;
        let Some(asked) = asked else {
            return Ok(work);
        };
        let invalid =
            |why: String| error(INVALID_PARAMS, format!("cwd {}: {why}", asked.display()));
        if !asked.is_absolute() {
            return Err(invalid("not an absolute path".into()));
        }
        let real = std::fs::canonicalize(asked).map_err(|e| invalid(e.to_string()))?;
        if !real.starts_with(&work) {
            return Err(invalid(format!(
                "resolves to {}, outside the scenario's work dir {}",
                real.display(),
                work.display()
            )));
        }
        if !real.is_dir() {
            return Err(invalid("not a directory".into()));
        }
        Ok(real)
    }

    /// The agent's environment, the request's variables on top, the marker
    /// last. The variables chaosrun sets to find its processes are refused.
    fn env(
        &self,
        vars: Vec<EnvVariable>,
        marker: &str,
    ) -> Result<BTreeMap<String, String>, RpcError> {
        use crate::proc_hygiene::{RUN_VAR, TAG_VAR};
        let mut env = self.sandbox.env.clone();
        for v in vars {
            let bad_name = v.name.is_empty() || v.name.contains(['=', '\0']);
            if bad_name || v.value.contains('\0') {
                return Err(error(
                    INVALID_PARAMS,
                    format!("env: invalid variable `{}`", v.name),
                ));
            }
            if [TAG_VAR, RUN_VAR, MARK_VAR].contains(&v.name.as_str()) {
                return Err(error(
                    INVALID_PARAMS,
                    format!("env: `{}` is chaosrun's own", v.name),
                ));
            }
            env.insert(v.name, v.value);
        }
        env.insert(MARK_VAR.into(), marker.into());
        Ok(env)
    }
}

fn unknown(id: &str) -> RpcError {
    error(INVALID_PARAMS, format!("unknown terminal id `{id}`"))
}

impl Drop for Terminals {
    fn drop(&mut self) {
        self.kill_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc_hygiene::RunContainment;
    use std::time::Duration;

    /// Terminals in a fresh work dir, contained like an agent with neither
    /// namespace (the scenario's cgroup where the host has one).
    struct Fixture {
        terms: Terminals,
        dir: tempfile::TempDir,
        run: RunContainment,
    }

    fn fixture(name: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let run = RunContainment::new(&format!("acpterm-{name}-{}", std::process::id()));
        let scope = Arc::new(run.scope("s0"));
        let env = BTreeMap::from([
            ("PATH".to_string(), "/usr/bin:/bin".to_string()),
            ("AGENT_ONLY".to_string(), "from-the-agent".to_string()),
        ]);
        let terms = Terminals::contained(Sandbox {
            work,
            env,
            netns: None,
            mntns: None,
            seccomp: Default::default(),
            scope,
        });
        Fixture { terms, dir, run }
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            self.terms.kill_all();
            self.run.end();
        }
    }

    /// A marker unique to one test: a sleep argument (`sleep 300 0.0N`
    /// sleeps 300 s and a bit) that no other process has in its argv.
    fn marker() -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        format!("0.0{}{n:03}7", std::process::id())
    }

    /// Live processes whose command line holds `marker`, from /proc (not
    /// from the terminals' bookkeeping).
    fn with_marker(marker: &str) -> Vec<i32> {
        let me = std::process::id() as i32;
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&p| p != me && !crate::proc_hygiene::is_zombie(p))
            .filter(|p| {
                let argv = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                argv.split(|&b| b == 0).any(|a| a == marker.as_bytes())
            })
            .collect()
    }

    /// Until `n` processes with `marker` run (the command has started its
    /// tree), within 10 s.
    async fn started(marker: &str, n: usize) -> Vec<i32> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let found = with_marker(marker);
            if found.len() >= n {
                return found;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{found:?} of {n} started"
            );
            tokio::task::yield_now().await;
        }
    }

    /// Until each of `pids` has exited (through a pidfd: the exit is the
    /// event awaited), within 10 s.
    async fn exited(pids: &[i32]) {
        for &p in pids {
            let Some(fd) = crate::proc_hygiene::pidfd_open(p) else {
                continue;
            };
            let fd = command::readable_at_exit(fd).expect("registered");
            let waited = tokio::time::timeout(Duration::from_secs(10), fd.readable()).await;
            assert!(waited.is_ok(), "{p} still runs");
        }
    }

    async fn create(t: &Terminals, p: Value) -> Result<String, RpcError> {
        let v = t.handle("terminal/create", &p).await?;
        Ok(v["terminalId"].as_str().expect("a terminalId").to_string())
    }

    async fn call(t: &Terminals, method: &str, id: &str) -> Result<Value, RpcError> {
        t.handle(method, &json!({"sessionId": "s", "terminalId": id}))
            .await
    }

    /// A tree: the shell, a background sleep and a foreground one.
    fn tree_command(m: &str) -> Value {
        json!({"sessionId": "s", "command": format!("sleep 300 {m} & sleep 300 {m}")})
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stdin_open_gives_the_command_a_pipe_nobody_writes() {
        let f = fixture("stdin");
        let p = json!({"sessionId": "s", "command": "readlink /proc/self/fd/0"});
        let plain = create(&f.terms, p.clone()).await.unwrap();
        call(&f.terms, "terminal/wait_for_exit", &plain)
            .await
            .unwrap();
        let out = call(&f.terms, "terminal/output", &plain).await.unwrap();
        assert_eq!(out["output"], "/dev/null\n", "{out}");
        let v = f.terms.create_stdin_open(&p).await.unwrap();
        let open = v["terminalId"].as_str().unwrap();
        call(&f.terms, "terminal/wait_for_exit", open)
            .await
            .unwrap();
        let out = call(&f.terms, "terminal/output", open).await.unwrap();
        assert!(
            out["output"].as_str().unwrap().starts_with("pipe:["),
            "{out}"
        );
        // A command that reads its input is still waiting when killed.
        let p = json!({"sessionId": "s", "command": "read x; echo read=$?"});
        let v = f.terms.create_stdin_open(&p).await.unwrap();
        let reading = v["terminalId"].as_str().unwrap();
        call(&f.terms, "terminal/kill", reading).await.unwrap();
        let exit = call(&f.terms, "terminal/wait_for_exit", reading)
            .await
            .unwrap();
        assert_eq!(exit["signal"], "SIGKILL", "{exit}");
        let out = call(&f.terms, "terminal/output", reading).await.unwrap();
        assert!(!out["output"].as_str().unwrap().contains("read="), "{out}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn output_is_captured_and_truncated_from_the_front_at_the_limit() {
        let f = fixture("output");
        let id = create(&f.terms, json!({"sessionId": "s", "command": "printf", "args": ["0123456789"], "outputByteLimit": 4})).await.unwrap();
        let exit = call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        assert_eq!(exit, json!({"exitCode": 0, "signal": null}));
        let out = call(&f.terms, "terminal/output", &id).await.unwrap();
        assert_eq!(
            out,
            json!({"output": "6789", "truncated": true, "exitStatus": {"exitCode": 0, "signal": null}})
        );
        // stdout and stderr both, nothing dropped under the limit.
        let id = create(
            &f.terms,
            json!({"sessionId": "s", "command": "echo out; echo err >&2"}),
        )
        .await
        .unwrap();
        call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        let out = call(&f.terms, "terminal/output", &id).await.unwrap();
        let text = out["output"].as_str().unwrap();
        assert!(text.contains("out\n") && text.contains("err\n"), "{out}");
        assert_eq!(out["truncated"], json!(false));
    }

    /// Once wait_for_exit answered, the output holds all the command wrote
    /// (the end of it sat in the pipe when it exited), every time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_output_is_complete_when_wait_for_exit_answers() {
        let f = fixture("complete");
        let write = "import sys; sys.stdout.write('a' * 300000)";
        for _ in 0..10 {
            let p = json!({"sessionId": "s", "command": "python3", "args": ["-c", write]});
            let id = create(&f.terms, p).await.unwrap();
            call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
            let out = call(&f.terms, "terminal/output", &id).await.unwrap();
            assert_eq!(out["output"].as_str().map(str::len), Some(300000));
            call(&f.terms, "terminal/release", &id).await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wait_for_exit_returns_the_exit_code_or_the_signal() {
        let f = fixture("wait");
        let id = create(&f.terms, json!({"sessionId": "s", "command": "exit 7"}))
            .await
            .unwrap();
        let exit = call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        assert_eq!(exit, json!({"exitCode": 7, "signal": null}));
        let m = marker();
        let id = create(
            &f.terms,
            json!({"sessionId": "s", "command": "sleep", "args": ["300", m]}),
        )
        .await
        .unwrap();
        let running = call(&f.terms, "terminal/output", &id).await.unwrap();
        assert!(running.get("exitStatus").is_none(), "{running}");
        call(&f.terms, "terminal/kill", &id).await.unwrap();
        let exit = call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        assert_eq!(exit, json!({"exitCode": null, "signal": "SIGKILL"}));
    }

    /// The background sleep outlives nothing: `terminal/kill` returns once
    /// the shell and both sleeps are gone, and the terminal keeps its output.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kill_takes_the_whole_tree_and_keeps_the_terminal() {
        let f = fixture("kill");
        let m = marker();
        let id = create(&f.terms, tree_command(&m)).await.unwrap();
        let pids = started(&m, 2).await;
        call(&f.terms, "terminal/kill", &id).await.unwrap();
        assert_eq!(with_marker(&m), Vec::<i32>::new(), "survivors of {pids:?}");
        let out = call(&f.terms, "terminal/output", &id).await.unwrap();
        assert_eq!(out["exitStatus"]["signal"], json!("SIGKILL"), "{out}");
    }

    /// The shell exits at once and leaves its background sleep re-parented,
    /// holding the output pipes: wait_for_exit answers at the shell's exit
    /// with all the shell wrote, and the kill still finds the sleep (by its
    /// marker variable).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kill_after_the_command_exited_takes_what_it_left_running() {
        let f = fixture("orphan");
        let m = marker();
        let line = format!("sleep 300 {m} & echo started");
        let id = create(&f.terms, json!({"sessionId": "s", "command": line}))
            .await
            .unwrap();
        let exit = call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        assert_eq!(exit["exitCode"], json!(0), "{exit}");
        let out = call(&f.terms, "terminal/output", &id).await.unwrap();
        assert_eq!(out["output"], json!("started\n"), "{out}");
        let pids = started(&m, 1).await;
        call(&f.terms, "terminal/kill", &id).await.unwrap();
        assert_eq!(with_marker(&m), Vec::<i32>::new(), "survivors of {pids:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn release_kills_the_tree_and_forgets_the_terminal() {
        let f = fixture("release");
        let m = marker();
        let id = create(&f.terms, tree_command(&m)).await.unwrap();
        let pids = started(&m, 2).await;
        assert_eq!(
            call(&f.terms, "terminal/release", &id).await.unwrap(),
            json!({})
        );
        assert_eq!(with_marker(&m), Vec::<i32>::new(), "survivors of {pids:?}");
        let e = call(&f.terms, "terminal/output", &id).await.unwrap_err();
        assert_eq!(e.code, -32602, "{e:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kill_all_and_drop_take_every_tree() {
        let f = fixture("killall");
        let (m1, m2) = (marker(), marker());
        create(&f.terms, tree_command(&m1)).await.unwrap();
        create(
            &f.terms,
            json!({"sessionId": "s", "command": format!("sleep 300 {m2} &")}),
        )
        .await
        .unwrap();
        let pids: Vec<i32> = [started(&m1, 2).await, started(&m2, 1).await].concat();
        f.terms.kill_all();
        f.terms.kill_all();
        exited(&pids).await;
        assert_eq!(
            [with_marker(&m1), with_marker(&m2)].concat(),
            Vec::<i32>::new()
        );
        let g = fixture("drop");
        let m3 = marker();
        create(&g.terms, tree_command(&m3)).await.unwrap();
        let pids = started(&m3, 2).await;
        drop(g);
        exited(&pids).await;
        assert_eq!(with_marker(&m3), Vec::<i32>::new());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cwd_outside_the_work_dir_is_refused_and_one_inside_is_used() {
        let f = fixture("cwd");
        let work = f.dir.path().join("work");
        let outside = f.dir.path().to_path_buf();
        std::os::unix::fs::symlink(&outside, work.join("up")).unwrap();
        for cwd in [
            outside.clone(),
            work.join("up"),
            work.join("../work/.."),
            PathBuf::from("work"),
        ] {
            let e = create(
                &f.terms,
                json!({"sessionId": "s", "command": "pwd", "cwd": cwd}),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code, -32602, "{cwd:?}: {e:?}");
        }
        std::fs::create_dir(work.join("sub")).unwrap();
        let id = create(
            &f.terms,
            json!({"sessionId": "s", "command": "pwd", "cwd": work.join("sub")}),
        )
        .await
        .unwrap();
        call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        let out = call(&f.terms, "terminal/output", &id).await.unwrap();
        let sub = work.join("sub").canonicalize().unwrap();
        assert_eq!(out["output"], json!(format!("{}\n", sub.display())));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unknown_terminal_method_or_program_is_refused() {
        let f = fixture("unknown");
        for method in [
            "terminal/output",
            "terminal/wait_for_exit",
            "terminal/kill",
            "terminal/release",
        ] {
            let e = call(&f.terms, method, "term-99").await.unwrap_err();
            assert_eq!(e.code, -32602, "{method}: {e:?}");
            assert!(e.message.contains("term-99"), "{e:?}");
        }
        let e = f
            .terms
            .handle("terminal/output", &json!({"sessionId": "s"}))
            .await
            .unwrap_err();
        assert_eq!(e.code, -32602, "{e:?}");
        let p = json!({"sessionId": "s", "command": "chaosrun-no-such-program", "args": ["x"]});
        let e = f.terms.handle("terminal/create", &p).await.unwrap_err();
        assert_eq!(e.code, -32603, "{e:?}");
        assert!(e.message.contains("chaosrun-no-such-program"), "{e:?}");
        let p = json!({"sessionId": "s", "command": ""});
        let e = f.terms.handle("terminal/create", &p).await.unwrap_err();
        assert_eq!(e.code, -32602, "{e:?}");
        let e = f
            .terms
            .handle("terminal/resize", &json!({}))
            .await
            .unwrap_err();
        assert_eq!(e.code, -32601, "{e:?}");
    }

    /// Past the cap a create is refused and starts nothing; once one is
    /// killed there is room again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn more_than_the_cap_is_refused() {
        let f = fixture("cap");
        let m = marker();
        let mut ids = Vec::new();
        for _ in 0..MAX_RUNNING {
            ids.push(
                create(
                    &f.terms,
                    json!({"sessionId": "s", "command": "sleep", "args": ["300", m]}),
                )
                .await
                .unwrap(),
            );
        }
        started(&m, MAX_RUNNING).await;
        let e = create(
            &f.terms,
            json!({"sessionId": "s", "command": "sleep", "args": ["300", m]}),
        )
        .await
        .unwrap_err();
        assert!(e.message.contains("limit"), "{e:?}");
        assert_eq!(
            with_marker(&m).len(),
            MAX_RUNNING,
            "the refused one never started"
        );
        call(&f.terms, "terminal/kill", &ids[0]).await.unwrap();
        create(&f.terms, json!({"sessionId": "s", "command": "true"}))
            .await
            .unwrap();
    }

    /// The command's environment is the agent's plus the request's: a
    /// variable of chaosrun's own process never reaches it, and chaosrun's
    /// markers cannot be overridden.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_callers_environment_never_reaches_the_command() {
        let f = fixture("env");
        std::env::set_var("CHAOSRUN_ACPTERM_CALLER_ONLY", "leaked");
        let id = create(&f.terms, json!({"sessionId": "s", "command": "env", "args": [], "env": [{"name": "GIVEN", "value": "by-the-agent"}]})).await.unwrap();
        call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        let out = call(&f.terms, "terminal/output", &id).await.unwrap();
        let text = out["output"].as_str().unwrap();
        assert!(!text.contains("CHAOSRUN_ACPTERM_CALLER_ONLY"), "{text}");
        assert!(text.contains("GIVEN=by-the-agent\n"), "{text}");
        assert!(text.contains("AGENT_ONLY=from-the-agent\n"), "{text}");
        assert!(text.contains(&format!("{MARK_VAR}=")), "{text}");
        for name in [MARK_VAR, crate::proc_hygiene::TAG_VAR] {
            let p =
                json!({"sessionId": "s", "command": "env", "env": [{"name": name, "value": "x"}]});
            let e = create(&f.terms, p).await.unwrap_err();
            assert_eq!(e.code, -32602, "{name}: {e:?}");
        }
    }

    /// The drive shares its terminals between tasks and serves each
    /// request on a task of its own.
    #[test]
    fn terminals_and_their_requests_cross_tasks() {
        fn send_sync<T: Send + Sync>() {}
        fn send<F: std::future::Future + Send>(_: F) {}
        send_sync::<Terminals>();
        let f = fixture("send");
        send(f.terms.handle("terminal/create", &json!({})));
    }

    /// The inode of a namespace fd (what `readlink /proc/self/ns/*` names).
    fn ns_inode(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let f = std::fs::File::from(fd.try_clone_to_owned().unwrap());
        f.metadata().unwrap().ino()
    }

    /// A terminal's command is contained exactly like the agent: in the
    /// scenario's network and mount namespaces, under the seccomp program
    /// (a `namespaces: denied` row's `unshare` refused), with no_new_privs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs root (scripts/test.sh runs it)"]
    async fn the_command_runs_in_the_scenarios_namespaces_and_seccomp_program() {
        use crate::driver::mountns::{MntNs, Reach};
        // SAFETY: geteuid has no preconditions.
        assert_eq!(unsafe { libc::geteuid() }, 0, "missing prerequisite: root");
        let mut f = fixture("contained");
        let (netns, network) = crate::driver::netns::NetNs::for_scenario_async(false).await;
        let netns = netns.unwrap_or_else(|| panic!("a network namespace: {}", network.describe()));
        let reach = Reach {
            scenario: f.dir.path().to_path_buf(),
            artifacts: None,
            paths: vec![],
        };
        let (mntns, mounts) = MntNs::for_scenario(&reach);
        let mntns = mntns.unwrap_or_else(|| panic!("a mount namespace: {mounts:?}"));
        let want = format!(
            "net:[{}]\nmnt:[{}]\n",
            ns_inode(netns.fd()),
            ns_inode(mntns.fd())
        );
        let scope = f.terms.sandbox.scope.clone();
        f.terms = Terminals::contained(Sandbox {
            work: f.dir.path().join("work"),
            env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
            netns: Some(netns),
            mntns: Some(mntns),
            seccomp: crate::driver::seccomp::Policy {
                allow_setns: false,
                deny_namespaces: true,
            },
            scope,
        });
        let line =
            "readlink /proc/self/ns/net /proc/self/ns/mnt; grep NoNewPrivs /proc/self/status; \
                    unshare --net true 2>/dev/null && echo UNSHARED || echo REFUSED";
        let id = create(&f.terms, json!({"sessionId": "s", "command": line}))
            .await
            .unwrap();
        call(&f.terms, "terminal/wait_for_exit", &id).await.unwrap();
        let out = call(&f.terms, "terminal/output", &id).await.unwrap();
        let text = out["output"].as_str().unwrap();
        assert!(text.starts_with(&want), "want {want:?}: {text}");
        assert!(text.contains("NoNewPrivs:\t1"), "{text}");
        assert!(
            text.contains("REFUSED") && !text.contains("UNSHARED"),
            "{text}"
        );
    }
}
