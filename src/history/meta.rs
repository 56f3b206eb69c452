//! What describes a recorded run besides its scenarios: chaosrun's version,
//! the table's content hash, the agent's own version (the profile's
//! `version_cmd`, run once, bounded), CI metadata from the environment, and
//! wall-clock times.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

pub const CHAOSRUN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How long `version_cmd` may take.
pub const VERSION_CMD_TIMEOUT: Duration = Duration::from_secs(5);

/// The commit, branch and run URL of the CI job, when it says.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Ci {
    pub commit: Option<String>,
    pub branch: Option<String>,
    pub run_url: Option<String>,
}

impl Ci {
    /// From the environment: `CHAOSRUN_COMMIT/BRANCH/RUN_URL` first, then
    /// GitHub Actions, then GitLab CI.
    pub fn from_env() -> Ci {
        Ci::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Ci {
        let github_url = match (
            get("GITHUB_SERVER_URL"),
            get("GITHUB_REPOSITORY"),
            get("GITHUB_RUN_ID"),
        ) {
            (Some(s), Some(r), Some(id)) => Some(format!("{s}/{r}/actions/runs/{id}")),
            _ => None,
        };
        Ci {
            commit: get("CHAOSRUN_COMMIT")
                .or_else(|| get("GITHUB_SHA"))
                .or_else(|| get("CI_COMMIT_SHA")),
            branch: get("CHAOSRUN_BRANCH")
                .or_else(|| get("GITHUB_REF_NAME"))
                .or_else(|| get("CI_COMMIT_REF_NAME")),
            run_url: get("CHAOSRUN_RUN_URL")
                .or(github_url)
                .or_else(|| get("CI_PIPELINE_URL")),
        }
    }
}

/// Now, in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The table's content hash.
pub fn table_sha256(path: &Path) -> Result<String, String> {
    crate::input::read_input(path, crate::input::TABLE)
        .map(|b| sha256_hex(&b))
        .map_err(String::from)
}

/// The first stdout line of `argv`, run once with no inherited environment
/// but PATH (so no secret reaches it), HOME in a fresh temporary directory,
/// in its own process group, killed with that group after
/// [`VERSION_CMD_TIMEOUT`]. `Err` says why there is no version.
pub fn agent_version(argv: &[String]) -> Result<String, String> {
    agent_version_within(argv, VERSION_CMD_TIMEOUT)
}

fn agent_version_within(argv: &[String], limit: Duration) -> Result<String, String> {
    let Some((prog, args)) = argv.split_first() else {
        return Err("the profile has no version_cmd".into());
    };
    let home = tempfile::tempdir().map_err(|e| format!("version_cmd: no temp HOME: {e}"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    // Owned: a run's orphan reaper must leave its exit status to us.
    let mut child = crate::children::spawn_owned(&mut cmd)
        .map_err(|e| format!("version_cmd `{prog}` did not start: {e}"))?;
    let mut out = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = out.by_ref().take(64 * 1024).read_to_end(&mut buf);
        buf
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            _ => break None,
        }
    };
    // The group is ours (process_group(0) above): whatever it left behind goes.
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    let _ = child.kill();
    let _ = child.wait();
    crate::children::disown(child.id() as i32);
    let stdout = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(format!(
            "version_cmd `{prog}` did not finish within {:.1} s",
            limit.as_secs_f64()
        ));
    };
    if !status.success() {
        return Err(format!("version_cmd `{prog}` exited with {status}"));
    }
    let line = String::from_utf8_lossy(&stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    if line.is_empty() {
        return Err(format!("version_cmd `{prog}` printed nothing"));
    }
    Ok(line.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_metadata_prefers_the_generic_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let gh = Ci::from_lookup(env(&[
            ("GITHUB_SHA", "abc"),
            ("GITHUB_REF_NAME", "main"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "o/r"),
            ("GITHUB_RUN_ID", "9"),
            ("CHAOSRUN_BRANCH", "nightly"),
        ]));
        assert_eq!(gh.commit.as_deref(), Some("abc"));
        assert_eq!(gh.branch.as_deref(), Some("nightly"));
        assert_eq!(
            gh.run_url.as_deref(),
            Some("https://github.com/o/r/actions/runs/9")
        );
        let gl = Ci::from_lookup(env(&[("CI_PIPELINE_URL", "https://gl/p/1")]));
        assert_eq!(gl.run_url.as_deref(), Some("https://gl/p/1"));
        assert_eq!(Ci::from_lookup(|_| None), Ci::default());
    }

    #[test]
    fn version_cmd_first_line_without_the_callers_environment() {
        std::env::set_var("CHAOSRUN_TEST_SECRET_FOR_VERSION", "s3cret");
        let v = agent_version(&[
            "sh".into(),
            "-c".into(),
            "echo \"v1.2 ${CHAOSRUN_TEST_SECRET_FOR_VERSION:-clean}\"; echo second".into(),
        ])
        .unwrap();
        assert_eq!(v, "v1.2 clean");
        let e = agent_version(&["sh".into(), "-c".into(), "exit 3".into()]).unwrap_err();
        assert!(e.contains("exited"), "{e}");
        assert!(agent_version(&["/no/such/prog".into()])
            .unwrap_err()
            .contains("did not start"));
    }

    /// Live (non-zombie) processes whose argv holds `marker`, from /proc.
    fn alive_with(marker: &str) -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| {
                let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let state = stat
                    .rsplit(')')
                    .next()?
                    .split_whitespace()
                    .next()?
                    .to_string();
                (cmd.contains(marker) && state != "Z").then_some(cmd)
            })
            .collect()
    }

    #[test]
    fn a_hanging_version_cmd_is_killed_with_what_it_started() {
        let marker = format!("{}.{}", 900 + std::process::id() % 99, std::process::id());
        let script = format!("sleep {marker} & sleep {marker}");
        let e = agent_version_within(
            &["sh".into(), "-c".into(), script],
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(e.contains("did not finish within 0.3 s"), "{e}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !alive_with(&format!("sleep {marker}")).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(alive_with(&format!("sleep {marker}")), Vec::<String>::new());
    }

    #[test]
    fn sha256_of_known_bytes() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
