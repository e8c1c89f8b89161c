//! HTTP/2 connections to one provider: each carries many streams at once,
//! so an open stream costs h2's stream state rather than a connection of
//! its own (a socket and its read buffer): with thousands of streams open,
//! a few dozen upstream sockets instead of thousands.
//!
//! A connection takes streams up to the provider's `http2_max_streams`, and
//! never more than the server's `SETTINGS_MAX_CONCURRENT_STREAMS` (hyper's
//! `Connection::current_max_send_streams`); beyond that a stream would wait
//! inside h2 for a free slot, so another connection is opened instead.
//!
//! hyper tells nobody when an HTTP/2 stream ends (its response body,
//! `Incoming`, is what the rest of the gateway reads, and nothing rides
//! along with it). The connection's own bytes do: [`Watched`] reads the
//! 9-byte frame headers going each way and counts a stream open from the
//! `HEADERS` frame that starts it to the `END_STREAM` flag or `RST_STREAM`
//! that ends it — what the server counts against its own limit.
//!
//! A request is counted from the moment the pool hands it a connection
//! (`reserved`) until its `HEADERS` frame is written (then `open`). One
//! given up while still queued inside hyper, before it reached the wire,
//! keeps its reservation for the connection's life: hyper drops such a
//! request silently. It happens only when h2 holds requests back, i.e. at
//! the server's own stream limit, which the pool keeps below.

use crate::upstream::body::ConnTimed;
use crate::upstream::transport::Conn;
use hyper::client::conn::http2;
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

/// A connection's streams: `open` on the wire, plus `reserved` — handed to
/// a request whose `HEADERS` frame is not written yet.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    reserved: AtomicUsize,
    open: AtomicUsize,
}

impl Streams {
    fn load(&self) -> usize {
        self.reserved.load(Relaxed) + self.open.load(Relaxed)
    }

    fn unreserve(&self) {
        let _ = self
            .reserved
            .fetch_update(Relaxed, Relaxed, |r| r.checked_sub(1));
    }
}

/// One pooled HTTP/2 connection.
pub(crate) struct H2Conn {
    pub(crate) sender: http2::SendRequest<ConnTimed>,
    streams: Arc<Streams>,
    /// The server's `SETTINGS_MAX_CONCURRENT_STREAMS`, as the connection's
    /// task last read it.
    server_max: Arc<AtomicUsize>,
    /// Last seen carrying a stream (or handed one): idle expiry counts from here.
    busy_at: Mutex<levee_policy::Instant>,
}

impl H2Conn {
    /// A new connection's pool entry, with one stream reserved for the
    /// request that opened it.
    pub(crate) fn new(
        sender: http2::SendRequest<ConnTimed>,
        streams: Arc<Streams>,
        server_max: Arc<AtomicUsize>,
        now: levee_policy::Instant,
    ) -> Self {
        streams.reserved.fetch_add(1, Relaxed);
        H2Conn {
            sender,
            streams,
            server_max,
            busy_at: Mutex::new(now),
        }
    }

    /// Gives back the reservation of a request that never reached the wire.
    pub(crate) fn unreserve(&self) {
        self.streams.unreserve();
    }

