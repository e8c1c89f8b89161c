//! The rate-limit fields providers send on their answers, read into one
//! plain value ([`read`]).
//!
//! | Provider | Fields | Reset |
//! |---|---|---|
//! | OpenAI | `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` | a duration from now: `1s`, `6m0s`, `20ms`, `1h2m3.5s` |
//! | Azure OpenAI | the same names; often `remaining` alone | as OpenAI's |
//! | Anthropic | `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}` | an RFC 3339 time: `2025-01-15T14:24:00Z` |
//!
//! What each meter counts is the provider's own: OpenAI's `tokens` is its
//! tokens-per-minute limit (input and output together); Anthropic's
//! `tokens` is whichever of its token limits is most restrictive right now,
//! beside `input_tokens` (ITPM) and `output_tokens` (OTPM). Every reset is
//! given as milliseconds from `now_unix_ms`: a duration rounded up to the
//! next whole millisecond, a time in the past as 0.
//!
//! Reading is field by field: a value that does not parse is ignored and
//! the others kept; nothing panics. It reads no clock and allocates nothing
//! (one pass over the header names, a prefix test on each).

use http::HeaderMap;

/// One limit as a provider reports it. Each part is `None` when its field
/// was absent or did not parse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meter {
    /// The most the limit allows per period (`…-limit`).
    pub limit: Option<u64>,
    /// What is left before the provider refuses (`…-remaining`).
    pub remaining: Option<u64>,
    /// Milliseconds from now until the limit is back to its initial state
    /// (`…-reset`).
    pub reset_ms: Option<u64>,
}

impl Meter {
    /// True when no part is known.
    pub fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset_ms.is_none()
    }
}

/// The rate-limit fields of one answer. A meter is `None` when none of its
/// fields was present and valid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// Requests per period (OpenAI, Azure, Anthropic).
    pub requests: Option<Meter>,
    /// Tokens per period: OpenAI's TPM (input and output together); for
    /// Anthropic, its most restrictive token limit at the moment.
    pub tokens: Option<Meter>,
    /// Anthropic's input tokens per minute (ITPM).
    pub input_tokens: Option<Meter>,
    /// Anthropic's output tokens per minute (OTPM).
    pub output_tokens: Option<Meter>,
}

impl RateHeaders {
    /// True when no meter is known.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none()
            && self.tokens.is_none()
            && self.input_tokens.is_none()
            && self.output_tokens.is_none()
    }
}

/// Every field name [`read`] reads, lowercase.
pub const NAMES: [&str; 18] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
];

const OPENAI_PREFIX: &[u8] = b"x-ratelimit-";
const ANTHROPIC_PREFIX: &[u8] = b"anthropic-ratelimit-";

/// Which meter a field feeds.
#[derive(Clone, Copy)]
enum Which {
    Requests,
    Tokens,
    Input,
    Output,
}

/// Which part of a meter a field is, and how its value is written.
#[derive(Clone, Copy)]
enum Part {
    Limit,
    Remaining,
    /// A duration from now (OpenAI's format).
    ResetIn,
    /// An RFC 3339 time (Anthropic's format).
    ResetAt,
}

/// The meter and part an OpenAI-style name stands for, after its prefix.
fn openai_field(rest: &[u8]) -> Option<(Which, Part)> {
    let (part, kind) = if let Some(kind) = rest.strip_prefix(b"limit-") {
        (Part::Limit, kind)
    } else if let Some(kind) = rest.strip_prefix(b"remaining-") {
        (Part::Remaining, kind)
    } else if let Some(kind) = rest.strip_prefix(b"reset-") {
        (Part::ResetIn, kind)
    } else {
        return None;
    };
    let which = match kind {
        b"requests" => Which::Requests,
        b"tokens" => Which::Tokens,
        _ => return None,
    };
    Some((which, part))
}

/// The meter and part an Anthropic name stands for, after its prefix.
fn anthropic_field(rest: &[u8]) -> Option<(Which, Part)> {
    let (which, part) = if let Some(part) = rest.strip_prefix(b"requests-") {
        (Which::Requests, part)
    } else if let Some(part) = rest.strip_prefix(b"tokens-") {
        (Which::Tokens, part)
    } else if let Some(part) = rest.strip_prefix(b"input-tokens-") {
        (Which::Input, part)
    } else if let Some(part) = rest.strip_prefix(b"output-tokens-") {
        (Which::Output, part)
    } else {
        return None;
    };
    let part = match part {
        b"limit" => Part::Limit,
        b"remaining" => Part::Remaining,
        b"reset" => Part::ResetAt,
        _ => return None,
    };
    Some((which, part))
}

