//! Keeping the provider keys out of everything Levee passes on.
//!
//! A provider that rejects a key may echo it back (`Incorrect API key
//! provided: Bearer sk-…`); that error body would otherwise reach the caller,
//! the request log and the `--record` tape verbatim. [`Secrets`] holds the
//! configured provider keys and replaces every occurrence with `[redacted]`:
//! the key as sent, in any ASCII case, percent-encoded, JSON-escaped, and
//! base64-encoded at any alignment (standard and URL-safe alphabets, as in a
//! `Basic` credential or a token that embeds the key). What is scanned:
//! error answers (head and body), the head of every relayed answer, the
//! request log and the tape. What is not: the bodies of successful answers
//! and streams, which are relayed as they come.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Shorter keys are not redacted: they would match ordinary text.
const MIN_SECRET_LEN: usize = 8;

/// The configured provider keys, and one automaton that finds every form
/// of every key in a single pass.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    keys: Vec<Vec<u8>>,
    finder: Option<AhoCorasick>,
}

impl Secrets {
    /// Secrets from the given keys (short and duplicate ones are ignored).
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<[u8]>>(keys: I) -> Self {
        let mut keys: Vec<Vec<u8>> = keys
            .into_iter()
            .map(|k| k.as_ref().to_vec())
            .filter(|k| k.len() >= MIN_SECRET_LEN)
            .collect();
        keys.sort();
        keys.dedup();
        let mut forms: Vec<Vec<u8>> = keys.iter().flat_map(|k| forms(k)).collect();
        forms.sort();
        forms.dedup();
        // Leftmost-longest: a key that contains another is replaced whole.
        let finder = (!forms.is_empty())
            .then(|| {
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&forms)
                    .ok()
            })
            .flatten();
        Secrets { keys, finder }
    }

    /// These secrets and `other`'s.
    pub fn merged(&self, other: &Secrets) -> Secrets {
        Secrets::new(self.keys.iter().chain(&other.keys))
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.finder.is_none()
    }

    /// `b` with every secret replaced; the same bytes when none occurs.
    pub fn bytes(&self, b: Bytes) -> Bytes {
        match self.scrub(&b) {
            Some(v) => Bytes::from(v),
            None => b,
        }
    }

    /// `s` with every secret replaced.
    pub fn text(&self, s: String) -> String {
        match self.scrub(s.as_bytes()) {
            // Every form is ASCII, so replacing one keeps the text valid
            // UTF-8; lossy only as a safety net.
            Some(v) => String::from_utf8(v)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            None => s,
        }
    }

    /// Replaces secrets inside header values (a value that no longer makes
    /// a valid header is dropped).
    pub fn headers(&self, h: &mut HeaderMap) {
        if self.is_empty() {
            return;
        }
        let hits: Vec<_> = h
            .iter()
            .filter(|(_, v)| self.occurs(v.as_bytes()))
            .map(|(n, _)| n.clone())
            .collect();
        for name in hits {
            let values: Vec<HeaderValue> = h
                .get_all(&name)
                .iter()
                .filter_map(|v| {
                    let out = self
                        .scrub(v.as_bytes())
                        .unwrap_or_else(|| v.as_bytes().to_vec());
                    HeaderValue::from_bytes(&out).ok()
                })
                .collect();
            h.remove(&name);
            for v in values {
                h.append(name.clone(), v);
            }
        }
    }

    /// Whether a secret occurs in `hay`.
    pub fn occurs(&self, hay: &[u8]) -> bool {
        self.finder.as_ref().is_some_and(|f| f.is_match(hay))
    }

    /// `Some(replaced)` when a secret occurs in `hay`.
    pub fn scrub(&self, hay: &[u8]) -> Option<Vec<u8>> {
        let finder = self.finder.as_ref()?;
        let mut matches = finder.find_iter(hay).peekable();
        matches.peek()?;
        let mut out = Vec::with_capacity(hay.len());
        let mut from = 0;
        for m in matches {
            out.extend_from_slice(&hay[from..m.start()]);
            out.extend_from_slice(REDACTED.as_bytes());
            from = m.end();
        }
        out.extend_from_slice(&hay[from..]);
        Some(out)
    }
}

