//! Building responses: Levee's own errors in the caller's dialect, and the
//! headers every response carries.
//!
//! Every answer Levee gives in place of a provider's is a [`LeveeError`]
//! value until the last moment; [`LeveeError::into_response`] is the one
//! place such a value becomes a response.

use crate::http::rawfields::RawFields;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use http_body_util::Full;
use levee_policy::Reason;
use levee_wire::{headers, Dialect};
use std::convert::Infallible;
use std::time::Duration;

/// The body of every response, the fields of a provider's answer that are
/// relayed as bytes ([`RawFields`]), and Levee's own fields on it
/// ([`Stamp`]): they travel with the body, so an answer built anew (an
/// error, a translation) never carries another's. All live in one
/// allocation, and the body itself is a pointer: a response moves often on
/// its way out (inline, the fields made each move a `memcpy`, ~800
/// instructions a request in all).
pub struct Body(Box<With<DynBody>>);

type DynBody = dyn http_body::Body<Data = Bytes, Error = Infallible> + Send + Unpin;

/// A body and the fields it carries (the body last, so a box of any body
/// becomes a box of the one type).
struct With<B: ?Sized> {
    raw: RawFields,
    stamp: Stamp,
    body: B,
}

/// Levee's fields on every answer it gives: `x-request-id`, and on a
/// provider's answer relayed, `x-levee-attempts` and `x-levee-target`.
/// Kept as values and written by the HTTP/1 front after the header map's
/// fields: inserting the three into the answer's map and taking them out
/// again cost ~1,100 instructions an answer. Whatever takes an answer apart
/// other than the front (a reshaping for AWS clients, the in-process
/// service value) puts them into the map first ([`Body::unstamp`]).
#[derive(Clone, Debug, Default)]
pub struct Stamp {
    /// `x-levee-attempts`.
    pub attempts: Option<u32>,
    /// `x-levee-target`: the provider that answered, by name.
    pub target: Option<HeaderValue>,
    /// `x-request-id`: the caller's, or the one Levee made.
    pub request_id: Option<HeaderValue>,
}

impl Stamp {
    /// The stamp of a provider's answer relayed: how many attempts it took
    /// and which target gave it (its provider's name, as a header value made
    /// when the config was loaded).
    pub fn relayed(attempts: u32, target: Option<&HeaderValue>) -> Stamp {
        Stamp {
            attempts: Some(attempts),
            target: target.cloned(),
            request_id: None,
        }
    }

    /// Writes the fields as header lines.
    pub fn write(&self, out: &mut bytes::BytesMut) {
        use crate::http::h1wire::line;
        if let Some(n) = self.attempts {
            let mut digits = itoa::Buffer::new();
            line(
                out,
                headers::X_LEVEE_ATTEMPTS.as_str().as_bytes(),
                digits.format(n).as_bytes(),
            );
        }
        if let Some(v) = &self.target {
            line(
                out,
                headers::X_LEVEE_TARGET.as_str().as_bytes(),
                v.as_bytes(),
            );
        }
        if let Some(v) = &self.request_id {
            line(out, headers::X_REQUEST_ID.as_str().as_bytes(), v.as_bytes());
        }
    }

    /// Puts the fields into `h`, replacing any of the same names.
    pub fn move_into(self, h: &mut HeaderMap) {
        if let Some(n) = self.attempts {
            h.insert(headers::X_LEVEE_ATTEMPTS, HeaderValue::from(n));
        }
        if let Some(v) = self.target {
            h.insert(headers::X_LEVEE_TARGET, v);
        }
        if let Some(v) = self.request_id {
            h.insert(headers::X_REQUEST_ID, v);
        }
    }
}

impl Body {
    /// `body`, with no relayed fields.
    pub fn new<B>(body: B) -> Body
    where
        B: http_body::Body<Data = Bytes, Error = Infallible> + Send + Unpin + 'static,
    {
        Body::relaying(body, RawFields::default())
    }