/// Reads the rate-limit fields of an answer's headers (see the module's
/// table). `now_unix_ms` is the wall-clock time the answer arrived, in
/// milliseconds since the unix epoch: Anthropic's reset times are turned
/// into milliseconds from it. `None` when no such field was present with a
/// valid value. Where a field is given more than once, its first valid
/// value counts.
pub fn read(headers: &HeaderMap, now_unix_ms: u64) -> Option<RateHeaders> {
    read_with(headers, || now_unix_ms)
}

/// [`read`], with the wall clock read only when a reset time needs it
/// (Anthropic's `*-reset` fields): an answer without one costs no clock
/// read.
pub fn read_with(headers: &HeaderMap, mut now_unix_ms: impl FnMut() -> u64) -> Option<RateHeaders> {
    let mut out = RateHeaders::default();
    // Read once, at the first reset time: Anthropic sends one per meter.
    let mut now = None;
    for (name, value) in headers {
        let name = name.as_str().as_bytes();
        let field = match name.first() {
            Some(b'x') => name.strip_prefix(OPENAI_PREFIX).and_then(openai_field),
            Some(b'a') => name
                .strip_prefix(ANTHROPIC_PREFIX)
                .and_then(anthropic_field),
            _ => None,
        };
        let Some((which, part)) = field else {
            continue;
        };
        let value = value.as_bytes();
        let parsed = match part {
            Part::Limit | Part::Remaining => parse_count(value),
            Part::ResetIn => parse_duration_ms(value),
            Part::ResetAt => parse_rfc3339_ms(value).map(|at| {
                let now = *now.get_or_insert_with(&mut now_unix_ms);
                u64::try_from(at.saturating_sub(i64_of(now))).unwrap_or(0)
            }),
        };
        let Some(parsed) = parsed else {
            continue;
        };
        let meter = match which {
            Which::Requests => &mut out.requests,
            Which::Tokens => &mut out.tokens,
            Which::Input => &mut out.input_tokens,
            Which::Output => &mut out.output_tokens,
        }
        .get_or_insert_with(Meter::default);
        let slot = match part {
            Part::Limit => &mut meter.limit,
            Part::Remaining => &mut meter.remaining,
            Part::ResetIn | Part::ResetAt => &mut meter.reset_ms,
        };
        if slot.is_none() {
            *slot = Some(parsed);
        }
    }
    (!out.is_empty()).then_some(out)
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Spaces and tabs around a field value are not part of it.
fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let Some(start) = start else {
        return &[];
    };
    let end = v
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(start);
    &v[start..=end]
}

/// A count: decimal digits, a fraction (some OpenAI-compatible servers send
/// one) dropped. `None` for anything else or a value past `u64::MAX`.
pub fn parse_count(value: &[u8]) -> Option<u64> {
    let v = trim(value);
    let (whole, frac) = match v.iter().position(|b| *b == b'.') {
        Some(dot) => (&v[..dot], Some(&v[dot + 1..])),
        None => (v, None),
    };
    if let Some(frac) = frac {
        if frac.is_empty() || !frac.iter().all(u8::is_ascii_digit) {
            return None;
        }
    }
    digits(whole)
}

/// Decimal digits (at least one) as a `u64`.
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for b in v {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(n)
}

const NS_PER_MS: u128 = 1_000_000;

/// A duration as OpenAI writes its resets (Go's notation: `1s`, `6m0s`,
/// `20ms`, `1h2m3.5s`, `1.5µs`; units `h`, `m`, `s`, `ms`, `us`/`µs`/`μs`,
/// `ns`), or a bare number of seconds (`2`, `0.5`) as some OpenAI-compatible
/// servers send, in milliseconds rounded up. `None` for anything else, a
/// negative duration or one past `u64::MAX` nanoseconds.
pub fn parse_duration_ms(value: &[u8]) -> Option<u64> {
    let mut v = trim(value);
    if let Some(rest) = v.strip_prefix(b"+") {
        v = rest;
    }
    if v.is_empty() {
        return None;
    }
    // A bare number: seconds.
    if v.iter().all(|b| b.is_ascii_digit() || *b == b'.') {
        let (int, frac, scale) = number(v)?;
        let ns = u128::from(int) * 1_000_000_000 + u128::from(frac) * 1_000_000_000 / scale;
        return ms_of(ns);
    }
    let mut total: u128 = 0;
    while !v.is_empty() {
        let n = v
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'.'))
            .unwrap_or(v.len());
        let (int, frac, scale) = number(&v[..n])?;
        v = &v[n..];
        let u = v
            .iter()
            .position(|b| b.is_ascii_digit() || *b == b'.')
            .unwrap_or(v.len());
        let unit: u128 = match &v[..u] {
            b"h" => 3_600_000_000_000,
            b"m" => 60_000_000_000,
            b"s" => 1_000_000_000,
            b"ms" => 1_000_000,
            // `us`, `µs` (U+00B5) and `μs` (U+03BC), as Go reads them.
            b"us" | [0xC2, 0xB5, b's'] | [0xCE, 0xBC, b's'] => 1_000,
            b"ns" => 1,
            _ => return None,
        };
        v = &v[u..];
        total = total.checked_add(u128::from(int) * unit + u128::from(frac) * unit / scale)?;
        if total > u128::from(u64::MAX) {
            return None;
        }
    }
    ms_of(total)
}

