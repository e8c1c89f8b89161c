//! Parsing `retry-after` and `retry-after-ms`.
//!
//! A provider that says when to come back knows more than any backoff formula,
//! so Levee honours it — but a header is network input: negative, garbage or
//! absurd values are ignored rather than obeyed, and anything longer than a cap
//! (default 60 s) is treated as "longer than we will wait".

use std::time::Duration;

/// The default cap on a server-requested wait.
pub const DEFAULT_RETRY_AFTER_CAP: Duration = Duration::from_secs(60);

/// What a response asked of us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Come back after this long (already within the cap).
    Wait(Duration),
    /// The server asked for a wait longer than the cap: do not wait for it.
    TooLong(Duration),
}

impl RetryAfter {
    /// The wait, if it is one we are willing to honour.
    pub fn wait(self) -> Option<Duration> {
        match self {
            RetryAfter::Wait(d) => Some(d),
            RetryAfter::TooLong(_) => None,
        }
    }

    /// The requested duration, honoured or not.
    pub fn requested(self) -> Duration {
        match self {
            RetryAfter::Wait(d) | RetryAfter::TooLong(d) => d,
        }
    }
}

/// Longest value we even consider meaningful (a day); beyond it the header is garbage.
const ABSURD: Duration = Duration::from_secs(86_400);

/// Reads the two headers a response may carry. `retry-after-ms` (OpenAI's, more
/// precise) wins over `retry-after` when both parse. `now_unix_ms` is the wall
/// clock, needed only for the HTTP-date form.
pub fn parse(
    retry_after: Option<&[u8]>,
    retry_after_ms: Option<&[u8]>,
    now_unix_ms: u64,
    cap: Duration,
) -> Option<RetryAfter> {
    let d = requested(retry_after, retry_after_ms, now_unix_ms)?;
    Some(if d > cap {
        RetryAfter::TooLong(d)
    } else {
        RetryAfter::Wait(d)
    })
}

/// The wait the two headers ask for, before any cap (the planner caps it for
/// the request, the model and the provider alike).
pub fn requested(
    retry_after: Option<&[u8]>,
    retry_after_ms: Option<&[u8]>,
    now_unix_ms: u64,
) -> Option<Duration> {
    retry_after_ms
        .and_then(parse_retry_after_ms)
        .or_else(|| retry_after.and_then(|v| parse_retry_after(v, now_unix_ms)))
}

/// `retry-after-ms: 1500` (a non-negative number of milliseconds, fractions allowed).
pub fn parse_retry_after_ms(value: &[u8]) -> Option<Duration> {
    let s = std::str::from_utf8(value).ok()?.trim();
    let ms: f64 = s.parse().ok()?;
    if !ms.is_finite() || ms < 0.0 {
        return None;
    }
    let d = Duration::try_from_secs_f64(ms / 1000.0).ok()?;
    (d <= ABSURD).then_some(d)
}

/// `retry-after: 2` (delta seconds) or `retry-after: Wed, 21 Oct 2015 07:28:00 GMT`.
/// A date in the past means "now" (zero wait).
pub fn parse_retry_after(value: &[u8], now_unix_ms: u64) -> Option<Duration> {
    let s = std::str::from_utf8(value).ok()?.trim();
    if s.is_empty() {
        return None;
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = s.parse().ok()?;
        let d = Duration::from_secs(secs);
        return (d <= ABSURD).then_some(d);
    }
    // Some servers send fractional seconds; accept them, reject negatives.
    if let Ok(secs) = s.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        let d = Duration::try_from_secs_f64(secs).ok()?;
        return (d <= ABSURD).then_some(d);
    }
    let at = httpdate::parse_http_date(s).ok()?;
    let at_ms = u64::try_from(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis()).ok()?;
    let d = Duration::from_millis(at_ms.saturating_sub(now_unix_ms));
    (d <= ABSURD).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_445_412_480_000; // Wed, 21 Oct 2015 07:28:00 GMT

    #[test]
    fn delta_seconds_and_milliseconds() {
        assert_eq!(parse_retry_after(b"2", NOW), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(b" 0 ", NOW), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after(b"1.5", NOW),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after_ms(b"1500"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after_ms(b"12.5"),
            Some(Duration::from_micros(12_500))
        );
    }

    #[test]
    fn http_date_is_measured_against_the_given_wall_clock() {
        let v = b"Wed, 21 Oct 2015 07:28:30 GMT";
        assert_eq!(parse_retry_after(v, NOW), Some(Duration::from_secs(30)));
        // A date in the past: come back now.
        assert_eq!(parse_retry_after(v, NOW + 60_000), Some(Duration::ZERO));
    }

    #[test]
    fn garbage_negative_and_absurd_values_are_ignored() {
        for v in [
            &b"-1"[..],
            b"abc",
            b"",
            b"NaN",
            b"inf",
            b"1e400",
            b"\xff\xfe",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_retry_after(v, NOW), None, "{v:?}");
        }
        for v in [&b"-5"[..], b"x", b"NaN", b"1e300"] {
            assert_eq!(parse_retry_after_ms(v), None, "{v:?}");
        }
        assert_eq!(parse_retry_after(b"864001", NOW), None);
    }

    #[test]
    fn ms_header_wins_and_cap_marks_too_long() {
        let cap = Duration::from_secs(60);
        assert_eq!(
            parse(Some(b"2"), Some(b"250"), NOW, cap),
            Some(RetryAfter::Wait(Duration::from_millis(250)))
        );
        assert_eq!(
            parse(Some(b"2"), Some(b"junk"), NOW, cap),
            Some(RetryAfter::Wait(Duration::from_secs(2)))
        );
        assert_eq!(
            parse(Some(b"120"), None, NOW, cap),
            Some(RetryAfter::TooLong(Duration::from_secs(120)))
        );
        assert_eq!(parse(None, None, NOW, cap), None);
    }
}
