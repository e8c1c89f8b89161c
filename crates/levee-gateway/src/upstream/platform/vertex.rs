//! Google Vertex AI: Anthropic models through `rawPredict` and
//! `streamRawPredict`, and Gemini (and the other models Vertex serves that
//! way) through its OpenAI-compatible endpoint, with OAuth2 access tokens.
//!
//! - Anthropic (`api: vertex`): `POST /v1/messages` goes to
//!   `/v1/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict`
//!   (`:streamRawPredict` when the body asks for a stream), the model taken
//!   out of the body and `anthropic_version: vertex-2023-10-16` put in; `stream`
//!   stays in the body, as Anthropic's own Vertex client sends it. A token
//!   count goes to `…/models/count-tokens:rawPredict` with the model left in
//!   the body.
//! - OpenAI-compatible (`api: vertex-openai`): `POST /v1/chat/completions`
//!   (and `/v1/embeddings`) go to
//!   `/v1/projects/{project}/locations/{region}/endpoints/openapi/…` with
//!   the body unchanged (models are named like `google/gemini-2.0-flash`).
//!
//! Auth is an OAuth2 access token as `authorization: Bearer`. A token kept
//! in the variable `api_key_env` names is sent by the common auth code;
//! otherwise a service-account key (`credentials_file`, else the file
//! `GOOGLE_APPLICATION_CREDENTIALS` names) is exchanged for tokens with the
//! JWT bearer grant (RFC 7523) at its token endpoint (`token_url`, else the
//! key's `token_uri`). A token is cached and refreshed in the background
//! once less than [`MAX_MARGIN`] or a tenth of its lifetime is left; one
//! refresh runs at a time, and requests keep using the old token while it
//! is valid, so a slow or failing token endpoint fails no request until the
//! token it issued last has expired.
//!
//! Google's error bodies (`{"error":{"code":429,"message":…,"status":
//! "RESOURCE_EXHAUSTED"}}`, or a JSON array of them) are turned into the
//! dialect's own error body with the same status, so a 429 is a throttle
//! (`rate_limit_error`), a 503 `overloaded_error`, and so on, as the core's
//! classifier and the caller's SDK read them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use levee_config::{Platform, Provider};
use levee_wire::Dialect;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde_json::Value;

use super::PlatformError;
use crate::clock::Clock;
use crate::http::outbound::Outbound;
use crate::upstream::body::{Reframe, Step, UpstreamBody};
use crate::upstream::transport::Connector;

/// The `anthropic_version` Vertex AI's Anthropic models take in the body.
pub(crate) const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// The scope a Vertex AI token is asked for.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's token endpoint: where tokens are asked for when neither
/// `token_url` nor the key names another, and the assertion's audience always.
const GOOGLE_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
/// How long the assertion of a token request is valid (Google's maximum).
const ASSERTION_LIFETIME_S: u64 = 3600;
/// The longest a token request may take, connection included.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest token endpoint answer read.
const MAX_TOKEN_ANSWER: usize = 64 * 1024;
/// A token is refreshed once less than this, or a tenth of its lifetime,
/// whichever is less, is left.
pub(crate) const MAX_MARGIN: Duration = Duration::from_secs(300);
/// After a background refresh failed, the next is tried no sooner than this.
const RETRY_REFRESH_AFTER: Duration = Duration::from_secs(10);
/// The largest error body turned into the dialect's shape; a longer one is
/// passed on as it came.
const MAX_ERROR_BODY: usize = 256 * 1024;

/// What a path segment keeps unescaped: RFC 3986's `pchar` less `;` (a
/// server that drops `;` and the rest of its segment would drop the
/// `:rawPredict` after a model name), as Anthropic's Vertex client escapes
/// it (`claude-sonnet-4@20250514` stays as it is).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b';')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// A Vertex AI provider: its project, region and where its tokens come from.
pub struct Vertex {
    provider: String,
    /// `/v1/projects/{project}/locations/{region}`, escaped; without the
    /// `/v1` when the base URL's path already ends in it.
    location: String,
    /// The OpenAI-compatible endpoint (`api: vertex-openai`).
    openai: bool,
    /// `None`: the token comes from `api_key_env`, sent by the common auth code.
    tokens: Option<Arc<Tokens>>,
}

