//! Where a provider runs. The dialect's own API needs nothing here; a cloud
//! that serves the same dialect under its own URLs, auth and framing
//! (Azure OpenAI, the Gemini API, Amazon Bedrock, Google Vertex AI) is
//! adapted at three points of an attempt, and nowhere else:
//!
//! 1. [`PlatformRuntime::target`], once per request and target, after the
//!    model is rewritten or the request translated: the URL path (Bedrock
//!    and Vertex put the model there) and the body the cloud expects.
//! 2. [`PlatformRuntime::authorize`], per attempt, once every other field
//!    is set: a SigV4 signature, or a bearer token read or refreshed now.
//! 3. [`PlatformRuntime::answer`], on the answer's head: the cloud's framing
//!    and error shapes turned back into the dialect's own, so retries,
//!    classification, the commit point and translation work unchanged.

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION};
use http::Response;
use levee_config::Provider;
use std::future::Future;
use std::pin::Pin;

use crate::http::outbound::Outbound;
use crate::upstream::body::UpstreamBody;
use crate::upstream::transport::Connector;

mod azure;
mod bedrock;
mod entra;
mod gemini;
mod google;
mod kept;
mod vertex;

/// The body's top-level `model` (Bedrock, Vertex and Azure deployments put
/// it in the URL path) and whether `stream` is `true`; `None` for a body
/// that is not a JSON object with a string `model`.
pub(crate) fn model_and_stream(body: &Bytes) -> Option<(String, bool)> {
    let text = std::str::from_utf8(body).ok()?;
    if let Some(top) = crate::http::quickjson::top(text) {
        return Some((top.model?.to_string(), top.stream));
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let model = v.get("model")?.as_str()?.to_string();
    Some((
        model,
        v.get("stream") == Some(&serde_json::Value::Bool(true)),
    ))
}

/// Why an attempt could not be authorised. The message says what to fix
/// and never holds a secret.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// Credentials are there but cannot be used (a malformed key file, a
    /// token endpoint that refuses).
    #[error("provider `{provider}`: {detail}")]
    Credentials { provider: String, detail: String },
    /// No credentials in this environment (variables unset, no file):
    /// `levee check --allow-missing-env` warns instead of refusing.
    #[error("provider `{provider}`: {detail}")]
    MissingCredentials { provider: String, detail: String },
}

/// Sets the attempt's `authorization` to `bearer`, the field `provider`'s
/// credentials gave, or fails with why they gave none.
fn set_bearer(
    req: &mut Outbound<Bytes>,
    provider: &str,
    bearer: Result<HeaderValue, String>,
) -> Result<(), PlatformError> {
    let value = bearer.map_err(|detail| PlatformError::Credentials {
        provider: provider.to_string(),
        detail,
    })?;
    req.fields.insert(AUTHORIZATION, value);
    Ok(())
}

/// A future an adaptation step returns: the attempt's signature or token,
/// or a probe of the credentials.
pub(crate) type Pending<'a> = Pin<Box<dyn Future<Output = Result<(), PlatformError>> + Send + 'a>>;

/// What a cloud that serves a dialect under its own URLs, auth and framing
/// adapts, at three points of an attempt; each step does nothing unless
/// the cloud's module says otherwise. One module per cloud implements
/// it; nothing outside this folder names a cloud.
pub(crate) trait Platform: std::fmt::Debug + Send + Sync {
    /// The path (appended verbatim to `base_url`'s path) and body for one
    /// target, given the native request's path and body (the target's
    /// model already in `model`). `Ok(None)`: sent as it is. `Err`: the
    /// request cannot go to this platform (a 400-class message).
    fn target(&self, _path: &str, _body: &Bytes) -> Result<Option<(String, Bytes)>, String> {
        Ok(None)
    }

    /// Whether the platform takes a request of `caller`'s dialect on `path`
    /// as it is, though its provider speaks the other dialect (Bedrock's
    /// embedding models take OpenAI's embeddings requests).
    fn carries(&self, _caller: levee_wire::Dialect, _path: &str) -> bool {
        false
    }

    /// Whether [`Platform::authorize`] adds anything (the request path
    /// skips the call otherwise).
    fn authorizes(&self) -> bool {
        false
    }

    /// Adds the attempt's auth once every other field is set. `unix_ms`:
    /// the wall clock now (SigV4 dates, token expiry).
    fn authorize<'a>(&'a self, _req: &'a mut Outbound<Bytes>, _unix_ms: u64) -> Pending<'a> {
        done()
    }

    /// Whether answers need [`Platform::answer`].
    fn maps_answers(&self) -> bool {
        false
    }

    /// The answer in the dialect's own wire format. `path`: the path the
    /// attempt was sent to (it names the cloud's operation and model).
    fn answer(
        &self,
        resp: Response<UpstreamBody>,
        _stream: bool,
        _path: &str,
    ) -> Response<UpstreamBody> {
        resp
    }

    /// Credentials this platform signs with now (keys, tokens), to redact
    /// from everything Levee passes on.
    fn secrets(&self) -> Vec<String> {
        Vec::new()
    }

    /// `levee check --probe`: credentials load and a token can be obtained.
    fn probe(&self, _unix_ms: u64) -> Pending<'_> {
        done()
    }

    /// Where the platform's credentials come from, in words (`levee check
    /// --probe` says it).
    fn credential_source(&self) -> Option<String> {
        None
    }

    /// The credentials the platform obtains while it runs (tokens it is
    /// issued, keys it re-reads), told to the redaction as it gets them.
    fn learned(&self) -> Option<std::sync::Arc<crate::observe::live_secrets::Learned>> {
        None
    }
}

