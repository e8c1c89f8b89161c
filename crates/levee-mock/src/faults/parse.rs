//! Parsing the fault document (`--faults FILE`, `POST /_mock/faults`), YAML
//! or JSON, with errors that name the key and the line.
//!
//! Parsing walks the document with hand-written serde visitors so that every
//! complaint is raised while the offending node is being read; the YAML
//! deserializer then knows that node's line and the message can name it.

use std::collections::HashSet;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use http::StatusCode;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;

use super::{Capacity, Effect, ErrorSpec, Fault, FaultSet, Latency, ModelMatch};
use crate::duration::parse_duration;
use crate::ratelimit::RateLimit;

mod rate_limit;

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
}

impl Doc {
    fn into_set(self) -> FaultSet {
        FaultSet {
            faults: self
                .faults
                .map_or_else(Vec::new, |f| f.into_iter().map(|Map(f)| f).collect()),
            capacity: self.capacity.map(|Map(c)| c),
            rate_limit: self.rate_limit.map(|Map(r)| r),
        }
    }
}

/// A scalar as the visitors see it, for uniform error messages.
enum Scalar<'a> {
    Str(&'a str),
    Int(i128),
    Float(f64),
    Bool(bool),
}

impl Scalar<'_> {
    fn unexpected(&self) -> Unexpected<'_> {
        match *self {
            Scalar::Str(s) => Unexpected::Str(s),
            Scalar::Int(i) => match i64::try_from(i) {
                Ok(i) => Unexpected::Signed(i),
                Err(_) => Unexpected::Other("a huge integer"),
            },
            Scalar::Float(f) => Unexpected::Float(f),
            Scalar::Bool(b) => Unexpected::Bool(b),
        }
    }

    fn as_u64(&self) -> Option<u64> {
        match *self {
            Scalar::Int(i) => u64::try_from(i).ok(),
            _ => None,
        }
    }
}

/// Reads one scalar and validates it inside the visitor, so a failure carries
/// the scalar's own line. `what` completes "`key` must be ...".
struct ScalarSeed<F> {
    key: &'static str,
    what: &'static str,
    check: F,
}

