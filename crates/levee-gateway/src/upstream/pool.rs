//! One provider's connection pool: idle HTTP/1.1 connections and HTTP/2
//! connections, a shard of each per worker thread, new connections opened
//! in the protocol the provider's `http2` key and ALPN pick, and the task
//! that closes idle ones.

use crate::clock::Clock;
use crate::http::outbound::Outbound;
use crate::upstream::body::{ConnTimed, UpstreamBody};
use crate::upstream::h1conn::{Failed, H1Conn, Home};
use crate::upstream::h2conn::{self, H2Conn, H2Pool, Streams, Watched};
use crate::upstream::SendError;
use http::header::HeaderValue;
use http::{Response, Uri};
use hyper::client::conn::http2;
use hyper_util::client::legacy::connect::Connection as _;
use hyper_util::rt::TokioExecutor;
use levee_config::{Http2, Provider};
use std::collections::VecDeque;
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

/// An idle connection, ready for a request.
struct Idle {
    conn: H1Conn,
    since: levee_policy::Instant,
}

/// One provider's upstream connections.
pub(super) struct Pool {
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
    /// The provider's `max_connections` (HTTP/1): a permit per open one.
    slots: Arc<tokio::sync::Semaphore>,
    /// Wakes an attempt waiting for a connection when one is back idle.
    returned: tokio::sync::Notify,
    /// `levee_upstream_pool_wait_seconds`: how long attempts waited for a
    /// connection to come free.
    wait_hist: crate::observe::histogram::Histogram,
}

/// The share of an attempt's time it may wait for a connection to come
/// free before it is refused (`pool_exhausted`): a quarter.
const POOL_WAIT_SHARE: u32 = 4;

/// What `http2: auto` on https has negotiated: nothing yet, HTTP/1.1, h2.
const SPOKEN_UNKNOWN: u8 = 0;
const SPOKEN_H1: u8 = 1;
const SPOKEN_H2: u8 = 2;

/// What an attempt at the connection limit gets: a place for a new
/// connection, or an idle one that came back.
enum Slot {
    Free(tokio::sync::OwnedSemaphorePermit),
    Idle(Idle),
}

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
    /// A pool for `p`'s connections, with a shard per worker counted so
    /// far ([`set_workers`]); nothing is connected until a request needs it.
    pub(super) fn new(
        p: &Provider,
        connector: Connector,
        host: HeaderValue,
        clock: Clock,
        https: bool,
        wait_hist: crate::observe::histogram::Histogram,
    ) -> Pool {
        let shards = shards();
        Pool {
            connector,
            host,
            clock,
            idle: (0..shards).map(|_| Mutex::new(VecDeque::new())).collect(),
            reaper: std::sync::atomic::AtomicBool::new(false),
            http2: p.http2,
            https,
            spoken: std::sync::atomic::AtomicU8::new(SPOKEN_UNKNOWN),
            h2_shards: (0..shards)
                .map(|_| H2Pool::new(p.http2_max_streams))
                .collect(),
            slots: Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(p.max_connections).unwrap_or(usize::MAX),
            )),
            returned: tokio::sync::Notify::new(),
            wait_hist,
        }
    }

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
    pub(super) async fn send(
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
                None => {
                    req.body.waiting();
                    match Box::pin(self.slot_or_idle(&req)).await? {
                        Slot::Idle(c) => (c.conn, true),
                        Slot::Free(slot) => match Box::pin(self.connect(&req.uri)).await? {
                            Opened::H1(c) => (c.holding(slot), false),
                            // `http2: auto` and the provider picked h2 this time.
                            Opened::H2(c) => return Box::pin(self.send_h2(req, Some(c))).await,
                        },
                    }
                }
            };
            match self.send_on_h1(conn, &mut req).await {
                Ok(resp) => return Ok(resp),
                Err(f) if f.unsent && reused => continue,
                Err(f) => return Err(f.into()),
            }
        }
    }

    /// A place for a new connection among the provider's
    /// `max_connections`, or an idle connection that came back while the
    /// attempt waited. At the limit it waits for either for a quarter of
    /// the attempt's time, then gives up (`pool_exhausted`): it is never
    /// queued past its share. The wait is timed
    /// (`levee_upstream_pool_wait_seconds`).
    async fn slot_or_idle(&self, req: &Outbound<ConnTimed>) -> Result<Slot, SendError> {
        if let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(Slot::Free(slot));
        }
        let start = self.clock.now();
        let patience = req
            .timeout_ms
            .map_or(Duration::from_secs(1), Duration::from_millis)
            / POOL_WAIT_SHARE;
        let until = self.clock.to_tokio(start + patience);
        let got = loop {
            let returned = self.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            if let Some(idle) = self.checkout(self.clock.now()) {
                break Ok(Slot::Idle(idle));
            }
            tokio::select! {
                slot = Arc::clone(&self.slots).acquire_owned() => match slot {
                    Ok(slot) => break Ok(Slot::Free(slot)),
                    Err(_) => break Err(SendError::PoolExhausted),
                },
                () = &mut returned => {}
                () = tokio::time::sleep_until(until) => break Err(SendError::PoolExhausted),
            }
        };
        let waited = self.clock.now().saturating_since(start);
        self.wait_hist.observe(waited.as_secs_f64());
        got
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
        req.body.waiting();
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
        drop(idle);
        // An attempt waiting at `max_connections` takes it (or the place
        // it left, when it was dropped).
        self.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::histogram::Histogram;
    use crate::upstream::{build_request, ProviderRuntime};
    use bytes::Bytes;
    use http::header::HeaderMap;

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

    /// The worker count is the process's: tests that set it take turns, or
    /// one test's pool would be built with another's count.
    static WORKER_COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// [`h2_provider`] built while the gateway counts `workers` workers.
    fn h2_provider_with_workers(workers: usize) -> (levee_mock::InProcess, ProviderRuntime) {
        let _turn = WORKER_COUNT.lock().unwrap_or_else(|e| e.into_inner());
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
        let resp = p.send(req, p.clock().now()).await.unwrap();
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
