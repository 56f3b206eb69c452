//! The `acp:` section of an adapter profile: the agent is driven over the
//! Agent Client Protocol, chaosrun being its client, one long-lived process
//! per scenario. The section gives the agent's argv (`command`, rendered like
//! a top-level `command`; `--agent-arg` values appended, no spec path), how a
//! restarted agent gets its session back (`load`) and which option chaosrun
//! picks when the agent asks permission (`permission`). Checked at load, so a
//! bad section is a `FILE:LINE:COL` error (exit 2); the runtime is
//! `driver::acp`.

use serde::{Deserialize, Serialize};

use crate::template;

/// How a restarted agent (after a kill) gets its session back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// `session/load` when the agent's `initialize` advertised
    /// `agentCapabilities.loadSession`, else `session/new`.
    #[default]
    Auto,
    /// Always `session/new`.
    Never,
}

/// The option kind chaosrun picks for `session/request_permission`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// `allow_once`, else `allow_always`.
    #[default]
    AllowOnce,
    AllowAlways,
    RejectOnce,
}

impl Permission {
    /// The option kinds acceptable for this choice, in order of preference.
    pub fn kinds(self) -> &'static [&'static str] {
        match self {
            Permission::AllowOnce => &["allow_once", "allow_always"],
            Permission::AllowAlways => &["allow_always"],
            Permission::RejectOnce => &["reject_once"],
        }
    }
}

/// The `acp:` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "AcpDoc", into = "AcpDoc")]
pub struct AcpSpec {
    /// The agent's argv (templates rendered per run).
    pub command: Vec<String>,
    pub load: Load,
    pub permission: Permission,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct AcpDoc {
    command: Vec<String>,
    #[serde(default)]
    load: Load,
    #[serde(default)]
    permission: Permission,
}

impl From<AcpSpec> for AcpDoc {
    fn from(s: AcpSpec) -> AcpDoc {
        AcpDoc {
            command: s.command,
            load: s.load,
            permission: s.permission,
        }
    }
}

impl TryFrom<AcpDoc> for AcpSpec {
    type Error = String;
    fn try_from(d: AcpDoc) -> Result<Self, String> {
        if d.command.first().is_none_or(|a| a.trim().is_empty()) {
            return Err("`acp.command` must be a non-empty argv".into());
        }
        let (vars, kinds) = (super::placeholder_vars(), super::var_kinds());
        for a in &d.command {
            template::check(a, &vars, &kinds).map_err(|e| format!("`acp.command`: {e}"))?;
        }
        Ok(AcpSpec {
            command: d.command,
            load: d.load,
            permission: d.permission,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_parses_with_defaults_and_refuses_bad_ones() {
        let s: AcpSpec = serde_yaml::from_str("command: [python3, a.py, --acp]").unwrap();
        assert_eq!(s.load, Load::Auto);
        assert_eq!(s.permission, Permission::AllowOnce);
        let s: AcpSpec =
            serde_yaml::from_str("{command: [x], load: never, permission: reject_once}").unwrap();
        assert_eq!(
            (s.load, s.permission),
            (Load::Never, Permission::RejectOnce)
        );
        for (bad, says) in [
            ("command: []", "non-empty argv"),
            ("command: [x, \"{{mesage}}\"]", "mesage"),
            ("{command: [x], load: sometimes}", "unknown variant"),
            ("{command: [x], permision: allow_once}", "unknown field"),
        ] {
            let e = serde_yaml::from_str::<AcpSpec>(bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
