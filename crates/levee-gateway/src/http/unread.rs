//! Connections accepted whose first request bytes the server has not read yet.
//!
//! A closing connection ends at once when it has neither
//! read nor written anything, which is right for a client that connected and
//! never spoke, and wrong for one whose request is already in the socket: a
//! connection accepted a moment before `SIGTERM` (or taken from the listener's
//! queue after it) would be closed with the request unread, and the caller
//! would see a reset. Shutdown therefore waits until every accepted connection
//! has been read from once (or has ended), bounded by the header read timeout,
//! before it asks connections to finish.

use levee_wire::conn::{Watch, Watched};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// How many accepted connections have not been read from yet.
#[derive(Debug, Default)]
pub struct Unread {
    count: AtomicUsize,
    changed: Notify,
}

impl Unread {
    /// Wraps a just-accepted connection; it counts until its first read.
    pub fn track(self: &Arc<Self>, stream: TcpStream) -> FirstRead {
        self.count.fetch_add(1, Ordering::SeqCst);
        Watched::new(stream, Pending(Some(Arc::clone(self))))
    }

    /// Waits until no accepted connection is still unread, or `limit` passes;
    /// returns how many were still unread at the end.
    pub async fn settle(&self, limit: Duration) -> usize {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                if self.count.load(Ordering::SeqCst) == 0 {
                    return;
                }
                changed.await;
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
        self.count.load(Ordering::SeqCst)
    }

    fn done(&self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

/// An accepted socket that leaves the [`Unread`] count at its first read
/// (or when it is dropped unread).
pub type FirstRead = Watched<TcpStream, Pending>;

/// The count a [`FirstRead`] still holds a place in, until its first read.
#[derive(Debug)]
pub struct Pending(Option<Arc<Unread>>);

impl Pending {
    fn read_once(&mut self) {
        if let Some(p) = self.0.take() {
            p.done();
        }
    }
}

impl Watch<TcpStream> for Pending {
    fn read_done(&mut self) {
        self.read_once();
    }

    fn closing(&mut self, _stream: &mut TcpStream) {
        self.read_once();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A loopback connection: (the client's end, the server's end).
    async fn connected() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let (stream, _) = listener.accept().await.expect("accept");
        (client, stream)
    }

    #[tokio::test]
    async fn a_connection_counts_until_its_first_read_and_settle_waits_for_it() {
        let (mut client, stream) = connected().await;
        let unread = Arc::new(Unread::default());
        let mut conn = unread.track(stream);
        assert_eq!(unread.settle(Duration::ZERO).await, 1);
        client
            .write_all(b"GET / HTTP/1.1\r\n")
            .await
            .expect("write");
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let n = conn.read(&mut buf).await.expect("read");
            (n, conn)
        });
        // A long limit that is never reached: settle returns at the read.
        assert_eq!(unread.settle(Duration::from_secs(60)).await, 0);
        let (n, conn) = reader.await.expect("reader");
        assert!(n > 0);
        drop(conn);
        assert_eq!(unread.settle(Duration::ZERO).await, 0);
    }

    #[tokio::test]
    async fn a_connection_dropped_unread_stops_counting() {
        let (_client, stream) = connected().await;
        let unread = Arc::new(Unread::default());
        drop(unread.track(stream));
        assert_eq!(unread.settle(Duration::ZERO).await, 0);
    }
}