    /// `body`, and `raw` to write after the header map's fields.
    pub fn relaying<B>(body: B, raw: RawFields) -> Body
    where
        B: http_body::Body<Data = Bytes, Error = Infallible> + Send + Unpin + 'static,
    {
        Body(Box::new(With {
            raw,
            stamp: Stamp::default(),
            body,
        }))
    }

    /// Levee's own fields on this answer.
    pub fn stamp(&self) -> &Stamp {
        &self.0.stamp
    }

    /// Levee's own fields on this answer, to set.
    pub fn stamp_mut(&mut self) -> &mut Stamp {
        &mut self.0.stamp
    }

    /// Moves Levee's own fields into `h`, leaving none here: for whatever
    /// takes an answer apart other than the HTTP/1 front.
    pub fn unstamp(&mut self, h: &mut HeaderMap) {
        std::mem::take(&mut self.0.stamp).move_into(h);
    }

    /// The fields relayed as bytes.
    pub fn raw(&self) -> &RawFields {
        &self.0.raw
    }

    /// Takes the fields relayed as bytes, leaving none.
    pub fn take_raw(&mut self) -> RawFields {
        std::mem::take(&mut self.0.raw)
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("raw", self.raw())
            .field("stamp", self.stamp())
            .finish_non_exhaustive()
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.get_mut().0.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.body.size_hint()
    }
}

/// A complete body.
pub fn full(b: impl Into<Bytes>) -> Body {
    Body::new(Full::new(b.into()))
}

/// Why Levee answered a request itself. Each value's row of
/// [`Why::row`] is the one table of Levee's own answers: the status, the
/// label that is at once `x-levee-reason`, the error body's `code` (OpenAI
/// dialect; Anthropic's body has no code field, its `type` follows the
/// status) and the `levee_rejected` / `levee_requests_total` label, and
/// what `x-should-retry` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The planner's verdict, or the same reason reached at admission
    /// (`bad_request`: the request itself, or a provider's deterministic
    /// 4xx passed on).
    Policy(Reason),
    /// No such endpoint, or no such model in the model list.
    NotFound,
    /// An endpoint asked with a method it does not serve.
    MethodNotAllowed,
    /// No route for the model asked for.
    NoRoute,
    /// A missing or invalid gateway key.
    Unauthorized,
    /// A request body that did not arrive in time.
    RequestTimeout,
    /// A request body over `limits.max_body_bytes`.
    PayloadTooLarge,
    /// A request URI too long to forward.
    UriTooLong,
    /// An idempotency key reused with a different request body.
    KeyReused,
    /// A request head over `limits.max_header_bytes` or its field count.
    HeadersTooLarge,
    /// A request framed in a way Levee does not take (an unknown
    /// transfer coding).
    NotImplemented,
    /// The shared idempotency store is unavailable and
    /// `state.on_unavailable` is `refuse`.
    StateUnavailable,
    /// The shutdown grace period ended before the answer.
    ShuttingDown,
    /// The last target's credentials could not be had (a token endpoint or
    /// a metadata service that refuses or is down, keys that expired with
    /// no refresh): nothing was sent to it.
    CredentialsUnavailable,
    /// The caller has spent its `budget` for the period.
    SpendLimit,
    /// The caller is at its `limits` of requests or tokens per minute.
    CallerLimit,
    /// The caller's `models` list does not have the model it asked for.
    ModelNotAllowed,
}

impl From<Reason> for Why {
    fn from(r: Reason) -> Self {
        Why::Policy(r)
    }
}

/// One row of the table of Levee's own answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// The status Levee chooses (a policy verdict after attempts may pass
    /// the provider's last status on instead).
    pub status: StatusCode,
    /// `x-levee-reason`, the body's `code` and the metric label.
    pub label: &'static str,
    /// What `x-should-retry` says. Levee has settled retries for its
    /// callers in every case, so that the layers above it do not multiply
    /// them: always `false`.
    pub should_retry: bool,
}

