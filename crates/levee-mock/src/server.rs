//! The HTTP server (HTTP/1.1, and HTTP/2 with prior knowledge on the same
//! port, told apart by the client's first bytes): accept loop, per-connection
//! hyper service, and the first step of each request (the `/_mock/` control
//! plane, a cloud's face, or the dialect's own request path in `native`).

mod endpoints;
mod misbehave;
mod native;
mod respond;
mod route;
mod syn_hole;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::body::MockBody;
use crate::faults::Hole;
use crate::shared::Shared;
use crate::{admin, clock, platform};
use levee_wire::conn::{Watch, Watched};

/// How often the accept loop looks whether a `blackhole` window opened.
const BLACKHOLE_LOOK: Duration = Duration::from_millis(50);

/// Request bodies larger than this get a 413.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// Accepts connections until `stop` fires (or its sender is dropped), then
/// aborts every connection and waits for them to be gone.
pub(crate) async fn accept_loop(
    mut listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        match shared.active().blackholed_for() {
            // Off the network, the handshake completes: a connection made
            // meanwhile is taken off the listen queue and held unread,
            // then dropped when the window ends: what it carried never
            // arrives (as with packets a black hole drops), and no request
            // of it is ever served.
            Some((Hole::Held, off)) => {
                let wake = tokio::time::sleep(off.min(Duration::from_secs(1)));
                tokio::select! {
                    _ = &mut stop => break,
                    () = wake => {}
                    accepted = listener.accept() => {
                        if let Ok((stream, _)) = accepted {
                            conns.spawn(async move {
                                tokio::time::sleep(off).await;
                                drop(stream);
                            });
                        }
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
                continue;
            }
            // Off the network at the SYN: no handshake completes.
            Some((Hole::Syn, off)) => {
                match syn_hole::hold(listener, off, &mut stop).await {
                    Some(l) => listener = l,
                    None => {
                        conns.shutdown().await;
                        return;
                    }
                }
                continue;
            }
            None => {}
        }
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(serve_connection(stream, Arc::clone(&shared)));
                }
                // Out of file descriptors and the like: back off, keep serving.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            // A `blackhole` window may open while no connection arrives.
            () = tokio::time::sleep(BLACKHOLE_LOOK), if shared.active().has_blackhole() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    serve_io(stream, shared).await
}

/// A connection the mock can serve: a TCP socket, or an in-memory pipe.
pub(crate) trait Socket: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Makes the coming close abortive (a reset, where the transport has one).
    fn reset_on_close(&self);
}

impl Socket for TcpStream {
    fn reset_on_close(&self) {
        let _ = socket2::SockRef::from(self).set_linger(Some(Duration::ZERO));
    }
}

/// An in-memory pipe has no reset: the close itself is what the client sees.
impl Socket for tokio::io::DuplexStream {
    fn reset_on_close(&self) {}
}

/// Serves one connection until the client closes it.
pub(crate) async fn serve_io<S: Socket>(stream: S, shared: Arc<Shared>) {
    let reset = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Watched::new(stream, ResetOnClose(Arc::clone(&reset))));
    shared.stats.connection();
    let service = service_fn(move |req| handle(Arc::clone(&shared), Arc::clone(&reset), req));
    // Errors here are the client going away or a deliberate reset/cut.
    // No header-read timeout: idle keep-alive connections stay open until the
    // client closes them, so a gateway's pool never races an idle close.
    // Over HTTP/2 a reset or a cut ends the one stream (`RST_STREAM`), as a
    // provider's HTTP/2 server does; the connection's other streams go on.
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    let _ = builder.serve_connection(io, service).await;
}

/// Asked of hyper to close a connection without answering (`reset`).
#[derive(Debug, thiserror::Error)]
#[error("levee mock reset the connection on purpose")]
struct ResetConnection;

type Answer = Result<Response<MockBody>, ResetConnection>;

async fn handle(shared: Arc<Shared>, reset: Arc<AtomicBool>, req: Request<Incoming>) -> Answer {
    let path = req.uri().path();
    if path.starts_with("/_mock/") || path == "/_mock" {
        return Ok(admin::handle(&shared, req).await);
    }
    if !shared.api.is_cloud() {
        return native::handle_native(shared, reset, req, None).await;
    }
    // A cloud's face: checked and rewritten into the dialect's own request,
    // answered like any other, and the answer put back into its shape.
    let (mut parts, body) = req.into_parts();
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => {
            let refused = platform::Refused::json(
                StatusCode::PAYLOAD_TOO_LARGE,
                false,
                serde_json::json!({ "message": too_large() }),
            );
            shared.stats.status(refused.status.as_u16());
            return Ok(refused.into_response());
        }
        Err(Unread::Gone) => return Err(ResetConnection),
    };
    let accepted = match platform::accept(
        shared.api,
        &mut parts,
        bytes,
        clock::unix_secs(),
        &shared.clouds,
    ) {
        Ok(a) => a,
        Err(refused) => {
            match refused.auth {
                true => shared.stats.unauthorized(refused.status.as_u16()),
                false => shared.stats.status(refused.status.as_u16()),
            }
            return Ok(refused.into_response());
        }
    };
    let req = Request::from_parts(parts, http_body_util::Full::new(accepted.body));
    let answer = native::handle_native(shared, reset, req, Some(accepted.native)).await?;
    Ok(platform::encode(&accepted.ctx, answer))
}

/// Why a request's body was not read.
enum Unread {
    /// Longer than [`MAX_BODY`]: answered with a 413.
    TooLarge,
    /// The client went away mid-body.
    Gone,
}

/// The request's body, up to [`MAX_BODY`] bytes.
async fn read_body<B>(body: B) -> Result<Bytes, Unread>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Unread::TooLarge),
        Err(_) => Err(Unread::Gone),
    }
}

/// The 413's message.
fn too_large() -> String {
    format!("Request body is larger than {MAX_BODY} bytes.")
}

/// Watches an accepted connection: when the service asked for a reset, the
/// close sets `SO_LINGER` to zero first so it is a TCP RST, not a FIN.
struct ResetOnClose(Arc<AtomicBool>);

impl<S: Socket> Watch<S> for ResetOnClose {
    fn closing(&mut self, stream: &mut S) {
        if self.0.load(Ordering::Relaxed) {
            stream.reset_on_close();
        }
    }
}
