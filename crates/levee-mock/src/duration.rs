//! Human durations as written in fault documents: `20s`, `150ms`, `1.5s`,
//! `2m`, `1h`, `250us`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `h`, `m`, `s`, `ms` or `us`. Returns
/// `None` for anything else (no unit, negative, not finite, absurdly large).
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|i| *i > 0)?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let seconds_per_unit = match unit.trim() {
        "h" => 3600.0,
        "m" | "min" => 60.0,
        "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        _ => return None,
    };
    let secs = value * seconds_per_unit;
    // A week is far beyond any drill; larger values are typos.
    if !secs.is_finite() || !(0.0..=604_800.0).contains(&secs) {
        return None;
    }
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("20s"), Some(Duration::from_secs(20)));
        assert_eq!(parse_duration("150ms"), Some(Duration::from_millis(150)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250us"), Some(Duration::from_micros(250)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
    }

    #[test]
    fn rejects() {
        for bad in [
            "20",
            "s",
            "-1s",
            "1.2.3s",
            "5 parsecs",
            "",
            "1e3s",
            "9999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
