//! One provider at run time ([`ProviderRuntime`]): its key and extra
//! fields, its connection pool, its policy state, and the upstream URI of
//! each inbound path.

use crate::clock::Clock;
use crate::http::outbound::Outbound;
use crate::observe::histogram::Histogram;
use crate::upstream::body::{ConnTimed, UpstreamBody};
use crate::upstream::pool::Pool;
use crate::upstream::{
    provider_auth, provider_extras, Extras, SendError, SharedRate, UpstreamError,
};
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Response, Uri};
use levee_config::{Api, Provider};
use levee_policy::ProviderState;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// One provider at run time.
#[derive(Debug)]
pub struct ProviderRuntime {
    /// Set when the allowance is shared across replicas.
    pub(crate) shared_rate: Option<SharedRate>,
    pub(crate) name: String,
    /// `name` as the `x-levee-target` value (none when it is not a valid
    /// header value).
    pub(crate) name_header: Option<HeaderValue>,
    pub(crate) api: Api,
    scheme_authority: String,
    base_path: String,
    /// The upstream URI of each endpoint Levee serves (`levee_wire::paths::POST`),
    /// built once: most requests carry no query string, and a clone shares
    /// the parsed URI's bytes where building it costs a format, a parse and
    /// three allocations per request.
    endpoints: Vec<(&'static str, Uri)>,
    pub(super) auth: Option<(HeaderName, HeaderValue)>,
    /// `headers:`, resolved: sent with every request.
    pub(super) extra_headers: Vec<(HeaderName, HeaderValue)>,
    /// `query:`, resolved and encoded (`a=b&c=d`): added to every URI.
    query: String,
    /// The provider key itself, to redact from whatever Levee passes on.
    pub(crate) secret: Option<String>,
    /// Values read from the environment for `headers:` and `query:`:
    /// redacted like the key.
    pub(crate) env_values: Vec<String>,
    pub(super) pool: Arc<Pool>,
    pub(crate) state: Mutex<ProviderState>,
    connect_hist: Histogram,
    clock: Clock,
    /// The provider's own model list, fetched for `GET /v1/models` and kept
    /// a short while.
    pub(crate) models: crate::upstream::listed::ModelCache,
    /// Where the provider runs: the cloud's URLs, auth and framing.
    pub(crate) platform: crate::upstream::platform::PlatformRuntime,
}

/// Where an attempt's wait for a connection is timed: the whole of it
/// (`levee_upstream_connect_seconds`) and the part spent waiting for one of
/// the provider's `max_connections` to come free
/// (`levee_upstream_pool_wait_seconds`).
#[derive(Clone, Debug)]
pub struct ConnectHists {
    pub connect: Histogram,
    pub pool_wait: Histogram,
}

impl From<Histogram> for ConnectHists {
    /// The connect histogram, and a pool wait one nobody reads.
    fn from(connect: Histogram) -> Self {
        ConnectHists {
            connect,
            pool_wait: Histogram::new([1.0]),
        }
    }
}

impl ProviderRuntime {
    /// Builds the client and reads the key from the environment.
    pub fn new(
        p: &Provider,
        hists: impl Into<ConnectHists>,
        clock: Clock,
        replicas: Option<u32>,
    ) -> Result<Self, UpstreamError> {
        Self::with_dial(p, hists, clock, replicas, None)
    }

    /// [`ProviderRuntime::new`], connecting through `dial` (in-memory
    /// pipes to in-process providers) instead of the network when given.
    pub fn with_dial(
        p: &Provider,
        hists: impl Into<ConnectHists>,
        clock: Clock,
        replicas: Option<u32>,
        dial: Option<&crate::upstream::transport::Dial>,
    ) -> Result<Self, UpstreamError> {
        let ConnectHists {
            connect: connect_hist,
            pool_wait,
        } = hists.into();
        let (auth, secret) = match provider_auth(p)? {
            Some((name, value, key)) => (Some((name, value)), Some(key)),
            None => (None, None),
        };
        let Extras {
            headers: extra_headers,
            query,
            env_values,
        } = provider_extras(p).map_err(|mut problems| problems.swap_remove(0).error)?;
        let connector = crate::upstream::transport::connector(p, dial);
        let platform = crate::upstream::platform::PlatformRuntime::with_connector(p, &connector)?;
        let scheme = p.base_url.scheme_str().unwrap_or("http");
        let authority = p
            .base_url
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or_default();
        let host = host_header(&p.base_url).map_err(|_| UpstreamError::BadKey {
            provider: p.name.clone(),
            var: "base_url".into(),
        })?;
        let https = scheme == "https";
        let pool = Arc::new(Pool::new(p, connector, host, clock, https, pool_wait));
        let shared_rate = replicas.and_then(|n| SharedRate::new(p.limits, n));
        let state = if shared_rate.is_some() {
            p.new_state_without_allowance()
        } else {
            p.new_state()
        };
        let mut runtime = ProviderRuntime {
            shared_rate,
            name: p.name.clone(),
            name_header: HeaderValue::from_str(&p.name).ok(),
            api: p.api,
            scheme_authority: format!("{scheme}://{authority}"),
            base_path: p.base_url.path().trim_end_matches('/').to_string(),
            endpoints: Vec::new(),
            auth,
            extra_headers,
            query,
            secret,
            env_values,
            pool,
            state: Mutex::new(state),
            connect_hist,
            clock,
            models: crate::upstream::listed::ModelCache::default(),
            platform,
        };
        runtime.endpoints = levee_wire::paths::POST
            .iter()
            .filter_map(|path| Some((*path, kept_uri(runtime.uri_text(path))?)))
            .collect();
        Ok(runtime)
    }

