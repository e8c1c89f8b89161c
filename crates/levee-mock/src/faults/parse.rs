//! Parsing the fault document (`--faults FILE`, `POST /_mock/faults`), YAML
//! or JSON, with errors that name the key and the line.
//!
//! Parsing walks the document with hand-written serde visitors so that every
//! complaint is raised while the offending node is being read; the YAML
//! deserializer then knows that node's line and the message can name it.
//! This file holds the document's top level, the errors, and what every map
//! in it shares (its keys read by `KeySeed`, its value built by
//! `FromMap`); `scalars` reads the values, `fault`, `capacity` and
//! `rate_limit` the maps.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use super::{Capacity, Fault, FaultSet};
use crate::ratelimit::RateLimit;

mod capacity;
mod fault;
mod rate_limit;
mod scalars;

/// Why a fault document was rejected. `Display` reads
/// "faults line 3: `from` must be a duration like `20s` (got ...)".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(.line, .message))]
pub struct FaultError {
    line: Option<usize>,
    message: String,
}

fn render(line: &Option<usize>, message: &str) -> String {
    match line {
        Some(line) => format!("faults line {line}: {message}"),
        None => format!("faults: {message}"),
    }
}

impl FaultError {
    /// 1-based line of the offending node, when the parser knows it.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The complaint without the line prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Parses a fault document, YAML or JSON (chosen by a leading `{`).
///
/// ```
/// let set = levee_mock::parse_faults("faults:\n  - { status: 503, retry_after: 2 }\n").unwrap();
/// assert_eq!(set.len(), 1);
/// ```
pub fn parse_faults(text: &str) -> Result<FaultSet, FaultError> {
    let only_comments = text
        .lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#'));
    if only_comments {
        return Ok(FaultSet::default());
    }
    if text.trim_start().starts_with('{') {
        match serde_json::from_str::<Doc>(text) {
            Ok(doc) => return Ok(doc.into_set()),
            // `{faults: [...]}` is YAML flow style, not JSON: let YAML try.
            Err(e) if e.is_syntax() => {
                if let Ok(doc) = serde_norway::from_str::<Doc>(text) {
                    return Ok(doc.into_set());
                }
                return Err(json_error(&e));
            }
            Err(e) => return Err(json_error(&e)),
        }
    }
    serde_norway::from_str::<Doc>(text)
        .map(Doc::into_set)
        .map_err(|e| yaml_error(&e))
}

fn json_error(e: &serde_json::Error) -> FaultError {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
    FaultError {
        line: (e.line() > 0).then_some(e.line()),
        message,
    }
}

fn yaml_error(e: &serde_norway::Error) -> FaultError {
    let full = e.to_string();
    let Some(loc) = e.location() else {
        return FaultError {
            line: None,
            message: full,
        };
    };
    let suffix = format!(" at line {} column {}", loc.line(), loc.column());
    let message = match full.strip_suffix(&suffix) {
        Some(m) => strip_path(m).to_owned(),
        // A YAML syntax error: libyaml's own text, which names positions itself.
        None => format!("YAML syntax: {full}"),
    };
    FaultError {
        line: Some(loc.line()),
        message,
    }
}

/// serde_norway prefixes messages with the node path (`faults[2].from: `);
/// the line number already says where, so drop it.
fn strip_path(message: &str) -> &str {
    if let Some((head, rest)) = message.split_once(": ") {
        let is_path = !head.is_empty()
            && head
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '[' | ']' | '.'));
        if is_path {
            return rest;
        }
    }
    message
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    faults: Option<Vec<Map<Fault>>>,
    #[serde(default)]
    capacity: Option<Map<Capacity>>,
    #[serde(default)]
    rate_limit: Option<Map<RateLimit>>,
    #[serde(default)]
    models: Option<Vec<String>>,
}

impl Doc {
    fn into_set(self) -> FaultSet {
        FaultSet {
            faults: self
                .faults
                .map_or_else(Vec::new, |f| f.into_iter().map(|Map(f)| f).collect()),
            capacity: self.capacity.map(|Map(c)| c),
            rate_limit: self.rate_limit.map(|Map(r)| r),
            models: self.models,
        }
    }
}

/// Reads a map key and rejects unknown ones at the key's own line.
struct KeySeed<K> {
    parse: fn(&str) -> Option<K>,
    known: &'static [&'static str],
}

impl<'de, K> DeserializeSeed<'de> for KeySeed<K> {
    type Value = K;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K> Visitor<'de> for KeySeed<K> {
    type Value = K;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<K, E> {
        (self.parse)(v).ok_or_else(|| E::unknown_field(v, self.known))
    }
}

impl<K> Clone for KeySeed<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for KeySeed<K> {}

/// A value the document gives as a map (a fault, `capacity`, `rate_limit`),
/// read key by key.
trait FromMap: Sized {
    /// What a value that is not a map is told was expected.
    const EXPECTING: &'static str;
    fn from_map<'de, A: MapAccess<'de>>(map: A) -> Result<Self, A::Error>;
}

/// A [`FromMap`] value as a field of the document.
struct Map<T>(T);

