//! Where an attempt's connection comes from: the network (TCP, and TLS for
//! https), or an in-memory pipe to a provider running in the same process.
//!
//! The pipe exists for tests under tokio's paused time: a task waiting on a
//! real socket lets the paused clock jump to the next timer, so an attempt
//! timeout would fire while the provider's answer is already on its way.
//! Over a pipe, every wake-up is a task's, and time moves only when all of
//! them wait on timers.

use crate::error::BoxError;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use levee_config::{Http2, Provider};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::DuplexStream;
use tokio::net::TcpStream;

/// Opens an in-memory connection to the provider at a URI's host, or
/// `None` when no provider lives there.
pub type Dial = Arc<dyn Fn(&http::Uri) -> Option<DuplexStream> + Send + Sync>;

/// The connector of every provider's client.
#[derive(Clone)]
pub enum Connector {
    Net(HttpsConnector<HttpConnector>),
    Memory(Dial),
}

/// A connection made by [`Connector`]. A TLS stream's state is over a
/// kilobyte (1,112 bytes inline): it is boxed, so that a plain TCP
/// connection, which every open HTTP/1.1 stream to an http provider holds,
/// does not carry that much unused space.
pub enum Conn {
    Tcp(TokioIo<TcpStream>),
    Tls(Box<MaybeHttpsStream<TokioIo<TcpStream>>>),
    Memory(TokioIo<DuplexStream>),
}

impl From<MaybeHttpsStream<TokioIo<TcpStream>>> for Conn {
    fn from(s: MaybeHttpsStream<TokioIo<TcpStream>>) -> Self {
        match s {
            MaybeHttpsStream::Http(tcp) => Conn::Tcp(tcp),
            tls => Conn::Tls(Box::new(tls)),
        }
    }
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Connector::Net(c) => c.poll_ready(cx),
            Connector::Memory(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        match self {
            Connector::Net(c) => {
                let connecting = c.call(uri);
                Box::pin(async move { connecting.await.map(Conn::from) })
            }
            Connector::Memory(dial) => {
                let conn = dial(&uri)
                    .map(|pipe| Conn::Memory(TokioIo::new(pipe)))
                    .ok_or_else(|| format!("no in-process provider at {uri}").into());
                Box::pin(async move { conn })
            }
        }
    }
}

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Tcp(s) => s.connected(),
            Conn::Tls(s) => s.connected(),
            Conn::Memory(_) => Connected::new(),
        }
    }
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Conn::Memory(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Conn::Memory(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Conn::Memory(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Conn::Memory(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// The connections a platform's credential requests take (an instance's
/// metadata service, STS): TCP, plus TLS with the web's roots for https.
pub(crate) fn credentials_connector() -> Connector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(std::time::Duration::from_secs(2)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Connector::Net(https)
}

/// How a provider's connections are made: TCP (plus TLS offering, by
/// ALPN, what its `http2` key allows), or in-memory pipes when `dial` is given.
pub(crate) fn connector(p: &Provider, dial: Option<&Dial>) -> Connector {
    if let Some(d) = dial {
        return Connector::Memory(Arc::clone(d));
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(p.connect_timeout));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http();
    Connector::Net(match p.http2 {
        Http2::Auto => https.enable_all_versions().wrap_connector(http),
        Http2::Always => https.enable_http2().wrap_connector(http),
        Http2::Never => https.enable_http1().wrap_connector(http),
    })
}