const fn row(status: StatusCode, label: &'static str) -> Row {
    Row {
        status,
        label,
        should_retry: false,
    }
}

impl Why {
    /// Every value, for the test that checks each row against what a caller
    /// receives.
    #[cfg(test)]
    pub const ALL: [Why; 25] = [
        Why::Policy(Reason::DeadlineExceeded),
        Why::Policy(Reason::Shed),
        Why::Policy(Reason::CircuitOpen),
        Why::Policy(Reason::BudgetExhausted),
        Why::Policy(Reason::RateLimited),
        Why::Policy(Reason::UpstreamError),
        Why::Policy(Reason::BadRequest),
        Why::Policy(Reason::CircuitRecovering),
        Why::Policy(Reason::PoolExhausted),
        Why::NotFound,
        Why::MethodNotAllowed,
        Why::NoRoute,
        Why::Unauthorized,
        Why::RequestTimeout,
        Why::PayloadTooLarge,
        Why::UriTooLong,
        Why::KeyReused,
        Why::HeadersTooLarge,
        Why::NotImplemented,
        Why::StateUnavailable,
        Why::ShuttingDown,
        Why::CredentialsUnavailable,
        Why::SpendLimit,
        Why::CallerLimit,
        Why::ModelNotAllowed,
    ];

    /// The table: this answer's status, label and `x-should-retry`.
    pub fn row(self) -> Row {
        match self {
            Why::Policy(r) => row(
                StatusCode::from_u16(r.status()).unwrap_or(StatusCode::BAD_GATEWAY),
                r.as_str(),
            ),
            Why::NotFound => row(StatusCode::NOT_FOUND, "not_found"),
            Why::MethodNotAllowed => row(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Why::NoRoute => row(StatusCode::NOT_FOUND, "no_route"),
            Why::Unauthorized => row(StatusCode::UNAUTHORIZED, "unauthorized"),
            Why::RequestTimeout => row(StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            Why::PayloadTooLarge => row(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Why::UriTooLong => row(StatusCode::URI_TOO_LONG, "uri_too_long"),
            Why::KeyReused => row(StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused"),
            Why::HeadersTooLarge => row(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "headers_too_large",
            ),
            Why::NotImplemented => row(StatusCode::NOT_IMPLEMENTED, "not_implemented"),
            Why::StateUnavailable => row(StatusCode::SERVICE_UNAVAILABLE, "state_unavailable"),
            Why::ShuttingDown => row(StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
            Why::CredentialsUnavailable => {
                row(StatusCode::SERVICE_UNAVAILABLE, "credentials_unavailable")
            }
            Why::SpendLimit => row(StatusCode::TOO_MANY_REQUESTS, "spend_limit"),
            Why::CallerLimit => row(StatusCode::TOO_MANY_REQUESTS, "caller_limit"),
            Why::ModelNotAllowed => row(StatusCode::FORBIDDEN, "model_not_allowed"),
        }
    }

    /// The header, body code and metric label.
    pub fn as_str(self) -> &'static str {
        self.row().label
    }
}

/// A provider's own deterministic 4xx answer, passed on unchanged (its body
/// already in the caller's dialect) under Levee's error headers.
#[derive(Debug)]
pub struct Verdict {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// An answer Levee gives in place of a provider's: the reason, the status,
/// a message that says what happened and what to do, and what the caller's
/// retry logic needs (`x-levee-attempts`, `retry-after`).
#[derive(Debug)]
pub struct LeveeError {
    pub why: Why,
    pub status: StatusCode,
    pub message: String,
    pub attempts: u32,
    pub retry_after: Option<Duration>,
    /// Set when the provider's own verdict is the answer.
    pub verdict: Option<Box<Verdict>>,
    /// `x-levee-skipped`: targets passed over because they cannot carry
    /// the request.
    pub skipped: Option<HeaderValue>,
}

impl LeveeError {
    /// Levee's answer for `why`, with the table's status, no attempts made
    /// and no `retry-after`.
    pub fn of(why: Why, message: impl Into<String>) -> Self {
        LeveeError {
            why,
            status: why.row().status,
            message: message.into(),
            attempts: 0,
            retry_after: None,
            verdict: None,
            skipped: None,
        }
    }

    /// A request that cannot be served as sent: 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        LeveeError::of(Why::Policy(Reason::BadRequest), message)
    }

    /// A provider's answer that cannot be given in the caller's dialect: 502
    /// (`upstream_error`).
    pub fn upstream_error(message: impl Into<String>) -> Self {
        LeveeError::of(Why::Policy(Reason::UpstreamError), message)
    }

    /// The caller's deadline passed before an answer: 504
    /// (`deadline_exceeded`).
    pub fn deadline_exceeded(message: impl Into<String>) -> Self {
        LeveeError::of(Why::Policy(Reason::DeadlineExceeded), message)
    }

    /// The planner (or admission) gave up for `f`, answered with the
    /// failure's status (502 if the core ever gave one that is not a status).
    pub fn failure(f: &levee_policy::Failure, message: impl Into<String>) -> Self {
        let mut e = LeveeError::of(Why::Policy(f.reason), message).retry_after(f.retry_after);
        e.status = StatusCode::from_u16(f.status).unwrap_or(StatusCode::BAD_GATEWAY);
        e
    }

    /// After `n` upstream attempts.
    pub fn attempts(mut self, n: u32) -> Self {
        self.attempts = n;
        self
    }

    /// With a `retry-after`.
    pub fn retry_after(mut self, ra: Option<Duration>) -> Self {
        self.retry_after = ra;
        self
    }

    /// The answer's status code.
    pub fn status(&self) -> u16 {
        self.verdict
            .as_ref()
            .map_or(self.status.as_u16(), |v| v.status)
    }

    /// The one place an error becomes a response: Levee's JSON error in the
    /// caller's dialect (or the provider's verdict), with `x-should-retry:
    /// false`, `x-levee-reason`, `x-levee-attempts` and `retry-after`.
    pub fn into_response(self, dialect: Dialect) -> Response<Body> {
        let reason = self.why.as_str();
        let mut resp = match self.verdict.map(|v| *v) {
            Some(v) => {
                let mut out = Response::new(full(v.body));
                *out.status_mut() =
                    StatusCode::from_u16(v.status).unwrap_or(StatusCode::BAD_REQUEST);
                copy_headers(&v.headers, out.headers_mut());
                out
            }
            None => {
                let body = dialect.error_body(self.status.as_u16(), reason, &self.message);
                let mut out = Response::new(full(body));
                *out.status_mut() = self.status;
                out.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                out
            }
        };
        error_headers(
            resp.headers_mut(),
            self.why,
            self.attempts,
            self.retry_after,
        );
        if let Some(v) = self.skipped {
            resp.headers_mut().insert(headers::X_LEVEE_SKIPPED, v);
        }
        resp
    }
}

/// Sets `x-should-retry`, `x-levee-reason`, `x-levee-attempts` and
/// `retry-after`, the first two from `why`'s row.
fn error_headers(h: &mut HeaderMap, why: Why, attempts: u32, retry_after: Option<Duration>) {
    let row = why.row();
    h.insert(headers::X_SHOULD_RETRY, should_retry(row));
    h.insert(headers::X_LEVEE_REASON, HeaderValue::from_static(row.label));
    h.insert(headers::X_LEVEE_ATTEMPTS, HeaderValue::from(attempts));
    if let Some(ra) = retry_after {
        // Whole seconds, rounded up, so a caller that honours it is never early.
        let secs = ra.as_millis().div_ceil(1000).max(1);
        h.insert(
            RETRY_AFTER,
            HeaderValue::from(u64::try_from(secs).unwrap_or(u64::MAX)),
        );
    }
}

/// `x-should-retry` as `row` says it.
pub fn should_retry(row: Row) -> HeaderValue {
    HeaderValue::from_static(if row.should_retry { "true" } else { "false" })
}

/// A provider's answer relayed to the caller: its status and end-to-end
/// headers (its own header map, taken over: copying it field by field cost
/// ~1,000 instructions per request) and `body`. Levee's success fields go
/// on its [`Stamp`].
pub fn relayed<B>(status: StatusCode, mut upstream: HeaderMap, body: B) -> Response<B> {
    drop_hop_by_hop(&mut upstream);
    drop_levees_own(&mut upstream);
    let mut out = Response::new(body);
    *out.status_mut() = status;
    *out.headers_mut() = upstream;
    out
}

/// Removes the fields that are not passed back (an HTTP/1.1 answer's
/// framing fields are already gone; an HTTP/2 answer may carry
/// `content-length`).
pub fn drop_hop_by_hop(h: &mut HeaderMap) {
    if h.keys().any(|n| is_hop_by_hop(n.as_str())) {
        for name in HOP_BY_HOP {
            h.remove(name);
        }
    }
}

/// Fields that frame a message or concern one hop only: never passed on,
/// in either direction (a connection's own framing is the only one sent).
pub fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.contains(&name)
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
];

/// Whether `name` is one of the fields Levee writes itself (`x-levee-*`,
/// `x-should-retry`): a provider's are dropped, so that only Levee speaks
/// for Levee (a provider's `x-levee-replayed: true` once reached a caller
/// on a fresh answer, and OpenAI's own `x-should-retry` would contradict
/// Levee's).
pub fn is_levees_own(name: &str) -> bool {
    name.starts_with("x-levee-") || name == "x-should-retry"
}

/// Removes the fields Levee writes itself from a provider's answer.
pub fn drop_levees_own(h: &mut HeaderMap) {
    if !h.keys().any(|n| is_levees_own(n.as_str())) {
        return;
    }
    let theirs: Vec<http::HeaderName> = h
        .keys()
        .filter(|n| is_levees_own(n.as_str()))
        .cloned()
        .collect();
    for n in theirs {
        h.remove(n);
    }
}

/// Copies an upstream response's end-to-end headers, without the fields
/// Levee writes itself.
pub fn copy_headers(from: &HeaderMap, to: &mut HeaderMap) {
    for (n, v) in from {
        if !is_hop_by_hop(n.as_str()) && !is_levees_own(n.as_str()) {
            to.append(n.clone(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// Every row of the table, as a caller receives it in both dialects and
    /// as the metric counts it: the status, `x-levee-reason`, the body's
    /// `code`, `x-should-retry` and the `levee_rejected` label all agree.
    #[test]
    fn every_refusal_is_labelled_alike_in_its_status_header_body_and_metric() {
        let mut seen = std::collections::BTreeSet::new();
        for why in Why::ALL {
            let row = why.row();
            assert!(seen.insert(row.label), "{why:?}: label {} twice", row.label);
            for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
                let r = LeveeError::of(why, "levee: m").into_response(dialect);
                assert_eq!(r.status(), row.status, "{why:?} {dialect:?}");
                let h = r.headers();
                assert_eq!(h["x-levee-reason"], row.label, "{why:?}");
                let retry = if row.should_retry { "true" } else { "false" };
                assert_eq!(h["x-should-retry"], retry, "{why:?}");
                if dialect == Dialect::OpenAi {
                    let body = futures_util::FutureExt::now_or_never(r.into_body().collect())
                        .and_then(Result::ok)
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    assert_eq!(v["error"]["code"], row.label, "{why:?}: {v}");
                }
            }
            let m = crate::observe::metrics::Metrics::new();
            m.reject(why);
            let line = format!("levee_rejected_total{{reason=\"{}\"}} 1", row.label);
            assert!(m.encode().contains(&line), "{why:?}: {line} missing");
        }
    }

    #[test]
    fn a_405_and_an_unknown_endpoint_have_labels_of_their_own() {
        assert_eq!(Why::MethodNotAllowed.row().status, 405);
        assert_eq!(Why::MethodNotAllowed.as_str(), "method_not_allowed");
        assert_eq!(Why::NotFound.row().status, 404);
        assert_eq!(Why::NotFound.as_str(), "not_found");
    }

    #[test]
    fn an_error_carries_the_reason_attempts_and_a_rounded_up_retry_after() {
        let e = LeveeError::of(Why::StateUnavailable, "levee: down")
            .attempts(2)
            .retry_after(Some(Duration::from_millis(1200)));
        let r = e.into_response(Dialect::Anthropic);
        assert_eq!(r.status(), 503);
        let h = r.headers();
        assert_eq!(h["x-should-retry"], "false");
        assert_eq!(h["x-levee-reason"], "state_unavailable");
        assert_eq!(h["x-levee-attempts"], "2");
        assert_eq!(h["retry-after"], "2");
        assert_eq!(h["content-type"], "application/json");
    }

    #[test]
    fn a_relayed_answer_keeps_its_end_to_end_fields_and_says_how_it_was_got() {
        for (attempts, said) in [(1, "1"), (2, "2"), (12, "12")] {
            let mut upstream = HeaderMap::new();
            upstream.insert("x-request-id", HeaderValue::from_static("req_1"));
            upstream.insert("content-length", HeaderValue::from_static("2"));
            upstream.insert("connection", HeaderValue::from_static("keep-alive"));
            upstream.insert("x-levee-attempts", HeaderValue::from_static("7"));
            upstream.append("set-cookie", HeaderValue::from_static("a=1"));
            upstream.append("set-cookie", HeaderValue::from_static("b=2"));
            let target = HeaderValue::from_static("openai");
            let r = relayed(StatusCode::OK, upstream, full(Bytes::from_static(b"{}")));
            let h = r.headers();
            assert_eq!(h["x-request-id"], "req_1");
            assert_eq!(h.get_all("set-cookie").iter().count(), 2);
            assert!(h.get("content-length").is_none() && h.get("connection").is_none());
            assert!(
                h.get("x-levee-attempts").is_none(),
                "a provider's is dropped"
            );
            assert_eq!(h.len(), 3, "{h:?}");
            // Levee's fields, as the front writes them and as a map holds them.
            let stamp = Stamp::relayed(attempts, Some(&target));
            let mut lines = bytes::BytesMut::new();
            stamp.write(&mut lines);
            assert_eq!(
                lines,
                format!("x-levee-attempts: {said}\r\nx-levee-target: openai\r\n").as_bytes()
            );
            let (mut parts, mut body) = r.into_parts();
            *body.stamp_mut() = stamp;
            body.unstamp(&mut parts.headers);
            assert_eq!(parts.headers["x-levee-attempts"], said);
            assert_eq!(parts.headers["x-levee-target"], "openai");
            assert!(body.stamp().attempts.is_none(), "moved, not copied");
        }
    }

    #[test]
    fn a_providers_verdict_is_passed_on_under_levees_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("x-request-id", HeaderValue::from_static("req_1"));
        headers.insert("content-length", HeaderValue::from_static("2"));
        let mut e = LeveeError::bad_request("unused").attempts(1);
        e.verdict = Some(Box::new(Verdict {
            status: 422,
            headers,
            body: Bytes::from_static(b"{}"),
        }));
        assert_eq!(e.status(), 422);
        let r = e.into_response(Dialect::OpenAi);
        assert_eq!(r.status(), 422);
        assert_eq!(r.headers()["x-request-id"], "req_1");
        assert!(r.headers().get("content-length").is_none());
        assert_eq!(r.headers()["x-levee-reason"], "bad_request");
    }
}
