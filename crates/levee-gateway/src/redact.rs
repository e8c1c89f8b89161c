//! Keeping the provider keys out of everything Levee passes on.
//!
//! A provider that rejects a key may echo it back (`Incorrect API key
//! provided: Bearer sk-…`); that error body would otherwise reach the caller,
//! the request log and the `--record` tape verbatim. [`Secrets`] holds the
//! configured provider keys and replaces every occurrence with `[redacted]`.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Shorter keys are not redacted: they would match ordinary text.
const MIN_SECRET_LEN: usize = 8;

/// The configured provider keys.
#[derive(Clone, Debug, Default)]
pub struct Secrets {
    keys: Vec<Vec<u8>>,
}

impl Secrets {
    /// Secrets from the given keys (short and duplicate ones are ignored).
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<[u8]>>(keys: I) -> Self {
        let mut keys: Vec<Vec<u8>> = keys
            .into_iter()
            .map(|k| k.as_ref().to_vec())
            .filter(|k| k.len() >= MIN_SECRET_LEN)
            .collect();
        // Longest first, so a key that contains another is replaced whole.
        keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
        keys.dedup();
        Secrets { keys }
    }

    /// These secrets and `other`'s.
    pub fn merged(&self, other: &Secrets) -> Secrets {
        Secrets::new(self.keys.iter().chain(&other.keys))
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
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
            // Keys come from environment strings (whole UTF-8 characters), so
            // replacing them keeps the text valid; lossy only as a safety net.
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
            .filter(|(_, v)| self.scrub(v.as_bytes()).is_some())
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

    /// `Some(replaced)` when a secret occurs in `hay`.
    pub fn scrub(&self, hay: &[u8]) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        for key in &self.keys {
            let src = out.as_deref().unwrap_or(hay);
            if let Some(v) = replace_all(src, key, REDACTED.as_bytes()) {
                out = Some(v);
            }
        }
        out
    }
}

/// `hay` with every `needle` replaced by `with`; `None` when there is none.
fn replace_all(hay: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let mut at = find(hay, needle)?;
    let mut out = Vec::with_capacity(hay.len());
    let mut rest = hay;
    loop {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with);
        rest = &rest[at + needle.len()..];
        match find(rest, needle) {
            Some(next) => at = next,
            None => break,
        }
    }
    out.extend_from_slice(rest);
    Some(out)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    let first = needle[0];
    let mut from = 0;
    while from + needle.len() <= hay.len() {
        let i = from
            + hay[from..=hay.len() - needle.len()]
                .iter()
                .position(|&b| b == first)?;
        if &hay[i..i + needle.len()] == needle {
            return Some(i);
        }
        from = i + 1;
    }
    None
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
        assert_eq!(s.scrub(b"aaaaaaa"), None);
        assert_eq!(s.scrub(b""), None);
    }
}
