//! The weights explore draws a main call's reply by (`weights:`, `ok` and
//! one per fault of the menu) and a persistent fault's kind by
//! (`persist.weights:`), keyed by the names the reply kinds declare
//! ([`super::menu`]): their defaults are the kinds' declared ones, an
//! unknown name is refused at its `FILE:LINE:COL` with the known ones.

use std::fmt;
use std::sync::OnceLock;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::menu;

/// Relative weights of what a main call gets. `ok` is "no fault: the
/// scripted reply"; the rest are the menu's faults (each a retryable fault,
/// so a healthy agent rides through it), in draw order.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    pub ok: f64,
    pub faults: Vec<f64>,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            ok: 0.55,
            faults: defaults(|e| e.per_mille),
        }
    }
}

impl Weights {
    /// The weights in [`super::generate::FaultKind`] order, `ok` first.
    pub fn list(&self) -> Vec<f64> {
        std::iter::once(self.ok)
            .chain(self.faults.iter().copied())
            .collect()
    }

    /// The weight named `key` (`ok` or a fault's), to change it.
    pub fn slot(&mut self, key: &str) -> Option<&mut f64> {
        if key == "ok" {
            return Some(&mut self.ok);
        }
        self.faults.get_mut(menu::position(key)?)
    }

    /// The weight named `key`.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.clone().slot(key).copied()
    }

    /// Every name a weight may have, for messages.
    pub fn names() -> Vec<&'static str> {
        std::iter::once("ok").chain(menu::keys()).collect()
    }
}

/// Relative weights of the kind of a persistent fault (each explore fault:
/// the retryable ones and the value faults).
#[derive(Debug, Clone, PartialEq)]
pub struct PersistWeights {
    pub faults: Vec<f64>,
}

impl Default for PersistWeights {
    fn default() -> Self {
        PersistWeights {
            faults: defaults(|e| e.persist_per_mille),
        }
    }
}

impl PersistWeights {
    /// In [`super::generate::FaultKind::all`] order.
    pub fn list(&self) -> Vec<f64> {
        self.faults.clone()
    }
}

/// Each fault's declared default weight.
fn defaults(per_mille: fn(&crate::kinds::Explored) -> u32) -> Vec<f64> {
    menu::menu()
        .iter()
        .map(|i| f64::from(per_mille(&i.explored)) / 1000.0)
        .collect()
}

/// Read `{name: weight, ...}` over `ok` (when given) and `faults`.
fn read<'de, A: MapAccess<'de>>(
    mut map: A,
    mut ok: Option<&mut f64>,
    faults: &mut [f64],
) -> Result<(), A::Error> {
    static WITH_OK: OnceLock<Vec<&'static str>> = OnceLock::new();
    static FAULTS: OnceLock<Vec<&'static str>> = OnceLock::new();
    let expected: &'static [&'static str] = if ok.is_some() {
        WITH_OK.get_or_init(Weights::names)
    } else {
        FAULTS.get_or_init(menu::keys)
    };
    while let Some(key) = map.next_key_seed(Key(expected))? {
        let slot = match (key, ok.as_deref_mut()) {
            ("ok", Some(ok)) => ok,
            (k, _) => &mut faults[menu::position(k).expect("a known name")],
        };
        *slot = map.next_value()?;
    }
    Ok(())
}

/// A weight's name, one of these (refused as the key is read, so the error
/// points at it).
struct Key(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a weight's name: {}", self.0.join(", "))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<&'static str, E> {
        self.0
            .iter()
            .find(|n| **n == v)
            .copied()
            .ok_or_else(|| E::unknown_field(v, self.0))
    }
}

struct WeightsVisitor<T>(T);

impl<'de> Visitor<'de> for WeightsVisitor<Weights> {
    type Value = Weights;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weights by name: {}", Weights::names().join(", "))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Weights, A::Error> {
        let mut w = self.0;
        read(map, Some(&mut w.ok), &mut w.faults)?;
        Ok(w)
    }
}

impl<'de> Visitor<'de> for WeightsVisitor<PersistWeights> {
    type Value = PersistWeights;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "weights by name: {}", menu::keys().join(", "))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<PersistWeights, A::Error> {
        let mut w = self.0;
        read(map, None, &mut w.faults)?;
        Ok(w)
    }
}

impl<'de> Deserialize<'de> for Weights {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(WeightsVisitor(Weights::default()))
    }
}

impl<'de> Deserialize<'de> for PersistWeights {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(WeightsVisitor(PersistWeights::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults are the declared ones in draw order: explore's old five
    /// (their weights as before), then the value faults (the empty and cut
    /// answers' old 0.03 each split with the no-calls finish and the
    /// refusal drawn right after them).
    #[test]
    fn defaults_are_the_declared_ones_in_draw_order() {
        assert_eq!(
            Weights::default().list(),
            [0.55, 0.14, 0.14, 0.1, 0.035, 0.035, 0.015, 0.015, 0.015, 0.015]
        );
        assert_eq!(
            PersistWeights::default().list(),
            [0.3, 0.3, 0.15, 0.1, 0.15, 0.05, 0.05, 0.05, 0.05]
        );
        assert_eq!(
            Weights::names(),
            [
                "ok",
                "error_500",
                "error_429",
                "drop_mid_stream",
                "stall_mid_stream",
                "hang",
                "value_empty",
                "value_no_calls",
                "value_cut",
                "value_refused"
            ]
        );
    }

    /// A name is read into its slot; `ok` only where it belongs; an
    /// unknown name lists the known ones.
    #[test]
    fn names_are_the_menu_s() {
        let w: Weights = serde_yaml::from_str("{hang: 0.5, ok: 0}").unwrap();
        assert_eq!((w.get("hang"), w.get("ok")), (Some(0.5), Some(0.0)));
        assert_eq!(w.get("error_500"), Some(0.14));
        let e = serde_yaml::from_str::<PersistWeights>("{ok: 1}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field `ok`") && e.contains("stall_mid_stream"),
            "{e}"
        );
        let e = serde_yaml::from_str::<Weights>("{nope: 1}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`nope`") && e.contains("`ok`, `error_500`"),
            "{e}"
        );
    }
}
