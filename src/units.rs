//! Durations and counts as the table, the profile and the command line give
//! them. [`Seconds`] is the one duration type: it is validated where it is
//! read (a number, finite, ≥ 0, at most [`MAX_SECONDS`], one week), so no
//! later `Duration` conversion can panic and no schedule can run forever.
//! Counts have documented ceilings too ([`MAX_REPEAT`], [`MAX_COUNT`]).
//!
//! Schema structs keep their fields as plain `f64` (validated) and read them
//! through [`seconds`], [`opt_seconds`] and [`seconds_pair`], which are
//! `Seconds`' own deserialisation; the CLI parses with [`Seconds::from_str`].
//!
//! Also the few small helpers every layer needs once: [`secs`] (seconds to a
//! `Duration`, never panicking), [`unix_now`] and [`clip`] (text shortened
//! for a report line).

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// The longest duration anything accepts: one week, in seconds.
pub const MAX_SECONDS: f64 = 604_800.0;
/// The most times a `tool_call` reply may repeat its batch.
pub const MAX_REPEAT: u64 = 1_000;
/// The ceiling of every other count in a table: `calls`, `max_calls`, chaos
/// `turns` and `min_faults`, `wait_for.count`, `after_calls`, `max_turns`,
/// `api_max_retries`, `chunk_chars`.
pub const MAX_COUNT: u64 = 10_000;

/// A non-negative, finite number of seconds, at most [`MAX_SECONDS`].
#[derive(Clone, Copy, PartialEq, PartialOrd, Default, Serialize)]
#[serde(transparent)]
pub struct Seconds(f64);

impl Seconds {
    /// `v` seconds, or why it is not a duration chaosrun accepts.
    pub fn new(v: f64) -> Result<Seconds, String> {
        if v.is_nan() {
            Err("is not a number of seconds (NaN)".into())
        } else if v.is_infinite() {
            Err("must be a finite number of seconds".into())
        } else if v < 0.0 {
            Err(format!("{} s is negative; a duration is ≥ 0", short(v)))
        } else if v > MAX_SECONDS {
            Err(format!(
                "{} s exceeds the ceiling of {MAX_SECONDS} s (one week)",
                short(v)
            ))
        } else {
            Ok(Seconds(v))
        }
    }

    pub fn get(self) -> f64 {
        self.0
    }

    /// As a `Duration` (never panics: the value is bounded).
    pub fn duration(self) -> Duration {
        Duration::from_secs_f64(self.0)
    }

    /// Multiplied by `factor`, or why the result is out of bounds.
    pub fn scaled(self, factor: f64) -> Result<Seconds, String> {
        Seconds::new(self.0 * factor)
    }
}

/// A number as a person would write it: `1e30`, not thirty-one digits.
pub fn short(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e9 {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

impl fmt::Debug for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::str::FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Seconds, String> {
        let v: f64 = s
            .trim()
            .parse()
            .map_err(|_| format!("`{s}` is not a number of seconds"))?;
        Seconds::new(v)
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seconds, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a number of seconds (0 to {MAX_SECONDS})")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Seconds, E> {
                Seconds::new(v).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Seconds, E> {
                Seconds::new(v as f64).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Seconds, E> {
                Seconds::new(v as f64).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A field of seconds, validated as [`Seconds`], kept as `f64`.
pub fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Seconds::deserialize(d).map(Seconds::get)
}

/// An optional field of seconds (use with `#[serde(default)]`).
pub fn opt_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Option::<Seconds>::deserialize(d).map(|s| s.map(Seconds::get))
}

/// A `[min, max]` pair of seconds.
pub fn seconds_pair<'de, D: Deserializer<'de>>(d: D) -> Result<[f64; 2], D::Error> {
    <[Seconds; 2]>::deserialize(d).map(|[a, b]| [a.get(), b.get()])
}

/// A `tool_call`'s `repeat`: 1 to [`MAX_REPEAT`] (in a table and in a
/// `serve --script` alike, so no reply allocates without bound).
pub fn repeat<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    let v = Option::<u64>::deserialize(d)?;
    match v {
        Some(n) if n == 0 || n > MAX_REPEAT => Err(serde::de::Error::custom(format!(
            "`repeat` is {n}; it is 1 to {MAX_REPEAT}"
        ))),
        other => Ok(other.map(|n| n as usize)),
    }
}

/// A count of 1 to [`MAX_COUNT`] (`chunk_chars`, `wait_for.count`).
pub fn count_1<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = u64::deserialize(d)?;
    if n == 0 || n > MAX_COUNT {
        return Err(serde::de::Error::custom(format!(
            "{n} is out of bounds: a count here is 1 to {MAX_COUNT}"
        )));
    }
    Ok(n as usize)
}

/// Checks a count against its ceiling: `Err` names the field and the bound.
pub fn count(name: &str, v: u64, max: u64) -> Result<(), String> {
    if v > max {
        Err(format!("`{name}` is {v}; the ceiling is {max}"))
    } else {
        Ok(())
    }
}

/// A duration from a number of seconds, clamped to something tokio accepts
/// (negative, NaN: zero; past 10^8 s: 10^8 s).
pub fn secs(s: f64) -> Duration {
    if s.is_finite() && s > 0.0 {
        Duration::from_secs_f64(s.min(1.0e8))
    } else {
        Duration::ZERO
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `s` cut to `n` characters, with `…` when something was cut.
pub fn clip(s: &str, n: usize) -> String {
    let t: String = s.chars().take(n).collect();
    if t.len() < s.len() {
        format!("{t}…")
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_zero_to_one_week_and_nothing_else() {
        assert_eq!(Seconds::new(0.0).unwrap().get(), 0.0);
        assert_eq!(Seconds::new(MAX_SECONDS).unwrap().get(), MAX_SECONDS);
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30] {
            assert!(Seconds::new(bad).is_err(), "{bad}");
        }
        assert!(Seconds::new(90.0).unwrap().scaled(1e300).is_err());
        assert_eq!(
            Seconds::new(2.0).unwrap().duration(),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn yaml_numbers_only() {
        let ok: Seconds = serde_yaml::from_str("1.5").unwrap();
        assert_eq!(ok.get(), 1.5);
        let int: Seconds = serde_yaml::from_str("3").unwrap();
        assert_eq!(int.get(), 3.0);
        for bad in ["1e30", ".inf", "-1", ".nan", "'5'", "[1]", "true", "~"] {
            let e = serde_yaml::from_str::<Seconds>(bad).unwrap_err();
            assert!(!e.to_string().is_empty(), "{bad}");
        }
    }

    #[test]
    fn cli_text() {
        assert_eq!("2.5".parse::<Seconds>().unwrap().get(), 2.5);
        assert!("x".parse::<Seconds>().is_err());
        assert!("inf".parse::<Seconds>().is_err());
        assert!("NaN".parse::<Seconds>().is_err());
    }
}
