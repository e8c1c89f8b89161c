//! Human durations as written in fault documents: `20s`, `150ms`, `1.5s`,
//! `2m`, `1h`, `250us` — levee-config's grammar, shared by everything Levee reads.

pub(crate) use levee_config::parse_duration;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn units() {
        for (text, want) in [
            ("20s", Duration::from_secs(20)),
            ("150ms", Duration::from_millis(150)),
            ("1.5s", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("250us", Duration::from_micros(250)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Some(want), "{text}");
        }
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
