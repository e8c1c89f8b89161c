//! The fields of a caller's request head that some part of Levee reads:
//! only these go into the request's header map.
//!
//! Putting a field into an `http::HeaderMap` costs ~500 instructions
//! (its name found, its value checked and shared, the map's slot hashed,
//! and all of it dropped again). OpenAI's Python SDK sends 17 fields with a
//! chat request, of which eight (`accept-encoding` and seven
//! `x-stainless-*` descriptions of the SDK's platform) no part of Levee
//! reads and none is forwarded to a provider: those are left out of the
//! map, and so is `content-length`, which the body carries as its framing
//! (and `connection`, which the connection reads itself). httparse has
//! checked every field's bytes, so leaving one out never lets through a
//! head the map would have refused.
//!
//! [`levee_reads`] is the contract: every field name any part of Levee
//! reads in a caller's request (to authenticate, to take a deadline, a
//! caller name or an idempotency key, to forward to a provider, to trace)
//! must be listed here, or that part sees a request without it. A request
//! signed with SigV4 keeps every field: its signature may cover any of
//! them.

use crate::http::fieldname::{has_prefix, same_name};

/// The scheme of a SigV4 `authorization` value (the space included).
pub(crate) const SIGV4_SCHEME: &str = "AWS4-HMAC-SHA256 ";

/// Prefixes of the names Levee reads: its own fields, the providers'
/// (forwarded to a provider of that dialect), and AWS's.
const READ_PREFIXES: [&[u8]; 4] = [b"x-levee-", b"anthropic-", b"openai-", b"x-amz-"];

/// Whether Levee reads the caller's field `name` (any case): such fields
/// go into the request's header map, all others are left out of it.
///
/// The names read, each told from the others by its length and first
/// letter: the body's type, the fields forwarded to providers (`accept`, `user-agent`, the W3C
/// trace context), the credentials (`authorization`, `x-api-key`, Azure's
/// `api-key`), the request id and idempotency key, the deadline
/// (`x-timeout-ms`, `x-deadline-ms` and the SDKs' own timeouts), the SDK's
/// retry count, and `expect`. Not `content-length`: the body's declared
/// length travels as its framing (its exact size hint), where the gateway
/// reads it to refuse a body over its limit before reading it. Not `host`:
/// the front refuses a head without one as it parses, and only SigV4 reads
/// its value, from a signed request, which keeps every field. One
/// comparison a field, eight bytes a step (~200 instructions a field with
/// a byte-by-byte scan of a list). The tests hold the same names as a
/// plain list and check that the two answer alike: a name is added to both.
pub(crate) fn levee_reads(name: &[u8]) -> bool {
    let Some(&first) = name.first() else {
        return false;
    };
    let named: &[u8] = match (name.len(), first | 0x20) {
        (6, b'a') => b"accept",
        (6, b'e') => b"expect",
        (7, b'a') => b"api-key",
        (9, b'x') => b"x-api-key",
        (10, b'u') => b"user-agent",
        (10, b't') => b"tracestate",
        (11, b't') => b"traceparent",
        (12, b'c') => b"content-type",
        (12, b'x') if name[2] | 0x20 == b'r' => b"x-request-id",
        (12, b'x') => b"x-timeout-ms",
        (13, b'a') => b"authorization",
        (13, b'x') => b"x-deadline-ms",
        (15, b'i') => b"idempotency-key",
        (19, b'x') => b"x-stainless-timeout",
        (23, b'x') => b"x-stainless-retry-count",
        (24, b'x') => b"x-stainless-read-timeout",
        _ => b"",
    };
    same_name(name, named)
        || (matches!(first | 0x20, b'x' | b'a' | b'o')
            && READ_PREFIXES.iter().any(|p| has_prefix(name, p)))
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
            "content-type",
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
            "content-length",
            "Host",
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

    /// The names read, as a plain list: what [`levee_reads`] must answer.
    const READ: [&[u8]; 16] = [
        b"accept",
        b"expect",
        b"api-key",
        b"x-api-key",
        b"user-agent",
        b"tracestate",
        b"traceparent",
        b"content-type",
        b"x-request-id",
        b"x-timeout-ms",
        b"authorization",
        b"x-deadline-ms",
        b"idempotency-key",
        b"x-stainless-timeout",
        b"x-stainless-retry-count",
        b"x-stainless-read-timeout",
    ];

    /// The one-comparison lookup answers as the plain list does.
    #[test]
    fn the_lookup_answers_as_the_list_does() {
        let unread: [&[u8]; 5] = [
            b"host",
            b"x-stainless-lang",
            b"accept-encoding",
            b"content-length",
            b"x",
        ];
        crate::http::fieldname::agrees_near(levee_reads, &READ, &READ_PREFIXES, &unread);
    }
}
