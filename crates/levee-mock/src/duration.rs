//! Human durations as written in fault documents: `20s`, `150ms`, `1.5s`,
//! `2m`, `1h`, `250us` — levee-config's grammar, shared by everything Levee reads.

pub(crate) use levee_config::parse_duration;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
