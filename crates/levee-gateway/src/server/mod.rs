//! Accepting connections: the public listener (one task per client
//! connection, served by [`crate::http::front`] under the header-size and
//! header-read-time limits) and the admin listener (`/metrics`, `/healthz`,
//! `/readyz`, on hyper), with graceful shutdown.
//!
//! The admin listener answers only requests whose `Host` names it (421
//! otherwise), so a web page whose domain an attacker points at the admin
//! address (DNS rebinding) cannot read it from a browser; and it sends a
//! `Content-Security-Policy` that lets its pages load nothing.

pub(crate) mod app;
pub(crate) mod spend;
pub(crate) mod status;

use crate::http::front;
use crate::http::respond::{full, Body};
use crate::http::unread::Unread;
use crate::runtime::reload::Reloader;
use crate::runtime::shared::Shared;
use crate::runtime::shutdown::Watcher;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Longest wait at shutdown for accepted connections to send their request.
const SETTLE_LIMIT: Duration = Duration::from_secs(1);

/// Releases the idempotency leases still held in Redis: once, after every
/// listener has drained.
pub async fn release_leases(shared: &Shared) {
    if let Some(redis) = &shared.redis {
        let n = redis.release_held().await;
        if n > 0 {
            tracing::info!(target: "levee", released = n, "released idempotency leases still held in Redis");
        }
    }
}

/// Serves one listener's connections, accepted until `shutdown` resolves,
/// then lets in-flight requests finish for up to the configured grace
/// period; each request runs under the config generation current when it
/// arrives. The leases still held in Redis are released by the caller
/// ([`release_leases`]) once every listener has drained. With one runtime
/// per core, each core's listener (`SO_REUSEPORT` on one port) runs this.
/// The shutdown is a boxed future, not a generic one: each type of it
/// compiled the whole request path (the connection and request futures
/// spawned here) once more.
pub async fn serve_connections(
    listener: TcpListener,
    generations: Arc<Reloader>,
    mut shutdown: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
) {
    // Read once (as hyper's builder was): a reload does not change them.
    let settings = {
        let first = generations.current();
        front::Settings {
            header_read_timeout: first.config.limits.header_read_timeout,
            max_header_bytes: first.config.limits.max_header_bytes,
        }
    };
    // Each connection holds a receiver: `true` asks it to finish, and the
    // sender's `closed()` is every connection gone.
    let (closing, watching) = watch::channel(false);
    // Ended with the listener (the runtime may live on in a test).
    let ticker = tokio::spawn(crate::runtime::warm::ticker());
    let unread = Arc::new(Unread::default());
    // One for every generation: a reload keeps it.
    let grace_over = Arc::clone(&generations.current().grace_over);
    let serve = |stream: TcpStream| {
        let _ = stream.set_nodelay(true);
        let stream = unread.track(stream);
        let generations = Arc::clone(&generations);
        // Each request runs under the generation current when it arrives.
        let mut held = generations.held();
        // The connection holds the one waiter on the grace period's end
        // that its requests rely on.
        let grace = grace_over.wait();
        let svc = move |req: Request<front::FrontBody>| {
            let shared = generations.current_for(&mut held);
            crate::request::handler::handle_watched(shared, req, Watcher::Connection)
        };
        let watching = watching.clone();
        // The connection lends its requests' attempts one timer for their
        // timeouts (`crate::timer`); its future made in its pinned place.
        tokio::spawn(async move {
            let conn = std::pin::pin!(front::serve(stream, settings, svc, watching, Some(grace)));
            crate::timer::lending(conn).await
        });
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else {
                    // Out of file descriptors or similar: back off briefly, keep serving.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                serve(stream);
            }
            _ = &mut shutdown => break,
        }
    }
    let taken = take_backlog(listener, serve);
    drop(watching);
    let shared = generations.current();
    shared.shutting_down.store(true, Ordering::SeqCst);
    if taken > 0 {
        tracing::info!(target: "levee", connections = taken, "took the connections still queued on the listener before closing it");
    }
    tracing::info!(target: "levee", grace_s = shared.config.shutdown_grace.as_secs_f64(), "shutting down: no new connections; letting in-flight requests finish");
    // A closing connection that has not read anything yet ends at once; let each accepted
    // connection's request arrive first. A client sends its request as soon as
    // it has connected, so a connection still silent after a second is most
    // likely a preconnect, and waiting longer would only delay the exit.
    let limit = shared.config.limits.header_read_timeout.min(SETTLE_LIMIT);
    let silent = unread.settle(limit).await;
    if silent > 0 {
        tracing::info!(target: "levee", connections = silent, "closing connections that sent nothing");
    }
    drain(closing, &shared).await;
    ticker.abort();
}

