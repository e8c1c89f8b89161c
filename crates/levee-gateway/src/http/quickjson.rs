//! A one-pass reader of a request body's top-level `model` and `stream`,
//! for the bodies every chat request sends: strings, short numbers,
//! nesting up to 64 deep. It validates as it reads, and it is
//! conservative: anything whose verdict needs more care than that — an
//! escaped top-level key or model, a lone surrogate, an exponent or a
//! number of over 40 characters, a field given twice, deeper nesting, any
//! syntax error — makes it answer "not sure" (`None`), and `serde_json`
//! reads the body instead and gives the verdict and its wording. It never
//! accepts a body `serde_json` refuses, and where it answers, it answers
//! what `serde_json` would.
//!
//! Why it exists: reading a 130-byte chat request through `serde_json`'s
//! visitor cost ~3,500 instructions, a tenth of everything the gateway does
//! for a request; this reader takes ~1,700 (callgrind, whole requests
//! through the gateway). It is not a JSON parser: it builds nothing,
//! decodes nothing (the model's name is a slice of the body), and reports
//! no errors. The body must already be known to be UTF-8.

/// What the top level held: the model (`None` for a missing or null
/// `model`), whether `stream` is the JSON `true`, and the largest output
/// cap among `max_tokens`, `max_completion_tokens` and `max_output_tokens`
/// given as a plain integer of at most 12 digits (`None`: no such cap).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Top<'a> {
    pub model: Option<&'a str>,
    pub stream: bool,
    pub max_output: Option<u64>,
}

/// The top-level keys that cap a request's output, in OpenAI's Chat
/// Completions (both names), Anthropic's Messages and OpenAI's Responses.
pub(crate) const OUTPUT_CAPS: [&[u8]; 3] = [
    b"max_tokens",
    b"max_completion_tokens",
    b"max_output_tokens",
];

/// The first output cap too large to be one (a plain integer of at most 12
/// digits is), in both the fast reader and `serde_json`'s.
pub(crate) const CAP_LIMIT: u64 = 1_000_000_000_000;

