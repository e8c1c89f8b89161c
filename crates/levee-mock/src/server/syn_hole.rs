//! A host off the network at the SYN (`syn_blackhole`): for the fault's
//! window the port is re-bound with a listen backlog of 0, which one
//! connection of the mock's own fills, so the kernel drops every SYN that
//! arrives (a full accept queue drops SYNs) and a client's connect waits
//! out its own timeout in SYN-SENT, as it does against a firewall that
//! drops packets or an address nothing routes to. When the window ends the
//! port is bound again as before. Connections already open stay open, and
//! their requests go unanswered (the fault's `Stall` outcome).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;

/// The listen backlog of the port outside the hole.
const BACKLOG: u32 = 1024;
/// How often, 20 ms apart, re-binding the port is tried before the mock
/// gives up serving (2 s).
const REBIND_TRIES: u32 = 100;

/// Holds the port in the hole for `off`, then gives back a listener on it;
/// `None` when `stop` fired meanwhile, or the port could not be bound again.
pub(super) async fn hold(
    listener: TcpListener,
    off: Duration,
    stop: &mut oneshot::Receiver<()>,
) -> Option<TcpListener> {
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(_) => return Some(listener),
    };
    drop(listener);
    // The hole may fail to open (the port taken meanwhile): the host is
    // then off the network outright, which a client sees as refused.
    let hole = full_queue(addr).await;
    if let Err(e) = &hole {
        eprintln!("levee mock: syn_blackhole could not fill the listen queue on {addr}: {e}");
    }
    let stopped = tokio::select! {
        _ = stop => true,
        () = tokio::time::sleep(off) => false,
    };
    drop(hole);
    if stopped {
        return None;
    }
    rebind(addr).await
}

/// A listener on `addr` whose accept queue is full: backlog 0, holding one
/// connection of our own that is never accepted.
async fn full_queue(addr: SocketAddr) -> io::Result<(TcpListener, TcpStream)> {
    let listener = socket(addr)?.listen(0)?;
    let filler = TcpStream::connect(addr).await?;
    Ok((listener, filler))
}

async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    let mut tries = 0;
    loop {
        tries += 1;
        match socket(addr).and_then(|s| s.listen(BACKLOG)) {
            Ok(l) => return Some(l),
            Err(e) if tries >= REBIND_TRIES => {
                eprintln!("levee mock: could not listen on {addr} again after syn_blackhole: {e}");
                return None;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

fn socket(addr: SocketAddr) -> io::Result<TcpSocket> {
    let s = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    Ok(s)
}