impl std::fmt::Debug for Vertex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vertex")
            .field("provider", &self.provider)
            .field("location", &self.location)
            .field("openai", &self.openai)
            .field(
                "auth",
                &match &self.tokens {
                    Some(t) => format!("service-account key {}", t.key.file.display()),
                    None => "access token from api_key_env".to_string(),
                },
            )
            .finish()
    }
}

impl Vertex {
    /// The provider `p` (of `api: vertex` or `vertex-openai`), its token
    /// requests made through `connector` (the provider's own: TLS with the
    /// gateway's trust, or in-memory pipes in tests). `Err` says which key
    /// or file to fix.
    pub(crate) fn new(p: &Provider, connector: &Connector) -> Result<Self, PlatformError> {
        let err = |detail: String| PlatformError::Credentials {
            provider: p.name.clone(),
            detail,
        };
        let Platform::Vertex {
            project,
            region,
            credentials_file,
            token_url,
            openai,
        } = &p.platform
        else {
            return Err(err("not a Vertex AI provider".into()));
        };
        let version = if p.base_url.path().trim_end_matches('/').ends_with("/v1") {
            ""
        } else {
            "/v1"
        };
        let location = format!(
            "{version}/projects/{}/locations/{}",
            utf8_percent_encode(project, SEGMENT),
            utf8_percent_encode(region, SEGMENT)
        );
        let tokens = match (&p.api_key_env, credentials_file) {
            (Some(var), Some(_)) => {
                return Err(err(format!(
                    "`api_key_env` ({var}, an access token) and `credentials_file` (a service-account key) both authenticate: keep one"
                )))
            }
            (Some(_), None) => None,
            (None, file) => {
                let path = match file {
                    Some(f) => f.clone(),
                    None => match std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS") {
                        Some(f) if !f.is_empty() => PathBuf::from(f),
                        _ => return Err(PlatformError::MissingCredentials {
                            provider: p.name.clone(),
                            detail: "Vertex AI needs credentials: set `credentials_file` to a service-account key (JSON), export GOOGLE_APPLICATION_CREDENTIALS naming one, or set `api_key_env` to a variable holding an access token".into(),
                        }),
                    },
                };
                let key = ServiceAccount::load(&path, token_url.as_deref()).map_err(err)?;
                Some(Arc::new(Tokens::new(&p.name, key, connector.clone())))
            }
        };
        Ok(Vertex {
            provider: p.name.clone(),
            location,
            openai: *openai,
            tokens,
        })
    }

    /// The Vertex path and body for a native request (see the module's doc).
    pub(crate) fn target(
        &self,
        path: &str,
        body: &Bytes,
    ) -> Result<Option<(String, Bytes)>, String> {
        let (bare, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        if self.openai {
            let op = match bare {
                "/v1/chat/completions" => "chat/completions",
                "/v1/embeddings" => "embeddings",
                other => {
                    return Err(format!(
                        "Vertex AI's OpenAI-compatible endpoint serves `/v1/chat/completions` and `/v1/embeddings`, not `{other}`"
                    ))
                }
            };
            let mut out = format!("{}/endpoints/openapi/{op}", self.location);
            if let Some(q) = query {
                out.push('?');
                out.push_str(q);
            }
            return Ok(Some((out, body.clone())));
        }
        // Anthropic's `?beta=true` marks its beta client's calls; Vertex
        // serves them at the same path, as Anthropic's Vertex client sends them.
        let query = query.filter(|q| *q != "beta=true");
        let count = match bare {
            "/v1/messages" => false,
            "/v1/messages/count_tokens" => true,
            other => {
                return Err(format!(
                    "Vertex AI serves Anthropic's Messages API (`/v1/messages` and `/v1/messages/count_tokens`), not `{other}`"
                ))
            }
        };
        let (model, stream, body) = vertex_body(body, count)?;
        let mut out = if count {
            format!(
                "{}/publishers/anthropic/models/count-tokens:rawPredict",
                self.location
            )
        } else {
            format!(
                "{}/publishers/anthropic/models/{}:{}",
                self.location,
                utf8_percent_encode(&model, SEGMENT),
                if stream {
                    "streamRawPredict"
                } else {
                    "rawPredict"
                }
            )
        };
        if let Some(q) = query {
            out.push('?');
            out.push_str(q);
        }
        Ok(Some((out, body)))
    }

    /// Whether [`Self::authorize`] adds a token (a service-account key);
    /// a token from `api_key_env` is sent by the common auth code.
    pub(crate) fn authorizes(&self) -> bool {
        self.tokens.is_some()
    }

    /// Sets `authorization: Bearer <token>`: the cached token, a new one
    /// when none is valid, and a background refresh when it is due.
    pub(crate) async fn authorize(
        &self,
        req: &mut Outbound<Bytes>,
        unix_ms: u64,
    ) -> Result<(), PlatformError> {
        let Some(tokens) = &self.tokens else {
            return Ok(());
        };
        super::set_bearer(req, &self.provider, tokens.bearer(unix_ms).await)
    }

    /// Google's error bodies in the dialect's shape. A 401 also drops the
    /// cached token, so the next attempt asks for a new one.
    pub(crate) fn answer(&self, resp: Response<UpstreamBody>) -> Response<UpstreamBody> {
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED {
            if let Some(tokens) = &self.tokens {
                tokens.forget();
            }
        }
        let dialect = if self.openai {
            Dialect::OpenAi
        } else {
            Dialect::Anthropic
        };
        google_errors(resp, dialect)
    }

    /// `levee check --probe`: the key signs and its token endpoint issues a token.
    pub(crate) async fn probe(&self, unix_ms: u64) -> Result<(), PlatformError> {
        let Some(tokens) = &self.tokens else {
            return Ok(());
        };
        tokens
            .bearer(unix_ms)
            .await
            .map(|_| ())
            .map_err(|detail| PlatformError::Credentials {
                provider: self.provider.clone(),
                detail,
            })
    }
}