/// `int[.frac]` with at least one digit: the whole part, the fraction's
/// digits (the first 18) and the power of ten they are over.
fn number(v: &[u8]) -> Option<(u64, u64, u128)> {
    let (whole, frac) = match v.iter().position(|b| *b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &[][..]),
    };
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    let int = if whole.is_empty() { 0 } else { digits(whole)? };
    let (mut f, mut scale) = (0u64, 1u128);
    for (i, b) in frac.iter().enumerate() {
        if !b.is_ascii_digit() {
            return None;
        }
        if i < 18 {
            f = f * 10 + u64::from(b - b'0');
            scale *= 10;
        }
    }
    Some((int, f, scale))
}

fn ms_of(ns: u128) -> Option<u64> {
    if ns > u128::from(u64::MAX) {
        return None;
    }
    u64::try_from(ns.div_ceil(NS_PER_MS)).ok()
}

/// An RFC 3339 time (`2025-01-15T14:24:00Z`, `2025-01-15T14:24:00.5+02:00`;
/// `t` or a space for `T`, `z` for `Z`) as milliseconds since the unix
/// epoch, a fraction rounded up to the next millisecond. `None` for
/// anything else.
pub fn parse_rfc3339_ms(value: &[u8]) -> Option<i64> {
    let v = trim(value);
    if v.len() < 20 {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let d = v.get(range)?;
        if d.iter().all(u8::is_ascii_digit) {
            digits(d).and_then(|n| i64::try_from(n).ok())
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if v[4] != b'-' || v[7] != b'-' || !matches!(v[10], b'T' | b't' | b' ') {
        return None;
    }
    if v[13] != b':' || v[16] != b':' {
        return None;
    }
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &v[19..];
    let mut frac_ms = 0i64;
    if let Some(after) = rest.strip_prefix(b".") {
        let n = after
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(after.len());
        if n == 0 {
            return None;
        }
        // `.ddd`: the digits read as a fraction.
        let (_, frac, scale) = number(&rest[..=n])?;
        let ms = (u128::from(frac) * 1000).div_ceil(scale);
        frac_ms = i64::try_from(ms).ok()?;
        rest = &after[n..];
    }
    let offset_secs = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let pair = |a: u8, b: u8| -> Option<i64> {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from(a - b'0') * 10 + i64::from(b - b'0'))
            };
            let (oh, om) = (pair(*h1, *h2)?, pair(*m1, *m2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let secs = oh * 3600 + om * 60;
            if *sign == b'+' {
                secs
            } else {
                -secs
            }
        }
        _ => return None,
    };
    let days = crate::civil::days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs * 1000 + frac_ms)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
#[path = "../tests/kit/headers.rs"]
mod test_kit;

#[cfg(test)]
mod tests {
    use super::test_kit::headers;
    use super::*;
    use http::header::{HeaderName, HeaderValue};
    use proptest::prelude::*;

    fn meter(limit: u64, remaining: u64, reset_ms: u64) -> Option<Meter> {
        Some(Meter {
            limit: Some(limit),
            remaining: Some(remaining),
            reset_ms: Some(reset_ms),
        })
    }

    /// 2025-01-15T14:23:00Z.
    const NOW: u64 = 1_736_950_980_000;

    #[test]
    fn openai_answers_give_requests_and_tokens() {
        // The documented sample values, beside the fields every answer has.
        let h = headers(&[
            ("content-type", "application/json"),
            ("x-request-id", "req_deaa3616cbd15d33b4db96b3ba74d2b4"),
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        let got = read(&h, NOW).unwrap();
        assert_eq!(
            got,
            RateHeaders {
                requests: meter(60, 59, 1000),
                tokens: meter(150_000, 149_984, 360_000),
                input_tokens: None,
                output_tokens: None,
            }
        );
    }

    #[test]
    fn openai_resets_in_every_shape_it_sends() {
        for (text, ms) in [
            ("1s", 1000),
            ("6m0s", 360_000),
            ("20ms", 20),
            ("1h2m3.5s", 3_723_500),
            ("8.64s", 8640),
            ("2m59.56s", 179_560),
            ("0s", 0),
            ("0", 0),
            ("1.5ms", 2),
            ("250us", 1),
            ("250µs", 1),
            ("17ns", 1),
            (" 3s ", 3000),
            ("2", 2000),
            ("0.25", 250),
            ("+1s", 1000),
        ] {
            assert_eq!(parse_duration_ms(text.as_bytes()), Some(ms), "{text}");
        }
        for bad in [
            "",
            "s",
            "-1s",
            "1.2.3s",
            "5 parsecs",
            "1e3s",
            "1h5",
            "ms",
            "1d",
            ".s",
            "1..5s",
            "9999999999h",
        ] {
            assert_eq!(parse_duration_ms(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn anthropic_answers_give_four_meters_with_resets_from_now() {
        let h = headers(&[
            ("anthropic-ratelimit-requests-limit", "4000"),
            ("anthropic-ratelimit-requests-remaining", "3999"),
            ("anthropic-ratelimit-requests-reset", "2025-01-15T14:23:00Z"),
            ("anthropic-ratelimit-tokens-limit", "400000"),
            ("anthropic-ratelimit-tokens-remaining", "312000"),
            ("anthropic-ratelimit-tokens-reset", "2025-01-15T14:23:15Z"),
            ("anthropic-ratelimit-input-tokens-limit", "400000"),
            ("anthropic-ratelimit-input-tokens-remaining", "312000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2025-01-15T14:23:15Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "80000"),
            ("anthropic-ratelimit-output-tokens-remaining", "79000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-01-15T14:23:01.250Z",
            ),
            ("request-id", "req_018EeWyXxfu5pfWkrYcMdjWG"),
        ]);
        let got = read(&h, NOW).unwrap();
        assert_eq!(
            got,
            RateHeaders {
                requests: meter(4000, 3999, 0),
                tokens: meter(400_000, 312_000, 15_000),
                input_tokens: meter(400_000, 312_000, 15_000),
                output_tokens: meter(80_000, 79_000, 1250),
            }
        );
    }

    #[test]
    fn anthropic_reset_times_with_offsets_and_the_past() {
        let cases = [
            ("2025-01-15T14:24:00Z", Some(60_000)),
            ("2025-01-15T16:24:00+02:00", Some(60_000)),
            ("2025-01-15T12:24:00-02:00", Some(60_000)),
            ("2025-01-15t14:24:00z", Some(60_000)),
            ("2025-01-15 14:23:00.0001Z", Some(1)),
            ("2025-01-15T14:22:00Z", Some(0)),
            ("1970-01-01T00:00:00Z", Some(0)),
        ];
        for (text, want) in cases {
            let h = headers(&[("anthropic-ratelimit-requests-reset", text)]);
            let got = read(&h, NOW)
                .and_then(|r| r.requests)
                .and_then(|m| m.reset_ms);
            assert_eq!(got, want, "{text}");
        }
        assert_eq!(parse_rfc3339_ms(b"1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms(b"2000-02-29T00:00:00Z"),
            Some(951_782_400_000)
        );
        assert_eq!(parse_rfc3339_ms(b"1969-12-31T23:59:59Z"), Some(-1000));
        for bad in [
            "2025-01-15",
            "2025-01-15T14:24:00",
            "2025-13-15T14:24:00Z",
            "2025-02-29T14:24:00Z",
            "2025-01-15T24:00:00Z",
            "2025-01-15T14:24:00.Z",
            "2025-01-15T14:24:00+2:00",
            "2025-01-15T14:24:00+24:00",
            "2025/01/15T14:24:00Z",
            "6m0s",
            "+025-01-15T14:24:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn azure_sends_remaining_alone() {
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "119"),
            ("x-ratelimit-remaining-tokens", "119968"),
            ("x-ms-region", "East US"),
            ("apim-request-id", "6b6a0cfa-1fb2-4d0f-b4a4-b2b0f1b5a0b4"),
        ]);
        let got = read(&h, NOW).unwrap();
        let remaining = |n| {
            Some(Meter {
                remaining: Some(n),
                ..Meter::default()
            })
        };
        assert_eq!(got.requests, remaining(119));
        assert_eq!(got.tokens, remaining(119_968));
        assert_eq!(got.input_tokens, None);
    }

    #[test]
    fn the_wall_clock_is_read_only_for_a_reset_time() {
        let reads = std::cell::Cell::new(0);
        let now = || {
            reads.set(reads.get() + 1);
            NOW
        };
        let openai = headers(&[
            ("x-ratelimit-remaining-requests", "9"),
            ("x-ratelimit-reset-requests", "6s"),
        ]);
        assert!(read_with(&openai, now).is_some());
        assert_eq!(reads.get(), 0, "OpenAI's reset is a duration");
        let anthropic = headers(&[
            ("anthropic-ratelimit-requests-remaining", "9"),
            ("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:06Z"),
            ("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:09Z"),
        ]);
        assert_eq!(read_with(&anthropic, now), read(&anthropic, NOW));
        assert_eq!(reads.get(), 1, "Anthropic's resets are times: one read");
    }

    #[test]
    fn no_field_is_none() {
        assert_eq!(read(&HeaderMap::new(), NOW), None);
        let h = headers(&[
            ("content-type", "application/json"),
            ("x-ratelimit-limit", "60"),
            ("x-ratelimit-remaining-images", "3"),
            ("anthropic-ratelimit-requests", "60"),
            ("anthropic-priority-input-tokens-limit", "1000"),
            ("anthropic-version", "2023-06-01"),
            ("retry-after", "3"),
        ]);
        assert_eq!(read(&h, NOW), None);
        // Present but junk everywhere: nothing is known either.
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "many"),
            ("x-ratelimit-reset-tokens", "soon"),
        ]);
        assert_eq!(read(&h, NOW), None);
    }

    #[test]
    fn a_bad_value_is_ignored_alone() {
        let h = headers(&[
            ("x-ratelimit-limit-requests", "-1"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "1 fortnight"),
            ("x-ratelimit-limit-tokens", "99999999999999999999999"),
            ("x-ratelimit-remaining-tokens", "1000.9"),
        ]);
        let got = read(&h, NOW).unwrap();
        assert_eq!(
            got.requests,
            Some(Meter {
                remaining: Some(59),
                ..Meter::default()
            })
        );
        assert_eq!(
            got.tokens,
            Some(Meter {
                remaining: Some(1000),
                ..Meter::default()
            })
        );
    }

    #[test]
    fn the_first_valid_value_of_a_repeated_field_counts() {
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "junk"),
            ("x-ratelimit-remaining-requests", "7"),
            ("x-ratelimit-remaining-requests", "8"),
        ]);
        assert_eq!(read(&h, NOW).unwrap().requests.unwrap().remaining, Some(7));
    }

    #[test]
    fn counts() {
        for (text, want) in [
            ("0", Some(0)),
            ("  42\t", Some(42)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("1.5", Some(1)),
            ("1.", None),
            (".5", None),
            ("1e3", None),
            ("+1", None),
            ("", None),
            (" ", None),
        ] {
            assert_eq!(parse_count(text.as_bytes()), want, "{text:?}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_values_never_panic(
            value in proptest::collection::vec(any::<u8>(), 0..48),
            text in "[0-9a-zA-Zµ.:+ TZ-]{0,40}",
            now in any::<u64>(),
            which in 0usize..20,
        ) {
            // Every name `read` reads, and its two bare prefixes.
            let names: Vec<&str> =
                NAMES.iter().copied().chain(["x-ratelimit-", "anthropic-ratelimit-"]).collect();
            let mut map = HeaderMap::new();
            let name = HeaderName::from_static(names[which]);
            if let Ok(v) = HeaderValue::from_bytes(&value) {
                map.append(name.clone(), v);
            }
            if let Ok(v) = HeaderValue::from_str(&text) {
                map.append(name, v);
            }
            let _ = read(&map, now);
            let _ = parse_duration_ms(&value);
            let _ = parse_rfc3339_ms(&value);
            let _ = parse_count(&value);
            let _ = parse_duration_ms(text.as_bytes());
            let _ = parse_rfc3339_ms(text.as_bytes());
        }

        #[test]
        fn durations_read_back_in_milliseconds(h in 0u64..100, m in 0u64..60, ms in 0u64..60_000) {
            let text = format!("{h}h{m}m{}.{:03}s", ms / 1000, ms % 1000);
            prop_assert_eq!(
                parse_duration_ms(text.as_bytes()),
                Some(h * 3_600_000 + m * 60_000 + ms)
            );
        }
    }
}
