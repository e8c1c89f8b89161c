//! The mock's own rate limits (`rate_limit:` in the fault document), metered
//! as the providers meter an organisation, and the rate-limit fields it
//! sends on its answers.
//!
//! Each limit given is a token bucket holding one minute's allowance (the
//! requests bucket `request_burst` requests, when given),
//! refilled continuously (a limit of 600/min gains one unit every 100 ms)
//! and full when the fault set is installed. Only the generation endpoints
//! are metered (chat completions, messages, Responses, embeddings), and only
//! requests whose body is valid; a request is metered after the `capacity`
//! check and before the faults, the tape and the answer. Its costs:
//!
//! | limit | charged | at |
//! |---|---|---|
//! | `requests_per_minute` | 1 | admission |
//! | `tokens_per_minute` | input estimate + `max_tokens` (or `max_completion_tokens` / `max_output_tokens`; 0 when none is given) | admission (OpenAI's way: never settled later) |
//! | `input_tokens_per_minute` | input estimate | admission (Anthropic's ITPM) |
//! | `output_tokens_per_minute` | the output tokens the answer's `usage` reports | when the answer is made (its head, for a stream): Anthropic's OTPM |
//!
//! The input estimate is the mock's own count, a token per four bytes of
//! request body (what the answer's `usage` reports as input). A request is
//! admitted when every bucket holds its cost, and the output bucket at least
//! one token (output taken when produced may leave that bucket below zero;
//! the debt is repaid by the refill, and the bucket reads 0 meanwhile).
//! Otherwise it is answered 429 in its dialect's shape (OpenAI type
//! `requests` or `tokens`, code `rate_limit_exceeded`; Anthropic
//! `rate_limit_error`) with `retry-after`: whole seconds, rounded up, until
//! every bucket can take it. It costs nothing. A cost above a bucket's whole
//! minute can never be taken: that 429 says so and has no `retry-after`.
//!
//! Every answer to a metered request (2xx, a fault's error, a replayed
//! answer, the limiter's 429) carries the limits' fields as the provider of its dialect sends
//! them, read at the moment the answer is made:
//!
//! - OpenAI (and Azure): `x-ratelimit-{limit,remaining,reset}-requests` and
//!   `-tokens` (`tokens_per_minute`), the reset as a duration (`1s`, `6m0s`,
//!   `20ms`, `1m2.5s`) until the bucket is full again, to the millisecond
//!   rounded up. Input and output limits are enforced but have no OpenAI
//!   fields.
//! - Anthropic: `anthropic-ratelimit-requests-*`, `-input-tokens-*`,
//!   `-output-tokens-*` and `-tokens-*` (the token limit given whose bucket
//!   is the smallest share of its limit), the reset as an RFC 3339 time
//!   (whole seconds, rounded up) when the bucket is full again.
//!
//! Remaining counts are whole tokens, not rounded to thousands. Behind
//! `--api bedrock` and `--api vertex` the limits are enforced but no fields
//! are sent (those clouds do not send them).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::{HeaderMap, Response};
use levee_wire::Dialect;

use crate::answer::{Reply, TOOL_CALL_TOKENS};
use crate::request::{self, Body, Endpoint};
use crate::{clock, MockApi};

/// `rate_limit:` as the fault document gives it: each limit per minute, a
/// limit not given is not enforced (at least one is given).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RateLimit {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub input_tokens_per_minute: Option<u64>,
    pub output_tokens_per_minute: Option<u64>,
    /// The most requests the requests bucket holds (a minute's worth when
    /// not given): a per-minute limit enforced over a shorter interval, as
    /// both providers say they may (60 a minute as one a second).
    pub request_burst: Option<u64>,
}

/// Nanoseconds in the minute each limit is given over: a bucket's level is
/// kept in tokens × this, so that a refill of `per_minute` per minute adds
/// exactly `per_minute` units per nanosecond.
const MINUTE_NS: i128 = 60_000_000_000;
/// A refill never runs longer than this (any bucket is full long before).
const MAX_REFILL_NS: i128 = 86_400 * 1_000_000_000;