/// A native Messages body as Vertex takes it: `model` taken out (left in
/// for a token count), `anthropic_version` set. Returns the model and
/// whether a stream is asked for.
fn vertex_body(body: &Bytes, keep_model: bool) -> Result<(String, bool, Bytes), String> {
    let mut map: serde_json::Map<String, Value> = serde_json::from_slice(body)
        .map_err(|_| "the request body is not a JSON object".to_string())?;
    let model = match if keep_model {
        map.get("model").cloned()
    } else {
        map.remove("model")
    } {
        Some(Value::String(m)) if !m.is_empty() => m,
        _ => {
            return Err(
                "a Vertex AI request names its model in `model`, and this one has none".into(),
            )
        }
    };
    let stream = map.get("stream") == Some(&Value::Bool(true));
    map.insert(
        "anthropic_version".into(),
        Value::String(ANTHROPIC_VERSION.into()),
    );
    let bytes = serde_json::to_vec(&map)
        .map_err(|e| format!("the request body cannot be written for Vertex AI: {e}"))?;
    Ok((model, stream, Bytes::from(bytes)))
}

/// The parts of a service-account key file Levee uses.
struct ServiceAccount {
    file: PathBuf,
    client_email: String,
    key_id: Option<String>,
    key: jsonwebtoken::EncodingKey,
    /// Where tokens are asked for (`token_url`, else the key's `token_uri`).
    token_url: String,
}

#[derive(serde::Deserialize)]
struct KeyFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    client_email: Option<String>,
    private_key_id: Option<String>,
    private_key: Option<String>,
    token_uri: Option<String>,
}