/// An adaptation step with nothing to do.
fn done<'a>() -> Pending<'a> {
    Box::pin(std::future::ready(Ok(())))
}

/// The platform `p` runs on, built by its module from the provider's
/// settings (`None`: the dialect's own API, nothing to adapt). Adding a
/// cloud is its module and one line here. `connector` makes the
/// connections a platform's own token requests take (`None`: the
/// provider's, over the network).
fn adapt(
    p: &Provider,
    connector: Option<&Connector>,
) -> Result<Option<Box<dyn Platform>>, PlatformError> {
    Ok(match &p.platform {
        levee_config::Platform::Direct => None,
        levee_config::Platform::Azure { .. } => Some(Box::new(azure::Azure::of(p, connector)?)),
        levee_config::Platform::Gemini => Some(Box::new(gemini::Gemini)),
        levee_config::Platform::Bedrock { .. } => {
            Some(Box::new(bedrock::Bedrock::of(p, connector)?))
        }
        levee_config::Platform::Vertex { .. } => Some(Box::new(vertex::Vertex::of(p, connector)?)),
    })
}

/// A provider's platform at run time: the adaptations of its cloud, or
/// none for the dialect's own API.
#[derive(Debug)]
pub struct PlatformRuntime(Option<Box<dyn Platform>>);

impl PlatformRuntime {
    /// The platform of `p`; `Err` when its settings cannot be used (a
    /// credentials file that cannot be read, a region that is not a name).
    /// A platform's own token requests go over the network, as the
    /// provider's connections go (`levee check --probe`).
    pub fn new(p: &Provider) -> Result<Self, PlatformError> {
        adapt(p, None).map(PlatformRuntime)
    }

    /// [`Self::new`] for a provider whose connections `connector` makes:
    /// a platform's token requests go the same way (the gateway's trust,
    /// or a test's in-memory pipes).
    pub(crate) fn with_connector(
        p: &Provider,
        connector: &Connector,
    ) -> Result<Self, PlatformError> {
        adapt(p, Some(connector)).map(PlatformRuntime)
    }

    /// See [`Platform::target`]; `Ok(None)` on the dialect's own API.
    pub fn target(&self, path: &str, body: &Bytes) -> Result<Option<(String, Bytes)>, String> {
        match &self.0 {
            None => Ok(None),
            Some(p) => p.target(path, body),
        }
    }

    /// See [`Platform::authorize`].
    pub async fn authorize(
        &self,
        req: &mut Outbound<Bytes>,
        unix_ms: u64,
    ) -> Result<(), PlatformError> {
        match &self.0 {
            None => Ok(()),
            Some(p) => p.authorize(req, unix_ms).await,
        }
    }

    /// See [`Platform::answer`].
    pub fn answer(
        &self,
        resp: Response<UpstreamBody>,
        stream: bool,
        path: &str,
    ) -> Response<UpstreamBody> {
        match &self.0 {
            None => resp,
            Some(p) => {
                // A platform reads and rewrites the head as it likes: all
                // of its fields are in the map.
                let (mut parts, mut body) = resp.into_parts();
                body.take_raw().move_into(&mut parts.headers);
                p.answer(Response::from_parts(parts, body), stream, path)
            }
        }
    }

    /// See [`Platform::carries`].
    pub fn carries(&self, caller: levee_wire::Dialect, path: &str) -> bool {
        self.0.as_ref().is_some_and(|p| p.carries(caller, path))
    }

    /// See [`Platform::authorizes`].
    pub fn authorizes(&self) -> bool {
        self.0.as_ref().is_some_and(|p| p.authorizes())
    }

    /// See [`Platform::maps_answers`].
    pub fn maps_answers(&self) -> bool {
        self.0.as_ref().is_some_and(|p| p.maps_answers())
    }

    /// See [`Platform::secrets`].
    pub fn secrets(&self) -> Vec<String> {
        self.0.as_ref().map(|p| p.secrets()).unwrap_or_default()
    }

    /// See [`Platform::credential_source`].
    pub fn credential_source(&self) -> Option<String> {
        self.0.as_ref().and_then(|p| p.credential_source())
    }

    /// See [`Platform::learned`].
    pub(crate) fn learned(&self) -> Option<std::sync::Arc<crate::observe::live_secrets::Learned>> {
        self.0.as_ref().and_then(|p| p.learned())
    }

    /// See [`Platform::probe`].
    pub async fn probe(&self) -> Result<(), PlatformError> {
        match &self.0 {
            None => Ok(()),
            Some(p) => p.probe(crate::clock::unix_ms()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn answer(status: u16, body: &'static str) -> Response<UpstreamBody> {
        let body = http_body_util::Full::new(Bytes::from_static(body.as_bytes()))
            .map_err(|e: std::convert::Infallible| match e {});
        let mut r = Response::new(UpstreamBody::Mapped(Box::pin(body)));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
        r
    }

    #[tokio::test]
    async fn the_gemini_apis_google_shaped_errors_reach_callers_in_openais_shape() {
        let g = PlatformRuntime(Some(Box::new(gemini::Gemini)));
        assert!(g.maps_answers());
        let google = r#"[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]"#;
        let r = g.answer(answer(429, google), false, "/");
        assert_eq!(r.status(), 429);
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("RESOURCE_EXHAUSTED")),
            "{v}"
        );
        assert!(v["error"].get("type").is_some(), "OpenAI's shape: {v}");
        // A success passes as it is.
        let ok = g.answer(answer(200, r#"{"id":"x"}"#), false, "/");
        let body = ok.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], br#"{"id":"x"}"#);
    }
}
