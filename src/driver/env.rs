//! The child's environment, built from an allowlist: of the caller's variables
//! only [`ALLOWED`] and `LC_*` pass; then chaosrun's own (`HOME`, `TMPDIR`,
//! `CHAOS_*`, `NO_COLOR`, `TZ=UTC`), the profile's `env` (which carries the
//! user's `--pass-env NAME`s, as `{{env:NAME}}`). Proxy variables are dropped
//! whatever their source, and `NO_PROXY`/`no_proxy` always hold the loopback
//! names, so an agent that honours a proxy still reaches the provider. Pure, so
//! it is tested without spawning anything.

use std::collections::BTreeMap;

/// The caller's variables the agent gets (plus every `LC_*`).
pub const ALLOWED: &[&str] = &["PATH", "LANG", "TERM", "TZ", "USER", "LOGNAME", "SHELL"];

/// What `NO_PROXY` and `no_proxy` always contain.
pub const LOOPBACK_NO_PROXY: &str = "127.0.0.1,localhost,::1";

/// Whether a caller's variable passes the allowlist.
pub fn is_allowed(name: &str) -> bool {
    ALLOWED.contains(&name) || name.starts_with("LC_")
}

/// A proxy variable (any case): never given to the agent.
pub fn is_proxy(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "http_proxy" | "https_proxy" | "all_proxy" | "ftp_proxy"
    )
}

/// Whether chaosrun sets `name` itself, so neither the profile nor
/// `--pass-env` may replace it.
pub fn is_fixed(name: &str) -> bool {
    matches!(
        name,
        "HOME" | "TMPDIR" | "CHAOS_TAG" | "CHAOS_RUN" | "CHAOS_SPEC" | "CHAOS_JOURNAL"
    )
}

/// Why `--pass-env NAME` cannot be honoured, if it cannot.
pub fn check_pass_env(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("--pass-env `{name}` is not a variable name"));
    }
    if is_proxy(name) {
        return Err(format!(
            "--pass-env {name}: proxy variables are never passed (the provider is on loopback)"
        ));
    }
    if is_fixed(name) || name.eq_ignore_ascii_case("no_proxy") {
        return Err(format!("--pass-env {name}: chaosrun sets {name} itself"));
    }
    match std::env::var(name) {
        Ok(_) => {}
        Err(std::env::VarError::NotPresent) => {
            return Err(format!(
                "--pass-env {name}: {name} is not set in chaosrun's environment"
            ))
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(format!(
                "--pass-env {name}: the value of {name} is not UTF-8"
            ))
        }
    }
    Ok(())
}

/// What chaosrun itself sets.
pub struct Fixed<'a> {
    pub home: &'a str,
    pub tmp: &'a str,
    pub tag: &'a str,
    pub run: &'a str,
    pub spec: &'a str,
    /// The side-effect journal scripted tools append to.
    pub journal: &'a str,
}