impl ServiceAccount {
    /// Reads and checks a key file; an error names the file and what is
    /// wrong with it, never its contents.
    fn load(path: &Path, token_url: Option<&str>) -> Result<Self, String> {
        let shown = path.display();
        let text = std::fs::read(path)
            .map_err(|e| format!("cannot read the service-account key {shown}: {e}"))?;
        let file: KeyFile = serde_json::from_slice(&text)
            .map_err(|e| format!("{shown} is not a service-account key (a JSON object): {e}"))?;
        match file.kind.as_deref() {
            Some("service_account") => {}
            Some("authorized_user") => return Err(format!(
                "{shown} holds user credentials (`authorized_user`, from `gcloud auth application-default login`); Levee needs a service-account key (`gcloud iam service-accounts keys create`), or an access token in the variable `api_key_env` names"
            )),
            Some(other) => return Err(format!(
                "{shown} is a `{other}` credential; Levee takes a service-account key (`type: service_account`) or an access token in the variable `api_key_env` names"
            )),
            None => return Err(format!(
                "{shown} has no `type`: is it a service-account key (`type: service_account`)?"
            )),
        }
        let client_email = file
            .client_email
            .filter(|e| !e.is_empty())
            .ok_or_else(|| format!("{shown} has no `client_email`"))?;
        let pem = file
            .private_key
            .ok_or_else(|| format!("{shown} has no `private_key`"))?;
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).map_err(|_| {
            format!("the `private_key` in {shown} is not an RSA private key in PEM form")
        })?;
        let token_url = token_url
            .map(str::to_string)
            .or(file.token_uri)
            .unwrap_or_else(|| GOOGLE_TOKEN_URL.to_string());
        match token_url.parse::<http::Uri>() {
            Ok(u) if matches!(u.scheme_str(), Some("https" | "http")) && u.host().is_some() => {}
            _ => {
                return Err(format!(
                    "the token endpoint `{token_url}` (`token_url`, else the key's `token_uri`) is not an http(s) URL"
                ))
            }
        }
        Ok(ServiceAccount {
            file: path.to_path_buf(),
            client_email,
            key_id: file.private_key_id.filter(|k| !k.is_empty()),
            key,
            token_url,
        })
    }

    /// The signed assertion of a token request made at `unix_s`.
    fn assertion(&self, unix_s: u64) -> Result<String, String> {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            iss: &'a str,
            sub: &'a str,
            aud: &'a str,
            scope: &'a str,
            iat: u64,
            exp: u64,
        }
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = self.key_id.clone();
        let claims = Claims {
            iss: &self.client_email,
            sub: &self.client_email,
            // Google's token endpoint, wherever the request is sent (a
            // private endpoint, a test's): as Google's own auth library writes it.
            aud: GOOGLE_TOKEN_URL,
            scope: SCOPE,
            iat: unix_s,
            exp: unix_s + ASSERTION_LIFETIME_S,
        };
        jsonwebtoken::encode(&header, &claims, &self.key).map_err(|e| {
            format!(
                "cannot sign a token request with the key in {}: {e}",
                self.file.display()
            )
        })
    }
}

/// An access token and when to stop using it.
#[derive(Clone)]
struct Token {
    /// `Bearer …`, marked sensitive.
    value: HeaderValue,
    /// On the gateway's clock (tokio's, so paused-time tests move it).
    expires: levee_policy::Instant,
    refresh_at: levee_policy::Instant,
}

#[derive(Default)]
struct Cache {
    token: Option<Token>,
    /// No background refresh before this (one just failed).
    quiet_until: Option<levee_policy::Instant>,
    /// When the last token request that found no valid token failed, and why.
    failed: Option<(levee_policy::Instant, String)>,
}

/// A service account's tokens: cached, refreshed one request at a time.
struct Tokens {
    provider: String,
    key: ServiceAccount,
    client: Client<Connector, Full<Bytes>>,
    clock: Clock,
    cache: Mutex<Cache>,
    /// Held while a token is being fetched: concurrent attempts that need
    /// one wait for that fetch instead of making their own.
    flight: tokio::sync::Mutex<()>,
    /// A background refresh is running.
    refreshing: AtomicBool,
}

