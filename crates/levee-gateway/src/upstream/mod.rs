//! Talking to providers: one connection pool per provider over hyper's
//! client connections, HTTP/1.1 or HTTP/2 as the provider's `http2` key and
//! ALPN decide (rustls with bundled web-PKI roots for https),
//! outbound request building, and timing of how long each attempt waits for
//! a connection, pooled or new, for `levee_upstream_connect_seconds`.
//!
//! The pool is Levee's own rather than hyper-util's legacy `Client`: that
//! client spawns a task per request to watch the connection become idle again
//! before it returns it to its pool. HTTP/1.1 connections are driven inside
//! the attempt's own task ([`crate::upstream::h1conn`]) and go back to the pool from
//! the poll that reads an answer's last byte; HTTP/2 connections are shared
//! by many streams at once ([`crate::upstream::h2conn`]).

pub(crate) mod allowance;
pub(crate) mod body;
pub(crate) mod h1conn;
pub(crate) mod h2conn;
pub(crate) mod listed;
pub(crate) mod platform;
pub(crate) mod transport;

use crate::clock::Clock;
use crate::error::BoxError;
use crate::http::outbound::Outbound;
use crate::upstream::body::ConnTimed;
pub use crate::upstream::body::UpstreamBody;
use crate::upstream::h1conn::{Failed, H1Conn, Home};
use crate::upstream::h2conn::{H2Conn, H2Pool, Streams, Watched};
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Response, Uri};
use hyper::client::conn::http2;
use hyper_util::client::legacy::connect::Connection as _;
use hyper_util::rt::TokioExecutor;
use levee_config::{Api, Http2, Provider};
use levee_policy::ProviderState;
use levee_wire::headers;
use prometheus_client::metrics::histogram::Histogram;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tower_service::Service;

/// How every provider connects: TCP, then TLS for `https` base URLs (or an
/// in-memory pipe to an in-process provider, in tests).
use crate::upstream::transport::Connector;

/// Longest an idle upstream connection is kept for reuse.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most idle connections kept per provider and worker; a connection freed
/// beyond that is closed.
const POOL_MAX_IDLE: usize = 1024;
/// An HTTP/2 connection silent this long is sent a `PING`; with no answer
/// within `H2_PING_TIMEOUT` it is closed. A provider gone without a FIN or
/// a reset (a NAT or load balancer that dropped the flow) would otherwise
/// keep every stream on the connection waiting for its attempt timeout, and
/// the pool would keep putting new streams on it.
const H2_PING_INTERVAL: Duration = Duration::from_secs(20);
const H2_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle connections are kept per worker thread (see `Options::extra_workers`):
/// a connection is registered with the runtime of the thread that opened it,
/// and is only ever used on that thread. Each pool has a shard per worker,
/// however many the machine runs ([`set_workers`]); this many until told.
const DEFAULT_SHARDS: usize = 16;

static WORKERS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(DEFAULT_SHARDS);

thread_local! {
    static WORKER: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the current thread as worker `i`'s (its own pool shard).
pub fn set_worker(i: usize) {
    WORKER.with(|w| w.set(i));
}

/// How many workers the gateway runs: every provider pool built from now
/// on has a shard for each (at least one), so no two workers share
/// connections opened on one's runtime.
pub fn set_workers(n: usize) {
    WORKERS.store(n.max(1), std::sync::atomic::Ordering::Relaxed);
}

fn shards() -> usize {
    WORKERS.load(std::sync::atomic::Ordering::Relaxed).max(1)
}

/// Why an attempt got no response head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connecting to the provider failed: {0}")]
    Connect(Box<dyn std::error::Error + Send + Sync>),
    #[error("the HTTP handshake with the provider failed: {0}")]
    Handshake(hyper::Error),
    #[error("the provider connection failed: {0}")]
    Request(BoxError),
}

/// An idle connection, ready for a request.
struct Idle {
    conn: H1Conn,
    since: levee_policy::Instant,
}

/// One provider's upstream connections.
struct Pool {
    connector: Connector,
    /// `host` header for every request (the base URL's authority).
    host: HeaderValue,
    clock: Clock,
    /// Per worker: most recently used at the back (LIFO reuse keeps few
    /// connections warm); the oldest at the front, where expiry looks.
    idle: Box<[Mutex<VecDeque<Idle>>]>,
    /// Set once the task that closes expired idle connections is running.
    reaper: std::sync::atomic::AtomicBool,
    /// The provider's `http2` key.
    http2: Http2,
    /// Whether the base URL is https (where `http2: auto` offers h2).
    https: bool,
    /// Under `http2: auto` on https, what the last new connection
    /// negotiated ([`SPOKEN_UNKNOWN`] before the first).
    spoken: std::sync::atomic::AtomicU8,
    /// HTTP/2 connections per worker, like the idle HTTP/1 ones: a stream's
    /// connection is driven on its own thread (no cross-thread wake-up per
    /// frame), and a worker that has drained and stopped takes down only
    /// connections its own requests used.
    h2_shards: Box<[H2Pool]>,
}

/// What `http2: auto` on https has negotiated: nothing yet, HTTP/1.1, h2.
const SPOKEN_UNKNOWN: u8 = 0;
const SPOKEN_H1: u8 = 1;
const SPOKEN_H2: u8 = 2;

/// A new connection, in the protocol it speaks.
enum Opened {
    H1(H1Conn),
    /// In the HTTP/2 pool already, one stream reserved for the caller.
    H2(Arc<H2Conn>),
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("host", &self.host).finish()
    }
}

