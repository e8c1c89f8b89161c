//! One fault of the document (`faults: [...]`): its keys, each read once,
//! the one effect it must have, and its `latency` (fixed or a distribution).

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use http::StatusCode;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};

use super::scalars::{duration, error_status, flag_true, must_be, probability, text, whole_number};
use super::{FromMap, KeySeed};
use crate::duration::parse_duration;
use crate::faults::{Effect, ErrorSpec, Fault, Hole, Latency, ModelMatch};

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
    Blackhole,
    SynBlackhole,
}

/// Each key with its name, in `Key`'s order.
const KEYS: [(Key, &str); 14] = [
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
    (Key::Blackhole, "blackhole"),
    (Key::SynBlackhole, "syn_blackhole"),
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
                Key::Blackhole => {
                    map.next_value_seed(flag_true("blackhole"))?;
                    b.blackhole = true;
                }
                Key::SynBlackhole => {
                    map.next_value_seed(flag_true("syn_blackhole"))?;
                    b.syn_blackhole = true;
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
    blackhole: bool,
    syn_blackhole: bool,
    latency: Option<Latency>,
    chunk_delay: Option<Duration>,
    cut_stream_after: Option<u32>,
}

impl FaultBuilder {
    /// A `blackhole` is the whole host's: no probability, no model.
    fn whole_host(&self, key: &str) -> Result<(), String> {
        match self.probability.is_some() || self.model.is_some() {
            true => Err(format!(
                "`{key}` takes the whole host off the network: it goes with `from` and `to` only"
            )),
            false => Ok(()),
        }
    }

    /// The host-wide effects asked for (`blackhole`, `syn_blackhole`).
    fn holes(&self, effects: &mut Vec<(&str, Effect)>) -> Result<(), String> {
        for (asked, key, hole) in [
            (self.blackhole, "blackhole", Hole::Held),
            (self.syn_blackhole, "syn_blackhole", Hole::Syn),
        ] {
            if asked {
                self.whole_host(key)?;
                effects.push((key, Effect::Blackhole(hole)));
            }
        }
        Ok(())
    }

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
        self.holes(&mut effects)?;
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
                "a fault needs one effect: `status`, `reset`, `stall`, `blackhole`, \
                        `syn_blackhole`, `latency`, `chunk_delay` or `cut_stream_after`"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_names_itself() {
        for (i, (key, name)) in KEYS.iter().enumerate() {
            assert_eq!(*key as usize, i, "{name}");
            assert_eq!(Key::parse(name), Some(*key));
        }
    }

    #[test]
    fn key_names_match_their_variants() {
        for name in FAULT_KEYS {
            assert_eq!(Key::parse(name).map(Key::name), Some(*name));
        }
    }
}