impl Tokens {
    fn new(provider: &str, key: ServiceAccount, connector: Connector) -> Self {
        Tokens {
            provider: provider.to_string(),
            key,
            // A token lasts about an hour: no connection is kept for the next.
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
            clock: Clock::new(),
            cache: Mutex::new(Cache::default()),
            flight: tokio::sync::Mutex::new(()),
            refreshing: AtomicBool::new(false),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The header value to send now.
    async fn bearer(self: &Arc<Self>, unix_ms: u64) -> Result<HeaderValue, String> {
        let now = self.clock.now();
        let (token, quiet) = {
            let c = self.cache();
            (c.token.clone(), c.quiet_until.is_some_and(|q| now < q))
        };
        match token {
            Some(t) if now < t.refresh_at => Ok(t.value),
            Some(t) if now < t.expires => {
                if !quiet {
                    self.refresh_in_background(unix_ms);
                }
                Ok(t.value)
            }
            _ => self.fresh(unix_ms).await.map(|t| t.value),
        }
    }

    /// A valid token, fetched now unless another caller has just fetched
    /// one; a caller that waited on a fetch that failed gets its error
    /// rather than making the next (a token endpoint that does not answer
    /// holds every waiter once, not once each).
    async fn fresh(&self, unix_ms: u64) -> Result<Token, String> {
        let asked = self.clock.now();
        let _flight = self.flight.lock().await;
        let now = self.clock.now();
        {
            let c = self.cache();
            if let Some(t) = c.token.clone().filter(|t| now < t.expires) {
                return Ok(t);
            }
            if let Some((_, e)) = c.failed.as_ref().filter(|(at, _)| *at >= asked) {
                return Err(e.clone());
            }
        }
        match self.fetch(unix_ms).await {
            Ok(token) => {
                let mut c = self.cache();
                c.token = Some(token.clone());
                c.failed = None;
                Ok(token)
            }
            Err(e) => {
                self.cache().failed = Some((self.clock.now(), e.clone()));
                Err(e)
            }
        }
    }

    /// Starts one refresh in the background unless one is running; the
    /// current token stays in use until it succeeds.
    fn refresh_in_background(self: &Arc<Self>, unix_ms: u64) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let _running = Running(&me.refreshing);
            let _flight = me.flight.lock().await;
            let due = me
                .cache()
                .token
                .as_ref()
                .is_none_or(|t| me.clock.now() >= t.refresh_at);
            if !due {
                return;
            }
            match me.fetch(unix_ms).await {
                Ok(token) => {
                    let mut c = me.cache();
                    c.token = Some(token);
                    c.quiet_until = None;
                }
                Err(e) => {
                    tracing::warn!(provider = %me.provider, error = %e, "Vertex AI token refresh failed; the current token stays in use until it expires");
                    me.cache().quiet_until = Some(me.clock.now() + RETRY_REFRESH_AFTER);
                }
            }
        });
    }

    /// Drops the cached token (the provider refused it).
    fn forget(&self) {
        self.cache().token = None;
    }

    /// One JWT bearer grant at the token endpoint.
    async fn fetch(&self, unix_ms: u64) -> Result<Token, String> {
        let started = self.clock.now();
        let url = &self.key.token_url;
        let assertion = self.key.assertion(unix_ms / 1000)?;
        let form = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        );
        let req = http::Request::post(url.as_str())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .body(Full::new(Bytes::from(form)))
            .map_err(|_| format!("the token endpoint `{url}` is not a usable URL"))?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| format!("cannot reach the token endpoint {url}: {}", chain(&e)))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_TOKEN_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("the token endpoint {url} broke off its answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(TOKEN_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                format!(
                    "the token endpoint {url} did not answer within {} s",
                    TOKEN_TIMEOUT.as_secs()
                )
            })??;
        if !status.is_success() {
            return Err(format!(
                "the token endpoint {url} refused the service-account key in {} ({status}){}",
                self.key.file.display(),
                grant_error(&body)
            ));
        }
        #[derive(serde::Deserialize)]
        struct Granted {
            access_token: String,
            expires_in: Option<u64>,
        }
        let granted: Granted = serde_json::from_slice(&body).map_err(|_| {
            format!("the token endpoint {url} answered {status} without an `access_token`")
        })?;
        let mut value = HeaderValue::try_from(format!("Bearer {}", granted.access_token))
            .ok()
            .filter(|_| !granted.access_token.is_empty())
            .ok_or_else(|| {
                format!("the token endpoint {url} issued a token a header cannot carry")
            })?;
        value.set_sensitive(true);
        let lifetime = Duration::from_secs(granted.expires_in.unwrap_or(3600).max(1));
        let margin = MAX_MARGIN.min(lifetime / 10);
        Ok(Token {
            value,
            expires: started + lifetime,
            refresh_at: started + (lifetime - margin),
        })
    }
}