impl Pool {
    /// This worker's shard (a pool built before more workers were counted
    /// wraps round: never out of bounds).
    fn shard(&self) -> usize {
        WORKER.with(|w| w.get()) % self.idle.len().max(1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Idle>> {
        self.idle[self.shard()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The most recently used idle connection that can take a request now;
    /// closed and expired ones are dropped on the way.
    fn checkout(&self, now: levee_policy::Instant) -> Option<Idle> {
        let mut idle = self.lock();
        while let Some(front) = idle.front() {
            if now.saturating_since(front.since) < POOL_IDLE_TIMEOUT {
                break;
            }
            idle.pop_front();
        }
        while let Some(mut c) = idle.pop_back() {
            if c.conn.is_open() {
                return Some(c);
            }
        }
        None
    }

    /// This worker's HTTP/2 connections.
    fn h2(&self) -> &H2Pool {
        &self.h2_shards[self.shard()]
    }

    /// Closes the idle connections of every worker unused for
    /// `POOL_IDLE_TIMEOUT` (dropping a sender ends its connection).
    fn expire(&self) {
        let now = self.clock.now();
        for h2 in &self.h2_shards {
            h2.expire(now, POOL_IDLE_TIMEOUT);
        }
        for shard in &self.idle {
            let mut idle = shard.lock().unwrap_or_else(|e| e.into_inner());
            while idle
                .front()
                .is_some_and(|c| now.saturating_since(c.since) >= POOL_IDLE_TIMEOUT)
            {
                idle.pop_front();
            }
        }
    }

    /// Starts, once, the task that expires idle connections while no
    /// request comes to do it: after a burst of thousands of streams their
    /// connections and buffers are given back within a minute or so.
    fn start_reaper(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.reaper.swap(true, Ordering::Relaxed) {
            return;
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POOL_IDLE_TIMEOUT / 4);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match pool.upgrade() {
                    Some(p) => p.expire(),
                    None => return,
                }
            }
        });
    }

    /// Idle connections across every worker.
    #[cfg(test)]
    fn idle_count(&self) -> usize {
        self.idle
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    /// Sends `req` on an HTTP/1 connection the attempt now holds.
    async fn send_on_h1(
        self: &Arc<Self>,
        conn: H1Conn,
        req: &mut Outbound<ConnTimed>,
    ) -> Result<Response<UpstreamBody>, Failed> {
        req.body.connected();
        let resp = conn.send(req, &self.host, self.home()).await?;
        Ok(resp.map(UpstreamBody::H1))
    }

    /// Where this pool's HTTP/1 connections return when an answer is over.
    fn home(self: &Arc<Self>) -> Weak<dyn Home> {
        let home: Weak<Self> = Arc::downgrade(self);
        home
    }

    /// A new connection: TCP (plus TLS), the handshake of the protocol the
    /// `http2` key and ALPN pick, and the task that drives it.
    async fn connect(self: &Arc<Self>, uri: &Uri) -> Result<Opened, SendError> {
        let mut connector = self.connector.clone();
        std::future::poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(SendError::Connect)?;
        let io = connector
            .call(uri.clone())
            .await
            .map_err(SendError::Connect)?;
        self.start_reaper();
        let h2 = match self.http2 {
            Http2::Never => false,
            Http2::Always => true,
            Http2::Auto => io.connected().is_negotiated_h2(),
        };
        if self.http2 == Http2::Auto {
            let spoken = if h2 { SPOKEN_H2 } else { SPOKEN_H1 };
            self.spoken
                .store(spoken, std::sync::atomic::Ordering::Relaxed);
        }
        if h2 {
            return self.connect_h2(io).await.map(Opened::H2);
        }
        Ok(Opened::H1(H1Conn::new(io)))
    }

    /// The HTTP/2 handshake on a new connection, its task, and its place in
    /// the pool (one stream reserved for the caller).
    async fn connect_h2(
        &self,
        io: crate::upstream::transport::Conn,
    ) -> Result<Arc<H2Conn>, SendError> {
        let streams = Arc::new(Streams::default());
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(H2_PING_INTERVAL)
            .keep_alive_timeout(H2_PING_TIMEOUT)
            .keep_alive_while_idle(true)
            .handshake(Watched::new(io, Arc::clone(&streams)))
            .await
            .map_err(SendError::Handshake)?;
        // No limit until the connection's task first reads h2's (hyper's
        // assumption of 100 until the server's SETTINGS arrive, then the
        // server's own).
        let server_max = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
        tokio::spawn(h2conn::drive(conn, Arc::clone(&server_max)));
        let c = Arc::new(H2Conn::new(sender, streams, server_max, self.clock.now()));
        self.h2().insert(Arc::clone(&c));
        Ok(c)
    }

    /// Whether a request goes to the HTTP/2 pool first. Under `http2:
    /// auto` on https that is also so until the first connection has
    /// negotiated: requests arriving together then wait for that one
    /// connection (if it is h2 they share it) instead of opening one each.
    fn prefers_h2(&self) -> bool {
        match self.http2 {
            Http2::Always => true,
            Http2::Never => false,
            Http2::Auto => {
                self.https && self.spoken.load(std::sync::atomic::Ordering::Relaxed) != SPOKEN_H1
            }
        }
    }

    /// Sends one request on a pooled connection or a new one.
    ///
    /// Opening a connection (TCP, TLS, a handshake) is boxed where it is
    /// awaited: it is rare next to sending on a pooled connection, and inline
    /// its future would make every attempt's that large (in a debug build:
    /// 10,240 bytes with both protocols' paths inline, 2,008 boxed; 2,384
    /// when only HTTP/1 was spoken and its connect was inline).
    async fn send(
        self: &Arc<Self>,
        req: Outbound<ConnTimed>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        if self.prefers_h2() {
            self.send_h2(req, None).await
        } else {
            self.send_h1(req).await
        }
    }

    /// Sends one request over HTTP/1. A request that a reused connection
    /// refused before taking any of it (the provider closed the idle
    /// connection just then) goes on a new one.
    async fn send_h1(
        self: &Arc<Self>,
        mut req: Outbound<ConnTimed>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        // A connection taken from the pool at once waited for nothing, and
        // the attempt's start is recent enough to judge idle ones by: two
        // readings of the clock fewer per request (~200 instructions).
        let mut at_once = Some(req.body.started());
        loop {
            let now = at_once.unwrap_or_else(|| self.clock.now());
            let (conn, reused) = match self.checkout(now) {
                Some(c) => {
                    if at_once.take().is_some() {
                        req.body.connected_at(now);
                    }
                    (c.conn, true)
                }
                None => match Box::pin(self.connect(&req.uri)).await? {
                    Opened::H1(c) => (c, false),
                    // `http2: auto` and the provider picked h2 this time.
                    Opened::H2(c) => return Box::pin(self.send_h2(req, Some(c))).await,
                },
            };
            match self.send_on_h1(conn, &mut req).await {
                Ok(resp) => return Ok(resp),
                Err(f) if f.unsent && reused => continue,
                Err(f) => return Err(f.into()),
            }
        }
    }

    /// Sends one request over HTTP/2 (on `first`, a connection already
    /// reserved for it, when given): the full URI gives `:scheme` and
    /// `:authority`. A request the server did not process — its stream
    /// refused, the connection shut down before it, or the connection
    /// closed before it was written — goes once more on a new connection.
    async fn send_h2(
        self: &Arc<Self>,
        mut req: Outbound<ConnTimed>,
        mut first: Option<Arc<H2Conn>>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let mut retried = false;
        loop {
            let conn = match first.take() {
                Some(c) => c,
                None => match self.h2_conn(&req, retried).await? {
                    Ok(c) => c,
                    // `http2: auto` and the provider picked HTTP/1.1 this time.
                    Err(Some(conn)) => {
                        return self.send_on_h1(conn, &mut req).await.map_err(Into::into)
                    }
                    // ... while this request waited for that connection.
                    Err(None) => return Box::pin(self.send_h1(req)).await,
                },
            };
            req.body.connected();
            // The outbound request stays here: hyper gives back only requests
            // never written, and one the server refused unprocessed goes once
            // more as it was.
            let sent = conn.sender.clone().try_send_request(req.to_request()).await;
            let e = match sent {
                Ok(resp) => return Ok(resp.map(UpstreamBody::H2)),
                Err(mut e) => {
                    if e.take_message().is_some() {
                        conn.unreserve();
                    } else if !h2conn::refused_unprocessed(e.error()) {
                        return Err(SendError::Request(Box::new(e.into_error())));
                    }
                    e
                }
            };
            if retried {
                return Err(SendError::Request(Box::new(e.into_error())));
            }
            retried = true;
        }
    }

    /// A pooled HTTP/2 connection with a stream reserved, or a new one
    /// (always new when `fresh`); or, when `http2: auto` opened an HTTP/1.1
    /// connection instead, that connection (`None`: another request's
    /// connection found HTTP/1.1 while this one waited: use the HTTP/1 pool).
    async fn h2_conn(
        self: &Arc<Self>,
        req: &Outbound<ConnTimed>,
        fresh: bool,
    ) -> Result<Result<Arc<H2Conn>, Option<H1Conn>>, SendError> {
        if !fresh {
            if let Some(c) = self.h2().checkout(self.clock.now()) {
                return Ok(Ok(c));
            }
        }
        let _opening = self.h2().opening.lock().await;
        if !self.prefers_h2() {
            return Ok(Err(None));
        }
        if !fresh {
            if let Some(c) = self.h2().checkout(self.clock.now()) {
                return Ok(Ok(c));
            }
        }
        Ok(match Box::pin(self.connect(&req.uri)).await? {
            Opened::H2(c) => Ok(c),
            Opened::H1(c) => Err(Some(c)),
        })
    }
}

impl Home for Pool {
    /// Back into this worker's idle connections, unless they are full.
    fn checkin(&self, conn: H1Conn) {
        let mut idle = self.lock();
        if idle.len() < POOL_MAX_IDLE {
            idle.push_back(Idle {
                conn,
                since: self.clock.now(),
            });
        }
    }
}

impl From<Failed> for SendError {
    fn from(f: Failed) -> Self {
        SendError::Request(Box::new(f.error))
    }
}

/// Why a provider could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("provider `{provider}`: environment variable `{var}` (api_key_env) is not set; export it or remove `api_key_env`")]
    MissingKey { provider: String, var: String },
    #[error("provider `{provider}`: environment variable `{var}` (named in `{key}`) is not set; export it or write the value in the config")]
    MissingValue {
        provider: String,
        key: &'static str,
        var: String,
    },
    #[error("provider `{provider}`: the key in `{var}` is not a valid header value")]
    BadKey { provider: String, var: String },
    #[error(transparent)]
    Platform(#[from] crate::upstream::platform::PlatformError),
}

/// What a query parameter's name or value keeps unescaped: RFC 3986's
/// unreserved characters.
const QUERY_PART: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A provider's allowance shared by replicas (Redis): every configured
/// meter (requests and tokens), with a local allowance at 1/N of each used
/// while Redis is unavailable.
#[derive(Debug)]
pub struct SharedRate {
    meters: Vec<(levee_policy::allowance::Meter, crate::state::SharedMeter)>,
    local: Mutex<levee_policy::allowance::Allowance>,
}

impl SharedRate {
    /// The shared meters of `limits`, or `None` when it meters nothing.
    fn new(limits: levee_policy::allowance::Limits, replicas: u32) -> Option<SharedRate> {
        use levee_policy::allowance::{Allowance, Limits, Meter};
        let n = u64::from(replicas.max(1));
        let mut meters = Vec::new();
        if let Some(rpm) = limits.requests_per_minute {
            let m = crate::state::SharedMeter {
                suffix: "",
                per_minute: u64::from(rpm),
                capacity: u64::from(limits.request_burst.max(1)),
            };
            meters.push((Meter::Requests, m));
        }
        for (meter, suffix, per_minute) in [
            (Meter::Tokens, ":tokens", limits.tokens_per_minute),
            (
                Meter::InputTokens,
                ":input_tokens",
                limits.input_tokens_per_minute,
            ),
            (
                Meter::OutputTokens,
                ":output_tokens",
                limits.output_tokens_per_minute,
            ),
        ] {
            if let Some(t) = per_minute {
                let m = crate::state::SharedMeter {
                    suffix,
                    per_minute: t,
                    capacity: t,
                };
                meters.push((meter, m));
            }
        }
        if meters.is_empty() {
            return None;
        }
        let share = |v: Option<u64>| v.map(|v| (v / n).max(1));
        let local = Allowance::new(Limits {
            requests_per_minute: limits
                .requests_per_minute
                .map(|r| (u64::from(r) / n).max(1) as u32),
            request_burst: (u64::from(limits.request_burst) / n).max(1) as u32,
            tokens_per_minute: share(limits.tokens_per_minute),
            input_tokens_per_minute: share(limits.input_tokens_per_minute),
            output_tokens_per_minute: share(limits.output_tokens_per_minute),
        });
        Some(SharedRate {
            meters,
            local: Mutex::new(local),
        })
    }

    /// `cost` of every meter of the allowance, or how long until it conforms.
    pub async fn check(
        &self,
        redis: &crate::state::RedisState,
        provider: &str,
        now: levee_policy::Instant,
        cost: levee_policy::allowance::Cost,
    ) -> Result<(), Duration> {
        let spend: Vec<_> = self
            .meters
            .iter()
            .map(|(meter, m)| (*m, units(*meter, cost)))
            .collect();
        if let Some(r) = redis.allowance_of(provider, &spend).await {
            return r;
        }
        let ask = levee_policy::allowance::Ask {
            cost,
            priority: levee_policy::allowance::Priority::High,
            ..Default::default()
        };
        self.local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(now, &ask)
            .map(|_| ())
            .map_err(|until| until.saturating_since(now))
    }

    /// What the answer used against its estimate, on the meters settled
    /// from usage (input and output; a total keeps its estimate, as
    /// OpenAI's does).
    pub fn settlements(
        &self,
        estimate: levee_policy::allowance::Cost,
        used: levee_policy::allowance::Cost,
    ) -> Vec<(crate::state::SharedMeter, i64)> {
        use levee_policy::allowance::Meter;
        self.meters
            .iter()
            .filter(|(meter, _)| matches!(meter, Meter::InputTokens | Meter::OutputTokens))
            .map(|(meter, m)| {
                let back = units(*meter, estimate) as i64 - units(*meter, used) as i64;
                (*m, back)
            })
            .filter(|(_, back)| *back != 0)
            .collect()
    }
}

/// The units of `meter` a request of `cost` spends.
fn units(meter: levee_policy::allowance::Meter, cost: levee_policy::allowance::Cost) -> u64 {
    use levee_policy::allowance::Meter;
    match meter {
        Meter::Requests => 1,
        Meter::Tokens => u64::from(cost.input) + u64::from(cost.output),
        Meter::InputTokens => u64::from(cost.input),
        Meter::OutputTokens => u64::from(cost.output),
    }
}

/// The header a provider's requests authenticate with, read now from the
/// environment variable its `api_key_env` names (none without one), and the
/// key itself (to redact). `levee check` reads keys through this too, so it
/// refuses what `serve` and a reload refuse.
pub fn provider_auth(
    p: &Provider,
) -> Result<Option<(HeaderName, HeaderValue, String)>, UpstreamError> {
    let Some(var) = p
        .api_key_env
        .as_ref()
        .filter(|_| p.auth != levee_config::Auth::None)
    else {
        return Ok(None);
    };
    let key = std::env::var(var).map_err(|_| UpstreamError::MissingKey {
        provider: p.name.clone(),
        var: var.clone(),
    })?;
    let (name, value) = match &p.auth {
        levee_config::Auth::Header(n) => (
            HeaderName::from_bytes(n.as_bytes()).map_err(|_| UpstreamError::BadKey {
                provider: p.name.clone(),
                var: var.clone(),
            })?,
            key,
        ),
        levee_config::Auth::Bearer | levee_config::Auth::None => {
            (header::AUTHORIZATION, format!("Bearer {key}"))
        }
    };
    let mut v = HeaderValue::from_str(&value).map_err(|_| UpstreamError::BadKey {
        provider: p.name.clone(),
        var: var.clone(),
    })?;
    v.set_sensitive(true);
    let secret = key_of(&value).to_string();
    Ok(Some((name, v, secret)))
}

/// A provider's `headers:` and `query:`, resolved: values written in the
/// config, or read now from the variables `{ env: VAR }` names.
#[derive(Debug, Default)]
pub struct Extras {
    /// Sent with every request.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Encoded (`a=b&c=d`), added to every URI.
    pub query: String,
    /// The values read from the environment, to redact like the key.
    pub env_values: Vec<String>,
}

/// Why one of a provider's `headers:` or `query:` entries cannot be used.
#[derive(Debug)]
pub struct ExtraProblem {
    /// `headers` or `query`.
    pub field: &'static str,
    /// The entry's name.
    pub name: String,
    pub error: UpstreamError,
}

/// Resolves a provider's `headers:` and `query:` (`serve`, a reload and
/// `levee check` alike); `Err` lists every entry that cannot be used.
pub fn provider_extras(p: &Provider) -> Result<Extras, Vec<ExtraProblem>> {
    let mut extras = Extras::default();
    let mut problems = Vec::new();
    let mut resolve = |field: &'static str, name: &str, v: &levee_config::ValueSource| match v {
        levee_config::ValueSource::Text(t) => Some(t.clone()),
        levee_config::ValueSource::Env(var) => match std::env::var(var) {
            Ok(value) => {
                extras.env_values.push(value.clone());
                Some(value)
            }
            Err(_) => {
                problems.push(ExtraProblem {
                    field,
                    name: name.to_string(),
                    error: UpstreamError::MissingValue {
                        provider: p.name.clone(),
                        key: field,
                        var: var.clone(),
                    },
                });
                None
            }
        },
    };
    let mut headers = Vec::with_capacity(p.headers.len());
    let mut bad_headers = Vec::new();
    for (name, v) in &p.headers {
        let Some(value) = resolve("headers", name, v) else {
            continue;
        };
        let header = HeaderName::from_bytes(name.as_bytes())
            .ok()
            .zip(HeaderValue::from_str(&value).ok());
        match header {
            Some((n, mut value)) => {
                value.set_sensitive(matches!(v, levee_config::ValueSource::Env(_)));
                headers.push((n, value));
            }
            None => bad_headers.push(ExtraProblem {
                field: "headers",
                name: name.clone(),
                error: UpstreamError::BadKey {
                    provider: p.name.clone(),
                    var: format!("headers.{name}"),
                },
            }),
        }
    }
    let mut query = String::new();
    for (name, v) in &p.query {
        let Some(value) = resolve("query", name, v) else {
            continue;
        };
        if !query.is_empty() {
            query.push('&');
        }
        query.extend(percent_encoding::utf8_percent_encode(name, QUERY_PART));
        query.push('=');
        query.extend(percent_encoding::utf8_percent_encode(&value, QUERY_PART));
    }
    problems.extend(bad_headers);
    if !problems.is_empty() {
        return Err(problems);
    }
    extras.headers = headers;
    extras.query = query;
    Ok(extras)
}

/// One provider at run time.
#[derive(Debug)]
pub struct ProviderRuntime {
    /// Set when the allowance is shared across replicas.
    pub(crate) shared_rate: Option<SharedRate>,
    pub(crate) name: String,
    /// `name` as the `x-levee-target` value (none when it is not a valid
    /// header value).
    pub(crate) name_header: Option<HeaderValue>,
    pub(crate) api: Api,
    scheme_authority: String,
    base_path: String,
    /// The upstream URI of each endpoint Levee serves (`levee_wire::paths::POST`),
    /// built once: most requests carry no query string, and a clone shares
    /// the parsed URI's bytes where building it costs a format, a parse and
    /// three allocations per request.
    endpoints: Vec<(&'static str, Uri)>,
    auth: Option<(HeaderName, HeaderValue)>,
    /// `headers:`, resolved: sent with every request.
    extra_headers: Vec<(HeaderName, HeaderValue)>,
    /// `query:`, resolved and encoded (`a=b&c=d`): added to every URI.
    query: String,
    /// The provider key itself, to redact from whatever Levee passes on.
    pub(crate) secret: Option<String>,
    /// Values read from the environment for `headers:` and `query:`:
    /// redacted like the key.
    pub(crate) env_values: Vec<String>,
    pool: Arc<Pool>,
    pub(crate) state: Mutex<ProviderState>,
    connect_hist: Histogram,
    clock: Clock,
    /// The provider's own model list, fetched for `GET /v1/models` and kept
    /// a short while.
    pub(crate) models: crate::upstream::listed::ModelCache,
    /// Where the provider runs: the cloud's URLs, auth and framing.
    pub(crate) platform: crate::upstream::platform::PlatformRuntime,
}

impl ProviderRuntime {
    /// Builds the client and reads the key from the environment.
    pub fn new(
        p: &Provider,
        connect_hist: Histogram,
        clock: Clock,
        replicas: Option<u32>,
    ) -> Result<Self, UpstreamError> {
        Self::with_dial(p, connect_hist, clock, replicas, None)
    }