/// One limit's token bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    per_minute: u64,
    /// The most tokens it holds.
    holds: u64,
    /// Tokens × `MINUTE_NS`; below zero while output taken on credit is
    /// being repaid.
    level: i128,
}

impl Bucket {
    fn full(per_minute: u64) -> Bucket {
        Bucket::holding(per_minute, per_minute)
    }

    /// A full bucket refilled at `per_minute` that holds `holds` tokens.
    fn holding(per_minute: u64, holds: u64) -> Bucket {
        Bucket {
            per_minute,
            holds,
            level: i128::from(holds) * MINUTE_NS,
        }
    }

    fn capacity(&self) -> i128 {
        i128::from(self.holds) * MINUTE_NS
    }

    fn refill(&mut self, elapsed_ns: i128) {
        let gained = i128::from(self.per_minute) * elapsed_ns.clamp(0, MAX_REFILL_NS);
        self.level = self.level.saturating_add(gained).min(self.capacity());
    }

    /// Whole tokens it holds now (0 while in debt).
    fn remaining(&self) -> u64 {
        u64::try_from((self.level / MINUTE_NS).max(0)).unwrap_or(u64::MAX)
    }

    /// Nanoseconds until it holds `tokens`: `None` when it never can (more
    /// than its whole minute).
    fn wait_for(&self, tokens: u64) -> Option<i128> {
        let need = i128::from(tokens) * MINUTE_NS;
        if need > self.capacity() {
            return None;
        }
        let short = need - self.level;
        Some(ceil_div(short.max(0), i128::from(self.per_minute)))
    }

    fn take(&mut self, tokens: u64) {
        self.level = self.level.saturating_sub(i128::from(tokens) * MINUTE_NS);
    }

    /// Nanoseconds until it is full again.
    fn until_full(&self) -> i128 {
        ceil_div(self.capacity() - self.level, i128::from(self.per_minute))
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    if b <= 0 {
        return 0;
    }
    (a + b - 1).div_euclid(b)
}

/// The buckets of one installed fault set, refilled up to `at`.
#[derive(Debug)]
struct Buckets {
    at: Instant,
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    input: Option<Bucket>,
    output: Option<Bucket>,
}

impl Buckets {
    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_nanos();
        let elapsed = i128::try_from(elapsed).unwrap_or(MAX_REFILL_NS);
        for b in [
            &mut self.requests,
            &mut self.tokens,
            &mut self.input,
            &mut self.output,
        ]
        .into_iter()
        .flatten()
        {
            b.refill(elapsed);
        }
        self.at = self.at.max(now);
    }
}

/// Which limit a refusal is for, in the provider's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requests,
    Tokens,
    Input,
    Output,
}

impl Kind {
    fn openai(self) -> (&'static str, &'static str) {
        match self {
            Kind::Requests => ("requests", "requests per min (RPM)"),
            Kind::Tokens => ("tokens", "tokens per min (TPM)"),
            Kind::Input => ("tokens", "input tokens per min (ITPM)"),
            Kind::Output => ("tokens", "output tokens per min (OTPM)"),
        }
    }

    fn anthropic(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
            Kind::Input => "input tokens",
            Kind::Output => "output tokens",
        }
    }
}

/// The limiter of one installed fault set: `None` limits meter nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Limiter {
    buckets: Option<Arc<Mutex<Buckets>>>,
}

impl Limiter {
    /// Full buckets for `limit` as of now.
    pub(crate) fn new(limit: Option<RateLimit>) -> Limiter {
        let Some(limit) = limit else {
            return Limiter::default();
        };
        let buckets = Buckets {
            at: clock::now(),
            requests: limit
                .requests_per_minute
                .map(|rpm| Bucket::holding(rpm, limit.request_burst.unwrap_or(rpm))),
            tokens: limit.tokens_per_minute.map(Bucket::full),
            input: limit.input_tokens_per_minute.map(Bucket::full),
            output: limit.output_tokens_per_minute.map(Bucket::full),
        };
        Limiter {
            buckets: Some(Arc::new(Mutex::new(buckets))),
        }
    }