    /// Sends one attempt that read the clock at `started`, timing how long
    /// it waits for a connection: no wait when the pool has one at hand
    /// (no reading of the clock), else from the pool's own reading.
    pub fn send(
        &self,
        req: Outbound<Bytes>,
        started: levee_policy::Instant,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, SendError>> + Send + '_ {
        let req =
            req.map(|bytes| ConnTimed::new(bytes, started, self.clock, self.connect_hist.clone()));
        self.pool.send(req)
    }

    /// The upstream URI for an inbound path (`/v1/...`), joined to the base
    /// URL's path without doubling a `/v1`.
    pub fn uri_for(&self, path_and_query: &str) -> Option<Uri> {
        match self.endpoints.iter().find(|(p, _)| *p == path_and_query) {
            Some((_, uri)) => Some(uri.clone()),
            None => self.build_uri(path_and_query),
        }
    }

    /// `base_url` is used as the provider's own SDK uses it. A bare host
    /// gets the whole path (`/v1/chat/completions`). For OpenAI a base URL
    /// with a path is the API's root, `/v1` included (`…/v1`,
    /// `…/v1beta/openai`, an Azure `…/openai/v1`): the path after `/v1` is
    /// added to it. For Anthropic, whose SDK's base URL has no `/v1`, a
    /// path is a prefix, and a base URL ending in `/v1` does not double it.
    fn build_uri(&self, path_and_query: &str) -> Option<Uri> {
        self.uri_text(path_and_query).parse().ok()
    }

    /// The text of [`ProviderRuntime::build_uri`]'s URI.
    fn uri_text(&self, path_and_query: &str) -> String {
        let root = match self.api {
            Api::OpenAi => !self.base_path.is_empty(),
            Api::Anthropic => self.base_path.ends_with("/v1"),
        };
        let tail = match path_and_query.strip_prefix("/v1") {
            Some(rest) if root && rest.starts_with('/') => rest,
            _ => path_and_query,
        };
        let mut uri = format!("{}{}{}", self.scheme_authority, self.base_path, tail);
        if !self.query.is_empty() {
            uri.push(if tail.contains('?') { '&' } else { '?' });
            uri.push_str(&self.query);
        }
        uri
    }

    /// The URI for a path a platform chose ([`crate::upstream::platform::PlatformRuntime::target`]):
    /// appended verbatim to the base URL's path, with `query:` added.
    pub fn platform_uri(&self, path_and_query: &str) -> Option<Uri> {
        let mut uri = format!(
            "{}{}{}",
            self.scheme_authority, self.base_path, path_and_query
        );
        if !self.query.is_empty() {
            uri.push(if path_and_query.contains('?') {
                '&'
            } else {
                '?'
            });
            uri.push_str(&self.query);
        }
        uri.parse().ok()
    }

    /// Everything to redact that this provider was configured with: its key
    /// and the values its `headers:` and `query:` read from the environment.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.secret
            .as_deref()
            .into_iter()
            .chain(self.env_values.iter().map(String::as_str))
    }

    /// The clock the provider's attempts are timed by.
    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    /// Locks the provider's policy state (a poisoned lock is still usable:
    /// the state is plain counters).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, ProviderState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `host` header for a base URL: its host, and its port unless it is the
/// scheme's default.
fn host_header(base: &Uri) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    let host = base.host().unwrap_or_default();
    let default_port = match base.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    match base.port_u16() {
        Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")),
        _ => HeaderValue::from_str(host),
    }
}

