//! The fault document's scalar values (durations, whole numbers, statuses,
//! flags, strings, probabilities), each read and checked inside its visitor
//! so that a complaint names the key and carries the value's own line.

use std::fmt;
use std::time::Duration;

use http::StatusCode;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

use crate::duration::parse_duration;

/// A scalar as the visitors see it, for uniform error messages.
pub(super) enum Scalar<'a> {
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

    pub(super) fn as_u64(&self) -> Option<u64> {
        match *self {
            Scalar::Int(i) => u64::try_from(i).ok(),
            _ => None,
        }
    }
}

/// Reads one scalar and validates it inside the visitor, so a failure carries
/// the scalar's own line. `what` completes "`key` must be ...".
pub(super) struct ScalarSeed<F> {
    key: &'static str,
    what: &'static str,
    check: F,
}

pub(super) fn scalar<T, F>(key: &'static str, what: &'static str, check: F) -> ScalarSeed<F>
where
    F: FnOnce(&Scalar<'_>) -> Option<T>,
{
    ScalarSeed { key, what, check }
}

pub(super) fn must_be<E: de::Error>(key: &str, what: &str, got: Unexpected<'_>) -> E {
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

pub(super) fn duration(key: &'static str) -> impl for<'de> DeserializeSeed<'de, Value = Duration> {
    scalar(key, DURATION, |s| match s {
        Scalar::Str(text) => parse_duration(text),
        Scalar::Int(0) => Some(Duration::ZERO),
        _ => None,
    })
}

pub(super) fn whole_number(
    key: &'static str,
    what: &'static str,
) -> impl for<'de> DeserializeSeed<'de, Value = u64> {
    scalar(key, what, |s| s.as_u64())
}

pub(super) fn error_status(
    key: &'static str,
) -> impl for<'de> DeserializeSeed<'de, Value = StatusCode> {
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

pub(super) fn flag_true(key: &'static str) -> impl for<'de> DeserializeSeed<'de, Value = ()> {
    scalar(key, "`true` (to turn the fault off, delete it)", |s| {
        matches!(s, Scalar::Bool(true)).then_some(())
    })
}

pub(super) fn text(key: &'static str) -> impl for<'de> DeserializeSeed<'de, Value = String> {
    scalar(key, "a non-empty string", |s| match s {
        Scalar::Str(t) if !t.is_empty() => Some((*t).to_owned()),
        _ => None,
    })
}

pub(super) fn probability() -> impl for<'de> DeserializeSeed<'de, Value = f64> {
    scalar("probability", "a number from 0 to 1, like `0.05`", |s| {
        let p = match *s {
            Scalar::Float(f) => f,
            Scalar::Int(i @ 0..=1) => i as f64,
            _ => return None,
        };
        (0.0..=1.0).contains(&p).then_some(p)
    })
}