    /// Meters one request. `api` is the mock's own `--api` (a cloud face
    /// sends no fields); `body` is `None` for a body that did not parse.
    /// `Err` is the limiter's 429: answer with [`Refused::body`], then
    /// [`Refused::stamp`] its head.
    pub(crate) fn admit(
        &self,
        api: MockApi,
        dialect: Dialect,
        endpoint: &Endpoint,
        body: Option<&Body<'_>>,
        body_len: usize,
    ) -> Result<Metered, Box<Refused>> {
        let (Some(buckets), Some(body)) = (&self.buckets, body) else {
            return Ok(Metered::default());
        };
        let Some(produced) = produced_tokens(endpoint, dialect, body) else {
            return Ok(Metered::default());
        };
        let cost = Cost::of(body, body_len);
        let fields = Fields::of(api, dialect);
        let mut guard = lock(buckets);
        let b: &mut Buckets = &mut guard;
        b.refill(clock::now());
        if let Some(short) = b.shortfall(&cost) {
            let refused = Refused {
                dialect,
                kind: short.kind,
                per_minute: short.bucket.per_minute,
                used: short
                    .bucket
                    .per_minute
                    .saturating_sub(short.bucket.remaining()),
                requested: short.need,
                model: body.model.as_deref().unwrap_or("mock-model").to_owned(),
                retry_after_secs: short.wait.map(|ns| {
                    u64::try_from(ceil_div(ns, 1_000_000_000).max(1)).unwrap_or(u64::MAX)
                }),
                fields: fields.with(|| Snapshot::of(b)),
            };
            return Err(Box::new(refused));
        }
        b.charge(&cost);
        drop(guard);
        Ok(Metered {
            buckets: Some(Arc::clone(buckets)),
            produced,
            fields,
        })
    }
}

/// The output tokens a metered endpoint's answer reports (a forced tool
/// call's, or the pieces `max_tokens` allows); `None` for an endpoint that
/// is not metered.
fn produced_tokens(endpoint: &Endpoint, dialect: Dialect, body: &Body<'_>) -> Option<u64> {
    let produced = match endpoint {
        Endpoint::Embeddings => 0,
        Endpoint::Responses => Reply::pieces_for(body.max_tokens()) as u64,
        Endpoint::Chat | Endpoint::Messages => match body.forced_tool(dialect) {
            Some(_) => TOOL_CALL_TOKENS,
            None => Reply::pieces_for(body.max_tokens()) as u64,
        },
        _ => return None,
    };
    Some(produced)
}

/// The limit that refuses a request, and by how much.
struct Shortfall {
    kind: Kind,
    /// The limit's bucket as the request found it.
    bucket: Bucket,
    /// What the request needs of it.
    need: u64,
    /// Nanoseconds until the bucket holds `need`: `None` when it never can.
    wait: Option<i128>,
}

impl Buckets {
    /// The limit a request of `cost` is refused by, if any: one the request
    /// can never fit first, else the one it waits longest for. The output
    /// bucket needs only one token.
    fn shortfall(&self, cost: &Cost) -> Option<Shortfall> {
        let needs = [
            (Kind::Requests, self.requests, 1),
            (Kind::Tokens, self.tokens, cost.tokens),
            (Kind::Input, self.input, cost.input),
            (Kind::Output, self.output, 1),
        ];
        let mut worst: Option<Shortfall> = None;
        for (kind, bucket, need) in needs {
            let Some(bucket) = bucket else { continue };
            let wait = bucket.wait_for(need);
            if wait == Some(0) {
                continue;
            }
            let worse = match (&worst, wait) {
                (None, _) => true,
                (Some(Shortfall { wait: None, .. }), _) => false,
                (Some(_), None) => true,
                (
                    Some(Shortfall {
                        wait: Some(prev), ..
                    }),
                    Some(w),
                ) => w > *prev,
            };
            if worse {
                worst = Some(Shortfall {
                    kind,
                    bucket,
                    need,
                    wait,
                });
            }
        }
        worst
    }

