//! One registry per fault family. A kind is a small type in its own file that
//! implements [`Kind`] (its YAML name; its schema is its serde derive) and the
//! family's behaviour trait; [`registry!`] turns ONE list of kinds into the
//! family's tagged enum (`{kind: NAME, ...fields}`), its `KINDS` list, its
//! `FACTS` (what other code reads of a kind by its recorded name), its
//! `kind_name`, its parsing (an unknown kind names every known one) and its
//! dispatch (`as_dyn`). Adding a kind is one new file and one registry line.
//! The registries live here, below every family (`provider` and `mcp` both
//! use them).

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserializer, Serialize, Serializer};

/// What every kind of every family declares in its own file.
pub trait Kind: Serialize + DeserializeOwned {
    /// The kind's name as written in YAML (`kind: NAME`).
    const NAME: &'static str;
    /// What the rest of the code reads of the kind by its recorded name.
    const FACTS: Facts = Facts::NONE;
}

/// What a report or a check reads of a kind by the name a recording keeps
/// (`"hang"`), declared in the kind's own file, so no other file lists
/// kinds by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Its colour on the HTML timeline and legend (`None`: the report's
    /// colour for anything else).
    pub colour: Option<&'static str>,
    /// The answer never completes: the request is left waiting until the
    /// client gives up on it.
    pub waits: bool,
    /// An MCP reply that withholds the answer to the agent's discovery
    /// (`initialize`, `tools/list`).
    pub withholds_listing: bool,
    /// A model reply that refuses the request's credential (the oracle
    /// bounds what a refused agent sends next).
    pub refuses_credential: bool,
    /// An MCP reply with which the server itself ends the call (no answer
    /// will come, so the agent owes no cancel for it).
    pub ends_call: bool,
    /// How `chaosrun explore` may serve the kind as a transient fault (one
    /// entry per variant it offers; none: explore never draws it).
    pub explore: &'static [Explored],
}

/// One way `chaosrun explore` serves a kind as a fault a retrying agent
/// rides through, declared in the kind's file: explore draws from every
/// kind's entries, so a kind reaches it by declaring one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Explored {
    /// Its weight's name in `explore.yaml` and `--weight` (`error_429`).
    pub key: &'static str,
    /// Its short name in trial descriptions and finding shapes (`429`).
    pub short: &'static str,
    /// The kind's fields, a YAML mapping (`{status: 429}`; `{}` for none).
    pub fields: &'static str,
    /// Default weight per main call, in thousandths (explore's `ok`, no
    /// fault, is its own).
    pub per_mille: u32,
    /// Default weight as a persistent fault, in thousandths.
    pub persist_per_mille: u32,
    /// Its place in explore's draw, from 0 (a seed draws the same trial
    /// whatever order the registry lists the kinds in).
    pub rank: u8,
    /// It breaks an answer whose stream began (else the agent is still
    /// waiting for one when it strikes).
    pub mid_stream: bool,
}

impl Facts {
    /// Nothing declared.
    pub const NONE: Facts = Facts {
        colour: None,
        waits: false,
        withholds_listing: false,
        refuses_credential: false,
        ends_call: false,
        explore: &[],
    };

    /// A kind with its colour and nothing else.
    pub const fn coloured(colour: &'static str) -> Facts {
        Facts {
            colour: Some(colour),
            ..Facts::NONE
        }
    }
}

/// Read a `{kind: NAME, ...}` mapping: the name and the other fields.
pub fn split_kind<'de, D: Deserializer<'de>>(
    d: D,
    family: &str,
    kinds: &[&str],
) -> Result<(String, serde_yaml::Value), D::Error> {
    use serde::Deserialize;
    let mut v = serde_yaml::Value::deserialize(d)?;
    let Some(map) = v.as_mapping_mut() else {
        return Err(D::Error::custom(format!(
            "a {family} is a mapping `{{kind: ...}}` (kind one of {})",
            kinds.join(", ")
        )));
    };
    match map.remove("kind") {
        Some(serde_yaml::Value::String(k)) => Ok((k, v)),
        Some(other) => Err(D::Error::custom(format!(
            "{family} `kind` is a name, not {other:?}: expected one of {}",
            kinds.join(", ")
        ))),
        None => Err(D::Error::custom(format!(
            "missing field `kind` ({family} kind, one of {})",
            kinds.join(", ")
        ))),
    }
}