    fn busy_at(&self) -> std::sync::MutexGuard<'_, levee_policy::Instant> {
        self.busy_at.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One worker's HTTP/2 connections to a provider (each worker keeps its
/// own, as nginx's workers do: one connection per worker and 100 streams,
/// not one shared across threads).
pub(crate) struct H2Pool {
    conns: Mutex<Vec<Arc<H2Conn>>>,
    /// Held while a connection is being opened, so that requests arriving
    /// together wait for it rather than open one each.
    pub(crate) opening: tokio::sync::Mutex<()>,
    max_streams: usize,
}

impl H2Pool {
    pub(crate) fn new(max_streams: u32) -> Self {
        H2Pool {
            conns: Mutex::new(Vec::new()),
            opening: tokio::sync::Mutex::new(()),
            max_streams: usize::try_from(max_streams).unwrap_or(usize::MAX),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<H2Conn>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A connection with a free stream, the stream reserved; closed
    /// connections (the server's `GOAWAY`, a failure) are dropped on the way.
    pub(crate) fn checkout(&self, now: levee_policy::Instant) -> Option<Arc<H2Conn>> {
        let mut conns = self.lock();
        conns.retain(|c| !c.sender.is_closed());
        // The oldest with room first: new streams fill the busy connections,
        // and spare ones go idle and expire.
        let c = conns.iter().find(|c| {
            let cap = self.max_streams.min(c.server_max.load(Relaxed));
            c.streams.load() < cap
        })?;
        c.streams.reserved.fetch_add(1, Relaxed);
        *c.busy_at() = now;
        Some(Arc::clone(c))
    }

    pub(crate) fn insert(&self, conn: Arc<H2Conn>) {
        self.lock().push(conn);
    }

    /// Closes connections that carried no stream for `idle` (dropping the
    /// last sender ends the connection), and drops closed ones.
    pub(crate) fn expire(&self, now: levee_policy::Instant, idle: Duration) {
        self.lock().retain(|c| {
            if c.sender.is_closed() {
                return false;
            }
            let mut busy_at = c.busy_at();
            if c.streams.load() > 0 {
                *busy_at = now;
            }
            now.saturating_since(*busy_at) < idle
        });
    }

    /// Connections in the pool.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Drives an HTTP/2 connection until it closes, keeping the server's stream
/// limit where the pool reads it.
pub(crate) async fn drive(
    conn: http2::Connection<Watched, ConnTimed, hyper_util::rt::TokioExecutor>,
    server_max: Arc<AtomicUsize>,
) {
    let mut conn = std::pin::pin!(conn);
    std::future::poll_fn(|cx| {
        if conn.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        server_max.store(conn.current_max_send_streams(), Relaxed);
        Poll::Pending
    })
    .await
}

/// Where a run of frames stands: inside a frame header, or skipping a
/// frame's payload.
#[derive(Debug, Default)]
struct FrameScan {
    head: [u8; 9],
    have: usize,
    skip: usize,
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const END_STREAM: u8 = 0x1;
/// The client's connection preface, which precedes its first frame.
const PREFACE_LEN: usize = 24;

impl FrameScan {
    /// Reads `buf`, the next bytes of the run, calling `on(type, flags,
    /// stream id)` for each frame header completed.
    fn feed(&mut self, mut buf: &[u8], mut on: impl FnMut(u8, u8, u32)) {
        while !buf.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(buf.len());
                self.skip -= n;
                buf = &buf[n..];
                continue;
            }
            let n = (self.head.len() - self.have).min(buf.len());
            self.head[self.have..self.have + n].copy_from_slice(&buf[..n]);
            self.have += n;
            buf = &buf[n..];
            if self.have == self.head.len() {
                let h = self.head;
                self.have = 0;
                self.skip = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                on(h[3], h[4], id);
            }
        }
    }
}

/// An HTTP/2 connection's transport, counting its open streams (see the
/// module's text).
pub(crate) struct Watched {
    io: Conn,
    streams: Arc<Streams>,
    read: FrameScan,
    write: FrameScan,
    /// Streams open on the wire (at most the stream cap: a short list).
    open: Vec<u32>,
    last_opened: u32,
}

impl Watched {
    pub(crate) fn new(io: Conn, streams: Arc<Streams>) -> Self {
        Watched {
            io,
            streams,
            read: FrameScan::default(),
            write: FrameScan {
                skip: PREFACE_LEN,
                ..FrameScan::default()
            },
            open: Vec::new(),
            last_opened: 0,
        }
    }

    fn close(open: &mut Vec<u32>, streams: &Streams, id: u32) {
        if let Some(i) = open.iter().position(|&s| s == id) {
            open.swap_remove(i);
            streams.open.fetch_sub(1, Relaxed);
        }
    }

    /// Frames the client wrote: a `HEADERS` frame on a new stream opens it
    /// (its reservation becomes an open stream); `RST_STREAM` (a request
    /// given up) ends it.
    fn wrote(&mut self, buf: &[u8]) {
        let (open, streams, last) = (&mut self.open, &*self.streams, &mut self.last_opened);
        self.write.feed(buf, |kind, _, id| match kind {
            HEADERS if id > *last => {
                *last = id;
                open.push(id);
                streams.open.fetch_add(1, Relaxed);
                streams.unreserve();
            }
            RST_STREAM => Self::close(open, streams, id),
            _ => {}
        });
    }

    /// Frames the server sent: `END_STREAM` (the answer is complete) or
    /// `RST_STREAM` ends a stream.
    fn read(&mut self, buf: &[u8]) {
        let (open, streams) = (&mut self.open, &*self.streams);
        self.read.feed(buf, |kind, flags, id| match kind {
            DATA | HEADERS if flags & END_STREAM != 0 => Self::close(open, streams, id),
            RST_STREAM => Self::close(open, streams, id),
            _ => {}
        });
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let n = self.open.len();
        self.streams.open.fetch_sub(n, Relaxed);
    }
}

/// Bytes read per call: the read is copied through here to be scanned.
const READ_CHUNK: usize = 4096;

impl Read for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let mut chunk = [0u8; READ_CHUNK];
        let want = buf.remaining().min(READ_CHUNK);
        let mut got = ReadBuf::new(&mut chunk[..want]);
        ready!(Pin::new(&mut this.io).poll_read(cx, got.unfilled()))?;
        let filled = got.filled();
        buf.put_slice(filled);
        this.read(filled);
        Poll::Ready(Ok(()))
    }
}

impl Write for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        this.wrote(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Whether an HTTP/2 request failed unprocessed, so that it may go once
/// more on a new connection: the server refused its stream
/// (`REFUSED_STREAM`), or shut the connection down gracefully (`GOAWAY`
/// with `NO_ERROR`) before the stream (a stream the server kept is
/// finished, not failed, on a graceful shutdown).
pub(crate) fn refused_unprocessed(e: &hyper::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(h2) = c.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2.is_go_away()
                    && h2.is_remote()
                    && h2.reason() == Some(h2::Reason::NO_ERROR));
        }
        cause = c.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, id: u32, payload: usize) -> Vec<u8> {
        let len = u32::try_from(payload).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&id.to_be_bytes());
        f.resize(9 + payload, 0xAB);
        f
    }

    #[test]
    fn frame_headers_are_found_across_any_split_of_the_bytes() {
        let mut run = Vec::new();
        run.extend(frame(0x4, 0, 0, 18)); // SETTINGS
        run.extend(frame(HEADERS, 0x4, 1, 40));
        run.extend(frame(DATA, 0, 1, 300));
        run.extend(frame(DATA, END_STREAM, 1, 5));
        run.extend(frame(RST_STREAM, 0, 3, 4));
        let want = vec![(0x4, 0, 0), (1, 4, 1), (0, 0, 1), (0, 1, 1), (3, 0, 3)];
        for step in [1, 2, 7, 9, 10, 64, run.len()] {
            let mut scan = FrameScan::default();
            let mut seen = Vec::new();
            for piece in run.chunks(step) {
                scan.feed(piece, |k, f, id| seen.push((k, f, id)));
            }
            assert_eq!(seen, want, "pieces of {step}");
        }
    }
}
