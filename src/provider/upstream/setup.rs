//! What a run checks before proxy mode starts: the flags over the profile's
//! `upstream:`, the credential rule (the key comes only from a variable the
//! user passed with `--pass-env`), and that `relay` rules have an upstream.

use super::{Upstream, UpstreamSpec};
use crate::provider::replies::Source;
use crate::scenarios::Scenario;

/// The command line's upstream flags.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--upstream URL`
    pub url: Option<String>,
    /// `--upstream-key-env NAME`
    pub key_env: Option<String>,
    /// `--upstream-ca FILE`
    pub ca: Option<std::path::PathBuf>,
}

/// The upstream a run uses: `--upstream URL` wins over the profile's `url`,
/// `--upstream-key-env NAME` over its `key_env`, `--upstream-ca FILE` over
/// its `ca`.
pub fn merge(profile: Option<UpstreamSpec>, flags: Flags) -> Result<Option<UpstreamSpec>, String> {
    let mut spec = match (profile, flags.url) {
        (p, Some(url)) => UpstreamSpec {
            url,
            ..p.unwrap_or_default()
        },
        (Some(p), None) => p,
        (None, None) if flags.key_env.is_some() || flags.ca.is_some() => {
            return Err(
                "--upstream-key-env and --upstream-ca need an upstream (--upstream URL or the \
             profile's `upstream:`)"
                    .into(),
            )
        }
        (None, None) => return Ok(None),
    };
    if flags.key_env.is_some() {
        spec.key_env = flags.key_env;
    }
    if flags.ca.is_some() {
        spec.ca = flags.ca;
    }
    Ok(Some(spec))
}

/// Check a run's upstream against its `--pass-env` names and its scenarios.
pub fn check(
    spec: Option<&UpstreamSpec>,
    pass_env: &[String],
    scenarios: &[Scenario],
) -> Result<(), String> {
    let Some(spec) = spec else {
        if let Some(s) = scenarios.iter().find(|s| {
            s.responder
                .iter()
                .any(|r| matches!(r.reply.source(), Source::Upstream { .. }))
        }) {
            return Err(format!(
                "scenario `{}` has a `relay` reply, which needs an upstream: give --upstream URL \
                 or the profile's `upstream: {{url: ...}}`",
                s.id
            ));
        }
        return Ok(());
    };
    if let Some(name) = &spec.key_env {
        if !pass_env.iter().any(|p| p == name) {
            return Err(format!(
                "the upstream key {name} must be passed explicitly: add --pass-env {name}"
            ));
        }
    }
    Upstream::resolve(spec, |n| std::env::var(n).ok()).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_profile() {
        let p = UpstreamSpec {
            url: "http://a".into(),
            key_env: Some("A".into()),
            model: Some("m".into()),
            ca: Some("p.pem".into()),
            ..UpstreamSpec::default()
        };
        let flags = |url: Option<&str>, key: Option<&str>, ca: Option<&str>| Flags {
            url: url.map(String::from),
            key_env: key.map(String::from),
            ca: ca.map(Into::into),
        };
        let s = merge(Some(p.clone()), flags(Some("http://b"), None, None))
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.url.as_str(), s.key_env.as_deref(), s.model.as_deref()),
            ("http://b", Some("A"), Some("m"))
        );
        assert_eq!(s.ca.as_deref(), Some(std::path::Path::new("p.pem")));
        let s = merge(Some(p), flags(None, Some("B"), Some("f.pem")))
            .unwrap()
            .unwrap();
        assert_eq!(s.key_env.as_deref(), Some("B"));
        assert_eq!(s.ca.as_deref(), Some(std::path::Path::new("f.pem")));
        assert_eq!(merge(None, Flags::default()).unwrap(), None);
        assert!(merge(None, flags(None, Some("B"), None)).is_err());
        assert!(merge(None, flags(None, None, Some("c.pem"))).is_err());
    }

    #[test]
    fn the_key_must_be_passed_with_pass_env() {
        let s = UpstreamSpec {
            url: "http://127.0.0.1:9".into(),
            key_env: Some("PATH".into()),
            ..UpstreamSpec::default()
        };
        let e = check(Some(&s), &[], &[]).unwrap_err();
        assert!(e.contains("--pass-env PATH"), "{e}");
        assert!(check(Some(&s), &["PATH".into()], &[]).is_ok());
    }
}