/// Parse the fields of kind `T`.
pub fn parse<T: Kind, E: serde::de::Error>(fields: serde_yaml::Value) -> Result<T, E> {
    // An empty-field kind written `{kind: hang}` has an empty mapping left.
    serde_yaml::from_value(fields).map_err(|e| E::custom(format!("`{}`: {e}", T::NAME)))
}

/// The error for a kind no entry of the registry has.
pub fn unknown<E: serde::de::Error>(family: &str, kind: &str, kinds: &[&str]) -> E {
    E::custom(format!(
        "unknown {family} kind `{kind}`, expected one of {}",
        kinds.join(", ")
    ))
}

/// Write `{kind: NAME, ...fields}`.
pub fn serialize<T: Kind, S: Serializer>(k: &T, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        kind: &'static str,
        #[serde(flatten)]
        fields: &'a T,
    }
    Tagged {
        kind: T::NAME,
        fields: k,
    }
    .serialize(s)
}

/// The family's enum, `KINDS`, `kind_name`, serde and `as_dyn` from one list
/// of `Variant(module::Type)` lines (each module declared here too).
macro_rules! registry {
    (
        $(#[$meta:meta])*
        $family:literal, $enum:ident: dyn $behaviour:ident {
            $( $variant:ident($module:ident :: $ty:ident) ),+ $(,)?
        }
    ) => {
        $( pub mod $module; pub use $module::$ty; )+

        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub enum $enum {
            $( $variant($ty), )+
        }

        impl $enum {
            /// Every kind's name, in registry order.
            pub const KINDS: &'static [&'static str] =
                &[$( <$ty as $crate::kinds::Kind>::NAME, )+];

            /// Every kind's name with its [`Facts`](crate::kinds::Facts), in
            /// registry order.
            pub const FACTS: &'static [(&'static str, $crate::kinds::Facts)] = &[$(
                (
                    <$ty as $crate::kinds::Kind>::NAME,
                    <$ty as $crate::kinds::Kind>::FACTS,
                ),
            )+];

            /// The facts of the kind recorded as `name`, if it is one of this
            /// family's.
            pub fn facts_of(name: &str) -> Option<$crate::kinds::Facts> {
                Self::FACTS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
            }

            /// The kind's name as written in YAML.
            pub fn kind_name(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => <$ty as $crate::kinds::Kind>::NAME, )+
                }
            }

            /// The kind behind its family's trait.
            pub(crate) fn as_dyn(&self) -> &dyn $behaviour {
                match self {
                    $( Self::$variant(k) => k, )+
                }
            }

            /// The kind behind its family's trait, to change it.
            #[allow(dead_code)]
            pub(crate) fn as_dyn_mut(&mut self) -> &mut dyn $behaviour {
                match self {
                    $( Self::$variant(k) => k, )+
                }
            }
        }

        $(
            impl From<$ty> for $enum {
                fn from(k: $ty) -> Self {
                    Self::$variant(k)
                }
            }
        )+

        impl serde::Serialize for $enum {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self {
                    $( Self::$variant(k) => $crate::kinds::serialize(k, s), )+
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for $enum {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let (kind, fields) =
                    $crate::kinds::split_kind(d, $family, Self::KINDS)?;
                $(
                    if kind == <$ty as $crate::kinds::Kind>::NAME {
                        return $crate::kinds::parse::<$ty, D::Error>(fields)
                            .map(Self::$variant);
                    }
                )+
                Err($crate::kinds::unknown::<D::Error>($family, &kind, Self::KINDS))
            }
        }
    };
}
pub(crate) use registry;

