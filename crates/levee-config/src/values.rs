//! Single values that check themselves while the YAML is read, so a bad one
//! is reported with the line and column the parser is at (a check made after
//! parsing would only know the enclosing block). Each refusal says what to
//! write instead.

use crate::redis_url::check_redis_url;
use serde::de::{self, Deserializer, Visitor};
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;

/// Reads a string with `parse`, failing at the string's own position.
fn parse_str<'de, D, T>(
    d: D,
    expecting: &'static str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    struct V<F, T>(&'static str, F, PhantomData<T>);
    impl<F: FnOnce(&str) -> Result<T, String>, T> Visitor<'_> for V<F, T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            (self.1)(v).map_err(E::custom)
        }
    }
    d.deserialize_str(V(expecting, parse, PhantomData))
}

/// Reads one of a few words, failing at the word's own position.
pub(crate) fn one_of<'de, D, T>(
    d: D,
    key: &'static str,
    words: &'static [(&'static str, T)],
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Copy,
{
    parse_str(d, "one of a few words", |s| {
        words
            .iter()
            .find(|(w, _)| *w == s)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                let listed: Vec<String> = words.iter().map(|(w, _)| format!("`{w}`")).collect();
                format!("`{key}` must be {} (got `{s}`)", listed.join(" or "))
            })
    })
}

/// `Deserialize` for an enum written as one of a few words.
macro_rules! from_words {
    ($ty:ty, $key:literal, [$(($word:literal, $variant:expr)),+ $(,)?]) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                one_of(d, $key, &[$(($word, $variant)),+])
            }
        }
    };
}

/// A listen address such as `127.0.0.1:8080`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenAddr(pub SocketAddr);

impl<'de> serde::Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, "a listen address like `127.0.0.1:8080`", |s| {
            s.parse().map(ListenAddr).map_err(|_| {
                format!("`{s}` is not a listen address: write it like `127.0.0.1:8080`")
            })
        })
    }
}

/// A provider's wire dialect: the paths and bodies it is sent, and how its
/// key is sent by default. The wire crate's own [`levee_wire::Dialect`].
pub use levee_wire::Dialect as Api;

/// A caller's `share`: a positive weight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share(pub f64);

impl<'de> serde::Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v.is_finite() && v > 0.0 && v <= 1e6 {
            Ok(Share(v))
        } else {
            Err(de::Error::custom(format!(
                "`share` must be a positive weight like `1` or `2.5` (got `{v}`)"
            )))
        }
    }
}

/// A budget's `per`: the UTC calendar period it runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetPer(pub levee_policy::spend::Period);

from_words!(
    BudgetPer,
    "per",
    [
        ("day", BudgetPer(levee_policy::spend::Period::Day)),
        ("week", BudgetPer(levee_policy::spend::Period::Week)),
        ("month", BudgetPer(levee_policy::spend::Period::Month)),
    ]
);

/// A caller's `priority`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallerPriority(pub levee_policy::allowance::Priority);

from_words!(
    CallerPriority,
    "priority",
    [
        (
            "high",
            CallerPriority(levee_policy::allowance::Priority::High)
        ),
        (
            "normal",
            CallerPriority(levee_policy::allowance::Priority::Normal)
        ),
        (
            "low",
            CallerPriority(levee_policy::allowance::Priority::Low)
        ),
    ]
);

/// A provider's `http2`: which HTTP version Levee speaks to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Http2 {
    /// On https, offer `h2` and `http/1.1` by ALPN and speak what the
    /// provider picks; HTTP/1.1 on plain http.
    #[default]
    Auto,
    /// HTTP/2 only: `h2` by ALPN on https, prior knowledge (h2c) on plain
    /// http — for local servers that speak it.
    Always,
    /// HTTP/1.1 only.
    Never,
}

from_words!(
    Http2,
    "http2",
    [
        ("auto", Http2::Auto),
        ("always", Http2::Always),
        ("never", Http2::Never)
    ]
);

/// An http(s) base URL: `scheme://authority` plus an optional path prefix,
/// kept without a trailing slash.
#[derive(Clone, Debug)]
pub struct BaseUrl(pub http::Uri);

impl<'de> serde::Deserialize<'de> for BaseUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, "an http(s) URL", |s| {
            s.trim_end_matches('/')
                .parse::<http::Uri>()
                .ok()
                .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some())
                .map(BaseUrl)
                .ok_or_else(|| format!("`base_url` must be an http(s) URL like `https://api.anthropic.com` (got `{s}`)"))
        })
    }
}

/// A count that must be at least 1 (`0` would switch the thing off, which
/// no setting means: leave the key out for the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtLeastOne<T>(pub T);

impl<'de, T: TryFrom<u64>> serde::Deserialize<'de> for AtLeastOne<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<T: TryFrom<u64>> Visitor<'_> for V<T> {
            type Value = AtLeastOne<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of at least 1")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                if v == 0 {
                    return Err(E::custom(
                        "must be at least 1 (leave the key out for the default)",
                    ));
                }
                T::try_from(v)
                    .map(AtLeastOne)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("must be at least 1 (got {v})"))),
                }
            }
        }
        d.deserialize_u64(V(PhantomData))
    }
}

/// The sha256 of a caller's key, decoded once here from its 64 hex digits
/// (either case) so nothing downstream handles hex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sha256Digest(pub [u8; 32]);

