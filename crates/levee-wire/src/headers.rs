//! Header names Levee reads or writes on every request, as constants:
//! looking a header up by `&str` parses and validates the name each time
//! (`HeaderName::from_static` in a `const` does it once, at compile time).

use http::header::HeaderName;

/// Anthropic's API version header; its presence marks an Anthropic request
/// on a path of neither dialect.
pub const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
/// The caller's idempotency key, forwarded unchanged on every attempt.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The caller's deadline as milliseconds from now.
pub const X_TIMEOUT_MS: HeaderName = HeaderName::from_static("x-timeout-ms");
/// The caller's deadline as a unix time in milliseconds.
pub const X_DEADLINE_MS: HeaderName = HeaderName::from_static("x-deadline-ms");
/// The OpenAI and Anthropic SDKs' retry counter (non-zero: the SDK's own retry).
pub const X_STAINLESS_RETRY_COUNT: HeaderName = HeaderName::from_static("x-stainless-retry-count");
/// The Anthropic SDK's request timeout in seconds (or `NOT_GIVEN`).
pub const X_STAINLESS_TIMEOUT: HeaderName = HeaderName::from_static("x-stainless-timeout");
/// The OpenAI SDK's read timeout in seconds.
pub const X_STAINLESS_READ_TIMEOUT: HeaderName =
    HeaderName::from_static("x-stainless-read-timeout");
/// Anthropic's key header.
pub const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// A provider's back-off request, in seconds or an HTTP date.
pub const RETRY_AFTER: HeaderName = HeaderName::from_static("retry-after");
/// A provider's back-off request in milliseconds.
pub const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
/// Levee's word to callers' retry layers: `false` means do not retry.
pub const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
/// Why Levee answered instead of a provider.
pub const X_LEVEE_REASON: HeaderName = HeaderName::from_static("x-levee-reason");
/// How many upstream attempts the answer took.
pub const X_LEVEE_ATTEMPTS: HeaderName = HeaderName::from_static("x-levee-attempts");
/// Which target answered.
pub const X_LEVEE_TARGET: HeaderName = HeaderName::from_static("x-levee-target");
/// The request's id: the caller's, or one Levee made; on every answer.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// A provider's own `x-request-id`, kept beside Levee's.
pub const X_LEVEE_UPSTREAM_REQUEST_ID: HeaderName =
    HeaderName::from_static("x-levee-upstream-request-id");
/// Targets of the route passed over for this request because they cannot
/// carry it (`provider=reason, …`): a vendor switch is never silent.
pub const X_LEVEE_SKIPPED: HeaderName = HeaderName::from_static("x-levee-skipped");
/// The caller's parameters left out because the target that answered
/// cannot carry them (a route's `on_untranslatable: drop`).
pub const X_LEVEE_DROPPED_PARAMS: HeaderName = HeaderName::from_static("x-levee-dropped-params");
/// What the idempotency store said about a keyed request.
pub const X_LEVEE_IDEMPOTENCY: HeaderName = HeaderName::from_static("x-levee-idempotency");
/// `true` on an answer replayed from the idempotency store.
pub const X_LEVEE_REPLAYED: HeaderName = HeaderName::from_static("x-levee-replayed");