#[cfg(test)]
mod tests {
    use crate::mcp::replies as mcp;
    use crate::provider::replies::{self, Reply};
    use crate::provider::upstream::faults::{self, Fault};

    /// Every family: names unique and the `kind_names()` list is the registry's.
    #[test]
    fn each_family_lists_its_kinds_once() {
        for names in [
            replies::kind_names(),
            faults::kind_names(),
            mcp::kind_names(),
        ] {
            let mut sorted = names.to_vec();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), names.len(), "{names:?}");
        }
        assert!(replies::kind_names().contains(&"stall_mid_stream"));
        assert!(faults::kind_names().contains(&"answer_then_hang"));
        assert!(mcp::kind_names().contains(&"schema_swap"));
    }

    /// The facts the oracle reads by recorded name, from the kinds' files:
    /// only `auth_expired` refuses a credential; only `crash` and
    /// `malformed` end an MCP call themselves (as the oracle's own lists had).
    #[test]
    fn facts_the_oracle_reads() {
        let refusing: Vec<&str> = replies::kind_names()
            .iter()
            .copied()
            .filter(|k| Reply::refuses_credential(k))
            .collect();
        assert_eq!(refusing, ["auth_expired"]);
        let ending: Vec<&str> = mcp::kind_names()
            .iter()
            .copied()
            .filter(|k| mcp::Reply::ends_call(k))
            .collect();
        assert_eq!(ending, ["crash", "malformed"]);
        assert!(!Reply::refuses_credential("crash") && !mcp::Reply::ends_call("auth_expired"));
        assert_eq!(Reply::credential_refusal().kind_name(), "auth_expired");
        assert_eq!(Reply::RELAYED, "relay");
        assert_eq!(Reply::plain("x").kind_name(), "text");
    }

    /// An unknown kind names itself and every known one; a missing `kind` too.
    #[test]
    fn unknown_and_missing_kinds_list_the_known_ones() {
        let e = serde_yaml::from_str::<Reply>("{kind: hangg}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown reply kind `hangg`"), "{e}");
        assert!(replies::kind_names().iter().all(|k| e.contains(k)), "{e}");
        let e = serde_yaml::from_str::<Fault>("{events: 3}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `kind`"), "{e}");
        assert!(faults::kind_names().iter().all(|k| e.contains(k)), "{e}");
        let e = serde_yaml::from_str::<mcp::Reply>("{kind: 7}")
            .unwrap_err()
            .to_string();
        assert!(mcp::kind_names().iter().all(|k| e.contains(k)), "{e}");
        let e = serde_yaml::from_str::<Reply>("{kind: hang, secnds: 3}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`hang`") && e.contains("secnds"), "{e}");
    }

    /// `{kind: NAME, ...fields}` written and read back the same, in YAML and
    /// JSON (saved observations), for a kind with fields and one without.
    #[test]
    fn kinds_round_trip() {
        for y in [
            "{kind: hang, seconds: 5}",
            "{kind: quota_exhausted}",
            "{kind: relay, fault: {kind: error, status: 429, retry_after: 2}}",
            "{kind: tool_call, calls: [{tool: shell, args: {cmd: ls}}]}",
        ] {
            let r: Reply = serde_yaml::from_str(y).unwrap();
            let json = serde_json::to_string(&r).unwrap();
            assert!(
                json.starts_with(&format!("{{\"kind\":\"{}\"", r.kind_name())),
                "{json}"
            );
            assert_eq!(serde_json::from_str::<Reply>(&json).unwrap(), r, "{json}");
            let yaml = serde_yaml::to_string(&r).unwrap();
            assert_eq!(serde_yaml::from_str::<Reply>(&yaml).unwrap(), r, "{yaml}");
        }
        let m: mcp::Reply = serde_yaml::from_str("{kind: slow, seconds: 2}").unwrap();
        assert_eq!(m.kind_name(), "slow");
        let back: mcp::Reply = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}
