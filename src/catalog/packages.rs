//! The agent's own registry client, asked which versions exist: `npm view
//! PKG versions --json` for an npm agent, `pip index versions DIST` for a
//! Python one. They run with the caller's environment, so the user's
//! registry settings (`npm_config_registry`, `PIP_INDEX_URL`,
//! `PIP_FIND_LINKS`, `PIP_NO_INDEX`, their config files) choose the registry;
//! tests point them at a local folder and never reach a network.

use std::process::{Command, Stdio};

use super::entry::{Entry, Install};

/// The command that lists `entry`'s versions, for messages.
pub fn lister(entry: &Entry) -> Option<String> {
    match entry.install {
        Install::Bundled => None,
        Install::Npm(pkg) => Some(format!("npm view {pkg} versions --json")),
        Install::Pip(dist) => Some(format!("pip index versions {dist}")),
    }
}

/// Every version the registry serves of `entry`, as it lists them.
pub fn versions(entry: &Entry) -> Result<Vec<String>, String> {
    let what = lister(entry)
        .ok_or_else(|| format!("agent `{}` is bundled: it has no versions", entry.name))?;
    let out = match entry.install {
        Install::Npm(pkg) => run(Command::new("npm").args(["view", pkg, "versions", "--json"])),
        Install::Pip(dist) => run(Command::new(python()).args([
            "-m",
            "pip",
            "index",
            "versions",
            "--disable-pip-version-check",
            dist,
        ])),
        Install::Bundled => unreachable!("checked above"),
    }
    .map_err(|e| format!("`{what}`: {e}"))?;
    let list = match entry.install {
        Install::Npm(_) => npm_versions(&out),
        _ => pip_versions(&out),
    };
    list.filter(|l| !l.is_empty())
        .ok_or_else(|| format!("`{what}` listed no version"))
}

/// The newest release the registry serves.
pub fn latest(entry: &Entry) -> Result<String, String> {
    let all = versions(entry)?;
    all.iter()
        .filter(|v| super::version::release(v).is_some())
        .max_by(|a, b| super::version::cmp(a, b))
        .cloned()
        .ok_or_else(|| {
            format!(
                "`{}` listed only pre-releases",
                lister(entry).unwrap_or_default()
            )
        })
}

fn python() -> String {
    std::env::var("PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// Run a registry client; its stdout, bounded (a version list is small).
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run it: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("{} ({})", out.status, tail.join(" / ")));
    }
    let cap = 4 << 20;
    Ok(String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(cap)]).into_owned())
}

/// `npm view PKG versions --json`: a JSON array (a string when only one).
fn npm_versions(out: &str) -> Option<Vec<String>> {
    match serde_json::from_str::<serde_json::Value>(out).ok()? {
        serde_json::Value::Array(a) => Some(
            a.into_iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
        ),
        serde_json::Value::String(s) => Some(vec![s]),
        _ => None,
    }
}

/// `pip index versions DIST`: the line `Available versions: 1.2, 1.1, ...`.
fn pip_versions(out: &str) -> Option<Vec<String>> {
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("Available versions:"))?;
    Some(
        line.split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings() {
        assert_eq!(
            npm_versions("[\"0.1.0\", \"0.2.0-linux-x64\"]").unwrap(),
            ["0.1.0", "0.2.0-linux-x64"]
        );
        assert_eq!(npm_versions("\"1.0.0\"").unwrap(), ["1.0.0"]);
        assert!(npm_versions("npm ERR").is_none());
        let pip = "x (1.2.0)\nAvailable versions: 1.2.0, 1.1.0, 1.0.0\n";
        assert_eq!(pip_versions(pip).unwrap(), ["1.2.0", "1.1.0", "1.0.0"]);
        assert!(pip_versions("nothing").is_none());
    }
}