    /// [`ProviderRuntime::new`], connecting through `dial` (in-memory
    /// pipes to in-process providers) instead of the network when given.
    pub fn with_dial(
        p: &Provider,
        connect_hist: Histogram,
        clock: Clock,
        replicas: Option<u32>,
        dial: Option<&crate::upstream::transport::Dial>,
    ) -> Result<Self, UpstreamError> {
        let (auth, secret) = match provider_auth(p)? {
            Some((name, value, key)) => (Some((name, value)), Some(key)),
            None => (None, None),
        };
        let Extras {
            headers: extra_headers,
            query,
            env_values,
        } = provider_extras(p).map_err(|mut problems| problems.swap_remove(0).error)?;
        let connector = crate::upstream::transport::connector(p, dial);
        let platform = crate::upstream::platform::PlatformRuntime::with_connector(p, &connector)?;
        let scheme = p.base_url.scheme_str().unwrap_or("http");
        let authority = p
            .base_url
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let pool = Arc::new(Pool {
            connector,
            host: host_header(&p.base_url).map_err(|_| UpstreamError::BadKey {
                provider: p.name.clone(),
                var: "base_url".into(),
            })?,
            clock,
            idle: (0..shards()).map(|_| Mutex::new(VecDeque::new())).collect(),
            reaper: std::sync::atomic::AtomicBool::new(false),
            http2: p.http2,
            https: scheme == "https",
            spoken: std::sync::atomic::AtomicU8::new(SPOKEN_UNKNOWN),
            h2_shards: (0..shards())
                .map(|_| H2Pool::new(p.http2_max_streams))
                .collect(),
        });
        let shared_rate = replicas.and_then(|n| SharedRate::new(p.limits, n));
        let state = if shared_rate.is_some() {
            p.new_state_without_allowance()
        } else {
            p.new_state()
        };
        let mut runtime = ProviderRuntime {
            shared_rate,
            name: p.name.clone(),
            name_header: HeaderValue::from_str(&p.name).ok(),
            api: p.api,
            scheme_authority: format!("{scheme}://{authority}"),
            base_path: p.base_url.path().trim_end_matches('/').to_string(),
            endpoints: Vec::new(),
            auth,
            extra_headers,
            query,
            secret,
            env_values,
            pool,
            state: Mutex::new(state),
            connect_hist,
            clock,
            models: crate::upstream::listed::ModelCache::default(),
            platform,
        };
        runtime.endpoints = levee_wire::paths::POST
            .iter()
            .filter_map(|path| Some((*path, runtime.build_uri(path)?)))
            .collect();
        Ok(runtime)
    }

