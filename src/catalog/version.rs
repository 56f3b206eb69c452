//! Agent versions: `NAME@VERSION` / `NAME@latest` as `--agent`, `agents
//! setup` and `bisect` take them, the order of a registry's version list, and
//! a profile's `versions:` range (the releases it is known to drive).
//!
//! Versions are compared as semver (`2.1.328`); a registry version with
//! fewer parts (`1.2`) is padded (`1.2.0`). A pre-release or a platform
//! build (`0.171.0-linux-x64`, `1.0.0rc1`) is not a release: bisect skips it,
//! and a range check says it cannot tell.

use std::cmp::Ordering;

/// What follows `@` in an agent spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// `@latest`: what the agent's registry serves as the newest release.
    Latest,
    /// `@1.2.3`.
    Exact(String),
}

/// `NAME@VERSION` split, when `spec` is one: a name that is not a path (no
/// `/`, not `*.yaml`), then `@`, then a version or `latest`.
pub fn split(spec: &str) -> Option<(&str, Want)> {
    if spec.contains('/') {
        return None;
    }
    let (name, version) = spec.rsplit_once('@')?;
    if name.is_empty() || name.ends_with(".yaml") || name.ends_with(".yml") {
        return None;
    }
    Some((name, want(version)))
}

fn want(version: &str) -> Want {
    if version == "latest" {
        Want::Latest
    } else {
        Want::Exact(version.to_string())
    }
}

/// A version string a user may give: digits, letters, `.`, `-`, `+`, `_`,
/// 1..=64 characters (it becomes part of a folder name).
pub fn check(version: &str) -> Result<(), String> {
    let ok = !version.is_empty()
        && version.len() <= 64
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{version}` is not a version (digits first, then letters, digits, `.`, `-`, `+`, `_`; at most 64 characters)"
        ))
    }
}

/// `version` as a release, if it is one (no pre-release part).
pub fn release(version: &str) -> Option<semver::Version> {
    let v = parse(version)?;
    v.pre.is_empty().then_some(v)
}

/// `version` as semver, padded to three parts.
fn parse(version: &str) -> Option<semver::Version> {
    let v = version.trim().trim_start_matches('v');
    if let Ok(p) = semver::Version::parse(v) {
        return Some(p);
    }
    let (core, rest) = match v.find(['-', '+']) {
        Some(i) => v.split_at(i),
        None => (v, ""),
    };
    let parts = core.split('.').count();
    let padded = match parts {
        1 => format!("{core}.0.0{rest}"),
        2 => format!("{core}.0{rest}"),
        _ => return None,
    };
    semver::Version::parse(&padded).ok()
}

/// Order two versions (unparsable ones after every parsable one, by text).
pub fn cmp(a: &str, b: &str) -> Ordering {
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The releases strictly after `good` up to and including `bad`, oldest
/// first: the versions a bisect between them has to decide. Pre-releases and
/// platform builds are left out.
pub fn between(all: &[String], good: &str, bad: &str) -> Vec<String> {
    let mut out: Vec<String> = all
        .iter()
        .filter(|v| release(v).is_some())
        .filter(|v| cmp(v, good) == Ordering::Greater && cmp(v, bad) != Ordering::Greater)
        .cloned()
        .collect();
    out.sort_by(|a, b| cmp(a, b));
    out.dedup();
    out
}

/// A profile's `versions:` (`">=2.1.300, <=2.1.332"`, semver requirement
/// syntax), checked when the profile is loaded.
pub fn range(text: &str) -> Result<semver::VersionReq, String> {
    semver::VersionReq::parse(text).map_err(|e| format!("`{text}` is not a version range: {e}"))
}

/// Is `version` inside `range`? `None` when it cannot be told (not a
/// release).
pub fn in_range(version: &str, range: &semver::VersionReq) -> Option<bool> {
    release(version).map(|v| range.matches(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(
            split("codex@0.171.0"),
            Some(("codex", Want::Exact("0.171.0".into())))
        );
        assert_eq!(split("codex@latest"), Some(("codex", Want::Latest)));
        assert_eq!(split("codex"), None);
        assert_eq!(split("examples/x@1/agent.yaml"), None);
        assert_eq!(split("@scope"), None);
        assert!(check("0.171.0").is_ok() && check("1.0.0rc1").is_ok());
        for bad in ["", "latest!", "../x", "1/2", "a1", &"9".repeat(65)] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn order_and_between() {
        assert_eq!(cmp("2.1.330", "2.1.4"), Ordering::Greater);
        assert_eq!(cmp("1.2", "1.2.0"), Ordering::Equal);
        assert_eq!(cmp("0.171.0-linux-x64", "0.171.0"), Ordering::Less);
        let all: Vec<String> = [
            "0.169.0",
            "0.171.0-linux-x64",
            "0.171.0",
            "0.170.0",
            "0.172.0",
            "0.168.0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(between(&all, "0.169.0", "0.171.0"), ["0.170.0", "0.171.0"]);
        assert!(between(&all, "0.171.0", "0.169.0").is_empty());
    }

    #[test]
    fn ranges() {
        let r = range(">=2.1.328, <=2.1.332").unwrap();
        assert_eq!(in_range("2.1.330", &r), Some(true));
        assert_eq!(in_range("2.1.333", &r), Some(false));
        assert_eq!(in_range("2.1.330-beta", &r), None);
        assert!(range("about two").is_err());
    }
}