/// The forms a key may take in text a provider writes: as sent,
/// percent-encoded, JSON-escaped, and base64 at each of the three
/// alignments a key can have inside a longer encoded string (only the
/// characters the key alone decides, so the form is found whatever
/// surrounds it). ASCII case is ignored when matching.
fn forms(key: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![key.to_vec()];
    let mut pct = Vec::with_capacity(key.len() * 3);
    for &b in key {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            pct.push(b);
        } else {
            pct.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out.push(pct);
    // JSON as encoders write it: the least escaping, `/` escaped too, and
    // every character that is not a letter or digit as `\u00XX`.
    let (mut least, mut slash, mut every) = (Vec::new(), Vec::new(), Vec::new());
    for &b in key {
        let unicode = format!("\\u{b:04x}");
        match b {
            b'"' | b'\\' => {
                least.extend_from_slice(&[b'\\', b]);
                slash.extend_from_slice(&[b'\\', b]);
            }
            b'/' => {
                least.push(b);
                slash.extend_from_slice(b"\\/");
            }
            b if b < 0x20 => {
                least.extend_from_slice(unicode.as_bytes());
                slash.extend_from_slice(unicode.as_bytes());
            }
            b => {
                least.push(b);
                slash.push(b);
            }
        }
        if b.is_ascii_alphanumeric() {
            every.push(b);
        } else {
            every.extend_from_slice(unicode.as_bytes());
        }
    }
    out.extend([least, slash, every]);
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
    ] {
        for offset in 0..3usize {
            let mut padded = vec![0u8; offset];
            padded.extend_from_slice(key);
            padded.extend_from_slice(&[0, 0]);
            let encoded = engine.encode(&padded);
            // Character i holds input bits [6i, 6i + 6): it is the key's
            // alone when those bits lie within the key's bytes.
            let (first, last) = (8 * offset, 8 * (offset + key.len()));
            let chars: Vec<u8> = encoded
                .bytes()
                .enumerate()
                .filter(|&(i, _)| 6 * i >= first && 6 * i + 6 <= last)
                .map(|(_, c)| c)
                .collect();
            if chars.len() >= MIN_SECRET_LEN {
                out.push(chars);
            }
        }
    }
    out.retain(|f| f.len() >= MIN_SECRET_LEN);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_of_every_key_is_replaced() {
        let s = Secrets::new(["sk-secret-1234", "another-key-99", "short"]);
        let body = Bytes::from_static(
            b"Incorrect API key provided: Bearer sk-secret-1234 (sk-secret-1234); another-key-99 short",
        );
        let out = s.bytes(body);
        assert_eq!(
            &out[..],
            b"Incorrect API key provided: Bearer [redacted] ([redacted]); [redacted] short"
        );
        let clean = Bytes::from_static(b"nothing here");
        assert_eq!(s.bytes(clean.clone()), clean);
        assert_eq!(s.text("x sk-secret-1234".into()), "x [redacted]");
    }

    #[test]
    fn header_values_are_scrubbed() {
        let s = Secrets::new(["sk-secret-1234"]);
        let mut h = HeaderMap::new();
        h.append("x-echo", HeaderValue::from_static("Bearer sk-secret-1234"));
        h.append("x-echo", HeaderValue::from_static("fine"));
        h.insert("x-other", HeaderValue::from_static("ok"));
        s.headers(&mut h);
        let v: Vec<_> = h.get_all("x-echo").iter().collect();
        assert_eq!(v, ["Bearer [redacted]", "fine"]);
        assert_eq!(h["x-other"], "ok");
    }

    #[test]
    fn overlapping_and_edge_positions() {
        let s = Secrets::new(["aaaaaaaa"]);
        assert_eq!(s.scrub(b"aaaaaaaaa").as_deref(), Some(&b"[redacted]a"[..]));
        assert_eq!(s.scrub(b"AaAaAaAaA").as_deref(), Some(&b"[redacted]A"[..]));
        assert_eq!(s.scrub(b"aaaaaaa"), None);
        assert_eq!(s.scrub(b""), None);
    }

    #[test]
    fn every_form_of_a_key_is_replaced() {
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let key = "sk-proj/Ab+9_x=Key~777";
        let s = Secrets::new([key]);
        let pct = "sk-proj%2FAb%2B9_x%3DKey~777";
        let cases = [
            key.to_string(),
            key.to_ascii_uppercase(),
            key.to_ascii_lowercase(),
            pct.to_string(),
            pct.to_ascii_lowercase(),
            serde_json::to_string(key).unwrap_or_default(),
            "sk-proj\\/Ab+9_x=Key~777".to_string(),
            "sk\\u002dproj\\u002fAb\\u002b9\\u005fx\\u003dKey\\u007e777".to_string(),
            STANDARD.encode(key),
            STANDARD.encode(format!("user:{key}")),
            STANDARD.encode(format!("ab:{key}:x")),
            URL_SAFE_NO_PAD.encode(format!("{{\"k\":\"{key}\"}}")),
            STANDARD.encode(format!("Bearer {key}")),
        ];
        for form in cases {
            let text = format!("provider says: {form} was wrong");
            let out = s.text(text.clone());
            assert!(out.contains(REDACTED), "{form}: {out}");
            assert!(!out.contains(&form), "{form}: {out}");
            // No run of the key's own bytes is left to read.
            assert!(
                !out.to_ascii_lowercase().contains("key~777"),
                "{form}: {out}"
            );
        }
        assert_eq!(s.scrub(b"an answer about something else entirely"), None);
    }
}
