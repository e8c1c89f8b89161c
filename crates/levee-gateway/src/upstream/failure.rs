//! Why an attempt got no response head ([`SendError`]), and the result it
//! is counted as.

use crate::error::BoxError;
use crate::upstream::h1conn::Failed;

/// Why an attempt got no response head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connecting to the provider failed: {0}")]
    Connect(Box<dyn std::error::Error + Send + Sync>),
    #[error("the HTTP handshake with the provider failed: {0}")]
    Handshake(hyper::Error),
    #[error("the provider connection failed: {0}")]
    Request(BoxError),
    /// Every connection to the provider (`max_connections`) stayed busy
    /// for the attempt's share of its time.
    #[error("every connection to the provider is busy (max_connections)")]
    PoolExhausted,
}

impl From<Failed> for SendError {
    fn from(f: Failed) -> Self {
        SendError::Request(Box::new(f.error))
    }
}

/// The result (`levee_upstream_attempts_total{result}`, the log's
/// `last_attempt`) of an attempt that got no response: `tls` when the TLS
/// handshake failed — a certificate the gateway does not trust, expired or
/// for another name, or a server that does not speak TLS —,
/// `connect_timeout` when no connection opened within the provider's
/// `connect_timeout`, else `connect_error` (refused, unreachable, DNS,
/// reset before a response).
/// Either way the core sees a connection fault (`Outcome::ConnectError`):
/// the provider cannot be reached, and its breaker counts it.
pub fn failure_result(e: &SendError) -> crate::observe::outcome::AttemptResult {
    let inner: &(dyn std::error::Error + 'static) = match e {
        SendError::Connect(e) => e.as_ref(),
        SendError::Handshake(e) => e,
        SendError::Request(e) => e.as_ref(),
        // Not a fault of the provider's: the driver books it as a refusal
        // (`pool_exhausted`) before it would get here.
        SendError::PoolExhausted => return crate::observe::outcome::AttemptResult::ConnectError,
    };
    let mut cause = Some(inner);
    while let Some(c) = cause {
        if is_tls(c) {
            return crate::observe::outcome::AttemptResult::Tls;
        }
        // The connector's timeout is an `io::Error` of kind `TimedOut`;
        // only a connect can time out this way (a slow head is the
        // attempt's own timer, never an error of the send).
        let timed_out = c
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut);
        if timed_out && matches!(e, SendError::Connect(_)) {
            return crate::observe::outcome::AttemptResult::ConnectTimeout;
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