    /// Sends one attempt, timing how long it waits for a connection.
    pub fn send(
        &self,
        req: Outbound<Bytes>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, SendError>> + Send + 'static {
        let started = self.clock.now();
        let req =
            req.map(|bytes| ConnTimed::new(bytes, started, self.clock, self.connect_hist.clone()));
        let pool = Arc::clone(&self.pool);
        async move { pool.send(req).await }
    }

    /// The upstream URI for an inbound path (`/v1/...`), joined to the base
    /// URL's path without doubling a `/v1`.
    pub fn uri_for(&self, path_and_query: &str) -> Option<Uri> {
        match self.endpoints.iter().find(|(p, _)| *p == path_and_query) {
            Some((_, uri)) => Some(uri.clone()),
            None => self.build_uri(path_and_query),
        }
    }

    /// `base_url` is used as the provider's own SDK uses it. A bare host
    /// gets the whole path (`/v1/chat/completions`). For OpenAI a base URL
    /// with a path is the API's root, `/v1` included (`…/v1`,
    /// `…/v1beta/openai`, an Azure `…/openai/v1`): the path after `/v1` is
    /// added to it. For Anthropic, whose SDK's base URL has no `/v1`, a
    /// path is a prefix, and a base URL ending in `/v1` does not double it.
    fn build_uri(&self, path_and_query: &str) -> Option<Uri> {
        let root = match self.api {
            Api::OpenAi => !self.base_path.is_empty(),
            Api::Anthropic => self.base_path.ends_with("/v1"),
        };
        let tail = match path_and_query.strip_prefix("/v1") {
            Some(rest) if root && rest.starts_with('/') => rest,
            _ => path_and_query,
        };
        let mut uri = format!("{}{}{}", self.scheme_authority, self.base_path, tail);
        if !self.query.is_empty() {
            uri.push(if tail.contains('?') { '&' } else { '?' });
            uri.push_str(&self.query);
        }
        uri.parse().ok()
    }