/// Clears the "background refresh running" flag however the task ends.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// An error and its causes, as one line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// `: error: description` from an OAuth2 error answer (RFC 6749 §5.2),
/// each at most 200 characters; empty when it has none.
fn grant_error(body: &[u8]) -> String {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    let short = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(|s| s.chars().take(200).collect::<String>())
    };
    match (short("error"), short("error_description")) {
        (Some(e), Some(d)) => format!(": {e}: {d}"),
        (Some(e), None) => format!(": {e}"),
        _ => String::new(),
    }
}

/// An answer whose error body, if Google's shape (Vertex AI, the Gemini
/// API), is turned into `dialect`'s with the same status; any other answer
/// as it is.
pub(crate) fn google_errors(
    resp: Response<UpstreamBody>,
    dialect: Dialect,
) -> Response<UpstreamBody> {
    let status = resp.status();
    if status.as_u16() < 400 {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(CONTENT_LENGTH);
    let mapped = body.reframed(ErrorAnswer {
        buf: Vec::new(),
        dialect,
        status: status.as_u16(),
    });
    Response::from_parts(parts, mapped)
}

/// A Google error body (`{"error":{"code","message","status"}}` or an
/// array of them) as `dialect`'s error body with the same status; `None`
/// for anything else (already the dialect's shape, or not JSON).
pub(crate) fn dialect_error(body: &[u8], dialect: Dialect, status: u16) -> Option<Bytes> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let first = match &v {
        Value::Array(items) => items.first()?,
        other => other,
    };
    let e = first.get("error")?.as_object()?;
    if e.contains_key("type") {
        return None;
    }
    let google = e.get("status").and_then(Value::as_str);
    if google.is_none() && !e.contains_key("code") {
        return None;
    }
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("Vertex AI gave no message");
    let message = match google {
        Some(s) => format!("{message} ({s})"),
        None => message.to_string(),
    };
    Some(levee_wire::error::body(
        dialect, status, &message, None, None,
    ))
}

/// An error answer's body, read whole and turned into the dialect's shape;
/// one over [`MAX_ERROR_BODY`] passes as it is.
struct ErrorAnswer {
    buf: Vec<u8>,
    dialect: Dialect,
    status: u16,
}

impl Reframe for ErrorAnswer {
    fn data(&mut self, data: Bytes) -> Step {
        self.buf.extend_from_slice(&data);
        if self.buf.len() > MAX_ERROR_BODY {
            return Step::Pass(Bytes::from(std::mem::take(&mut self.buf)));
        }
        Step::More
    }

