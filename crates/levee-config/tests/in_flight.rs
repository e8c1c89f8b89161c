//! The provider in-flight cap when the config does not set one: derived from
//! the provider's allowance and the longest attempt its routes expect
//! (Little's law: in flight = arrival rate × time each one takes).

use levee_config::{Config, InFlightCap};
use std::time::Duration;

fn provider_cap(yaml: &str) -> (u32, InFlightCap) {
    let c = Config::parse(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let p = &c.providers[0];
    (p.max_in_flight, p.max_in_flight_from)
}

#[test]
fn the_default_cap_holds_what_the_allowance_lets_in_at_the_expected_attempt_time() {
    // 3,000 requests a minute is 50 a second; at 6 s each that is 300 in
    // flight while healthy. A cap of 256 refused 14 % of that traffic.
    let (cap, from) = provider_cap(
        "providers:\n  p: { api: openai, base_url: http://127.0.0.1:1, rate_limit: { requests_per_minute: 3000 } }\nroutes:\n  - targets: [p]\n    expected_attempt_ms: 6000\n",
    );
    assert!(cap >= 300, "cap {cap} sheds healthy traffic");
    assert_eq!(cap, 300 + 50, "rate × expected attempt + the burst");
    assert_eq!(
        from,
        InFlightCap::Derived {
            requests_per_minute: 3000,
            burst: 50,
            expected_attempt: Duration::from_secs(6)
        }
    );
}

#[test]
fn the_longest_expected_attempt_on_the_provider_sizes_its_cap() {
    // `b` is a 20 s fallback on one route and a 2 s primary on another.
    let c = Config::parse(
        "providers:\n  a: { api: openai, base_url: http://127.0.0.1:1 }\n  b: { api: openai, base_url: http://127.0.0.1:2, rate_limit: { requests_per_minute: 600, burst: 10 } }\nroutes:\n  - match: { model_prefix: \"x/\" }\n    targets:\n      - { provider: a, expected_attempt_ms: 1000 }\n      - { provider: b, expected_attempt_ms: 20000 }\n  - match: { model_prefix: \"y/\" }\n    targets: [b]\n    expected_attempt_ms: 2000\n",
    )
    .unwrap();
    let b = c.providers.iter().find(|p| p.name == "b").unwrap();
    assert_eq!(b.max_in_flight, 10 * 20 + 10);
}

#[test]
fn without_an_allowance_a_provider_has_no_cap_of_its_own() {
    let (cap, from) = provider_cap(
        "providers:\n  p: { api: openai, base_url: http://127.0.0.1:1 }\nroutes:\n  - targets: [p]\n",
    );
    assert_eq!(from, InFlightCap::None);
    assert_eq!(cap, u32::MAX, "bounded by the routes' bulkheads only");
}

#[test]
fn a_configured_cap_is_kept_as_written() {
    let (cap, from) = provider_cap(
        "providers:\n  p: { api: openai, base_url: http://127.0.0.1:1, max_in_flight: 40, rate_limit: { requests_per_minute: 3000 } }\nroutes:\n  - targets: [p]\n",
    );
    assert_eq!((cap, from), (40, InFlightCap::Configured));
}
