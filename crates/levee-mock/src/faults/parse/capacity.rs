//! `capacity: { max_in_flight: N, status: S, retry_after: N,
//! retry_after_ms: N }`: how many requests the mock serves at once, and the
//! error beyond that (503 unless `status` says otherwise).

use http::StatusCode;
use serde::de::{self, MapAccess};

use super::scalars::{error_status, whole_number};
use super::{FromMap, KeySeed};
use crate::faults::{Capacity, ErrorSpec};

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
