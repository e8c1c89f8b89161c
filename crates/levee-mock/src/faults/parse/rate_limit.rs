//! `rate_limit: { requests_per_minute: N, tokens_per_minute: N,
//! input_tokens_per_minute: N, output_tokens_per_minute: N,
//! request_burst: N }`: the mock's own limits (see `crate::ratelimit`),
//! each a whole number above 0, at least one limit given (`request_burst`,
//! the requests bucket's size, only with `requests_per_minute`).

use serde::de::{self, MapAccess};

use super::scalars::scalar;
use super::{FromMap, KeySeed};
use crate::ratelimit::RateLimit;

/// The keys, in `RateLimit`'s field order.
const KEYS: &[&str] = &[
    "requests_per_minute",
    "tokens_per_minute",
    "input_tokens_per_minute",
    "output_tokens_per_minute",
    "request_burst",
];

impl FromMap for RateLimit {
    const EXPECTING: &'static str =
        "`rate_limit: { requests_per_minute: 60, tokens_per_minute: 40000 }`";

    fn from_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<RateLimit, A::Error> {
        fn parse(name: &str) -> Option<usize> {
            KEYS.iter().position(|k| *k == name)
        }
        let keys = KeySeed { parse, known: KEYS };
        let mut limit = RateLimit::default();
        while let Some(i) = map.next_key_seed(keys)? {
            let key = KEYS[i];
            let slot = match i {
                0 => &mut limit.requests_per_minute,
                1 => &mut limit.tokens_per_minute,
                2 => &mut limit.input_tokens_per_minute,
                3 => &mut limit.output_tokens_per_minute,
                _ => &mut limit.request_burst,
            };
            if slot.is_some() {
                return Err(de::Error::custom(format_args!(
                    "`{key}` is given twice in `rate_limit`"
                )));
            }
            let value = map.next_value_seed(scalar(
                key,
                "a whole number per minute above 0, like `600`",
                |s| s.as_u64().filter(|n| *n > 0),
            ))?;
            *slot = Some(value);
        }
        if limit.request_burst.is_some() && limit.requests_per_minute.is_none() {
            return Err(de::Error::custom(
                "`request_burst` is the requests bucket's size: it goes with `requests_per_minute`",
            ));
        }
        if limit == RateLimit::default() {
            return Err(de::Error::custom(
                "`rate_limit` needs at least one of `requests_per_minute`, `tokens_per_minute`, \
                 `input_tokens_per_minute`, `output_tokens_per_minute`",
            ));
        }
        Ok(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::err;
    use crate::faults::parse_faults;

    #[test]
    fn limits_parse_in_yaml_and_json() {
        let set =
            parse_faults("rate_limit: { requests_per_minute: 60, tokens_per_minute: 40000 }\n")
                .unwrap();
        assert_eq!(
            set.rate_limits(),
            Some([Some(60), Some(40_000), None, None])
        );
        assert!(!set.is_empty());
        let set = parse_faults(
            r#"{"rate_limit":{"input_tokens_per_minute":400000,"output_tokens_per_minute":80000}}"#,
        )
        .unwrap();
        assert_eq!(
            set.rate_limits(),
            Some([None, None, Some(400_000), Some(80_000)])
        );
        assert_eq!(parse_faults("faults: []\n").unwrap().rate_limits(), None);
    }

    #[test]
    fn bad_limits_name_the_key_and_the_line() {
        for (doc, line, says) in [
            (
                "faults: []\nrate_limit:\n  requests_per_minute: 60\n  tokens_per_min: 5\n",
                4,
                "unknown field `tokens_per_min`, expected one of `requests_per_minute`",
            ),
            (
                "rate_limit:\n  requests_per_minute: 60\n  tokens_per_minute: 0\n",
                3,
                "`tokens_per_minute` must be a whole number per minute above 0, like `600` (got integer `0`)",
            ),
            (
                "rate_limit: { requests_per_minute: 60/min }\n",
                1,
                "`requests_per_minute` must be a whole number per minute above 0",
            ),
            (
                "rate_limit: { output_tokens_per_minute: 1.5 }\n",
                1,
                "`output_tokens_per_minute` must be a whole number",
            ),
            (
                "faults: []\nrate_limit: {}\n",
                2,
                "`rate_limit` needs at least one of `requests_per_minute`",
            ),
            (
                "rate_limit: 60\n",
                1,
                "expected `rate_limit: { requests_per_minute: 60, tokens_per_minute: 40000 }`",
            ),
        ] {
            let e = err(doc);
            assert_eq!(e.line(), Some(line), "{doc}: {e}");
            assert!(e.message().contains(says), "{doc}: {e}");
        }
        let e = err("rate_limit: { requests_per_minute: 6, requests_per_minute: 7 }\n");
        assert_eq!(e.line(), Some(1), "{e}");
        assert!(e.message().contains("requests_per_minute"), "{e}");
    }
}
