//! Talking to providers: one pooled hyper client per provider (rustls with
//! bundled web-PKI roots for https), outbound request building, and timing of
//! how long each attempt waits for a connection, pooled or new, for
//! `levee_upstream_connect_seconds`.

use crate::clock::Clock;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use levee_config::{Api, Provider};
use levee_policy::ProviderState;
use prometheus_client::metrics::histogram::Histogram;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

/// An attempt's request body that times how long the attempt waited for a
/// connection. hyper polls a request's body only once a connection is
/// writing it, so the first poll marks the moment a connection was obtained:
/// taken from the pool at once, after waiting for one, or newly connected
/// (TCP plus TLS). Counting only new connections would leave out the pool
/// wait, where a starved gateway shows first. Bodies here are never empty
/// (a JSON request), so the first poll always comes.
#[derive(Debug)]
pub struct ConnTimed {
    inner: Full<Bytes>,
    started: levee_policy::Instant,
    clock: Clock,
    /// Taken at the first poll: observed once.
    hist: Option<Histogram>,
}

impl HttpBody for ConnTimed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(hist) = this.hist.take() {
            hist.observe(this.clock.since(this.started).as_secs_f64());
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The client type used for every provider.
pub type UpstreamClient = Client<crate::transport::Connector, ConnTimed>;

/// Why a provider could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("provider `{provider}`: environment variable `{var}` (api_key_env) is not set; export it or remove `api_key_env`")]
    MissingKey { provider: String, var: String },
    #[error("provider `{provider}`: the key in `{var}` is not a valid header value")]
    BadKey { provider: String, var: String },
}

/// A provider's allowance shared by replicas (Redis), with the local
/// limiter at 1/N of the rate used while Redis is unavailable.
#[derive(Debug)]
pub struct SharedRate {
    rpm: u32,
    burst: u32,
    local: Mutex<levee_policy::Gcra>,
}

impl SharedRate {
    /// One request of the allowance, or how long until one conforms.
    pub async fn check(
        &self,
        redis: &crate::state::RedisState,
        provider: &str,
        now: levee_policy::Instant,
    ) -> Result<(), Duration> {
        if let Some(r) = redis.allowance(provider, self.rpm, self.burst).await {
            return r;
        }
        self.local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .check(now)
            .map_err(|until| until.saturating_since(now))
    }
}

/// One provider at run time.
#[derive(Debug)]
pub struct ProviderRuntime {
    /// Set when the allowance is shared across replicas.
    pub shared_rate: Option<SharedRate>,
    pub name: String,
    pub api: Api,
    scheme_authority: String,
    base_path: String,
    auth: Option<(HeaderName, HeaderValue)>,
    /// The provider key itself, to redact from whatever Levee passes on.
    pub secret: Option<String>,
    pub client: UpstreamClient,
    pub state: Mutex<ProviderState>,
    connect_hist: Histogram,
    clock: Clock,
}

impl ProviderRuntime {
    /// Builds the client and reads the key from the environment.
    pub fn new(
        p: &Provider,
        connect_hist: Histogram,
        clock: Clock,
        replicas: Option<u32>,
    ) -> Result<Self, UpstreamError> {
        Self::with_dial(p, connect_hist, clock, replicas, None)
    }