/// `list` with every loopback name present.
fn with_loopback(list: Option<&String>) -> String {
    let mut items: Vec<&str> = list
        .map(|l| {
            l.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    for n in LOOPBACK_NO_PROXY.split(',') {
        if !items.contains(&n) {
            items.push(n);
        }
    }
    items.join(",")
}

/// The child's full environment. `extra` (the profile's rendered env) is
/// applied after the allowlisted variables, but can never replace HOME,
/// TMPDIR or chaosrun's `CHAOS_TAG`/`RUN`/`SPEC`/`JOURNAL`, nor add a proxy.
pub fn build(
    parent: impl IntoIterator<Item = (String, String)>,
    fixed: &Fixed<'_>,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> =
        parent.into_iter().filter(|(k, _)| is_allowed(k)).collect();
    env.insert("NO_COLOR".into(), "1".into());
    env.insert("TZ".into(), "UTC".into());
    for (k, v) in extra {
        if !is_fixed(k) && !is_proxy(k) {
            env.insert(k.clone(), v.clone());
        }
    }
    let no_proxy = with_loopback(env.get("NO_PROXY").or(env.get("no_proxy")));
    env.insert("NO_PROXY".into(), no_proxy.clone());
    env.insert("no_proxy".into(), no_proxy);
    env.insert("HOME".into(), fixed.home.into());
    env.insert("TMPDIR".into(), fixed.tmp.into());
    env.insert(crate::proc_hygiene::TAG_VAR.into(), fixed.tag.into());
    env.insert(crate::proc_hygiene::RUN_VAR.into(), fixed.run.into());
    env.insert("CHAOS_SPEC".into(), fixed.spec.into());
    env.insert("CHAOS_JOURNAL".into(), fixed.journal.into());
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed() -> Fixed<'static> {
        Fixed {
            home: "/tmp/h",
            tmp: "/tmp/h/tmp",
            tag: "t1",
            run: "r1",
            spec: "/tmp/s.json",
            journal: "/tmp/j.log",
        }
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_allowlist_passes_no_secret_does() {
        let secrets = [
            ("DATABASE_URL", "postgres://u:hunter2@db/prod"),
            ("PGPASSWORD", "hunter2"),
            ("MYSQL_PWD", "hunter2"),
            ("API_KEY", "k"),
            ("SECRET_KEY", "s"),
            ("DJANGO_SECRET_KEY", "d"),
            ("REDIS_URL", "redis://:pw@r:6379"),
            ("SENTRY_DSN", "https://key@sentry.io/1"),
            ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/x"),
            ("PRIVATE_KEY", "-----BEGIN"),
            ("KUBECONFIG", "/root/.kube/config"),
            ("HTTP_PROXY", "http://user:pw@proxy:3128"),
            ("https_proxy", "http://user:pw@proxy:3128"),
            ("ALL_PROXY", "socks5://user:pw@proxy"),
            ("OPENAI_API_KEY", "sk-real"),
            ("GITHUB_TOKEN", "ghp"),
            ("SSH_AUTH_SOCK", "/tmp/agent.sock"),
            ("CHAOS_TAG", "parent-tag"),
            ("CHAOS_PG_DSN", "host=db password=pw"),
            ("XDG_CONFIG_HOME", "/root/.config"),
            ("HOME", "/root"),
        ];
        let allowed = [
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("TERM", "xterm"),
            ("USER", "me"),
            ("LOGNAME", "me"),
            ("SHELL", "/bin/sh"),
        ];
        let mut parent = pairs(&secrets);
        parent.extend(pairs(&allowed));
        let env = build(parent, &fixed(), &BTreeMap::new());
        for (k, v) in secrets {
            if let Some(got) = env.get(k) {
                assert_ne!(got, v, "{k} leaked");
            }
            assert!(!env.values().any(|x| x == v), "the value of {k} leaked");
        }
        for (k, v) in allowed {
            assert_eq!(env[k], v);
        }
        assert_eq!(env["HOME"], "/tmp/h");
        assert_eq!(env["TMPDIR"], "/tmp/h/tmp");
        assert_eq!(env["CHAOS_TAG"], "t1");
        assert_eq!(env["CHAOS_RUN"], "r1");
        assert_eq!(env["NO_PROXY"], LOOPBACK_NO_PROXY);
        assert_eq!(env["no_proxy"], LOOPBACK_NO_PROXY);
        let expected: std::collections::BTreeSet<&str> = allowed
            .iter()
            .map(|(k, _)| *k)
            .chain([
                "HOME",
                "TMPDIR",
                "TZ",
                "NO_COLOR",
                "NO_PROXY",
                "no_proxy",
                "CHAOS_TAG",
                "CHAOS_RUN",
                "CHAOS_SPEC",
                "CHAOS_JOURNAL",
            ])
            .collect();
        let got: std::collections::BTreeSet<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn profile_env_applies_but_cannot_replace_home_tag_or_add_a_proxy() {
        let extra: BTreeMap<String, String> = pairs(&[
            ("OPENAI_API_KEY", "sk-fake"),
            ("HOME", "/root"),
            ("CHAOS_TAG", "other"),
            ("CHAOS_PG_DSN", "host=127.0.0.1"),
            ("http_proxy", "http://proxy:3128"),
            ("NO_PROXY", "example.com,localhost"),
        ])
        .into_iter()
        .collect();
        let env = build(Vec::new(), &fixed(), &extra);
        assert_eq!(env["OPENAI_API_KEY"], "sk-fake");
        assert_eq!(env["HOME"], "/tmp/h");
        assert_eq!(env["CHAOS_TAG"], "t1");
        assert!(!env.contains_key("http_proxy"));
        // A profile may hand the agent a variable of its own (the pgworker
        // DSN), rendered from chaosrun's environment by `{{env:NAME}}`.
        assert_eq!(env["CHAOS_PG_DSN"], "host=127.0.0.1");
        assert_eq!(env["NO_PROXY"], "example.com,localhost,127.0.0.1,::1");
        assert_eq!(env["no_proxy"], env["NO_PROXY"]);
    }

    #[test]
    fn pass_env_names_are_checked() {
        assert!(check_pass_env("PATH").is_ok());
        assert!(check_pass_env("CHAOSRUN_SURELY_UNSET_VAR")
            .unwrap_err()
            .contains("not set"));
        for bad in [
            "",
            "A=B",
            "1X",
            "HOME",
            "CHAOS_TAG",
            "HTTPS_PROXY",
            "no_proxy",
        ] {
            assert!(check_pass_env(bad).is_err(), "{bad}");
        }
    }
}
