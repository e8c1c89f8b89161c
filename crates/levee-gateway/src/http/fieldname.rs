//! Header field names read off an HTTP/1.1 head, taken from a table of the
//! names model providers and their SDKs send on every exchange.
//!
//! `HeaderName::from_bytes` lowercases a name into a scratch buffer, matches
//! it against the standard names and, for any other name, copies it into a
//! fresh heap allocation that is freed with the head. An OpenAI chat
//! completion's answer carries 17 such names (`x-ratelimit-*`,
//! `openai-*`, `x-request-id`, `cf-ray`, ...) and an SDK's request a dozen
//! (`x-stainless-*`), at ~235 instructions plus a `malloc` and a `free`
//! each. A name found here costs ~130 instructions and is a clone of one
//! made once (no allocation; the standard ones are plain enum values):
//! 5 % fewer instructions for a whole request with OpenAI's answer head.
//! Any other name goes to `from_bytes` as before, so what the table holds
//! changes speed, never an answer.
//!
//! The match is ASCII case-insensitive, as field names are, and exact:
//! the table's names are lowercase `[a-z0-9-]` only, and a byte that
//! matches one of them with its `0x20` bit set is that character in either
//! case (the other bytes that would, `0x0D` for `-` and `0x10`–`0x19` for
//! the digits, are control bytes, refused by the `0x60` test).

use http::header::{HeaderName, InvalidHeaderName};
use std::sync::LazyLock;

/// The names, lowercase, besides the rate-limit fields providers send
/// ([`levee_wire::ratelimit::NAMES`], in the table too). Order does not
/// matter; the table sorts them.
const NAMES: &[&str] = &[
    // Standard names (no allocation either way; the table's match is
    // cheaper than `from_bytes`' lowercasing copy and lookup).
    "accept",
    "accept-encoding",
    "access-control-allow-origin",
    "access-control-expose-headers",
    "alt-svc",
    "authorization",
    "cache-control",
    "content-encoding",
    "content-length",
    "content-type",
    "date",
    "host",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "user-agent",
    "vary",
    "via",
    "x-content-type-options",
    // Sent by callers and their SDKs.
    "anthropic-beta",
    "anthropic-version",
    "idempotency-key",
    "openai-beta",
    "openai-organization",
    "openai-project",
    "traceparent",
    "tracestate",
    "x-api-key",
    "x-deadline-ms",
    "x-stainless-arch",
    "x-stainless-async",
    "x-stainless-lang",
    "x-stainless-os",
    "x-stainless-package-version",
    "x-stainless-read-timeout",
    "x-stainless-retry-count",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-timeout",
    "x-timeout-ms",
    // Sent back by OpenAI-compatible providers.
    "cf-cache-status",
    "cf-ray",
    "openai-processing-ms",
    "openai-version",
    "retry-after-ms",
    "x-envoy-upstream-service-time",
    "x-request-id",
    "x-should-retry",
    // Sent back by Anthropic.
    "anthropic-organization-id",
    "request-id",
];

/// Longest name in the table (a longer one is never looked up).
const LONGEST: usize = 48;