impl<'de> serde::Deserialize<'de> for Sha256Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, "64 hex digits", |s| {
            let mut digest = [0u8; 32];
            hex::decode_to_slice(s.trim(), &mut digest)
                .map(|()| Sha256Digest(digest))
                .map_err(|e| format!("`sha256` must be 64 hex digits, the sha256 of the caller's key ({e}); make one with `printf %s \"$KEY\" | sha256sum`"))
        })
    }
}

/// `state.backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendKind {
    #[default]
    Memory,
    Redis,
}

from_words!(
    BackendKind,
    "state.backend",
    [
        ("memory", BackendKind::Memory),
        ("redis", BackendKind::Redis)
    ]
);

/// What a keyed request does when the shared store cannot be consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnUnavailable {
    /// Run it on this replica's local store (answered with
    /// `x-levee-idempotency: local`).
    #[default]
    Local,
    /// Refuse it: 503, `x-levee-reason: state_unavailable`, never sent.
    Refuse,
}

from_words!(
    OnUnavailable,
    "state.on_unavailable",
    [
        ("local", OnUnavailable::Local),
        ("refuse", OnUnavailable::Refuse)
    ]
);

/// What a route does with a request one of its targets cannot carry (a
/// parameter the target's dialect has no way to say).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnUntranslatable {
    /// Pass the target over for the next one that can carry it.
    #[default]
    Skip,
    /// Answer 400, naming the parameter and the target.
    Fail,
    /// Send the request without the parameters the target cannot carry,
    /// and say which (`x-levee-dropped-params`, the log's `dropped_params`).
    Drop,
}

from_words!(
    OnUntranslatable,
    "on_untranslatable",
    [
        ("skip", OnUntranslatable::Skip),
        ("fail", OnUntranslatable::Fail),
        ("drop", OnUntranslatable::Drop)
    ]
);

/// How a balanced group picks the member a request tries first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BalanceStrategy(pub levee_policy::planner::balance::Strategy);

from_words!(
    BalanceStrategy,
    "strategy",
    [
        (
            "weighted_random",
            BalanceStrategy(levee_policy::planner::balance::Strategy::WeightedRandom)
        ),
        (
            "least_in_flight",
            BalanceStrategy(levee_policy::planner::balance::Strategy::LeastInFlight)
        )
    ]
);

/// A checked Redis URL (see [`check_redis_url`]); errors show it redacted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisUrl(pub String);

impl<'de> serde::Deserialize<'de> for RedisUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, "a Redis URL", |s| {
            check_redis_url(s)
                .map(|()| RedisUrl(s.to_string()))
                .map_err(|e| e.to_string())
        })
    }
}

/// An OTLP/HTTP collector address, `http(s)://host[:port]`, no path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpEndpoint(pub String);

impl<'de> serde::Deserialize<'de> for OtlpEndpoint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, "an OTLP/HTTP address", |s| {
            let endpoint = s.trim_end_matches('/');
            endpoint
                .parse::<http::Uri>()
                .ok()
                .filter(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
                .filter(|u| u.path() == "/" || u.path().is_empty())
                .map(|_| OtlpEndpoint(endpoint.to_string()))
                .ok_or_else(|| format!("`telemetry.otlp_endpoint` must be a collector's OTLP/HTTP address like `http://127.0.0.1:4318`, without a path (got `{endpoint}`); spans go to its /v1/traces"))
        })
    }
}

/// A value written in the config (`"2024-10-21"`) or read from an
/// environment variable when the gateway starts (`{ env: VAR }`), for a
/// provider's extra header fields and query parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueSource {
    Text(String),
    Env(String),
}

impl<'de> serde::Deserialize<'de> for ValueSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ValueSource;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, or `{ env: VARIABLE }` to read it from the environment")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ValueSource, E> {
                Ok(ValueSource::Text(v.to_string()))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<ValueSource, A::Error> {
                let mut var = None;
                while let Some(key) = m.next_key::<String>()? {
                    if key != "env" || var.is_some() {
                        return Err(de::Error::custom(format!(
                            "unexpected `{key}`: write a string, or `{{ env: VARIABLE }}`"
                        )));
                    }
                    var = Some(m.next_value::<String>()?);
                }
                var.map(ValueSource::Env)
                    .ok_or_else(|| de::Error::custom("`{ env: VARIABLE }` needs `env`"))
            }
        }
        d.deserialize_any(V)
    }
}

/// How a provider's key is sent: `bearer` (`authorization: Bearer KEY`),
/// `header NAME` (`NAME: KEY`, e.g. Azure's `header api-key`), or `none`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    Bearer,
    Header(String),
    None,
}

impl<'de> serde::Deserialize<'de> for Auth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, "`bearer`, `header NAME` or `none`", |s| {
            let s = s.trim();
            let token = |n: &str| {
                !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            };
            match s.split_once(char::is_whitespace) {
                None if s == "bearer" => Ok(Auth::Bearer),
                None if s == "none" => Ok(Auth::None),
                Some(("header", name)) if token(name.trim()) => {
                    Ok(Auth::Header(name.trim().to_ascii_lowercase()))
                }
                _ => Err(format!(
                    "`auth` must be `bearer`, `header NAME` (e.g. `header api-key`) or `none` (got `{s}`)"
                )),
            }
        })
    }
}