/// Asks every connection to finish and waits the shutdown grace period for
/// them; then ends it (a waiting request gets its 503, a stream its error
/// event) and gives those last answers two seconds to be written.
async fn drain(closing: watch::Sender<bool>, shared: &Shared) {
    let _ = closing.send(true);
    let drained = closing.closed();
    tokio::pin!(drained);
    if tokio::time::timeout(shared.config.shutdown_grace, &mut drained)
        .await
        .is_err()
    {
        tracing::warn!(target: "levee", "shutdown grace period over: answering waiting requests 503 and ending streams with an error event");
        shared.grace_over.fire();
        if tokio::time::timeout(Duration::from_secs(2), &mut drained)
            .await
            .is_err()
        {
            tracing::warn!(target: "levee", "closing the connections that are still open");
        }
    }
}

/// Accepts every connection already queued on `listener`, hands each to
/// `serve`, then closes the listener; returns how many it took.
///
/// Linux resets the connections still queued on a listening socket when it
/// closes, even when another process listens on the same port with
/// `SO_REUSEPORT`: closing without this would refuse the callers whose
/// handshake had completed but who had not been accepted yet. What remains is
/// the interval between the last `accept` here and the `close` (microseconds,
/// no await in between): a connection the kernel queues on this socket in
/// that interval is still reset, unless `net.ipv4.tcp_migrate_req` is 1, in
/// which case Linux (5.14 and later) moves it to the other listener.
fn take_backlog(listener: TcpListener, mut serve: impl FnMut(TcpStream)) -> usize {
    let Ok(listener) = listener.into_std() else {
        return 0;
    };
    let mut taken = 0;
    // A non-blocking accept until the queue is empty: the std socket sees the
    // kernel's queue as it is now, not tokio's last readiness event.
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            // A caller that gave up while queued; the next one may still wait.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionAborted | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => break, // WouldBlock: the queue is empty
        };
        let Ok(stream) = stream
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_std(stream))
        else {
            continue;
        };
        serve(stream);
        taken += 1;
    }
    taken
}

/// hyper's HTTP/1 settings for the admin listener, the same limits as the
/// public one's: the header section must arrive within
/// `limits.header_read_timeout` and fit `limits.max_header_bytes`.
fn connection_builder(limits: &levee_config::Limits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    builder
}

/// Serves `/metrics`, `/healthz` and `/readyz` until `shutdown` resolves.
pub async fn serve_admin(
    listener: TcpListener,
    generations: Arc<Reloader>,
    shutdown: impl Future<Output = ()>,
) {
    let builder = connection_builder(&generations.current().config.limits);
    let bound = listener.local_addr().ok();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let generations = Arc::clone(&generations);
                let svc = service_fn(move |req: Request<Incoming>| {
                    let shared = generations.current();
                    async move {
                        let allowed = &shared.config.admin_allowed_hosts;
                        let answer = match bound {
                            Some(bound) if !admin_host_ok(bound, allowed, &req) => misdirected(),
                            _ if req.uri().path() == "/admin/spend" => {
                                let (status, body) =
                                    crate::server::spend::report(&shared, req.uri().query()).await;
                                admin_answer(status, "application/json", body)
                            }
                            _ => admin(&shared, &req),
                        };
                        Ok::<_, Infallible>(answer)
                    }
                });
                let conn = builder.serve_connection(TokioIo::new(stream), svc);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = &mut shutdown => break,
        }
    }
}

