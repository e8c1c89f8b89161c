//! The fields of a caller's request head that some part of Levee reads:
//! only these go into the request's header map.
//!
//! Putting a field into an `http::HeaderMap` costs ~500 instructions
//! (its name found, its value checked and shared, the map's slot hashed,
//! and all of it dropped again). The OpenAI and Anthropic SDKs send 16
//! fields with each request, of which eight (`accept-encoding` and seven
//! `x-stainless-*` descriptions of the SDK's platform) no part of Levee
//! reads and none is forwarded to a provider: those are left out of the
//! map. httparse has checked every field's bytes, so leaving one out never
//! lets through a head the map would have refused.
//!
//! [`levee_reads`] is the contract: every field name any part of Levee
//! reads in a caller's request (to authenticate, to take a deadline, a
//! caller name or an idempotency key, to forward to a provider, to trace)
//! must be listed here, or that part sees a request without it. A request
//! signed with SigV4 keeps every field: its signature may cover any of
//! them.

/// The scheme of a SigV4 `authorization` value (the space included).
pub(crate) const SIGV4_SCHEME: &str = "AWS4-HMAC-SHA256 ";

/// Prefixes of the names Levee reads: its own fields, the providers'
/// (forwarded to a provider of that dialect), and AWS's.
const READ_PREFIXES: [&[u8]; 4] = [b"x-levee-", b"anthropic-", b"openai-", b"x-amz-"];

/// The names Levee reads, by length (most names are ruled out by theirs):
/// the host (SigV4, the refusal of a head without one), the body's type and
/// length, the fields forwarded to providers (`accept`, `user-agent`, the
/// W3C trace context), the credentials (`authorization`, `x-api-key`,
/// Azure's `api-key`), the request id and idempotency key, the deadline
/// (`x-timeout-ms`, `x-deadline-ms` and the SDKs' own timeouts), the
/// SDK's retry count, and `expect`.
const READ_NAMES: [(usize, &[&[u8]]); 13] = [
    (4, &[b"host"]),
    (6, &[b"accept", b"expect"]),
    (7, &[b"api-key"]),
    (9, &[b"x-api-key"]),
    (10, &[b"user-agent", b"tracestate"]),
    (11, &[b"traceparent"]),
    (12, &[b"content-type", b"x-request-id", b"x-timeout-ms"]),
    (13, &[b"authorization", b"x-deadline-ms"]),
    (14, &[b"content-length"]),
    (15, &[b"idempotency-key"]),
    (19, &[b"x-stainless-timeout"]),
    (23, &[b"x-stainless-retry-count"]),
    (24, &[b"x-stainless-read-timeout"]),
];

/// Whether Levee reads the caller's field `name` (any case): such fields
/// go into the request's header map, all others are left out of it.
pub(crate) fn levee_reads(name: &[u8]) -> bool {
    let named = READ_NAMES
        .iter()
        .find(|(len, _)| *len == name.len())
        .is_some_and(|(_, names)| names.iter().any(|n| n.eq_ignore_ascii_case(name)));
    named
        || (matches!(name.first(), Some(b'x' | b'X' | b'a' | b'A' | b'o' | b'O'))
            && READ_PREFIXES
                .iter()
                .any(|p| name.len() >= p.len() && name[..p.len()].eq_ignore_ascii_case(p)))
}

/// Whether an `authorization` value is a SigV4 signature.
pub(crate) fn is_sigv4(value: &[u8]) -> bool {
    value.starts_with(SIGV4_SCHEME.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_levee_reads_is_kept_and_the_sdks_descriptions_are_not() {
        use levee_wire::headers;
        let read = [
            "Host",
            "content-type",
            "Content-Length",
            "accept",
            "user-agent",
            "traceparent",
            "tracestate",
            "authorization",
            "api-key",
            "expect",
            "x-levee-anything-new",
            "anthropic-beta",
            "openai-organization",
            "x-amz-date",
            crate::observe::census::CALLER_HEADER,
        ];
        for name in read {
            assert!(levee_reads(name.as_bytes()), "{name} must be kept");
        }
        for name in [
            headers::ANTHROPIC_VERSION,
            headers::IDEMPOTENCY_KEY,
            headers::X_TIMEOUT_MS,
            headers::X_DEADLINE_MS,
            headers::X_STAINLESS_RETRY_COUNT,
            headers::X_STAINLESS_TIMEOUT,
            headers::X_STAINLESS_READ_TIMEOUT,
            headers::X_API_KEY,
            headers::X_REQUEST_ID,
        ] {
            assert!(levee_reads(name.as_str().as_bytes()), "{name} must be kept");
        }
        let unread = [
            "accept-encoding",
            "x-stainless-lang",
            "x-stainless-package-version",
            "x-stainless-os",
            "x-stainless-arch",
            "x-stainless-runtime",
            "x-stainless-runtime-version",
            "x-stainless-async",
            "cookie",
            "x",
            "",
        ];
        for name in unread {
            assert!(!levee_reads(name.as_bytes()), "{name} is read by nothing");
        }
    }
}
