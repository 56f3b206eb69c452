//! The store-damage kinds (`store_damage: {kind: NAME}`): damage done to
//! the agent's JSONL transcript between its death and its restart, the way
//! power loss and a concurrent writer leave it (claude-code #49876,
//! copilot-cli #1864, #4098, codex #24425). One small type per kind, each
//! in its own file declaring its name and how it rewrites the transcript's
//! bytes ([`DamageKind`]); they are registered once, in the list below,
//! which makes [`Damage`] (written as the kind's name in YAML and saved
//! observations). Applying one to the files on disk is the store's
//! (`store/damaged.rs`, called by the runner's kill); judging the resume is the oracle's
//! (`store_resumed_past_damage`).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::kinds::Kind;

/// `store_damage:` on a row: which damage, done to the agent's transcript
/// once the agent killed by the row's `process_fault` is gone and before it
/// is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreDamage {
    pub kind: Damage,
}

/// The kinds' enum, `KINDS` and dispatch from one list of
/// `Variant(module::Type)` lines (each module declared here too).
macro_rules! damages {
    ($( $variant:ident($module:ident :: $ty:ident) ),+ $(,)?) => {
        $( pub mod $module; pub use $module::$ty; )+

        /// Which damage: see each kind's file.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Damage {
            $( $variant, )+
        }

        impl Damage {
            /// Every kind's name, in registry order.
            pub const KINDS: &'static [&'static str] = &[$( <$ty as Kind>::NAME, )+];

            /// Every kind, in registry order.
            pub const ALL: &'static [Damage] = &[$( Damage::$variant, )+];

            /// The kind's name as written in YAML.
            pub fn kind_name(self) -> &'static str {
                match self {
                    $( Self::$variant => <$ty as Kind>::NAME, )+
                }
            }

            fn as_dyn(self) -> &'static dyn DamageKind {
                match self {
                    $( Self::$variant => &$module::$ty, )+
                }
            }
        }
    };
}

damages! {
    TruncateLast(truncate_last::TruncateLast),
    NulTail(nul_tail::NulTail),
    FuseRecords(fuse_records::FuseRecords),
    ConcurrentAppend(concurrent_append::ConcurrentAppend),
}

/// What every kind declares in its own file (its name: [`Kind`]).
pub(crate) trait DamageKind: Sync {
    /// What it does to the transcript, in a few words (recorded).
    fn did(&self) -> &'static str;

    /// The transcript's bytes after the damage, or why this transcript
    /// cannot take it (too few records).
    fn apply(&self, text: &[u8]) -> Result<Vec<u8>, String>;
}

impl Damage {
    /// The kind named `name`, if one is.
    pub fn from_name(name: &str) -> Option<Damage> {
        Self::ALL.iter().copied().find(|a| a.kind_name() == name)
    }

    /// What it does, in a few words.
    pub fn did(self) -> &'static str {
        self.as_dyn().did()
    }

    /// The transcript's bytes after the damage.
    pub fn apply(self, text: &[u8]) -> Result<Vec<u8>, String> {
        self.as_dyn().apply(text)
    }
}

impl Serialize for Damage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.kind_name())
    }
}

impl<'de> Deserialize<'de> for Damage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::from_name(&name).ok_or_else(|| D::Error::unknown_variant(&name, Self::KINDS))
    }
}

/// The byte spans of the transcript's records: its non-blank lines, each
/// without its newline.
pub(crate) fn records(text: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in text.iter().enumerate() {
        if *b == b'\n' {
            if text[start..i].iter().any(|c| !c.is_ascii_whitespace()) {
                out.push((start, i));
            }
            start = i + 1;
        }
    }
    if text[start..].iter().any(|c| !c.is_ascii_whitespace()) {
        out.push((start, text.len()));
    }
    out
}

/// The refusal of a transcript with fewer than `n` records.
pub(crate) fn too_few(n: usize, have: usize) -> String {
    format!("the transcript holds {have} record(s); this damage needs at least {n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_registered_once_and_round_trips() {
        let mut names = Damage::KINDS.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Damage::ALL.len());
        for &d in Damage::ALL {
            let yaml = serde_yaml::to_string(&d).unwrap();
            assert_eq!(serde_yaml::from_str::<Damage>(&yaml).unwrap(), d);
        }
        let e = serde_yaml::from_str::<StoreDamage>("{kind: nul}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown variant `nul`") && e.contains("nul_tail"),
            "{e}"
        );
    }

    /// Each kind on a four-record transcript: what it keeps readable and
    /// where its tail ends.
    #[test]
    fn each_kind_damages_as_documented() {
        let t = b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n{\"d\":4}\n";
        let cut = Damage::TruncateLast.apply(t).unwrap();
        assert_eq!(cut, b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n{\"d\"");
        let nul = Damage::NulTail.apply(t).unwrap();
        assert!(nul.starts_with(t) && nul.len() == t.len() + nul_tail::NULS);
        assert!(nul[t.len()..].iter().all(|b| *b == 0));
        let fused = Damage::FuseRecords.apply(t).unwrap();
        assert_eq!(fused, b"{\"a\":1}\n{\"b\":2}{\"c\":3}\n{\"d\":4}\n");
        let two = Damage::ConcurrentAppend.apply(t).unwrap();
        assert_eq!(&two[t.len()..], b"{\"d\"\n{\"d\":4}\n");
        // Too few records: refused, saying why.
        let e = Damage::FuseRecords.apply(b"{}\n{}\n{}\n").unwrap_err();
        assert!(e.contains("needs at least 4"), "{e}");
        assert!(Damage::TruncateLast.apply(b"\n \n").is_err());
        assert_eq!(records(b"{}\n\n{}"), [(0, 2), (4, 6)]);
    }
}
