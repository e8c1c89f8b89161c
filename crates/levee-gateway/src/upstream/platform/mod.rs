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
use levee_config::{Platform, Provider};

use crate::http::outbound::Outbound;
use crate::upstream::body::UpstreamBody;

mod azure;
mod bedrock;
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

/// A provider's platform at run time.
#[derive(Debug)]
pub enum PlatformRuntime {
    /// The dialect's own API: nothing to adapt.
    Direct,
    Azure(azure::Azure),
    /// The Gemini API's OpenAI-compatible endpoint: OpenAI's wire format
    /// under its own base URL and key.
    Gemini,
    /// Anthropic models on Amazon Bedrock: SigV4, the event stream.
    Bedrock(bedrock::Bedrock),
    /// Google Vertex AI: Anthropic models or its OpenAI-compatible
    /// endpoint, OAuth2 tokens from a service-account key.
    Vertex(vertex::Vertex),
}

impl PlatformRuntime {
    /// The platform of `p`; `Err` when its settings cannot be used (a
    /// credentials file that cannot be read, a region that is not a name).
    pub fn new(p: &Provider) -> Result<Self, PlatformError> {
        Ok(match &p.platform {
            Platform::Direct => PlatformRuntime::Direct,
            Platform::Gemini => PlatformRuntime::Gemini,
            Platform::Azure {
                api_version,
                token_file,
            } => PlatformRuntime::Azure(azure::Azure::new(
                &p.name,
                api_version.clone(),
                token_file.clone(),
            )),
            Platform::Bedrock {
                region,
                profile,
                credentials_file,
            } => PlatformRuntime::Bedrock(bedrock::Bedrock::new(
                &p.name,
                region,
                profile.as_deref(),
                credentials_file.as_deref(),
            )?),
            // Token requests over the network, as the provider's own
            // connections go (`levee check --probe`).
            Platform::Vertex { .. } => PlatformRuntime::Vertex(vertex::Vertex::new(
                p,
                &crate::upstream::transport::connector(p, None),
            )?),
        })
    }

    /// [`Self::new`] for a provider whose connections `connector` makes:
    /// Vertex AI's token requests go the same way (the gateway's trust, or
    /// a test's in-memory pipes).
    pub(crate) fn with_connector(
        p: &Provider,
        connector: &crate::upstream::transport::Connector,
    ) -> Result<Self, PlatformError> {
        match &p.platform {
            Platform::Vertex { .. } => {
                Ok(PlatformRuntime::Vertex(vertex::Vertex::new(p, connector)?))
            }
            _ => Self::new(p),
        }
    }

    /// The path (appended verbatim to `base_url`'s path) and body for one
    /// target, given the native request's path and body (the target's model
    /// already in `model`). `Ok(None)`: sent as it is. `Err`: the request
    /// cannot go to this platform (a 400-class message).
    pub fn target(&self, path: &str, body: &Bytes) -> Result<Option<(String, Bytes)>, String> {
        match self {
            PlatformRuntime::Direct | PlatformRuntime::Gemini => Ok(None),
            PlatformRuntime::Azure(a) => a.target(path, body),
            PlatformRuntime::Bedrock(b) => b.target(path, body),
            PlatformRuntime::Vertex(v) => v.target(path, body),
        }
    }

    /// Adds the attempt's auth once every other field is set. `unix_ms`:
    /// the wall clock now (SigV4 dates, token expiry).
    pub async fn authorize(
        &self,
        req: &mut Outbound<Bytes>,
        unix_ms: u64,
    ) -> Result<(), PlatformError> {
        let _ = unix_ms;
        match self {
            PlatformRuntime::Direct | PlatformRuntime::Gemini => Ok(()),
            PlatformRuntime::Azure(a) => a.authorize(req),
            PlatformRuntime::Bedrock(b) => b.authorize(req, unix_ms).await,
            PlatformRuntime::Vertex(v) => v.authorize(req, unix_ms).await,
        }
    }

    /// The answer in the dialect's own wire format.
    pub fn answer(&self, resp: Response<UpstreamBody>, stream: bool) -> Response<UpstreamBody> {
        match self {
            PlatformRuntime::Direct | PlatformRuntime::Azure(_) => resp,
            // The Gemini API answers errors in Google's shape, even on its
            // OpenAI-compatible endpoint (often as a one-element array).
            PlatformRuntime::Gemini => vertex::google_errors(resp, levee_wire::Dialect::OpenAi),
            PlatformRuntime::Bedrock(b) => b.answer(resp, stream),
            PlatformRuntime::Vertex(v) => v.answer(resp),
        }
    }

    /// Whether this platform adds anything at [`Self::authorize`] (the
    /// request path skips the call otherwise).
    pub fn authorizes(&self) -> bool {
        match self {
            PlatformRuntime::Direct | PlatformRuntime::Gemini => false,
            PlatformRuntime::Azure(a) => a.authorizes(),
            PlatformRuntime::Bedrock(_) => true,
            PlatformRuntime::Vertex(v) => v.authorizes(),
        }
    }

    /// Whether answers need [`Self::answer`].
    pub fn maps_answers(&self) -> bool {
        matches!(
            self,
            PlatformRuntime::Gemini | PlatformRuntime::Bedrock(_) | PlatformRuntime::Vertex(_)
        )
    }

    /// Credentials this platform signs with (keys, tokens), to redact from
    /// everything Levee passes on.
    pub fn secrets(&self) -> Vec<String> {
        match self {
            PlatformRuntime::Bedrock(b) => b.secrets(),
            _ => Vec::new(),
        }
    }

    /// `levee check --probe`: credentials load and a token can be obtained.
    pub async fn probe(&self) -> Result<(), PlatformError> {
        match self {
            PlatformRuntime::Direct | PlatformRuntime::Gemini => Ok(()),
            PlatformRuntime::Azure(a) => a.probe(),
            PlatformRuntime::Bedrock(b) => b.probe().await,
            PlatformRuntime::Vertex(v) => v.probe(crate::clock::unix_ms()).await,
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
        let g = PlatformRuntime::Gemini;
        assert!(g.maps_answers());
        let google = r#"[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]"#;
        let r = g.answer(answer(429, google), false);
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
        let ok = g.answer(answer(200, r#"{"id":"x"}"#), false);
        let body = ok.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], br#"{"id":"x"}"#);
    }
}