/// What the admin pages may load: nothing but their own inline style (the
/// status page has one `<style>` element, no scripts, images or forms), in
/// no frame.
pub const ADMIN_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Whether a request to the admin listener bound at `bound` names it: the
/// URI's authority, else the `Host` field, must carry the bound port (or
/// none when it is 80) and one of
/// - the bound IP address;
/// - for a loopback or unspecified bind, `localhost` or a loopback address;
/// - for an unspecified bind, any IP address (one of the machine's own: a
///   probe or a scrape by pod IP). An address is never a DNS-rebinding
///   name: a browser sends the name the page was loaded from.
///
/// - a name in `allowed` (`admin.allowed_hosts`: a Kubernetes Service's
///   name, on any port, since a Service may map its own port), or under a
///   `*.` entry's name.
///
/// A request naming nothing (HTTP/1.0 without `Host`) does not come from
/// a browser and is answered.
pub fn admin_host_ok<B>(bound: SocketAddr, allowed: &[String], req: &Request<B>) -> bool {
    let named = match req.uri().authority() {
        Some(a) => Some(a.as_str().as_bytes()),
        None => req.headers().get(http::header::HOST).map(|v| v.as_bytes()),
    };
    match named {
        None => true,
        Some(v) => names_admin(bound, v) || names_allowed(allowed, v),
    }
}

/// Whether the authority `v` names one of the `allowed` host names.
fn names_allowed(allowed: &[String], v: &[u8]) -> bool {
    if allowed.is_empty() {
        return false;
    }
    let Ok(authority) = http::uri::Authority::try_from(v) else {
        return false;
    };
    if authority.as_str().contains('@') || authority.as_str().ends_with(':') {
        return false;
    }
    let host = authority.host().trim_end_matches('.').to_ascii_lowercase();
    allowed.iter().any(|a| match a.strip_prefix("*.") {
        Some(parent) => host
            .strip_suffix(parent)
            .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
        None => host == *a,
    })
}

/// Whether the authority `v` (`host[:port]`) names the admin listener bound at `bound`.
fn names_admin(bound: SocketAddr, v: &[u8]) -> bool {
    let Ok(authority) = http::uri::Authority::try_from(v) else {
        return false;
    };
    if authority.as_str().contains('@') {
        return false;
    }
    let port_ok = match authority.port_u16() {
        Some(p) => p == bound.port(),
        None => bound.port() == 80 && !authority.as_str().ends_with(':'),
    };
    if !port_ok {
        return false;
    }
    let host = authority.host();
    let local = bound.ip().is_loopback() || bound.ip().is_unspecified();
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match literal.parse::<IpAddr>() {
        Ok(ip) => ip == bound.ip() || (local && ip.is_loopback()) || bound.ip().is_unspecified(),
        Err(_) => local && host.eq_ignore_ascii_case("localhost"),
    }
}

