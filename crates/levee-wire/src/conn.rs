//! An accepted connection with an observer: [`Watched`] passes every read
//! and write through to the stream it holds, and tells its [`Watch`] when a
//! read completes and when the connection is dropped. The gateway counts a
//! connection until its first read with it; the mock resets a connection on
//! close with it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What a [`Watched`] connection tells its observer. Both calls do nothing
/// unless implemented.
pub trait Watch<S> {
    /// A read on the stream completed: with data, at the stream's end, or
    /// with an error.
    fn read_done(&mut self) {}

    /// The connection is being dropped; the stream is still open.
    fn closing(&mut self, _stream: &mut S) {}
}

/// A stream whose reads and writes go straight through, observed by `W`.
#[derive(Debug)]
pub struct Watched<S, W: Watch<S>> {
    stream: S,
    watch: W,
}

impl<S, W: Watch<S>> Watched<S, W> {
    /// Wraps `stream`, observed by `watch`.
    pub fn new(stream: S, watch: W) -> Self {
        Watched { stream, watch }
    }
}

impl<S, W: Watch<S>> Drop for Watched<S, W> {
    fn drop(&mut self) {
        self.watch.closing(&mut self.stream);
    }
}

impl<S: AsyncRead + Unpin, W: Watch<S> + Unpin> AsyncRead for Watched<S, W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.stream).poll_read(cx, buf);
        if r.is_ready() {
            this.watch.read_done();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin, W: Watch<S> + Unpin> AsyncWrite for Watched<S, W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Records what a connection told it.
    #[derive(Debug, Default)]
    struct Log(Arc<Mutex<Vec<&'static str>>>);

    impl<S> Watch<S> for Log {
        fn read_done(&mut self) {
            self.0.lock().expect("log").push("read");
        }
        fn closing(&mut self, _stream: &mut S) {
            self.0.lock().expect("log").push("closing");
        }
    }

    #[tokio::test]
    async fn reads_and_writes_pass_through_and_the_watch_hears_reads_and_the_close() {
        let (mut peer, stream) = tokio::io::duplex(64);
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut conn = Watched::new(stream, Log(Arc::clone(&log)));
        peer.write_all(b"ping").await.expect("peer write");
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"ping");
        conn.write_all(b"pong").await.expect("write");
        conn.flush().await.expect("flush");
        peer.read_exact(&mut buf).await.expect("peer read");
        assert_eq!(&buf, b"pong");
        assert_eq!(*log.lock().expect("log"), ["read"]);
        drop(conn);
        assert_eq!(*log.lock().expect("log"), ["read", "closing"]);
    }
}