struct Table {
    /// The names, shortest first: the lowercase bytes (kept beside the
    /// name: a standard name's `as_str` is itself a lookup), their last
    /// eight bytes as `tail` makes them (a first test that tells most of
    /// one length apart: `x-ratelimit-*` share their first twelve), the name.
    names: Vec<(&'static [u8], u64, HeaderName)>,
    /// For each length, the range of `names` that long.
    by_len: [(u16, u16); LONGEST + 1],
}

/// Every name of the table.
fn all_names() -> impl Iterator<Item = &'static &'static str> {
    NAMES.iter().chain(levee_wire::ratelimit::NAMES.iter())
}

static TABLE: LazyLock<Table> = LazyLock::new(|| {
    let mut names: Vec<(&'static [u8], u64, HeaderName)> = all_names()
        .map(|n| (n.as_bytes(), tail(n.as_bytes()), HeaderName::from_static(n)))
        .collect();
    names.sort_by_key(|(n, _, _)| n.len());
    let mut by_len = [(0u16, 0u16); LONGEST + 1];
    for (i, (n, _, _)) in names.iter().enumerate() {
        // The names are constants, fewer than 2^16, each at most
        // `LONGEST` long (the tests check both).
        let slot = &mut by_len[n.len()];
        if slot.1 == 0 {
            slot.0 = i as u16;
        }
        slot.1 = i as u16 + 1;
    }
    Table { names, by_len }
});

/// The field name `raw` spells: a clone of the table's when it holds it,
/// else `HeaderName::from_bytes(raw)`. The two always agree.
pub(crate) fn field_name(raw: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    let table: &Table = &TABLE;
    if let Some(&(from, to)) = table.by_len.get(raw.len()) {
        if from < to {
            let last = tail(raw);
            for (known, known_last, name) in &table.names[usize::from(from)..usize::from(to)] {
                if last == *known_last && same_name(raw, known) {
                    return Ok(name.clone());
                }
            }
        }
    }
    HeaderName::from_bytes(raw)
}

const LOWER: u64 = 0x2020_2020_2020_2020;
const CASE_BITS: u64 = 0x6060_6060_6060_6060;
const BIT6: u64 = 0x4040_4040_4040_4040;

/// The last eight bytes (all of a shorter name, zero-padded) with each
/// byte's `0x20` bit set: equal for two spellings of one name.
fn tail(name: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = name.len();
    if n >= 8 {
        w.copy_from_slice(&name[n - 8..]);
    } else {
        w[..n].copy_from_slice(name);
    }
    u64::from_le_bytes(w) | LOWER
}

/// `raw` is `known` (same length, lowercase `[a-z0-9-]`) in any case:
/// eight bytes a step, the last step overlapping the one before it.
pub(crate) fn same_name(raw: &[u8], known: &[u8]) -> bool {
    let n = raw.len();
    if n != known.len() {
        return false;
    }
    if n < 8 {
        return raw
            .iter()
            .zip(known)
            .all(|(&b, &c)| b | 0x20 == c && b & 0x60 != 0);
    }
    let mut at = 0;
    loop {
        let (r, k) = (word(&raw[at..at + 8]), word(&known[at..at + 8]));
        // Every byte has its 0x20 or 0x40 bit: shifting the 0x20 bit onto
        // the 0x40 bit stays within the byte.
        let case = r & CASE_BITS;
        if r | LOWER != k || (case | (case << 1)) & BIT6 != BIT6 {
            return false;
        }
        if at + 8 == n {
            return true;
        }
        at = (at + 8).min(n - 8);
    }
}

fn word(eight: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(eight);
    u64::from_le_bytes(w)
}

/// Whether `name` begins with `prefix` (lowercase `[a-z0-9-]`) in any case.
pub(crate) fn has_prefix(name: &[u8], prefix: &[u8]) -> bool {
    name.len() >= prefix.len() && same_name(&name[..prefix.len()], prefix)
}

/// Spellings near `names`, for checking a name lookup against a plainer
/// one: each of up to two bytes may be changed case, swapped for any byte,
/// have its case bit flipped, be dropped, or have a byte added before it.
#[cfg(test)]
pub(crate) fn spellings_near(
    names: Vec<Vec<u8>>,
) -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        0..names.len(),
        proptest::collection::vec((0usize..64, 0u8..5, any::<u8>()), 0..3),
    )
        .prop_map(move |(i, edits)| {
            let mut v = names[i].clone();
            for (at, how, byte) in edits {
                if v.is_empty() {
                    break;
                }
                let at = at % v.len();
                match how {
                    0 => v[at] = v[at].to_ascii_uppercase(),
                    1 => v[at] = byte,
                    2 => v[at] ^= 0x20,
                    3 => {
                        v.remove(at);
                    }
                    _ => v.insert(at, byte),
                }
            }
            v
        })
}