/// `digits` (a JSON number's text) as an output cap: a plain integer below
/// [`CAP_LIMIT`], as the admission estimate reads one.
fn cap(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 12 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// Nesting past this is left to `serde_json` (whose own limit is 128).
const MAX_DEPTH: u32 = 64;
/// A number longer than this is left to `serde_json` (an integer of 309
/// digits overflows an `f64`, which `serde_json` refuses).
const MAX_NUMBER: usize = 40;

/// Reads `body` (valid UTF-8) as a JSON object; `None` when not sure.
pub(crate) fn top(body: &str) -> Option<Top<'_>> {
    let b = body.as_bytes();
    let mut i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut model: Option<Option<&str>> = None;
    let mut stream: Option<bool> = None;
    // Each cap's last value (a key given twice keeps its last, as
    // `serde_json::Value` does), then the largest.
    let mut caps: [Option<u64>; 3] = [None; 3];
    i = ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let (key, at) = plain_string(b, i)?;
            i = ws(b, at);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i = ws(b, i + 1);
            match key {
                b"model" if model.is_none() => match b.get(i)? {
                    b'n' => {
                        i = word(b, i, b"null")?;
                        model = Some(None);
                    }
                    _ => {
                        let (m, at) = plain_string(b, i)?;
                        i = at;
                        // Cut at two ASCII quotes: on char boundaries.
                        model = Some(Some(body.get(i - 1 - m.len()..i - 1)?));
                    }
                },
                b"stream" if stream.is_none() => {
                    let t = b.get(i) == Some(&b't');
                    i = if t {
                        word(b, i, b"true")?
                    } else {
                        value(b, i)?
                    };
                    stream = Some(t);
                }
                b"model" | b"stream" => return None,
                // Matched by name here (a lookup in `OUTPUT_CAPS` for
                // every key cost ~260 instructions a chat request).
                b"max_tokens" | b"max_completion_tokens" | b"max_output_tokens" => {
                    let at = value(b, i)?;
                    if let Some(slot) = OUTPUT_CAPS.iter().position(|c| *c == key) {
                        caps[slot] = cap(&b[i..at]);
                    }
                    i = at;
                }
                _ => i = value(b, i)?,
            }
            i = ws(b, i);
            match b.get(i)? {
                b',' => i = ws(b, i + 1),
                b'}' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    if ws(b, i) != b.len() {
        return None;
    }
    Some(Top {
        model: model.flatten(),
        stream: stream.unwrap_or(false),
        max_output: caps.into_iter().flatten().max(),
    })
}

/// Past JSON's whitespace (space, tab, line feed, carriage return).
fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// Past `w`, which must be at `i`.
fn word(b: &[u8], i: usize, w: &[u8]) -> Option<usize> {
    let end = i.checked_add(w.len())?;
    (b.get(i..end)? == w).then_some(end)
}

/// The first byte at or after `i` that ends a plain run of string content:
/// `"`, `\` or a control character. Eight bytes a step.
#[inline]
fn string_stop(b: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Bytes of `x` that are zero (and none below the first such byte
    // reported falsely): the classic has-zero-byte test.
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    while let Some(chunk) = b.get(i..i + 8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let x = u64::from_le_bytes(w);
        let hit = zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')))
            | (x.wrapping_sub(ONES * 0x20) & !x & HIGH);
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// A string at `i` with no escapes at all: its content, and where it ends.
fn plain_string(b: &[u8], i: usize) -> Option<(&[u8], usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = string_stop(b, i + 1)?;
    (b[end] == b'"').then(|| (&b[i + 1..end], end + 1))
}

/// Past a string at `i` (its opening quote), its escapes checked: a `\u`
/// escape of a surrogate must be a leading one followed by a trailing one
/// (a lone surrogate is left to `serde_json`, which refuses it).
#[inline]
fn string(b: &[u8], i: usize) -> Option<usize> {
    let mut i = i + 1;
    loop {
        i = string_stop(b, i)?;
        match b[i] {
            b'"' => return Some(i + 1),
            b'\\' => i = escape(b, i)?,
            _ => return None,
        }
    }
}

/// Past the escape at `i` (its backslash). Out of line: most strings have
/// none, and inlined it made every string's call save and restore
/// registers it alone needs.
#[cold]
#[inline(never)]
fn escape(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 2),
        b'u' => match hex4(b, i + 2)? {
            // A leading surrogate, then its trailing one.
            0xD800..=0xDBFF if b.get(i + 6..i + 8)? == b"\\u" => (0xDC00..=0xDFFF)
                .contains(&hex4(b, i + 8)?)
                .then_some(i + 12),
            0xD800..=0xDFFF => None,
            _ => Some(i + 6),
        },
        _ => None,
    }
}

/// The four hex digits of a `\u` escape at `i`.
fn hex4(b: &[u8], i: usize) -> Option<u16> {
    b.get(i..i + 4)?.iter().try_fold(0u16, |n, &c| {
        let d = char::from(c).to_digit(16)?;
        Some(n << 4 | d as u16)
    })
}

/// Past a number at `i`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, no exponent, at
/// most `MAX_NUMBER` characters, so always finite to `serde_json`.
fn number(b: &[u8], start: usize) -> Option<usize> {
    let digits = |mut i: usize| {
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        i
    };
    let mut i = start + usize::from(b.get(start) == Some(&b'-'));
    i = match b.get(i)? {
        b'0' => i + 1,
        b'1'..=b'9' => digits(i + 1),
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        if !b.get(i + 1)?.is_ascii_digit() {
            return None;
        }
        i = digits(i + 1);
    }
    if matches!(b.get(i), Some(b'e' | b'E')) || i - start > MAX_NUMBER {
        return None;
    }
    Some(i)
}

/// Past any JSON value at `i`. Iterative: `open` holds a bit per open
/// container, set for an object.
fn value(b: &[u8], mut i: usize) -> Option<usize> {
    let mut open: u64 = 0;
    let mut depth: u32 = 0;
    loop {
        // A value starts at `i`.
        match *b.get(i)? {
            b'"' => i = string(b, i)?,
            c @ (b'{' | b'[') => {
                if depth == MAX_DEPTH {
                    return None;
                }
                let object = c == b'{';
                i = ws(b, i + 1);
                let close = if object { b'}' } else { b']' };
                if b.get(i) == Some(&close) {
                    i += 1;
                } else {
                    open = open << 1 | u64::from(object);
                    depth += 1;
                    if object {
                        i = member_key(b, i)?;
                    }
                    continue;
                }
            }
            b't' => i = word(b, i, b"true")?,
            b'f' => i = word(b, i, b"false")?,
            b'n' => i = word(b, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number(b, i)?,
            _ => return None,
        }
        // A value ended before `i`: close what it ends, or go on to the next.
        loop {
            if depth == 0 {
                return Some(i);
            }
            i = ws(b, i);
            let object = open & 1 == 1;
            match (b.get(i)?, object) {
                (b',', true) => {
                    i = member_key(b, ws(b, i + 1))?;
                    break;
                }
                (b',', false) => {
                    i = ws(b, i + 1);
                    break;
                }
                (b'}', true) | (b']', false) => {
                    i += 1;
                    open >>= 1;
                    depth -= 1;
                }
                _ => return None,
            }
        }
    }
}

/// Past an object member's key and colon at `i`, to its value.
fn member_key(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let i = ws(b, string(b, i)?);
    if b.get(i) != Some(&b':') {
        return None;
    }
    Some(ws(b, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &str) -> Option<(Option<&str>, bool)> {
        top(s).map(|t| (t.model, t.stream))
    }

    #[test]
    fn a_chat_request_is_read_here() {
        let chat = r#"{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are terse.\nSay \"hi\"\t\\ /"},{"role":"user","content":"Say hello. é ü 日本 \u00e9 \ud83d\ude00 \u2028"}],"max_tokens":64,"temperature":0.7,"top_p":1,"n":-1,"stream":true,"stop":null,"logprobs":false,"tools":[]}"#;
        assert_eq!(read(chat), Some((Some("gpt-4o-mini"), true)));
        assert_eq!(
            read(" \r\n\t{ \"stream\" : false , \"model\" : \"m\" } \n"),
            Some((Some("m"), false))
        );
        assert_eq!(read("{}"), Some((None, false)));
        assert_eq!(read(r#"{"model":null}"#), Some((None, false)));
        assert_eq!(
            read(r#"{"model":"m","stream":"true"}"#),
            Some((Some("m"), false))
        );
        assert_eq!(
            read(r#"{"model":"m","stream":[true]}"#),
            Some((Some("m"), false))
        );
        assert_eq!(read(r#"{"model":""}"#), Some((Some(""), false)));
    }

    #[test]
    fn what_needs_serde_json_is_left_to_it() {
        for body in [
            r#"{"model":"a","model":"b"}"#,
            r#"{"model":"a","stream":true,"stream":true}"#,
            r#"{"mod\u0065l":"m"}"#,
            r#"{"model":"m\"q"}"#,
            r#"{"model":5}"#,
            r#"{"model":"m","x":"\ud800"}"#,
            r#"{"model":"m","x":"\ud800\u0041"}"#,
            r#"{"model":"m","x":"\udc00\ud800"}"#,
            r#"{"model":"m","x":"\u00zz"}"#,
            r#"{"model":"m","x":"\u00e"}"#,
            r#"{"model":"m","x":1e3}"#,
            r#"{"model":"m","x":1234567890123456789012345678901234567890123}"#,
            r#"{"model":"m","x":01}"#,
            r#"{"model":"m","x":1.}"#,
            r#"{"model":"m","x":-}"#,
            r#"{"model":"m","x":"a
b"}"#,
            r#"{"model":"m","x":tru}"#,
            r#"{"model":"m",}"#,
            r#"{"model":"m"} x"#,
            r#"{"model":"m""#,
            r#"{"model":"m","x":[1,]}"#,
            r#"{"model":"m","x":{"a"}}"#,
            r#"{"model":"m","x":"\q"}"#,
            "[1]",
            "",
        ] {
            assert_eq!(read(body), None, "{body:?}");
        }
        let deep = |n: usize| {
            format!(
                "{{\"model\":\"a\",\"x\":{}{}}}",
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert_eq!(read(&deep(64)), Some((Some("a"), false)));
        assert_eq!(read(&deep(65)), None);
    }

    #[test]
    fn the_output_cap_is_the_largest_top_level_integer_cap() {
        let cap = |s: &str| top(s).map(|t| t.max_output);
        assert_eq!(cap(r#"{"model":"m","max_tokens":64}"#), Some(Some(64)));
        assert_eq!(
            cap(
                r#"{"max_completion_tokens":9,"model":"m","max_tokens":64,"max_output_tokens":100}"#
            ),
            Some(Some(100))
        );
        // Nested, in a string, negative, fractional, too long: no cap.
        for body in [
            r#"{"model":"m","x":{"max_tokens":64}}"#,
            r#"{"model":"m","messages":[{"content":"\"max_tokens\": 99"}]}"#,
            r#"{"model":"m","max_tokens":-1}"#,
            r#"{"model":"m","max_tokens":64.5}"#,
            r#"{"model":"m","max_tokens":"64"}"#,
            r#"{"model":"m","max_tokens":1000000000000}"#,
            r#"{"model":"m"}"#,
        ] {
            assert_eq!(cap(body), Some(None), "{body}");
        }
        // A key given twice keeps its last value.
        assert_eq!(cap(r#"{"max_tokens":500,"max_tokens":5}"#), Some(Some(5)));
        assert_eq!(
            cap(r#"{"max_tokens":999999999999}"#),
            Some(Some(999_999_999_999))
        );
    }
}
