//! The handler's unit tests: a caller's digest, and the one-pass read of
//! what a caller said.

use super::*;

use http::header::HeaderName;

/// The digest made late is the one made at once: the `x-api-key`
/// value, else the `authorization` token, else all zero; and a caller
/// not checked against gateway keys has none of them.
#[test]
fn a_callers_digest_made_when_needed_is_the_credentials_digest() {
    type Case = (&'static [(&'static str, &'static str)], &'static [u8]);
    let cases: [Case; 6] = [
        (&[], b""),
        (&[("x-api-key", "k1")], b"k1"),
        (&[("authorization", "Bearer k2")], b"k2"),
        (&[("authorization", "bearer   k2")], b"k2"),
        (&[("authorization", "Basic k3")], b"Basic k3"),
        (
            &[("authorization", "Bearer k2"), ("x-api-key", "k1")],
            b"k1",
        ),
    ];
    for (fields, token) in cases {
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
        }
        let caller = Caller::Presented(Said::of(&h).credentials());
        let want: [u8; 32] = if token.is_empty() {
            [0; 32]
        } else {
            Sha256::digest(token).into()
        };
        assert_eq!(caller.digest(), want, "{fields:?}");
        assert_eq!(caller.key_index(&[want]), None, "{fields:?}");
        assert_eq!(Caller::Checked(want).key_index(&[[9; 32], want]), Some(1));
    }
}

#[test]
fn the_one_pass_reads_each_field_as_a_lookup_would() {
    let mut h = HeaderMap::new();
    let fields = [
        (headers::X_API_KEY, "k1"),
        (http::header::AUTHORIZATION, "Bearer k2"),
        (headers::IDEMPOTENCY_KEY, "idem"),
        (headers::X_STAINLESS_RETRY_COUNT, "2"),
        (headers::X_STAINLESS_TIMEOUT, "60"),
        (headers::X_STAINLESS_READ_TIMEOUT, "30"),
        (headers::X_TIMEOUT_MS, "5000"),
        (headers::X_DEADLINE_MS, "1700000000000"),
        (
            HeaderName::from_static(crate::observe::census::CALLER_HEADER),
            "billing",
        ),
    ];
    for (name, value) in &fields {
        h.append(name.clone(), HeaderValue::from_static(value));
        // A repeated field: the first value counts, as with `get`.
        h.append(name.clone(), HeaderValue::from_static("second"));
    }
    h.append("x-other", HeaderValue::from_static("ignored"));
    let said = Said::of(&h);
    let read = [
        said.api_key,
        said.authorization,
        said.idempotency_key,
        said.stainless_retry_count,
        said.stainless_timeout,
        said.stainless_read_timeout,
        said.timeout_ms,
        said.deadline_ms,
        said.caller,
    ];
    for ((name, _), got) in fields.iter().zip(read) {
        assert_eq!(got, h.get(name), "{name}");
    }
    let empty = HeaderMap::new();
    let none = Said::of(&empty);
    assert!(none.api_key.is_none() && none.caller.is_none());
}