    /// Takes an admitted request's cost from the request and token buckets
    /// (its output is taken when its answer is made).
    fn charge(&mut self, cost: &Cost) {
        for (bucket, n) in [
            (&mut self.requests, 1),
            (&mut self.tokens, cost.tokens),
            (&mut self.input, cost.input),
        ] {
            if let Some(bucket) = bucket {
                bucket.take(n);
            }
        }
    }
}

fn lock(buckets: &Mutex<Buckets>) -> std::sync::MutexGuard<'_, Buckets> {
    // Buckets are plain numbers: a panic elsewhere cannot leave them torn.
    buckets.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Cost {
    /// Input and `max_tokens`: what `tokens_per_minute` is charged.
    tokens: u64,
    /// Input alone: what `input_tokens_per_minute` is charged.
    input: u64,
}

impl Cost {
    /// A request's cost: the input estimate from its body's length, and
    /// its `max_tokens`-style limit (0 when none is given).
    fn of(body: &Body<'_>, body_len: usize) -> Cost {
        let input = request::prompt_tokens(body_len);
        let max_output = body.max_tokens().unwrap_or(0);
        Cost {
            tokens: input.saturating_add(max_output),
            input,
        }
    }
}

/// Whether an answer carries fields, and whose.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Fields {
    #[default]
    None,
    OpenAi,
    Anthropic,
}

impl Fields {
    fn of(api: MockApi, dialect: Dialect) -> Fields {
        match (api, dialect) {
            (MockApi::Bedrock | MockApi::Vertex, _) => Fields::None,
            (_, Dialect::OpenAi) => Fields::OpenAi,
            (_, Dialect::Anthropic) => Fields::Anthropic,
        }
    }

    /// The fields to write with `snapshot`, when there are any.
    fn with(self, snapshot: impl FnOnce() -> Snapshot) -> Option<(Fields, Snapshot)> {
        (self != Fields::None).then(|| (self, snapshot()))
    }
}

/// An admitted request: its output is taken and its answer's fields
/// written when the answer is made ([`Metered::stamped`]). The default
/// meters nothing.
#[derive(Debug, Default)]
pub(crate) struct Metered {
    buckets: Option<Arc<Mutex<Buckets>>>,
    /// Output tokens its answer reports.
    produced: u64,
    fields: Fields,
}

impl Metered {
    /// Takes the answer's output (a 2xx only: an error produced none) and
    /// writes the limits' fields on its head, as of now.
    pub(crate) fn stamped<B>(&self, mut res: Response<B>) -> Response<B> {
        let Some(buckets) = &self.buckets else {
            return res;
        };
        let mut b = lock(buckets);
        b.refill(clock::now());
        if res.status().is_success() {
            if let Some(output) = &mut b.output {
                output.take(self.produced);
            }
        }
        let snapshot = Snapshot::of(&b);
        drop(b);
        snapshot.write(self.fields, res.headers_mut());
        res
    }
}

/// The limiter's 429.
#[derive(Debug)]
pub(crate) struct Refused {
    dialect: Dialect,
    kind: Kind,
    per_minute: u64,
    used: u64,
    requested: u64,
    model: String,
    /// `None`: the request is larger than the limit's whole minute.
    retry_after_secs: Option<u64>,
    fields: Option<(Fields, Snapshot)>,
}