    fn end(&mut self) -> Step {
        let held = std::mem::take(&mut self.buf);
        let out =
            dialect_error(&held, self.dialect, self.status).unwrap_or_else(|| Bytes::from(held));
        Step::Last((!out.is_empty()).then_some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../levee-mock/testdata/vertex-test-service-account.json"
    );

    fn provider(yaml_extra: &str, api: &str) -> Provider {
        let text = format!(
            "providers:\n  v: {{ api: {api}, region: us-east5, project: my-proj, base_url: \"http://v.test\"{yaml_extra} }}\nroutes:\n  - targets: [v]\n"
        );
        let config = levee_config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        config.providers[0].clone()
    }

    fn vertex(yaml_extra: &str, api: &str) -> Vertex {
        let p = provider(yaml_extra, api);
        let dial: crate::upstream::transport::Dial = Arc::new(|_: &http::Uri| None);
        Vertex::new(&p, &Connector::Memory(dial)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn json(b: &Bytes) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn a_message_goes_to_raw_predict_with_the_model_in_the_path() {
        let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
        let body = Bytes::from_static(
            br#"{"model":"claude-sonnet-4@20250514","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#,
        );
        let (path, out) = v.target("/v1/messages", &body).unwrap().unwrap();
        assert_eq!(
            path,
            "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict"
        );
        let out = json(&out);
        assert!(out.get("model").is_none());
        assert_eq!(out["anthropic_version"], "vertex-2023-10-16");
        assert_eq!(out["max_tokens"], 5);
        assert!(out.get("stream").is_none());
    }

    #[test]
    fn a_stream_goes_to_stream_raw_predict_and_keeps_its_stream_flag() {
        let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
        let body = Bytes::from_static(
            br#"{"model":"claude-3-5-haiku@20241022","stream":true,"max_tokens":5,"messages":[]}"#,
        );
        let (path, out) = v.target("/v1/messages?beta=true", &body).unwrap().unwrap();
        assert!(
            path.ends_with("/models/claude-3-5-haiku@20241022:streamRawPredict"),
            "{path}"
        );
        assert_eq!(json(&out)["stream"], true);
    }

    #[test]
    fn a_token_count_keeps_its_model_in_the_body() {
        let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
        let body = Bytes::from_static(br#"{"model":"claude-sonnet-4@20250514","messages":[]}"#);
        let (path, out) = v
            .target("/v1/messages/count_tokens", &body)
            .unwrap()
            .unwrap();
        assert_eq!(
            path,
            "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict"
        );
        let out = json(&out);
        assert_eq!(out["model"], "claude-sonnet-4@20250514");
        assert_eq!(out["anthropic_version"], "vertex-2023-10-16");
    }

    #[test]
    fn a_model_name_cannot_break_out_of_its_path_segment() {
        let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
        let body = Bytes::from_static(br#"{"model":"../x;y?z#w","messages":[]}"#);
        let (path, _) = v.target("/v1/messages", &body).unwrap().unwrap();
        assert!(
            path.ends_with("/models/..%2Fx%3By%3Fz%23w:rawPredict"),
            "{path}"
        );
    }

    #[test]
    fn what_vertex_does_not_serve_is_refused_with_what_it_does() {
        let v = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex");
        let e = v
            .target("/v1/messages/batches", &Bytes::from_static(b"{}"))
            .unwrap_err();
        assert!(e.contains("/v1/messages/count_tokens"), "{e}");
        let e = v
            .target("/v1/messages", &Bytes::from_static(br#"{"messages":[]}"#))
            .unwrap_err();
        assert!(e.contains("`model`"), "{e}");
        let o = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex-openai");
        let e = o
            .target("/v1/responses", &Bytes::from_static(b"{}"))
            .unwrap_err();
        assert!(e.contains("/v1/chat/completions"), "{e}");
    }

    #[test]
    fn gemini_goes_to_the_openai_compatible_endpoint_with_its_body_unchanged() {
        let o = vertex(&format!(", credentials_file: \"{KEY}\""), "vertex-openai");
        let body = Bytes::from_static(br#"{"model":"google/gemini-2.0-flash","messages":[]}"#);
        let (path, out) = o.target("/v1/chat/completions", &body).unwrap().unwrap();
        assert_eq!(
            path,
            "/v1/projects/my-proj/locations/us-east5/endpoints/openapi/chat/completions"
        );
        assert_eq!(out, body);
    }

    #[test]
    fn a_base_url_ending_in_v1_is_not_given_a_second_one() {
        let text = format!(
            "providers:\n  v: {{ api: vertex, region: global, project: p, base_url: \"https://aiplatform.googleapis.com/v1\", credentials_file: \"{KEY}\" }}\nroutes:\n  - targets: [v]\n"
        );
        let config = levee_config::Config::parse(&text).unwrap();
        let dial: crate::upstream::transport::Dial = Arc::new(|_: &http::Uri| None);
        let v = Vertex::new(&config.providers[0], &Connector::Memory(dial)).unwrap();
        let body = Bytes::from_static(br#"{"model":"m","messages":[]}"#);
        let (path, _) = v.target("/v1/messages", &body).unwrap().unwrap();
        assert!(path.starts_with("/projects/p/locations/global/"), "{path}");
    }

    #[test]
    fn google_errors_become_the_dialects_own_with_the_same_status() {
        let quota = br#"{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per_base_model","status":"RESOURCE_EXHAUSTED"}}"#;
        let a = dialect_error(quota, Dialect::Anthropic, 429).unwrap();
        let a = json(&a);
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "rate_limit_error");
        assert!(a["error"]["message"]
            .as_str()
            .unwrap()
            .contains("RESOURCE_EXHAUSTED"));
        let o = json(&dialect_error(quota, Dialect::OpenAi, 429).unwrap());
        assert_eq!(o["error"]["code"], "rate_limit_exceeded");
        // A JSON array of them, as the OpenAI-compatible endpoint sends.
        let unavailable =
            br#"[{"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}]"#;
        let a = json(&dialect_error(unavailable, Dialect::Anthropic, 503).unwrap());
        assert_eq!(a["error"]["type"], "overloaded_error");
        // Already the dialect's own (Anthropic's 529 relayed by Vertex): unchanged.
        let own = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert!(dialect_error(own, Dialect::Anthropic, 529).is_none());
        assert!(dialect_error(b"<html>502</html>", Dialect::Anthropic, 502).is_none());
    }

    #[test]
    fn credentials_are_required_and_a_bad_key_file_is_named_without_its_contents() {
        let p = provider("", "vertex");
        let dial: crate::upstream::transport::Dial = Arc::new(|_: &http::Uri| None);
        let c = Connector::Memory(dial);
        // The variable may be set on a developer's machine: this test only
        // runs the check when it is not.
        if std::env::var_os("GOOGLE_APPLICATION_CREDENTIALS").is_none() {
            let e = Vertex::new(&p, &c).unwrap_err().to_string();
            assert!(e.contains("credentials_file"), "{e}");
        }
        let dir = std::env::temp_dir().join(format!("levee-vertex-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("user.json");
        std::fs::write(
            &bad,
            r#"{"type":"authorized_user","refresh_token":"1//secret-refresh"}"#,
        )
        .unwrap();
        let p = provider(
            &format!(", credentials_file: \"{}\"", bad.display()),
            "vertex",
        );
        let e = Vertex::new(&p, &c).unwrap_err().to_string();
        assert!(
            e.contains("authorized_user") && !e.contains("secret-refresh"),
            "{e}"
        );
        let broken = dir.join("broken.json");
        std::fs::write(
            &broken,
            r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nnot-a-key\n-----END PRIVATE KEY-----\n"}"#,
        )
        .unwrap();
        let p = provider(
            &format!(", credentials_file: \"{}\"", broken.display()),
            "vertex",
        );
        let e = Vertex::new(&p, &c).unwrap_err().to_string();
        assert!(
            e.contains("not an RSA private key") && !e.contains("not-a-key"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_assertion_is_an_rs256_jwt_bearer_grant_for_the_token_endpoint() {
        let key = ServiceAccount::load(Path::new(KEY), Some("http://mock0.test/token")).unwrap();
        let jwt = key.assertion(1_700_000_000).unwrap();
        let public = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../levee-mock/testdata/vertex-test-service-account.pub.pem"
        ))
        .unwrap();
        let mut check = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        check.validate_exp = false;
        check.set_audience(&["https://oauth2.googleapis.com/token"]);
        let decoded = jsonwebtoken::decode::<Value>(
            &jwt,
            &jsonwebtoken::DecodingKey::from_rsa_pem(&public).unwrap(),
            &check,
        )
        .unwrap();
        let c = decoded.claims;
        assert_eq!(c["iss"], "levee-test@levee-test.iam.gserviceaccount.com");
        assert_eq!(c["sub"], c["iss"]);
        assert_eq!(c["scope"], SCOPE);
        assert_eq!(c["iat"], 1_700_000_000u64);
        assert_eq!(c["exp"], 1_700_003_600u64);
        assert_eq!(
            decoded.header.kid.as_deref(),
            Some("6fb9f414eaa09705def5622e6755e92a8ea55c14")
        );
    }
}