/// The answer to a request whose `Host` does not name the admin listener.
fn misdirected() -> Response<Body> {
    let mut r = Response::new(full(
        "misdirected request: the admin listener answers only to its own address as Host\n",
    ));
    *r.status_mut() = StatusCode::MISDIRECTED_REQUEST;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

fn admin(shared: &Shared, req: &Request<Incoming>) -> Response<Body> {
    let (status, ctype, body) = match req.uri().path() {
        "/metrics" => {
            shared.refresh_gauges();
            (
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                shared.metrics.encode(),
            )
        }
        "/" => (
            StatusCode::OK,
            "text/html; charset=utf-8",
            crate::server::status::render(shared),
        ),
        "/census" => (
            StatusCode::OK,
            "application/json",
            serde_json::to_string(&shared.census.report(&shared.config)).unwrap_or_default(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/readyz" => {
            if shared.shutting_down.load(Ordering::SeqCst) {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "shutting down\n".to_string(),
                )
            } else {
                (
                    StatusCode::OK,
                    "text/plain",
                    format!("ready {}\n", shared.generation.version()),
                )
            }
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /, /metrics, /census, /admin/spend, /healthz, /readyz\n".to_string(),
        ),
    };
    admin_answer(status, ctype, body)
}

/// An admin page's answer, with the headers every one carries.
fn admin_answer(status: StatusCode, ctype: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r.headers_mut().insert(
        http::header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(ADMIN_CSP),
    );
    r.headers_mut().insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(bound: &str, host: &str) -> bool {
        let bound: SocketAddr = bound.parse().expect("test address");
        names_admin(bound, host.as_bytes())
    }

    #[test]
    fn a_service_name_in_allowed_hosts_is_answered_and_no_other_name() {
        let allowed = vec!["levee-admin".to_string(), "*.svc.cluster.local".to_string()];
        let bound: SocketAddr = "0.0.0.0:9090".parse().unwrap();
        let host = |h: &str| {
            let req = Request::get("/metrics").header("host", h).body(()).unwrap();
            admin_host_ok(bound, &allowed, &req)
        };
        for h in [
            "levee-admin:9090",
            "LEVEE-ADMIN:80",
            "levee-admin",
            "levee.default.svc.cluster.local:9090",
            "levee.default.svc.cluster.local.:9090",
        ] {
            assert!(host(h), "{h}");
        }
        for h in [
            "levee-admin.evil.example:9090",
            "svc.cluster.local:9090",
            "xsvc.cluster.local:9090",
            "evil.example:9090",
            "user@levee-admin:9090",
            "levee-admin:",
        ] {
            assert!(!host(h), "{h}");
        }
        // Without the list, a name is refused as before.
        let req = Request::get("/")
            .header("host", "levee-admin:9090")
            .body(())
            .unwrap();
        assert!(!admin_host_ok(bound, &[], &req));
    }

    #[test]
    fn the_admin_host_must_name_the_bound_address() {
        // Loopback: the address, localhost and the loopback literals.
        for host in [
            "127.0.0.1:9090",
            "localhost:9090",
            "LOCALHOST:9090",
            "[::1]:9090",
        ] {
            assert!(ok("127.0.0.1:9090", host), "{host}");
        }
        for host in [
            "rebind.example:9090",
            "localhost.rebind.example:9090",
            "127.0.0.1:9091",
            "127.0.0.1",
            "127.0.0.1:",
            "localhost",
            "10.0.0.5:9090",
            "user@127.0.0.1:9090",
            "",
            "[::1:9090",
        ] {
            assert!(!ok("127.0.0.1:9090", host), "{host:?}");
        }
        // A private address: only itself.
        assert!(ok("10.0.0.5:9090", "10.0.0.5:9090"));
        assert!(!ok("10.0.0.5:9090", "localhost:9090"));
        assert!(!ok("10.0.0.5:9090", "127.0.0.1:9090"));
        assert!(!ok("10.0.0.5:9090", "admin.internal:9090"));
        // Unspecified: localhost and any address (probes and scrapes by pod
        // IP), never a name.
        for bound in ["0.0.0.0:9090", "[::]:9090"] {
            for host in [
                "localhost:9090",
                "127.0.0.1:9090",
                "[::1]:9090",
                "10.1.2.3:9090",
            ] {
                assert!(ok(bound, host), "{bound} {host}");
            }
            assert!(!ok(bound, "rebind.example:9090"), "{bound}");
            assert!(!ok(bound, "10.1.2.3:9091"), "{bound}");
        }
        // Port 80 may be left out.
        assert!(ok("127.0.0.1:80", "localhost"));
        assert!(ok("127.0.0.1:80", "127.0.0.1:80"));
        assert!(!ok("127.0.0.1:80", "rebind.example"));
    }
}
