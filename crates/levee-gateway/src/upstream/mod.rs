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
//!
//! By role: [`provider`] is a provider at run time (its URIs, its policy
//! state); [`pool`] its connections, a shard per worker; [`request`] an
//! attempt's outbound request; [`failure`] why an attempt got no answer;
//! [`auth`] the provider's key and extra fields; [`shared_rate`] an
//! allowance shared across replicas.

pub(crate) mod allowance;
mod auth;
pub(crate) mod body;
mod failure;
pub(crate) mod h1conn;
pub(crate) mod h2conn;
pub(crate) mod listed;
pub(crate) mod platform;
mod pool;
mod provider;
mod request;
mod shared_rate;
pub(crate) mod transport;

pub use crate::upstream::auth::{provider_auth, provider_extras, Extras, UpstreamError};
pub use crate::upstream::body::UpstreamBody;
pub use crate::upstream::failure::{failure_result, SendError};
pub use crate::upstream::pool::{set_worker, set_workers};
pub use crate::upstream::provider::{ConnectHists, ProviderRuntime};
#[cfg(test)]
pub use crate::upstream::request::build_request;
pub use crate::upstream::request::build_request_with;
pub use crate::upstream::shared_rate::SharedRate;