impl Refused {
    /// The error body, in the request's dialect, as the provider words it.
    pub(crate) fn body(&self) -> Bytes {
        let (limit, used, requested) = (self.per_minute, self.used, self.requested);
        match self.dialect {
            Dialect::OpenAi => {
                let (kind, per) = self.kind.openai();
                let message = match self.retry_after_secs {
                    Some(secs) => format!(
                        "Rate limit reached for {} in organization org-levee-mock on {per}: \
                         Limit {limit}, Used {used}, Requested {requested}. \
                         Please try again in {secs}s.",
                        self.model
                    ),
                    None => format!(
                        "Request too large for {} in organization org-levee-mock on {per}: \
                         Limit {limit}, Requested {requested}. \
                         The input or output tokens must be reduced in order to run successfully.",
                        self.model
                    ),
                };
                let body = serde_json::json!({ "error": {
                    "message": message,
                    "type": kind,
                    "param": null,
                    "code": "rate_limit_exceeded",
                }});
                Bytes::from(body.to_string())
            }
            Dialect::Anthropic => {
                let what = self.kind.anthropic();
                let message = match self.retry_after_secs {
                    Some(_) => format!(
                        "This request would exceed the rate limit for your organization \
                         (levee-mock) of {limit} {what} per minute. \
                         Please wait before trying again."
                    ),
                    None => format!(
                        "This request ({requested} {what}) is larger than the rate limit for \
                         your organization (levee-mock) of {limit} {what} per minute."
                    ),
                };
                levee_wire::error::body(Dialect::Anthropic, 429, &message, None, None)
            }
        }
    }

    /// Writes `retry-after` and the limits' fields on the 429's head.
    pub(crate) fn stamp(&self, headers: &mut HeaderMap) {
        if let Some(secs) = self.retry_after_secs {
            headers.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some((fields, snapshot)) = &self.fields {
            snapshot.write(*fields, headers);
        }
    }
}

/// One bucket's state as its fields report it.
#[derive(Debug, Clone, Copy)]
struct Reading {
    limit: u64,
    remaining: u64,
    /// Nanoseconds until it is full.
    reset_ns: i128,
}

impl Reading {
    fn of(bucket: &Bucket) -> Reading {
        Reading {
            limit: bucket.per_minute,
            remaining: bucket.remaining(),
            reset_ns: bucket.until_full(),
        }
    }

    /// The share of its limit left, compared without division.
    fn tighter_than(&self, other: &Reading) -> bool {
        u128::from(self.remaining) * u128::from(other.limit)
            < u128::from(other.remaining) * u128::from(self.limit)
    }
}

#[derive(Debug, Clone, Copy)]
struct Snapshot {
    requests: Option<Reading>,
    tokens: Option<Reading>,
    input: Option<Reading>,
    output: Option<Reading>,
}

impl Snapshot {
    fn of(b: &Buckets) -> Snapshot {
        Snapshot {
            requests: b.requests.as_ref().map(Reading::of),
            tokens: b.tokens.as_ref().map(Reading::of),
            input: b.input.as_ref().map(Reading::of),
            output: b.output.as_ref().map(Reading::of),
        }
    }

    fn write(&self, fields: Fields, headers: &mut HeaderMap) {
        match fields {
            Fields::None => {}
            Fields::OpenAi => {
                for (kind, reading) in [("requests", self.requests), ("tokens", self.tokens)] {
                    let Some(r) = reading else { continue };
                    let reset = go_duration(ms_up(r.reset_ns));
                    put(
                        headers,
                        &format!("x-ratelimit-limit-{kind}"),
                        r.limit.to_string(),
                    );
                    let remaining = r.remaining.to_string();
                    put(headers, &format!("x-ratelimit-remaining-{kind}"), remaining);
                    put(headers, &format!("x-ratelimit-reset-{kind}"), reset);
                }
            }
            Fields::Anthropic => {
                let now_ms = clock::unix_ms();
                // The tightest of the token limits given, first listed on a tie.
                let tightest = [self.input, self.output, self.tokens]
                    .into_iter()
                    .flatten()
                    .reduce(|a, b| if b.tighter_than(&a) { b } else { a });
                for (kind, reading) in [
                    ("requests", self.requests),
                    ("tokens", tightest),
                    ("input-tokens", self.input),
                    ("output-tokens", self.output),
                ] {
                    let Some(r) = reading else { continue };
                    let at_ms = now_ms.saturating_add(ms_up(r.reset_ns));
                    let reset = rfc3339(at_ms.div_ceil(1000));
                    let name = |part: &str| format!("anthropic-ratelimit-{kind}-{part}");
                    put(headers, &name("limit"), r.limit.to_string());
                    put(headers, &name("remaining"), r.remaining.to_string());
                    put(headers, &name("reset"), reset);
                }
            }
        }
    }
}

fn put(headers: &mut HeaderMap, name: &str, value: String) {
    // Names and values are built from fixed ASCII and digits: both parse.
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(&value),
    ) {
        headers.insert(name, value);
    }
}