/// Checks the name lookup `lookup` against the plain list it stands for
/// (the names `read`, and any name starting with one of `prefixes`, in any
/// case) on 4,000 spellings near those names, each prefix with a name
/// after it, and the names `unread` (a fixed seed: the same cases every
/// run).
#[cfg(test)]
pub(crate) fn agrees_near(
    lookup: impl Fn(&[u8]) -> bool,
    read: &[&[u8]],
    prefixes: &[&[u8]],
    unread: &[&[u8]],
) {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let plain = |raw: &[u8]| {
        let n = raw.to_ascii_lowercase();
        read.contains(&n.as_slice()) || prefixes.iter().any(|p| n.starts_with(p))
    };
    let near = read
        .iter()
        .chain(unread)
        .map(|n| n.to_vec())
        .chain(prefixes.iter().map(|p| [*p, b"limit-x"].concat()))
        .collect();
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(Config::with_cases(4000), rng);
    let checked = runner.run(&spellings_near(near), |raw| {
        proptest::prop_assert_eq!(lookup(&raw), plain(&raw), "{:?}", raw);
        Ok(())
    });
    if let Err(e) = checked {
        panic!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_table_is_lowercase_short_and_unique() {
        let mut seen = std::collections::HashSet::new();
        for n in all_names() {
            assert!(
                n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{n}: the case-insensitive match holds for [a-z0-9-] only"
            );
            assert!(n.len() <= LONGEST, "{n} is longer than LONGEST");
            assert!(seen.insert(*n), "{n} twice");
        }
        assert!(all_names().count() < usize::from(u16::MAX));
    }

    /// Every name of the table is found there, in any case, and what comes
    /// back is the table's own value (a lookup that always fell through to
    /// `from_bytes` would give equal names and fail here).
    #[test]
    fn every_name_is_found_in_the_table_in_any_case() {
        for n in all_names() {
            let upper = n.to_ascii_uppercase();
            let title: String = n
                .split('-')
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>()
                .join("-");
            for spelling in [n.to_string(), upper, title] {
                let got = field_name(spelling.as_bytes()).expect("a valid name");
                assert_eq!(got.as_str(), *n);
                assert!(
                    std::ptr::eq(got.as_str().as_ptr(), table_entry(n).as_str().as_ptr()),
                    "{spelling} was not taken from the table"
                );
            }
        }
    }

    fn table_entry(n: &str) -> &'static HeaderName {
        TABLE
            .names
            .iter()
            .find(|(k, _, _)| *k == n.as_bytes())
            .map(|(_, _, v)| v)
            .expect("in the table")
    }

    #[test]
    fn near_misses_and_control_bytes_are_not_table_names() {
        // A control byte whose 0x20 bit makes it `-` or a digit.
        assert!(field_name(b"x\x0dapi-key").is_err());
        assert!(field_name(b"cf\x0dray").is_err());
        assert!(field_name(b"x-timeout-m\x13").is_err());
        // One letter off a table name: a name of its own.
        assert_eq!(
            field_name(b"X-Api-Kez").map(|n| n.to_string()).ok(),
            Some("x-api-kez".to_string())
        );
        assert_eq!(
            field_name(b"X-Custom-Thing").map(|n| n.to_string()).ok(),
            Some("x-custom-thing".to_string())
        );
        assert!(field_name(b"").is_err());
    }

    /// Spellings near the table's names.
    fn spelling() -> impl Strategy<Value = Vec<u8>> {
        spellings_near(all_names().map(|n| n.as_bytes().to_vec()).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// The table changes speed, never an answer.
        #[test]
        fn the_table_answers_what_from_bytes_answers(raw in spelling()) {
            let ours = field_name(&raw).map(|n| n.as_str().to_string()).ok();
            let theirs = HeaderName::from_bytes(&raw).map(|n| n.as_str().to_string()).ok();
            prop_assert_eq!(ours, theirs);
        }
    }
}
