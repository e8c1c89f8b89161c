//! Human durations: `250ms`, `10s`, `1.5s`, `2m`, `1h` (also `min`, `us`).
//! The one grammar for every duration Levee reads — config, fault documents,
//! scenarios, drill flags.

use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::time::Duration;

/// The longest duration Levee takes, in seconds (a week): anything longer is
/// a typo.
const MAX_SECS: f64 = 604_800.0;

/// Parses `250ms`, `10s`, `1.5s`, `2m`, `1h`, `5min`, `250us` (a bare number
/// is refused: units matter). At most a week: anything longer is a typo.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let secs = seconds(s)?;
    if !(0.0..=MAX_SECS).contains(&secs) {
        return None;
    }
    Duration::try_from_secs_f64(secs).ok()
}

/// What is wrong with `s`, which [`parse_duration`] refused, and what to
/// write instead.
pub fn why_not_a_duration(s: &str) -> String {
    match seconds(s) {
        Some(secs) if secs > MAX_SECS => format!(
            "`{s}` is longer than a week, the longest duration Levee takes: write at most `168h`"
        ),
        _ => format!("`{s}` is not a duration: write it like `10s`, `250ms` or `2m`"),
    }
}

/// The seconds `s` spells in the grammar, however many.
fn seconds(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let secs = match unit.trim() {
        "us" | "µs" => n / 1e6,
        "ms" => n / 1000.0,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    Some(secs)
}

/// A serde-deserialisable duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> serde::Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration like `10s`, `250ms` or `2m`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v)
                    .map(Dur)
                    .ok_or_else(|| E::custom(why_not_a_duration(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Err(E::custom(format!(
                    "`{v}` has no unit: write a duration like `{v}s` or `{v}ms`"
                )))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                Err(E::custom(format!(
                    "`{v}` is not a duration: write it like `10s` or `250ms`"
                )))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Dur, E> {
                Err(E::custom(format!(
                    "`{v}` has no unit: write a duration like `{v}s`"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_past_a_week_is_refused_as_too_long_not_as_malformed() {
        assert_eq!(parse_duration("168h"), Some(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("169h"), None);
        assert!(why_not_a_duration("169h").contains("longer than a week"));
        assert!(why_not_a_duration("1000000000h").contains("write at most `168h`"));
        assert!(why_not_a_duration("10").contains("is not a duration"));
        assert!(why_not_a_duration("10 parsecs").contains("is not a duration"));
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        for bad in ["10", "s", "-1s", "1e999s", "10 parsecs", ""] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