    /// [`ProviderRuntime::new`], connecting through `dial` (in-memory
    /// pipes to in-process providers) instead of the network when given.
    pub fn with_dial(
        p: &Provider,
        connect_hist: Histogram,
        clock: Clock,
        replicas: Option<u32>,
        dial: Option<&crate::transport::Dial>,
    ) -> Result<Self, UpstreamError> {
        let mut secret = None;
        let auth = match &p.api_key_env {
            None => None,
            Some(var) => {
                let key = std::env::var(var).map_err(|_| UpstreamError::MissingKey {
                    provider: p.name.clone(),
                    var: var.clone(),
                })?;
                let (name, value) = match p.api {
                    Api::Anthropic => (HeaderName::from_static("x-api-key"), key),
                    Api::OpenAi => (header::AUTHORIZATION, format!("Bearer {key}")),
                };
                let mut v = HeaderValue::from_str(&value).map_err(|_| UpstreamError::BadKey {
                    provider: p.name.clone(),
                    var: var.clone(),
                })?;
                v.set_sensitive(true);
                secret = Some(key_of(&value).to_string());
                Some((name, v))
            }
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(p.connect_timeout));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let connector = match dial {
            Some(d) => crate::transport::Connector::Memory(std::sync::Arc::clone(d)),
            None => crate::transport::Connector::Net(https),
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(1024)
            .build(connector);
        let scheme = p.base_url.scheme_str().unwrap_or("http");
        let authority = p
            .base_url
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let shared_rate = match (replicas, p.rate_limit) {
            (Some(n), Some((rpm, burst))) => Some(SharedRate {
                rpm,
                burst,
                local: Mutex::new(
                    levee_policy::Gcra::per_minute(
                        (rpm / n.max(1)).max(1),
                        (burst / n.max(1)).max(1),
                    )
                    .map_err(|_| UpstreamError::BadKey {
                        provider: p.name.clone(),
                        var: "rate_limit".into(),
                    })?,
                ),
            }),
            _ => None,
        };
        let state = if shared_rate.is_some() {
            p.new_state_without_allowance()
        } else {
            p.new_state()
        };
        Ok(ProviderRuntime {
            shared_rate,
            name: p.name.clone(),
            api: p.api,
            scheme_authority: format!("{scheme}://{authority}"),
            base_path: p.base_url.path().trim_end_matches('/').to_string(),
            auth,
            secret,
            client,
            state: Mutex::new(state),
            connect_hist,
            clock,
        })
    }

    /// Sends one attempt, timing how long it waits for a connection.
    pub fn send(&self, req: Request<Full<Bytes>>) -> hyper_util::client::legacy::ResponseFuture {
        let started = self.clock.now();
        self.client.request(req.map(|inner| ConnTimed {
            inner,
            started,
            clock: self.clock,
            hist: Some(self.connect_hist.clone()),
        }))
    }

    /// The upstream URI for an inbound path (`/v1/...`), joined to the base
    /// URL's path without doubling a `/v1`.
    pub fn uri_for(&self, path_and_query: &str) -> Option<Uri> {
        let tail = if self.base_path.ends_with("/v1") && path_and_query.starts_with("/v1/") {
            &path_and_query[3..]
        } else {
            path_and_query
        };
        format!("{}{}{}", self.scheme_authority, self.base_path, tail)
            .parse()
            .ok()
    }

    /// Locks the provider's policy state (a poisoned lock is still usable:
    /// the state is plain counters).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, ProviderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The key inside an auth header value (`Bearer KEY` or `KEY`).
fn key_of(value: &str) -> &str {
    value.strip_prefix("Bearer ").unwrap_or(value)
}

/// The caller headers forwarded upstream: an allow-list, so nothing that
/// selects an account, a billing project or an identity at the provider
/// (`openai-organization`, `openai-project`, `cookie`, `api-key`,
/// `x-goog-api-key`, `forwarded`, `x-forwarded-for`, …) ever travels beside
/// Levee's own key. Levee sets `authorization`/`x-api-key`, `x-timeout-ms`
/// and `idempotency-key` itself; framing headers are hyper's.
pub fn is_forwarded(api: Api, name: &HeaderName) -> bool {
    match name.as_str() {
        "content-type" | "accept" | "user-agent" | "traceparent" | "tracestate" => true,
        "anthropic-version" | "anthropic-beta" => api == Api::Anthropic,
        "openai-beta" => api == Api::OpenAi,
        _ => false,
    }
}

/// Builds one attempt's request.
pub fn build_request(
    provider: &ProviderRuntime,
    inbound: &HeaderMap,
    uri: Uri,
    body: Bytes,
    timeout: Duration,
    idempotency_key: &HeaderValue,
) -> Request<Full<Bytes>> {
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = http::Method::POST;
    *req.uri_mut() = uri;
    let h = req.headers_mut();
    // Names listed in the caller's `Connection` header are hop-by-hop.
    let listed: Vec<String> = inbound
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in inbound {
        if is_forwarded(provider.api, name) && !listed.iter().any(|l| l == name.as_str()) {
            h.append(name.clone(), value.clone());
        }
    }
    if let Some((n, v)) = &provider.auth {
        h.insert(n.clone(), v.clone());
    }
    if provider.api == Api::Anthropic && !h.contains_key("anthropic-version") {
        h.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    }
    if !h.contains_key(header::CONTENT_TYPE) {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    h.insert(
        "x-timeout-ms",
        HeaderValue::from(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
    );
    h.insert("idempotency-key", idempotency_key.clone());
    req
}

/// The `levee_upstream_attempts_total{result}` label (and the log's
/// `last_attempt`) of an attempt that got no response: `tls` when the TLS
/// handshake failed — a certificate the gateway does not trust, expired or
/// for another name, or a server that does not speak TLS — else
/// `connect_error` (refused, unreachable, DNS, reset before a response).
/// Either way the core sees a connection fault (`Outcome::ConnectError`):
/// the provider cannot be reached, and its breaker counts it.
pub fn failure_label(e: &hyper_util::client::legacy::Error) -> &'static str {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if is_tls(c) {
            return "tls";
        }
        cause = c.source();
    }
    "connect_error"
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