fn scalar<T, F>(key: &'static str, what: &'static str, check: F) -> ScalarSeed<F>
where
    F: FnOnce(&Scalar<'_>) -> Option<T>,
{
    ScalarSeed { key, what, check }
}

fn must_be<E: de::Error>(key: &str, what: &str, got: Unexpected<'_>) -> E {
    E::custom(format_args!("`{key}` must be {what} (got {got})"))
}

impl<'de, T, F> DeserializeSeed<'de> for ScalarSeed<F>
where
    F: FnOnce(&Scalar<'_>) -> Option<T>,
{
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<T, F> ScalarSeed<F>
where
    F: FnOnce(&Scalar<'_>) -> Option<T>,
{
    fn finish<E: de::Error>(self, s: Scalar<'_>) -> Result<T, E> {
        let (key, what) = (self.key, self.what);
        (self.check)(&s).ok_or_else(|| must_be(key, what, s.unexpected()))
    }
}

impl<'de, T, F> Visitor<'de> for ScalarSeed<F>
where
    F: FnOnce(&Scalar<'_>) -> Option<T>,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "`{}` as {}", self.key, self.what)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        self.finish(Scalar::Str(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.finish(Scalar::Int(i128::from(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.finish(Scalar::Int(i128::from(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        self.finish(Scalar::Float(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        self.finish(Scalar::Bool(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Err(must_be(self.key, self.what, Unexpected::Unit))
    }
    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Err(must_be(self.key, self.what, Unexpected::Unit))
    }
    fn visit_map<A: MapAccess<'de>>(self, _map: A) -> Result<T, A::Error> {
        Err(must_be(self.key, self.what, Unexpected::Map))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<T, A::Error> {
        Err(must_be(self.key, self.what, Unexpected::Seq))
    }
}

const DURATION: &str = "a duration like `20s`, `150ms` or `1.5s`";

fn duration(key: &'static str) -> impl for<'de> DeserializeSeed<'de, Value = Duration> {
    scalar(key, DURATION, |s| match s {
        Scalar::Str(text) => parse_duration(text),
        Scalar::Int(0) => Some(Duration::ZERO),
        _ => None,
    })
}

fn whole_number(
    key: &'static str,
    what: &'static str,
) -> impl for<'de> DeserializeSeed<'de, Value = u64> {
    scalar(key, what, |s| s.as_u64())
}

fn error_status(key: &'static str) -> impl for<'de> DeserializeSeed<'de, Value = StatusCode> {
    // 3xx included: a proxy in front of a provider may answer a redirect.
    scalar(
        key,
        "an HTTP status from 300 to 599 (a redirect or an error)",
        |s| {
            let code = u16::try_from(s.as_u64()?).ok()?;
            if (300..=599).contains(&code) {
                StatusCode::from_u16(code).ok()
            } else {
                None
            }
        },
    )
}

fn flag_true(key: &'static str) -> impl for<'de> DeserializeSeed<'de, Value = ()> {
    scalar(key, "`true` (to turn the fault off, delete it)", |s| {
        matches!(s, Scalar::Bool(true)).then_some(())
    })
}

fn text(key: &'static str) -> impl for<'de> DeserializeSeed<'de, Value = String> {
    scalar(key, "a non-empty string", |s| match s {
        Scalar::Str(t) if !t.is_empty() => Some((*t).to_owned()),
        _ => None,
    })
}

fn probability() -> impl for<'de> DeserializeSeed<'de, Value = f64> {
    scalar("probability", "a number from 0 to 1, like `0.05`", |s| {
        let p = match *s {
            Scalar::Float(f) => f,
            Scalar::Int(i @ 0..=1) => i as f64,
            _ => return None,
        };
        (0.0..=1.0).contains(&p).then_some(p)
    })
}

/// Keys of one fault, in the order error messages list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    From,
    To,
    Probability,
    Model,
    Status,
    RetryAfter,
    RetryAfterMs,
    Reset,
    Stall,
    Latency,
    ChunkDelay,
    CutStreamAfter,
}

/// Each key with its name, in `Key`'s order.
const KEYS: [(Key, &str); 12] = [
    (Key::From, "from"),
    (Key::To, "to"),
    (Key::Probability, "probability"),
    (Key::Model, "model"),
    (Key::Status, "status"),
    (Key::RetryAfter, "retry_after"),
    (Key::RetryAfterMs, "retry_after_ms"),
    (Key::Reset, "reset"),
    (Key::Stall, "stall"),
    (Key::Latency, "latency"),
    (Key::ChunkDelay, "chunk_delay"),
    (Key::CutStreamAfter, "cut_stream_after"),
];

/// The names alone, for "unknown field" errors.
const FAULT_KEYS: &[&str] = &{
    let mut names = [""; KEYS.len()];
    let mut i = 0;
    while i < KEYS.len() {
        names[i] = KEYS[i].1;
        i += 1;
    }
    names
};

impl Key {
    fn name(self) -> &'static str {
        KEYS[self as usize].1
    }

    fn parse(name: &str) -> Option<Key> {
        KEYS.iter().find(|(_, n)| *n == name).map(|(k, _)| *k)
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

impl FromMap for Fault {
    const EXPECTING: &'static str = "a fault like `{ status: 503, from: 20s, to: 50s }`";

    fn from_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<Fault, A::Error> {
        let mut b = FaultBuilder::default();
        let mut seen = HashSet::new();
        let keys = KeySeed {
            parse: Key::parse,
            known: FAULT_KEYS,
        };
        while let Some(key) = map.next_key_seed(keys)? {
            if !seen.insert(key) {
                return Err(de::Error::custom(format_args!(
                    "`{}` is given twice in one fault",
                    key.name()
                )));
            }
            match key {
                Key::From => b.from = Some(map.next_value_seed(duration("from"))?),
                Key::To => b.to = Some(map.next_value_seed(duration("to"))?),
                Key::Probability => b.probability = Some(map.next_value_seed(probability())?),
                Key::Model => b.model = Some(map.next_value_seed(text("model"))?),
                Key::Status => b.status = Some(map.next_value_seed(error_status("status"))?),
                Key::RetryAfter => {
                    b.retry_after =
                        Some(map.next_value_seed(whole_number(
                            "retry_after",
                            "whole seconds, like `2`",
                        ))?)
                }
                Key::RetryAfterMs => {
                    b.retry_after_ms = Some(map.next_value_seed(whole_number(
                        "retry_after_ms",
                        "whole milliseconds, like `1500`",
                    ))?)
                }
                Key::Reset => {
                    map.next_value_seed(flag_true("reset"))?;
                    b.reset = true;
                }
                Key::Stall => {
                    map.next_value_seed(flag_true("stall"))?;
                    b.stall = true;
                }
                Key::Latency => b.latency = Some(map.next_value_seed(LatencySeed)?),
                Key::ChunkDelay => {
                    b.chunk_delay = Some(map.next_value_seed(duration("chunk_delay"))?)
                }
                Key::CutStreamAfter => {
                    let n = map.next_value_seed(whole_number(
                        "cut_stream_after",
                        "a number of chunks, like `3`",
                    ))?;
                    b.cut_stream_after = Some(u32::try_from(n).unwrap_or(u32::MAX));
                }
            }
        }
        b.finish().map_err(de::Error::custom)
    }
}

impl<K> Clone for KeySeed<K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<K> Copy for KeySeed<K> {}

#[derive(Default)]
struct FaultBuilder {
    from: Option<Duration>,
    to: Option<Duration>,
    probability: Option<f64>,
    model: Option<String>,
    status: Option<StatusCode>,
    retry_after: Option<u64>,
    retry_after_ms: Option<u64>,
    reset: bool,
    stall: bool,
    latency: Option<Latency>,
    chunk_delay: Option<Duration>,
    cut_stream_after: Option<u32>,
}

impl FaultBuilder {
    fn finish(self) -> Result<Fault, String> {
        if let (Some(from), Some(to)) = (self.from, self.to) {
            if from >= to {
                return Err(format!(
                    "`from` ({from:?}) must be before `to` ({to:?}): the window is [from, to)"
                ));
            }
        }
        if self.status.is_none() {
            for (key, given) in [
                ("retry_after", self.retry_after.is_some()),
                ("retry_after_ms", self.retry_after_ms.is_some()),
            ] {
                if given {
                    return Err(format!(
                        "`{key}` only goes with `status` (e.g. `{{ status: 429, {key}: ... }}`)"
                    ));
                }
            }
        }
        let mut effects: Vec<(&str, Effect)> = Vec::new();
        if let Some(status) = self.status {
            effects.push((
                "status",
                Effect::Status(ErrorSpec {
                    status,
                    retry_after: self.retry_after,
                    retry_after_ms: self.retry_after_ms,
                }),
            ));
        }
        if self.reset {
            effects.push(("reset", Effect::Reset));
        }
        if self.stall {
            effects.push(("stall", Effect::Stall));
        }
        if let Some(n) = self.cut_stream_after {
            effects.push(("cut_stream_after", Effect::CutStreamAfter(n)));
        }
        if self.latency.is_some() || self.chunk_delay.is_some() {
            let name = if self.latency.is_some() {
                "latency"
            } else {
                "chunk_delay"
            };
            effects.push((
                name,
                Effect::Delay {
                    latency: self.latency,
                    chunk_delay: self.chunk_delay,
                },
            ));
        }
        if effects.len() > 1 {
            let names: Vec<String> = effects.iter().map(|(n, _)| format!("`{n}`")).collect();
            return Err(format!(
                "a fault has exactly one effect, this one has {}: split it into one fault per effect",
                names.join(" and ")
            ));
        }
        let Some((_, effect)) = effects.pop() else {
            return Err(
                "a fault needs one effect: `status`, `reset`, `stall`, `latency`, \
                        `chunk_delay` or `cut_stream_after`"
                    .to_owned(),
            );
        };
        Ok(Fault {
            from: self.from,
            to: self.to,
            probability: self.probability,
            model: self.model.as_deref().map(ModelMatch::new),
            effect,
        })
    }
}

/// `latency: 150ms` or `latency: { p50: 200ms, p99: 900ms }`.
struct LatencySeed;

impl<'de> DeserializeSeed<'de> for LatencySeed {
    type Value = Latency;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Latency, D::Error> {
        d.deserialize_any(self)
    }
}

const LATENCY: &str = "a duration like `150ms` or `{ p50: 200ms, p99: 900ms }`";

impl<'de> Visitor<'de> for LatencySeed {
    type Value = Latency;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(LATENCY)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Latency, E> {
        parse_duration(v)
            .map(Latency::Fixed)
            .ok_or_else(|| must_be("latency", LATENCY, Unexpected::Str(v)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Latency, E> {
        Err(must_be("latency", LATENCY, Unexpected::Unsigned(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Latency, E> {
        Err(must_be("latency", LATENCY, Unexpected::Signed(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Latency, E> {
        Err(must_be("latency", LATENCY, Unexpected::Float(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Latency, E> {
        Err(must_be("latency", LATENCY, Unexpected::Bool(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Latency, E> {
        Err(must_be("latency", LATENCY, Unexpected::Unit))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<Latency, A::Error> {
        Err(must_be("latency", LATENCY, Unexpected::Seq))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Latency, A::Error> {
        #[derive(Clone, Copy, PartialEq)]
        enum Q {
            P50,
            P99,
        }
        fn parse(name: &str) -> Option<Q> {
            match name {
                "p50" => Some(Q::P50),
                "p99" => Some(Q::P99),
                _ => None,
            }
        }
        let keys = KeySeed {
            parse,
            known: &["p50", "p99"],
        };
        let (mut p50, mut p99) = (None, None);
        while let Some(q) = map.next_key_seed(keys)? {
            match q {
                Q::P50 => p50 = Some(map.next_value_seed(duration("p50"))?),
                Q::P99 => p99 = Some(map.next_value_seed(duration("p99"))?),
            }
        }
        let (Some(p50), Some(p99)) = (p50, p99) else {
            return Err(de::Error::custom(
                "`latency` as a distribution needs both `p50` and `p99`, like `{ p50: 200ms, p99: 900ms }`",
            ));
        };
        if p99 < p50 {
            return Err(de::Error::custom(format_args!(
                "`latency`: `p99` ({p99:?}) must not be below `p50` ({p50:?})"
            )));
        }
        Latency::from_quantiles(p50, p99).map_err(|_| {
            de::Error::custom(format_args!(
                "`latency`: `p50` must be positive (got {p50:?}); for no delay leave `latency` out"
            ))
        })
    }
}

const CAPACITY_KEYS: &[&str] = &["max_in_flight", "status", "retry_after", "retry_after_ms"];

impl FromMap for Capacity {
    const EXPECTING: &'static str = "`capacity: { max_in_flight: 100, status: 529 }`";

    fn from_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<Capacity, A::Error> {
        fn parse(name: &str) -> Option<usize> {
            CAPACITY_KEYS.iter().position(|k| *k == name)
        }
        let keys = KeySeed {
            parse,
            known: CAPACITY_KEYS,
        };
        let mut max = None;
        let mut error = ErrorSpec {
            status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after: None,
            retry_after_ms: None,
        };
        while let Some(k) = map.next_key_seed(keys)? {
            match k {
                0 => {
                    max = Some(map.next_value_seed(whole_number(
                        "max_in_flight",
                        "a whole number of concurrent requests, like `100`",
                    ))?)
                }
                1 => error.status = map.next_value_seed(error_status("status"))?,
                2 => {
                    error.retry_after =
                        Some(map.next_value_seed(whole_number(
                            "retry_after",
                            "whole seconds, like `2`",
                        ))?)
                }
                _ => {
                    error.retry_after_ms = Some(map.next_value_seed(whole_number(
                        "retry_after_ms",
                        "whole milliseconds, like `1500`",
                    ))?)
                }
            }
        }
        let Some(max_in_flight) = max else {
            return Err(de::Error::custom(
                "`capacity` needs `max_in_flight`, like `{ max_in_flight: 100, status: 529 }`",
            ));
        };
        Ok(Capacity {
            max_in_flight,
            error,
        })
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
    fn every_key_names_itself() {
        for (i, (key, name)) in KEYS.iter().enumerate() {
            assert_eq!(*key as usize, i, "{name}");
            assert_eq!(Key::parse(name), Some(*key));
        }
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

    #[test]
    fn key_names_match_their_variants() {
        for name in FAULT_KEYS {
            assert_eq!(Key::parse(name).map(Key::name), Some(*name));
        }
    }
}