/// Nanoseconds as whole milliseconds, rounded up.
fn ms_up(ns: i128) -> u64 {
    u64::try_from(ceil_div(ns.max(0), 1_000_000)).unwrap_or(u64::MAX)
}

/// Milliseconds in Go's duration notation, as OpenAI writes its resets:
/// `20ms`, `1s`, `1.5s`, `6m0s`, `1h2m3.5s`.
pub(crate) fn go_duration(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(out, "{m}m");
    }
    let _ = write!(out, "{s}");
    if frac > 0 {
        let digits = format!("{frac:03}");
        let _ = write!(out, ".{}", digits.trim_end_matches('0'));
    }
    out.push('s');
    out
}

/// Unix seconds as an RFC 3339 UTC time, `2025-01-15T14:24:00Z`.
pub(crate) fn rfc3339(unix_secs: u64) -> String {
    levee_wire::civil::rfc3339(i64::try_from(unix_secs).unwrap_or(i64::MAX / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_openai_writes_them() {
        for (ms, text) in [
            (0, "0ms"),
            (20, "20ms"),
            (999, "999ms"),
            (1000, "1s"),
            (1500, "1.5s"),
            (8640, "8.64s"),
            (60_000, "1m0s"),
            (360_000, "6m0s"),
            (179_560, "2m59.56s"),
            (3_723_500, "1h2m3.5s"),
            (3_600_000, "1h0m0s"),
        ] {
            assert_eq!(go_duration(ms), text, "{ms}");
            assert_eq!(
                levee_wire::ratelimit::parse_duration_ms(text.as_bytes()),
                Some(ms)
            );
        }
    }

    #[test]
    fn rfc3339_times_read_back() {
        for secs in [
            0,
            951_782_400,
            1_736_951_040,
            4_102_444_800,
            253_402_300_799,
        ] {
            let text = rfc3339(secs);
            assert_eq!(
                levee_wire::ratelimit::parse_rfc3339_ms(text.as_bytes()),
                Some(secs as i64 * 1000),
                "{text}"
            );
        }
        assert_eq!(rfc3339(1_736_951_040), "2025-01-15T14:24:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn a_bucket_refills_by_its_minute_and_waits_are_exact() {
        let mut b = Bucket::full(600);
        assert_eq!(b.remaining(), 600);
        b.take(600);
        assert_eq!(b.remaining(), 0);
        // One unit every 100 ms.
        assert_eq!(b.wait_for(1), Some(100_000_000));
        assert_eq!(b.until_full(), 60_000_000_000);
        b.refill(250_000_000);
        assert_eq!(b.remaining(), 2);
        assert_eq!(b.wait_for(3), Some(50_000_000));
        assert_eq!(b.wait_for(601), None);
        b.refill(600_000_000_000);
        assert_eq!(b.remaining(), 600);
        // Output taken on credit leaves a debt repaid by the refill.
        b.take(700);
        assert_eq!(b.remaining(), 0);
        // 100 owed and one more wanted, at 10 a second.
        assert_eq!(b.wait_for(1), Some(10_100_000_000));
    }
}
