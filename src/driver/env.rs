//! The child's environment: the parent's, minus every credential and provider
//! variable, plus a fake HOME, the tag and the run marker. Pure, so it is
//! tested without spawning anything.

use std::collections::BTreeMap;

/// Suffixes of variables that may hold a credential.
const SECRET_SUFFIXES: &[&str] = &["_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_CREDENTIALS"];
/// Prefixes of provider and agent configuration that must not leak in.
const PROVIDER_PREFIXES: &[&str] = &[
    "OPENAI",
    "ANTHROPIC",
    "OPENROUTER",
    "AZURE_OPENAI",
    "GEMINI",
    "GOOGLE_API",
    "MISTRAL",
    "GROQ",
    "DEEPSEEK",
    "TOGETHER",
    "HERMES_",
    "NOUS_",
    "AWS_",
    "HF_",
    "CHAOS_",
];
/// Other variables that point at the real user or would change the agent.
const DROPPED: &[&str] = &[
    "HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "TMPDIR",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "SSH_AUTH_SOCK",
    "GIT_ASKPASS",
    "PYTEST_CURRENT_TEST",
    "NETRC",
];

/// Whether a parent variable is dropped.
pub fn is_stripped(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_SUFFIXES.iter().any(|s| upper.ends_with(s))
        || PROVIDER_PREFIXES.iter().any(|p| upper.starts_with(p))
        || DROPPED.contains(&upper.as_str())
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

/// The child's full environment. `extra` (the profile's rendered env) is
/// applied last, but can never replace the tag, the run marker or HOME.
pub fn build(
    parent: impl IntoIterator<Item = (String, String)>,
    fixed: &Fixed<'_>,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = parent
        .into_iter()
        .filter(|(k, _)| !is_stripped(k))
        .collect();
    env.insert("NO_COLOR".into(), "1".into());
    env.insert("TZ".into(), "UTC".into());
    for (k, v) in extra {
        env.insert(k.clone(), v.clone());
    }
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

    #[test]
    fn strips_credentials_and_provider_variables_keeps_the_rest() {
        let parent = [
            ("OPENAI_API_KEY", "sk-real"),
            ("GITHUB_TOKEN", "ghp"),
            ("MY_SECRET", "x"),
            ("anthropic_base_url", "x"),
            ("HERMES_HOME", "/root/.hermes"),
            ("HOME", "/root"),
            ("CHAOS_TAG", "parent-tag"),
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let env = build(parent, &fixed(), &BTreeMap::new());
        for gone in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "MY_SECRET",
            "anthropic_base_url",
            "HERMES_HOME",
        ] {
            assert!(!env.contains_key(gone), "{gone} leaked");
        }
        assert_eq!(env["PATH"], "/usr/bin");
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["HOME"], "/tmp/h");
        assert_eq!(env["CHAOS_TAG"], "t1");
        assert_eq!(env["CHAOS_RUN"], "r1");
    }

    #[test]
    fn profile_env_applies_but_cannot_replace_home_or_tag() {
        let extra: BTreeMap<String, String> = [
            ("OPENAI_API_KEY", "sk-fake"),
            ("HOME", "/root"),
            ("CHAOS_TAG", "other"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let env = build(Vec::new(), &fixed(), &extra);
        assert_eq!(env["OPENAI_API_KEY"], "sk-fake");
        assert_eq!(env["HOME"], "/tmp/h");
        assert_eq!(env["CHAOS_TAG"], "t1");
    }
}