/// The `Uri` of `text`, the text kept for the life of the process: a `Uri`
/// made from static text is cloned and dropped without a reference count,
/// where one made from a `String` costs two atomic read-modify-writes a
/// clone and two a drop (an endpoint's URI is cloned twice a request).
/// Each distinct text is kept once, so reloading a config keeps nothing
/// more; the texts are the endpoints' (a base URL from the config and a
/// path Levee serves), never a caller's. `None`: not a URI.
fn kept_uri(text: String) -> Option<Uri> {
    static KEPT: std::sync::LazyLock<Mutex<std::collections::HashSet<&'static str>>> =
        std::sync::LazyLock::new(Mutex::default);
    // `Uri::from_static` panics on text that is not a URI: parsed first.
    text.parse::<Uri>().ok()?;
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let text: &'static str = match kept.get(text.as_str()) {
        Some(t) => t,
        None => {
            let t: &'static str = Box::leak(text.into_boxed_str());
            kept.insert(t);
            t
        }
    };
    Some(Uri::from_static(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_uris_use_the_base_url_as_the_providers_sdk_does() {
        assert_uris(&[
            (
                "openai",
                "http://h.test",
                "",
                "/v1/chat/completions",
                "http://h.test/v1/chat/completions",
            ),
            (
                "openai",
                "http://h.test/v1",
                "",
                "/v1/chat/completions",
                "http://h.test/v1/chat/completions",
            ),
            // Gemini's OpenAI-compatible root: no `/v1` added.
            (
                "openai",
                "https://generativelanguage.googleapis.com/v1beta/openai/",
                "",
                "/v1/chat/completions",
                "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
            ),
            (
                "openai",
                "http://h.test:8080/proxy",
                "",
                "/v1/embeddings",
                "http://h.test:8080/proxy/embeddings",
            ),
            // Anthropic's SDK base URL has no `/v1`: a path is a prefix.
            (
                "anthropic",
                "http://h.test:8080/proxy",
                "",
                "/v1/messages",
                "http://h.test:8080/proxy/v1/messages",
            ),
            (
                "anthropic",
                "https://h.test/anthropic/v1/",
                "",
                "/v1/messages",
                "https://h.test/anthropic/v1/messages",
            ),
            // Not one of the endpoints built in advance: built on the spot.
            (
                "openai",
                "http://h.test/v1",
                "",
                "/v1/messages?beta=true",
                "http://h.test/v1/messages?beta=true",
            ),
        ]);
    }

    #[test]
    fn a_providers_query_goes_on_every_uri_after_the_callers_own() {
        assert_uris(&[
            // `query:` on every URI, escaped, after the caller's own.
            (
                "openai",
                "https://r.test/openai/v1",
                ", query: { api-version: \"2024-10-21 preview\" }",
                "/v1/chat/completions",
                "https://r.test/openai/v1/chat/completions?api-version=2024-10-21%20preview",
            ),
            (
                "openai",
                "https://r.test/openai/v1",
                ", query: { api-version: v1 }",
                "/v1/chat/completions?x=1",
                "https://r.test/openai/v1/chat/completions?x=1&api-version=v1",
            ),
        ]);
    }

    /// Asserts each `(api, base_url, extra config, inbound path, upstream
    /// URI)`: a provider so configured sends the path to that URI.
    fn assert_uris(cases: &[(&str, &str, &str, &str, &str)]) {
        for &(api, base, extra, path, want) in cases {
            let cfg = levee_config::Config::parse(&format!(
                "providers:\n  p: {{ api: {api}, base_url: \"{base}\"{extra} }}\nroutes:\n  - targets: [p]\n"
            ))
            .unwrap();
            let p =
                ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
                    .unwrap();
            assert_eq!(
                p.uri_for(path).unwrap().to_string(),
                want,
                "{base} + {path}"
            );
        }
    }

    #[test]
    fn an_endpoints_uri_is_kept_once_however_often_its_provider_is_made() {
        let cfg = levee_config::Config::parse(
            "providers:\n  p: { api: openai, base_url: \"http://kept.test/v1\" }\nroutes:\n  - targets: [p]\n",
        )
        .unwrap();
        let make = || {
            ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
                .unwrap()
        };
        let (a, b) = (make(), make());
        let path = "/v1/chat/completions";
        let (ua, ub) = (a.uri_for(path).unwrap(), b.uri_for(path).unwrap());
        assert_eq!(ua.to_string(), "http://kept.test/v1/chat/completions");
        // The same text, not a second copy: a reload keeps nothing more.
        let text = |u: &Uri| u.path_and_query().unwrap().as_str().as_ptr();
        assert_eq!(text(&ua), text(&ub));
        // A text that is no URI is refused, not a panic.
        assert!(kept_uri("http://bad host/".to_string()).is_none());
    }
}