impl<'de, T: FromMap> Deserialize<'de> for Map<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MapVisitor(PhantomData))
    }
}

struct MapVisitor<T>(PhantomData<T>);

impl<'de, T: FromMap> Visitor<'de> for MapVisitor<T> {
    type Value = Map<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Map<T>, A::Error> {
        T::from_map(map).map(Map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a document that must not parse gives.
    pub(super) fn err(text: &str) -> FaultError {
        match parse_faults(text) {
            Ok(set) => panic!("expected an error, parsed {set:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn parses_the_design_example() {
        let set = parse_faults(
            "faults:\n\
             \x20 - { status: 503, retry_after: 2, from: 20s, to: 50s }\n\
             \x20 - { status: 429, retry_after_ms: 1500 }\n\
             \x20 - { status: 400, model: \"broken-model\" }\n\
             \x20 - { reset: true, probability: 0.05 }\n\
             \x20 - { stall: true, from: 0s, to: 5s }\n\
             \x20 - { latency: { p50: 200ms, p99: 900ms } }\n\
             \x20 - { latency: 150ms, chunk_delay: 20ms }\n\
             \x20 - { cut_stream_after: 3 }\n\
             capacity: { max_in_flight: 100, status: 529 }\n",
        )
        .unwrap();
        assert_eq!(set.len(), 8);
        assert_eq!(set.capacity_limit(), Some((100, 529)));
    }

    #[test]
    fn json_documents_parse_too() {
        let set = parse_faults(
            r#"{"faults":[{"status":503,"from":"1s"}],"capacity":{"max_in_flight":3}}"#,
        )
        .unwrap();
        assert_eq!(set.len(), 1);
        assert_eq!(set.capacity_limit(), Some((3, 503)));
        let set = parse_faults("{faults: [{reset: true}]}").unwrap();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn empty_documents_mean_no_faults() {
        assert!(parse_faults("").unwrap().is_empty());
        assert!(parse_faults("# nothing\n\n").unwrap().is_empty());
        assert!(parse_faults("faults:\n").unwrap().is_empty());
    }

    #[test]
    fn bad_duration_names_key_and_line() {
        let e = err("faults:\n  - { status: 503 }\n  - { status: 503, from: 20 }\n");
        assert_eq!(e.line(), Some(3));
        assert!(
            e.to_string()
                .starts_with("faults line 3: `from` must be a duration like `20s`"),
            "{e}"
        );
    }

    #[test]
    fn block_style_points_at_the_value_line() {
        let e = err("faults:\n  - status: 503\n    retry_after: 2\n    to: soon\n");
        assert_eq!(e.line(), Some(4), "{e}");
        assert!(e.message().contains("`to` must be a duration"), "{e}");
    }

    #[test]
    fn unknown_keys_are_rejected_at_their_line() {
        let e = err("faults:\n  - status: 503\n    retry_afer: 2\n");
        assert_eq!(e.line(), Some(3), "{e}");
        assert!(e.message().contains("unknown field `retry_afer`"), "{e}");
        let e = err("faults: []\ncapacity: { max_in_flight: 1 }\nfualts: []\n");
        assert_eq!(e.line(), Some(3), "{e}");
        let e = err("capacity: { max_in_flight: 1, staus: 529 }\n");
        assert!(e.message().contains("unknown field `staus`"), "{e}");
    }

    #[test]
    fn effects_are_checked() {
        let e = err("faults:\n  - { status: 503, reset: true }\n");
        assert_eq!(e.line(), Some(2));
        for (doc, says) in [
            (
                "faults:\n  - { status: 503, reset: true }\n",
                "exactly one effect",
            ),
            ("faults:\n  - { from: 1s }\n", "needs one effect"),
            ("faults:\n  - { reset: false }\n", "`reset` must be `true`"),
            (
                "faults:\n  - { status: 200 }\n",
                "`status` must be an HTTP status from 300 to 599",
            ),
            (
                "faults:\n  - { retry_after: 2, reset: true }\n",
                "only goes with `status`",
            ),
            (
                "faults:\n  - { status: 503, from: 5s, to: 1s }\n",
                "must be before `to`",
            ),
            (
                "faults:\n  - { reset: true, probability: 1.5 }\n",
                "`probability` must be a number from 0 to 1",
            ),
            (
                "faults:\n  - { latency: { p50: 200ms } }\n",
                "needs both `p50` and `p99`",
            ),
            ("capacity: { status: 529 }\n", "needs `max_in_flight`"),
        ] {
            let e = err(doc);
            assert!(e.message().contains(says), "{doc}: {e}");
        }
    }

    #[test]
    fn yaml_syntax_errors_have_a_line() {
        let e = err("faults:\n  - status: 503\n  retry_after: 2\n");
        assert!(e.line().is_some(), "{e}");
        assert!(e.message().starts_with("YAML syntax"), "{e}");
    }

    #[test]
    fn json_errors_have_a_line() {
        let e = err("{\n \"faults\": [\n  {\"status\": 503, \"from\": 20}\n ]\n}");
        assert_eq!(e.line(), Some(3), "{e}");
        assert!(e.message().contains("`from` must be a duration"), "{e}");
    }
}