    /// The URI for a path a platform chose ([`crate::upstream::platform::PlatformRuntime::target`]):
    /// appended verbatim to the base URL's path, with `query:` added.
    pub fn platform_uri(&self, path_and_query: &str) -> Option<Uri> {
        let mut uri = format!(
            "{}{}{}",
            self.scheme_authority, self.base_path, path_and_query
        );
        if !self.query.is_empty() {
            uri.push(if path_and_query.contains('?') {
                '&'
            } else {
                '?'
            });
            uri.push_str(&self.query);
        }
        uri.parse().ok()
    }

    /// Everything to redact that this provider was configured with: its key
    /// and the values its `headers:` and `query:` read from the environment.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.secret
            .as_deref()
            .into_iter()
            .chain(self.env_values.iter().map(String::as_str))
    }

    /// The clock the provider's attempts are timed by.
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// Locks the provider's policy state (a poisoned lock is still usable:
    /// the state is plain counters).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, ProviderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `host` header for a base URL: its host, and its port unless it is the
/// scheme's default.
fn host_header(base: &Uri) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    let host = base.host().unwrap_or_default();
    let default_port = match base.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    match base.port_u16() {
        Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")),
        _ => HeaderValue::from_str(host),
    }
}

/// The key inside an auth header value (`Bearer KEY` or `KEY`).
fn key_of(value: &str) -> &str {
    value.strip_prefix("Bearer ").unwrap_or(value)
}

/// The caller headers forwarded upstream: an allow-list, so nothing that
/// selects an account, a billing project or an identity at the provider
/// (`openai-organization`, `openai-project`, `cookie`, `api-key`,
/// `x-goog-api-key`, `forwarded`, `x-forwarded-for`, …) ever travels beside
/// Levee's own key. Levee sets `authorization`/`x-api-key`, `x-timeout-ms`
/// and `idempotency-key` itself; framing headers are the connection's.
pub fn is_forwarded(api: Api, name: &HeaderName) -> bool {
    match name.as_str() {
        "content-type" | "accept" | "user-agent" | "traceparent" | "tracestate" => true,
        "anthropic-version" | "anthropic-beta" => api == Api::Anthropic,
        "openai-beta" => api == Api::OpenAi,
        _ => false,
    }
}

/// Builds one attempt's request (a `POST`).
#[cfg(test)]
pub fn build_request(
    provider: &ProviderRuntime,
    inbound: &HeaderMap,
    uri: Uri,
    body: Bytes,
    timeout: Duration,
    idempotency_key: &HeaderValue,
) -> Outbound<Bytes> {
    let mut req = Outbound::post(uri, body);
    request_fields(provider, &mut req, inbound, timeout, Some(idempotency_key));
    req
}

/// Builds a request of any method: an attempt of a pass-through request,
/// or Levee's own (the model list, with no caller fields and no key).
pub fn build_request_with(
    provider: &ProviderRuntime,
    method: http::Method,
    inbound: &HeaderMap,
    uri: Uri,
    body: Bytes,
    timeout: Duration,
    idempotency_key: Option<&HeaderValue>,
) -> Outbound<Bytes> {
    let mut req = Outbound::post(uri, body);
    req.method = method;
    request_fields(provider, &mut req, inbound, timeout, idempotency_key);
    req
}

/// The fields of a request to `provider`: the caller's allowed ones, the
/// provider's auth and `headers:`, `anthropic-version`, a JSON
/// `content-type` for a body that has none, the idempotency key, and the
/// attempt's timeout.
fn request_fields(
    provider: &ProviderRuntime,
    req: &mut Outbound<Bytes>,
    inbound: &HeaderMap,
    timeout: Duration,
    idempotency_key: Option<&HeaderValue>,
) {
    let has_body = !req.body.is_empty();
    let h = &mut req.fields;
    // Names listed in the caller's `Connection` header are hop-by-hop.
    let listed: Vec<String> = inbound
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in inbound {
        if is_forwarded(provider.api, name) && !listed.iter().any(|l| l == name.as_str()) {
            h.append(name.clone(), value.clone());
        }
    }
    if let Some((n, v)) = &provider.auth {
        h.insert(n.clone(), v.clone());
    }
    for (n, v) in &provider.extra_headers {
        h.insert(n.clone(), v.clone());
    }
    if provider.api == Api::Anthropic && !h.contains(&headers::ANTHROPIC_VERSION) {
        h.append(
            headers::ANTHROPIC_VERSION,
            HeaderValue::from_static("2023-06-01"),
        );
    }
    if has_body && !h.contains(&header::CONTENT_TYPE) {
        h.append(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(key) = idempotency_key {
        h.insert(headers::IDEMPOTENCY_KEY, key.clone());
    }
    req.timeout_ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
}

/// The result (`levee_upstream_attempts_total{result}`, the log's
/// `last_attempt`) of an attempt that got no response: `tls` when the TLS
/// handshake failed — a certificate the gateway does not trust, expired or
/// for another name, or a server that does not speak TLS — else
/// `connect_error` (refused, unreachable, DNS, reset before a response).
/// Either way the core sees a connection fault (`Outcome::ConnectError`):
/// the provider cannot be reached, and its breaker counts it.
pub fn failure_result(e: &SendError) -> crate::observe::outcome::AttemptResult {
    let inner: &(dyn std::error::Error + 'static) = match e {
        SendError::Connect(e) => e.as_ref(),
        SendError::Handshake(e) => e,
        SendError::Request(e) => e.as_ref(),
    };
    let mut cause = Some(inner);
    while let Some(c) = cause {
        if is_tls(c) {
            return crate::observe::outcome::AttemptResult::Tls;
        }
        cause = c.source();
    }
    crate::observe::outcome::AttemptResult::ConnectError
}

/// rustls reports a failed handshake as an `io::Error` wrapping its own
/// error (hyper-rustls wraps that in one more `io::Error`), and an
/// `io::Error`'s `source()` skips the value it wraps: look inside.
fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.is::<rustls::Error>() {
        return true;
    }
    e.downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .is_some_and(|inner| is_tls(inner as &(dyn std::error::Error + 'static)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_callers_vendor_headers_reach_only_their_own_providers() {
        let name = |n: &'static str| HeaderName::from_static(n);
        for n in ["anthropic-version", "anthropic-beta"] {
            assert!(is_forwarded(Api::Anthropic, &name(n)), "{n}");
            assert!(!is_forwarded(Api::OpenAi, &name(n)), "{n}");
        }
        assert!(is_forwarded(Api::OpenAi, &name("openai-beta")));
        assert!(!is_forwarded(Api::Anthropic, &name("openai-beta")));
        for n in [
            "openai-organization",
            "x-stainless-lang",
            "authorization",
            "x-api-key",
        ] {
            assert!(!is_forwarded(Api::OpenAi, &name(n)), "{n}");
            assert!(!is_forwarded(Api::Anthropic, &name(n)), "{n}");
        }
        assert!(is_forwarded(Api::OpenAi, &name("traceparent")));
    }

    #[test]
    fn upstream_uris_use_the_base_url_as_the_providers_sdk_does() {
        for (api, base, extra, path, want) in [
            (
                "openai",
                "http://h.test",
                "",
                "/v1/chat/completions",
                "http://h.test/v1/chat/completions",
            ),
            (
                "openai",
                "http://h.test/v1",
                "",
                "/v1/chat/completions",
                "http://h.test/v1/chat/completions",
            ),
            // Gemini's OpenAI-compatible root: no `/v1` added.
            (
                "openai",
                "https://generativelanguage.googleapis.com/v1beta/openai/",
                "",
                "/v1/chat/completions",
                "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
            ),
            (
                "openai",
                "http://h.test:8080/proxy",
                "",
                "/v1/embeddings",
                "http://h.test:8080/proxy/embeddings",
            ),
            // Anthropic's SDK base URL has no `/v1`: a path is a prefix.
            (
                "anthropic",
                "http://h.test:8080/proxy",
                "",
                "/v1/messages",
                "http://h.test:8080/proxy/v1/messages",
            ),
            (
                "anthropic",
                "https://h.test/anthropic/v1/",
                "",
                "/v1/messages",
                "https://h.test/anthropic/v1/messages",
            ),
            // Not one of the endpoints built in advance: built on the spot.
            (
                "openai",
                "http://h.test/v1",
                "",
                "/v1/messages?beta=true",
                "http://h.test/v1/messages?beta=true",
            ),
            // `query:` on every URI, escaped, after the caller's own.
            (
                "openai",
                "https://r.test/openai/v1",
                ", query: { api-version: \"2024-10-21 preview\" }",
                "/v1/chat/completions",
                "https://r.test/openai/v1/chat/completions?api-version=2024-10-21%20preview",
            ),
            (
                "openai",
                "https://r.test/openai/v1",
                ", query: { api-version: v1 }",
                "/v1/chat/completions?x=1",
                "https://r.test/openai/v1/chat/completions?x=1&api-version=v1",
            ),
        ] {
            let cfg = levee_config::Config::parse(&format!(
                "providers:\n  p: {{ api: {api}, base_url: \"{base}\"{extra} }}\nroutes:\n  - targets: [p]\n"
            ))
            .unwrap();
            let p =
                ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
                    .unwrap();
            assert_eq!(
                p.uri_for(path).unwrap().to_string(),
                want,
                "{base} + {path}"
            );
        }
    }

    #[test]
    fn a_providers_key_goes_where_its_auth_says_with_its_extra_fields() {
        std::env::set_var("LEVEE_UPSTREAM_TEST_KEY", "k-123456789");
        std::env::set_var("LEVEE_UPSTREAM_TEST_ORG", "org-from-env");
        let cases = [
            ("openai", "", Some(("authorization", "Bearer k-123456789"))),
            ("anthropic", "", Some(("x-api-key", "k-123456789"))),
            (
                "openai",
                ", auth: header api-key",
                Some(("api-key", "k-123456789")),
            ),
            (
                "anthropic",
                ", auth: bearer",
                Some(("authorization", "Bearer k-123456789")),
            ),
        ];
        for (api, extra, want) in cases {
            let cfg = levee_config::Config::parse(&format!(
                "providers:\n  p: {{ api: {api}, base_url: \"http://h.test\", api_key_env: LEVEE_UPSTREAM_TEST_KEY{extra}, headers: {{ OpenAI-Organization: {{ env: LEVEE_UPSTREAM_TEST_ORG }}, x-static: s }} }}\nroutes:\n  - targets: [p]\n"
            ))
            .unwrap();
            let p =
                ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
                    .unwrap();
            let out = bare_request(&p);
            let (name, value) = want.unwrap_or(("", ""));
            assert_eq!(
                out.fields
                    .get(&HeaderName::from_bytes(name.as_bytes()).unwrap())
                    .map(|v| v.as_bytes()),
                Some(value.as_bytes()),
                "{api}{extra}"
            );
            assert_eq!(
                out.fields
                    .get(&HeaderName::from_static("openai-organization"))
                    .map(|v| v.as_bytes()),
                Some(&b"org-from-env"[..])
            );
            assert_eq!(
                out.fields
                    .get(&HeaderName::from_static("x-static"))
                    .map(|v| v.as_bytes()),
                Some(&b"s"[..])
            );
            assert!(
                p.secrets().any(|s| s == "org-from-env"),
                "an env value is redacted"
            );
        }
        let cfg = levee_config::Config::parse(
            "providers:\n  p: { api: openai, base_url: \"http://h.test\", auth: none }\nroutes:\n  - targets: [p]\n",
        )
        .unwrap();
        let p = ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
            .unwrap();
        let out = bare_request(&p);
        assert!(out
            .fields
            .get(&HeaderName::from_static("authorization"))
            .is_none());
        // Config errors: a reserved field, a key with auth none.
        for bad in [
            "headers: { Host: x }",
            "headers: { content-length: \"1\" }",
            "auth: none, api_key_env: X",
            "auth: basic",
        ] {
            let text = format!("providers:\n  p: {{ api: openai, base_url: \"http://h.test\", {bad} }}\nroutes:\n  - targets: [p]\n");
            assert!(levee_config::Config::parse(&text).is_err(), "{bad}");
        }
    }

    /// A chat-completions attempt of `p`'s with no caller fields and an
    /// empty body.
    fn bare_request(p: &ProviderRuntime) -> Outbound<Bytes> {
        let uri = p.uri_for("/v1/chat/completions").unwrap();
        build_request(
            p,
            &HeaderMap::new(),
            uri,
            Bytes::new(),
            Duration::from_secs(1),
            &HeaderValue::from_static("k"),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_after_the_idle_timeout_without_traffic() {
        let mock = levee_mock::spawn(
            "127.0.0.1:0".parse().unwrap(),
            levee_mock::MockOptions::default(),
        )
        .await
        .unwrap();
        let cfg = levee_config::Config::parse(&format!(
            "providers:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n",
            mock.url()
        ))
        .unwrap();
        let p = ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
            .unwrap();
        complete(&p).await;
        // The body's last byte returned the connection to the pool.
        assert_eq!(
            p.pool.idle_count(),
            1,
            "the connection went back to the pool"
        );
        tokio::time::sleep(POOL_IDLE_TIMEOUT / 2).await;
        assert_eq!(p.pool.idle_count(), 1, "still fresh: kept");
        tokio::time::sleep(POOL_IDLE_TIMEOUT).await;
        assert_eq!(p.pool.idle_count(), 0, "expired with no request to notice");
    }

    /// A provider over pipes that answers one request per connection with
    /// keep-alive, then closes its side for writing (the client reads the
    /// end of the stream, while its own writes are still taken, as on a TCP
    /// connection the server closed); returns how many connections it took.
    fn one_answer_per_connection() -> (ProviderRuntime, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dialed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&dialed);
        let dial: crate::upstream::transport::Dial = Arc::new(move |_: &Uri| {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match theirs.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                let _ = theirs.write_all(answer).await;
                let _ = theirs.shutdown().await;
                // Keep reading (and dropping) whatever else arrives.
                while let Ok(n) = theirs.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                }
            });
            Some(ours)
        });
        let cfg = levee_config::Config::parse(
            "providers:\n  p: { api: openai, base_url: \"http://mock.test\" }\nroutes:\n  - targets: [p]\n",
        )
        .unwrap();
        let hist = Histogram::new([1.0]);
        let p =
            ProviderRuntime::with_dial(&cfg.providers[0], hist, Clock::new(), None, Some(&dial))
                .unwrap();
        (p, dialed)
    }

    #[tokio::test]
    async fn a_pooled_connection_the_provider_has_closed_is_passed_over() {
        let (p, dialed) = one_answer_per_connection();
        complete(&p).await;
        assert_eq!(p.pool.idle_count(), 1, "kept alive, as the answer said");
        // The provider closed it while idle: the next request must not be
        // written on it (it would get no answer), but on a new connection.
        tokio::task::yield_now().await;
        complete(&p).await;
        assert_eq!(dialed.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// A provider speaking HTTP/2 (`http2: always`) to an in-process mock.
    fn h2_provider() -> (levee_mock::InProcess, ProviderRuntime) {
        h2_provider_with_workers(DEFAULT_SHARDS)
    }

    /// [`h2_provider`] built while the gateway counts `workers` workers
    /// (pools built by other tests meanwhile get as many shards: harmless).
    fn h2_provider_with_workers(workers: usize) -> (levee_mock::InProcess, ProviderRuntime) {
        set_workers(workers);
        let mock = levee_mock::InProcess::new(levee_mock::MockOptions::default());
        let served = mock.clone();
        let dial: crate::upstream::transport::Dial =
            Arc::new(move |_: &Uri| Some(served.connect()));
        let cfg = levee_config::Config::parse(
            "providers:\n  p: { api: openai, base_url: \"http://mock.test\", http2: always }\nroutes:\n  - targets: [p]\n",
        )
        .unwrap();
        let hist = Histogram::new([1.0]);
        let p =
            ProviderRuntime::with_dial(&cfg.providers[0], hist, Clock::new(), None, Some(&dial))
                .unwrap();
        set_workers(DEFAULT_SHARDS);
        (mock, p)
    }

    /// One chat completion through `p`, read to its end.
    async fn complete(p: &ProviderRuntime) {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let uri = p.uri_for("/v1/chat/completions").unwrap();
        let key = HeaderValue::from_static("k");
        let req = build_request(
            p,
            &HeaderMap::new(),
            uri,
            Bytes::from(body),
            Duration::from_secs(5),
            &key,
        );
        let resp = p.send(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
        let (mock, p) = h2_provider();
        complete(&p).await;
        complete(&p).await;
        assert_eq!(p.pool.h2().len(), 1, "one connection for both");
        tokio::time::sleep(POOL_IDLE_TIMEOUT / 2).await;
        assert_eq!(p.pool.h2().len(), 1, "still fresh: kept");
        tokio::time::sleep(POOL_IDLE_TIMEOUT).await;
        assert_eq!(p.pool.h2().len(), 0, "expired with no request to notice");
        complete(&p).await;
        let s = mock.stats();
        assert_eq!((s.connections_total, s.http2_requests), (2, 3), "{s:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn each_worker_keeps_its_own_http2_connections() {
        let (mock, p) = h2_provider();
        for worker in [0, 1, 1, 0] {
            set_worker(worker);
            complete(&p).await;
        }
        set_worker(0);
        // A worker that stops takes its connections down with its runtime:
        // they must carry none of another worker's streams.
        let s = mock.stats();
        assert_eq!((s.connections_total, s.http2_requests), (2, 4), "{s:?}");
        assert_eq!(p.pool.h2_shards[0].len(), 1);
        assert_eq!(p.pool.h2_shards[1].len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn thirty_two_workers_each_keep_their_own_connections() {
        // On a 32-core machine: 32 workers, each with a shard of its own
        // (16 fixed shards had worker 16 use worker 0's connections).
        let (mock, p) = h2_provider_with_workers(32);
        for worker in (0..32).chain(0..32) {
            set_worker(worker);
            complete(&p).await;
        }
        set_worker(0);
        let s = mock.stats();
        assert_eq!((s.connections_total, s.http2_requests), (32, 64), "{s:?}");
        assert_eq!(p.pool.h2_shards.len(), 32);
        assert!(p.pool.h2_shards.iter().all(|h| h.len() == 1));
    }
}
