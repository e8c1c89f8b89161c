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
//! once less than [`tokens::MAX_MARGIN`] or a tenth of its lifetime is left; one
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
use http::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use levee_config::Provider;
use levee_wire::Dialect;
use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use serde_json::Value;

use super::{Pending, Platform, PlatformError};
use grants::Grant;
use tokens::Tokens;

mod federation;
mod grants;
mod tokens;
use crate::clock::Clock;
use crate::http::outbound::Outbound;
use crate::upstream::body::UpstreamBody;
use crate::upstream::transport::Connector;

/// The `anthropic_version` Vertex AI's Anthropic models take in the body.
pub(crate) const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
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
                    Some(t) => t.grant.describe(),
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
    pub(super) fn of(p: &Provider, connector: Option<&Connector>) -> Result<Self, PlatformError> {
        match connector {
            Some(c) => Self::new(p, c),
            None => Self::new(p, &crate::upstream::transport::connector(p, None)),
        }
    }

    /// [`Self::of`] with the connector given.
    fn new(p: &Provider, connector: &Connector) -> Result<Self, PlatformError> {
        let err = |detail: String| PlatformError::Credentials {
            provider: p.name.clone(),
            detail,
        };
        let levee_config::Platform::Vertex {
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
                let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
                let path = file
                    .clone()
                    .or_else(|| env("GOOGLE_APPLICATION_CREDENTIALS").map(PathBuf::from))
                    .or_else(|| Grant::well_known(&env));
                let grant = match path {
                    Some(path) => Grant::load(&path, token_url.as_deref()),
                    None => Grant::metadata(&env),
                }
                .map_err(err)?;
                Some(Arc::new(Tokens::new(&p.name, grant, connector.clone())))
            }
        };
        Ok(Vertex {
            provider: p.name.clone(),
            location,
            openai: *openai,
            tokens,
        })
    }

    /// Sets `authorization: Bearer <token>`: the cached token, a new one
    /// when none is valid, and a background refresh when it is due.
    async fn send_token(
        &self,
        req: &mut Outbound<Bytes>,
        unix_ms: u64,
    ) -> Result<(), PlatformError> {
        let Some(tokens) = &self.tokens else {
            return Ok(());
        };
        super::set_bearer(req, &self.provider, tokens.bearer(unix_ms).await)
    }

    /// `levee check --probe`: the key signs and its token endpoint issues a token.
    async fn probe_token(&self, unix_ms: u64) -> Result<(), PlatformError> {
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

impl Platform for Vertex {
    /// The Vertex path and body for a native request (see the module's doc).
    fn target(&self, path: &str, body: &Bytes) -> Result<Option<(String, Bytes)>, String> {
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
    /// Whether [`Platform::authorize`] adds a token (a service-account key);
    /// a token from `api_key_env` is sent by the common auth code.
    fn authorizes(&self) -> bool {
        self.tokens.is_some()
    }

    fn authorize<'a>(&'a self, req: &'a mut Outbound<Bytes>, unix_ms: u64) -> Pending<'a> {
        Box::pin(self.send_token(req, unix_ms))
    }

    fn maps_answers(&self) -> bool {
        true
    }
    /// Google's error bodies in the dialect's shape. A 401 also drops the
    /// cached token, so the next attempt asks for a new one.
    fn answer(
        &self,
        resp: Response<UpstreamBody>,
        _stream: bool,
        _path: &str,
    ) -> Response<UpstreamBody> {
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
        super::google::errors(resp, dialect)
    }

    fn probe(&self, unix_ms: u64) -> Pending<'_> {
        Box::pin(self.probe_token(unix_ms))
    }

    fn learned(&self) -> Option<Arc<crate::observe::live_secrets::Learned>> {
        self.tokens.as_ref().map(|t| Arc::clone(&t.learned))
    }

    fn secrets(&self) -> Vec<String> {
        self.tokens
            .as_ref()
            .map(|t| t.grant.secrets())
            .unwrap_or_default()
    }

    fn credential_source(&self) -> Option<String> {
        Some(match &self.tokens {
            Some(t) => t.grant.describe(),
            None => "an access token from api_key_env".to_string(),
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

#[cfg(test)]
mod tests;
