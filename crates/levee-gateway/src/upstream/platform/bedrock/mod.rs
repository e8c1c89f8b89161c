//! Amazon Bedrock: Anthropic's models by the Messages API under Bedrock's
//! `InvokeModel` and `InvokeModelWithResponseStream`, every other model by
//! the Converse API (`converse`: the request written as Converse, the answer
//! read back as a Messages answer), and OpenAI's embeddings on Titan and
//! Cohere models (`embed`).
//!
//! - Request: `POST /model/{modelId}/invoke` (or
//!   `/invoke-with-response-stream` when the body asked for a stream), the
//!   model id taken from the body's `model` and percent-encoded as the AWS
//!   SDKs encode a URI label (`:` is `%3A`, `/` is `%2F`); the body is the
//!   Messages body without `model` and `stream`, with `anthropic_version:
//!   bedrock-2023-05-31`, and a caller's `anthropic-beta` header moved into
//!   an `anthropic_beta` array, as the official SDK's Bedrock client sends
//!   it. Token counting, the model list and batches are not Bedrock
//!   operations: such a request is refused for this target.
//! - Auth: AWS Signature Version 4 (service `bedrock`, the provider's
//!   region) by the AWS SDK's own signer, over `host`, `content-type`,
//!   `x-amz-date` and, with temporary credentials, `x-amz-security-token`.
//!   Credentials come from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` /
//!   `AWS_SESSION_TOKEN`, or from the shared credentials file
//!   (`credentials_file`, else `AWS_SHARED_CREDENTIALS_FILE`, else
//!   `~/.aws/credentials`) under a profile (`profile`, else `AWS_PROFILE`,
//!   else `default`). A provider that names a `profile` or a
//!   `credentials_file` reads the file even when the variables are set, as
//!   the AWS SDKs do for an explicit profile. The file must hold the
//!   profile's keys when the provider is built (an absent file is missing
//!   credentials, as an unset key variable is); after that it is looked at
//!   (one `stat`) on every signature and read again when its modification
//!   time or length changed, so rotated keys are used from the next attempt
//!   on, and a file that goes away fails the attempt (`credentials`).
//! - Answer: a stream's `application/vnd.amazon.eventstream` frames are
//!   read with their CRC checks by the AWS SDK's decoder; each `chunk`
//!   event carries one Anthropic stream event (base64 in `{"bytes": …}`),
//!   relayed as `event: <type>` / `data: <json>`. An exception event
//!   (`throttlingException`, `modelStreamErrorException`, …) becomes an
//!   Anthropic `event: error` with the matching error type and ends the
//!   stream. An error answer (`{"message": …}` named by `x-amzn-errortype`)
//!   becomes an Anthropic error body with the same status and headers.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::event_stream::{HeaderValue as FrameValue, Message};
use base64::Engine as _;
use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Response, StatusCode, Uri};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Map, Value};

use super::{Pending, Platform, PlatformError};
use events::{error_name, is_event_stream, ErrorAnswer, EventStreamSse};

mod chain;
mod converse;
mod credentials;
mod embed;
mod events;
use crate::error::BoxError;
use crate::http::outbound::Outbound;
use crate::observe::redact::Secrets;
use crate::upstream::body::{Reframe, Step, UpstreamBody};
use credentials::*;
use levee_config::Provider;

/// The `anthropic_version` Bedrock requires in the body.
pub(crate) const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The SigV4 signing name of Bedrock's runtime API.
const SERVICE: &str = "bedrock";

/// What a URI label keeps unescaped (RFC 3986's unreserved characters), as
/// the AWS SDKs write a model id into the path.
const LABEL: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// An Amazon Bedrock provider.
pub struct Bedrock {
    provider: String,
    region: String,
    source: Source,
}

/// Where the provider's credentials come from.
enum Source {
    /// The environment's `AWS_*` variables, as the process started.
    Env(Arc<Keys>),
    /// The shared credentials file, looked at on every signature.
    File(CredentialsFile),
    /// The rest of the default chain (a credential_process, web identity,
    /// container credentials, the instance profile): fetched, kept and
    /// refreshed before they expire.
    Fetched(Arc<super::kept::Kept<chain::Fetched>>),
}

/// One set of credentials: the signer's identity and the values to redact.
struct Keys {
    identity: Identity,
    /// These keys, found in any form (a provider's error may quote a signed
    /// field, the session token included).
    redact: Secrets,
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl fmt::Debug for Bedrock {
    /// Where the credentials come from, never what they are.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Bedrock");
        d.field("provider", &self.provider)
            .field("region", &self.region);
        match &self.source {
            Source::Env(_) => d.field("credentials", &"environment"),
            Source::File(file) => d
                .field("credentials_file", &file.path)
                .field("profile", &file.profile),
            Source::Fetched(f) => d.field("credentials", &f.inner.how.source()),
        };
        d.finish()
    }
}

impl Bedrock {
    /// The provider `p` (of `api: bedrock`), its credentials found as the
    /// module's documentation says, with the process's environment.
    pub(super) fn of(
        p: &Provider,
        connector: Option<&crate::upstream::transport::Connector>,
    ) -> Result<Self, PlatformError> {
        match &p.platform {
            levee_config::Platform::Bedrock {
                region,
                profile,
                credentials_file,
            } => {
                let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
                let connector = connector
                    .cloned()
                    .unwrap_or_else(crate::upstream::transport::credentials_connector);
                Self::with_env_via(
                    &p.name,
                    region,
                    profile.as_deref(),
                    credentials_file.as_deref(),
                    &env,
                    connector,
                )
            }
            _ => Err(PlatformError::Credentials {
                provider: p.name.clone(),
                detail: "not an `api: bedrock` provider".to_string(),
            }),
        }
    }

    /// The provider `provider` in `region`, its credentials found with the
    /// environment given as a lookup.
    #[cfg(test)]
    pub(crate) fn with_env(
        provider: &str,
        region: &str,
        profile: Option<&str>,
        credentials_file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, PlatformError> {
        let connector = crate::upstream::transport::credentials_connector();
        Self::with_env_via(provider, region, profile, credentials_file, env, connector)
    }

    /// [`Bedrock::with_env`], fetched credentials asked through `connector`.
    fn with_env_via(
        provider: &str,
        region: &str,
        profile: Option<&str>,
        credentials_file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        connector: crate::upstream::transport::Connector,
    ) -> Result<Self, PlatformError> {
        let fail = |detail: String| PlatformError::Credentials {
            provider: provider.to_string(),
            detail,
        };
        let missing = |detail: String| PlatformError::MissingCredentials {
            provider: provider.to_string(),
            detail,
        };
        if !is_region(region) {
            return Err(fail(format!(
                "`region: {region}` is not an AWS region name (like `us-east-1`)"
            )));
        }
        let ambient = profile.is_none() && credentials_file.is_none();
        let from_env = if ambient {
            env_keys(env).map_err(fail)?
        } else {
            None
        };
        let source = match from_env {
            Some(s) => s,
            None => chain_source(provider, region, profile, credentials_file, env, connector)?,
        };
        let bedrock = Bedrock {
            provider: provider.to_string(),
            region: region.to_string(),
            source,
        };
        // The file is read now, as a key in the environment is: one that is
        // absent is missing credentials (`levee check --allow-missing-env`
        // warns), one without the profile's keys is refused. Its keys are
        // known to the redactor from the start.
        if let Source::File(file) = &bedrock.source {
            if let Err(detail) = file.keys() {
                return Err(match (file.path.exists(), ambient) {
                    (true, _) => fail(detail),
                    (false, true) => missing(format!(
                        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set, and {detail}"
                    )),
                    (false, false) => missing(detail),
                });
            }
        }
        Ok(bedrock)
    }

    fn not_served(&self, path: &str) -> String {
        let provider = &self.provider;
        if path.starts_with("/v1/messages/count_tokens") {
            format!("Amazon Bedrock does not count tokens: POST {path} cannot go to provider `{provider}`; route token counting to an Anthropic provider")
        } else if path.starts_with("/v1/messages/batches") {
            format!("Amazon Bedrock has no Message Batches API: {path} cannot go to provider `{provider}`")
        } else if path.starts_with("/v1/models") {
            format!("Amazon Bedrock lists models in its control-plane API, not at {path}: provider `{provider}` cannot answer it")
        } else {
            format!("Amazon Bedrock serves POST /v1/messages (InvokeModel, Converse) and /v1/embeddings (Titan and Cohere models), not {path}: provider `{provider}` cannot answer it")
        }
    }

    /// Signs the attempt (SigV4 at `unix_ms`), after moving a caller's
    /// `anthropic-beta` into the body.
    async fn sign(&self, req: &mut Outbound<Bytes>, unix_ms: u64) -> Result<(), PlatformError> {
        let keys = self.keys_at(unix_ms).await?;
        let beta = HeaderName::from_static("anthropic-beta");
        let invoke = converse::converse_model(req.uri.path()).is_none();
        if let Some(betas) = req.fields.get(&beta).and_then(|v| v.to_str().ok()) {
            // Betas are Anthropic's: a Converse model has none to turn on.
            if let Some(body) = with_betas(&req.body, betas).filter(|_| invoke) {
                req.body = body;
            }
        }
        // Bedrock reads the version and betas from the body only.
        if req.fields.iter().any(|(n, _)| is_anthropic_field(n)) {
            let mut kept = crate::http::outbound::Fields::with_capacity(req.fields.len());
            for (n, v) in req.fields.iter().filter(|(n, _)| !is_anthropic_field(n)) {
                kept.append(n.clone(), v.clone());
            }
            req.fields = kept;
        }
        let time = UNIX_EPOCH + Duration::from_millis(unix_ms);
        let signed = sign_request(&keys.identity, &self.region, time, req)
            .map_err(|detail| self.error(detail))?;
        for (name, value) in signed {
            req.fields.insert(name, value);
        }
        Ok(())
    }

    /// The current keys' redactor (none when they do not load).
    fn redactor(&self) -> Secrets {
        self.keys().map(|k| k.redact.clone()).unwrap_or_default()
    }

    /// The credentials now: the environment's, or the file's (read again
    /// when it changed since it was last read), or the fetched ones held.
    fn keys(&self) -> Result<Arc<Keys>, PlatformError> {
        match &self.source {
            Source::Env(keys) => Ok(Arc::clone(keys)),
            Source::File(file) => file.keys().map_err(|detail| self.error(detail)),
            Source::Fetched(f) => f
                .cached()
                .ok_or_else(|| self.error(format!("{}: not fetched yet", f.inner.how.source()))),
        }
    }

    /// The credentials to sign with at `unix_ms`: fetched (or refreshed)
    /// first when they come from a fetched source.
    async fn keys_at(&self, unix_ms: u64) -> Result<Arc<Keys>, PlatformError> {
        match &self.source {
            Source::Fetched(f) => f.get(unix_ms).await.map_err(|detail| self.error(detail)),
            _ => self.keys(),
        }
    }

    /// Where the credentials come from, in words.
    fn source_name(&self) -> String {
        match &self.source {
            Source::Env(_) => "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY".to_string(),
            Source::File(f) => format!("profile `{}` of {}", f.profile, f.path.display()),
            Source::Fetched(f) => f.inner.how.source(),
        }
    }

    fn error(&self, detail: String) -> PlatformError {
        PlatformError::Credentials {
            provider: self.provider.clone(),
            detail,
        }
    }
}

impl Platform for Bedrock {
    /// The path (model id in it) and body Bedrock takes for a Messages
    /// request; `Err` for what Bedrock does not serve.
    fn target(&self, path: &str, body: &Bytes) -> Result<Option<(String, Bytes)>, String> {
        let bare = path.split_once('?').map_or(path, |(p, _)| p);
        if bare == levee_wire::paths::EMBEDDINGS {
            let fields: Map<String, Value> = serde_json::from_slice(body)
                .map_err(|_| "the embeddings request is not a JSON object".to_string())?;
            let model = match fields.get("model") {
                Some(Value::String(m)) if !m.is_empty() => m.clone(),
                _ => return Err("the embeddings request has no `model`".to_string()),
            };
            return embed::target(&fields, &model).map(Some);
        }
        if bare != "/v1/messages" {
            return Err(self.not_served(bare));
        }
        let mut fields: Map<String, Value> = serde_json::from_slice(body).map_err(|_| {
            "the request body is not a JSON object, so it cannot be sent to Amazon Bedrock"
                .to_string()
        })?;
        let model = match fields.remove("model") {
            Some(Value::String(m)) if !m.is_empty() => m,
            _ => {
                return Err(
                    "the request has no `model`: Amazon Bedrock takes the model id in the URL"
                        .to_string(),
                )
            }
        };
        let stream = matches!(fields.remove("stream"), Some(Value::Bool(true)));
        if !converse::uses_invoke(&model) {
            return converse::target(&fields, &model, stream).map(Some);
        }
        fields
            .entry("anthropic_version")
            .or_insert_with(|| Value::String(ANTHROPIC_VERSION.to_string()));
        let op = if stream {
            "invoke-with-response-stream"
        } else {
            "invoke"
        };
        let path = format!("/model/{}/{op}", utf8_percent_encode(&model, LABEL));
        let body = serde_json::to_vec(&fields).map_err(|e| e.to_string())?;
        Ok(Some((path, Bytes::from(body))))
    }

    fn authorizes(&self) -> bool {
        true
    }

    /// OpenAI's embeddings, for Titan and Cohere models, in the caller's
    /// own dialect.
    fn carries(&self, caller: levee_wire::Dialect, path: &str) -> bool {
        caller == levee_wire::Dialect::OpenAi && path == levee_wire::paths::EMBEDDINGS
    }

    /// Signs the attempt (SigV4 at `unix_ms`), after moving a caller's
    /// `anthropic-beta` into the body.
    fn authorize<'a>(&'a self, req: &'a mut Outbound<Bytes>, unix_ms: u64) -> Pending<'a> {
        Box::pin(self.sign(req, unix_ms))
    }

    fn maps_answers(&self) -> bool {
        true
    }
    /// The answer in the Messages API's own wire format.
    /// A Converse answer (the attempt's `path` says so) is read back as a
    /// Messages answer.
    fn answer(
        &self,
        resp: Response<UpstreamBody>,
        stream: bool,
        path: &str,
    ) -> Response<UpstreamBody> {
        let (mut parts, body) = resp.into_parts();
        let embeds = embed::family_of_path(path).is_some();
        if parts.status.is_success() && embeds {
            let model = path.trim_start_matches("/model/");
            let model = model.rsplit_once('/').map_or(model, |(m, _)| m);
            let model = percent_encoding::percent_decode_str(model)
                .decode_utf8_lossy()
                .into_owned();
            let answer = embed::EmbedAnswer::new(model, &parts.headers);
            parts.headers.remove(CONTENT_LENGTH);
            return Response::from_parts(parts, body.reframed(answer));
        }
        if parts.status.is_success() {
            let conversed = converse::converse_model(path)
                .map(|model| (model, converse::message_id(&parts.headers)));
            if !stream || !is_event_stream(&parts.headers) {
                let Some((model, id)) = conversed else {
                    return Response::from_parts(parts, body);
                };
                parts.headers.remove(CONTENT_LENGTH);
                let body = body.reframed(converse::ConverseAnswer::new(model, id));
                return Response::from_parts(parts, body);
            }
            parts.headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream; charset=utf-8"),
            );
            parts.headers.remove(CONTENT_LENGTH);
            let mut events = EventStreamSse::new(self.redactor());
            if let Some((model, id)) = conversed {
                events = events.conversing(&model, &id);
            }
            return Response::from_parts(parts, body.reframed(events));
        }
        let name = error_name(&parts.headers);
        // Bedrock's model timeout is a 408; its Anthropic equivalent,
        // `timeout_error`, is a 504: retried like one by the default
        // `retry.on` (and by the SDKs), never read as the caller's fault.
        if parts.status == StatusCode::REQUEST_TIMEOUT
            && name
                .as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case("ModelTimeoutException"))
        {
            parts.status = StatusCode::GATEWAY_TIMEOUT;
        }
        let mut error = ErrorAnswer::new(parts.status, name, self.redactor());
        if embeds {
            error = error.in_openai_shape();
        }
        let mapped = body.reframed(error);
        parts
            .headers
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        parts.headers.remove(CONTENT_LENGTH);
        Response::from_parts(parts, mapped)
    }
    /// The credentials' values, to redact from everything Levee passes on.
    fn secrets(&self) -> Vec<String> {
        match self.keys() {
            Ok(k) => {
                let mut v = vec![k.access_key_id.clone(), k.secret_access_key.clone()];
                v.extend(k.session_token.clone());
                v
            }
            Err(_) => Vec::new(),
        }
    }

    fn learned(&self) -> Option<Arc<crate::observe::live_secrets::Learned>> {
        match &self.source {
            Source::File(file) => Some(Arc::clone(&file.learned)),
            Source::Fetched(f) => Some(Arc::clone(&f.inner.learned)),
            Source::Env(_) => None,
        }
    }

    /// `levee check --probe`: the credentials load.
    fn probe(&self, unix_ms: u64) -> Pending<'_> {
        Box::pin(async move { self.keys_at(unix_ms).await.map(|_| ()) })
    }

    fn credential_source(&self) -> Option<String> {
        Some(self.source_name())
    }
}

impl Keys {
    fn new(
        access_key_id: String,
        secret_access_key: String,
        session_token: Option<String>,
    ) -> Self {
        let creds = Credentials::new(
            access_key_id.clone(),
            secret_access_key.clone(),
            session_token.clone(),
            None,
            "levee",
        );
        let redact = Secrets::new(
            [&access_key_id, &secret_access_key]
                .into_iter()
                .chain(session_token.as_ref()),
        );
        Keys {
            identity: Identity::from(creds),
            redact,
            access_key_id,
            secret_access_key,
            session_token,
        }
    }
}

/// Whether `region` reads as an AWS region name (`us-east-1`).
fn is_region(region: &str) -> bool {
    !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn is_anthropic_field(name: &HeaderName) -> bool {
    matches!(name.as_str(), "anthropic-beta" | "anthropic-version")
}

/// The body with `anthropic_beta` set from a comma-separated
/// `anthropic-beta` header (kept when the body has one already); `None` when
/// the body is not a JSON object or there is nothing to add.
fn with_betas(body: &Bytes, header: &str) -> Option<Bytes> {
    let betas: Vec<Value> = header
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(|b| Value::String(b.to_string()))
        .collect();
    if betas.is_empty() {
        return None;
    }
    let mut fields: Map<String, Value> = serde_json::from_slice(body).ok()?;
    if fields.contains_key("anthropic_beta") {
        return None;
    }
    fields.insert("anthropic_beta".to_string(), Value::Array(betas));
    serde_json::to_vec(&fields).ok().map(Bytes::from)
}

/// The SigV4 header fields for `req` at `time`, signed over `host` (the
/// URI's authority, without a default port, as the pool sends it),
/// `content-type` when set, `x-amz-date` and any session token.
fn sign_request(
    identity: &Identity,
    region: &str,
    time: SystemTime,
    req: &Outbound<Bytes>,
) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let host = host_of(&req.uri)
        .ok_or_else(|| "the request URI has no host to sign for; check `base_url`".to_string())?;
    let content_type = req.fields.get(&CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let mut headers = vec![("host", host.as_str())];
    headers.extend(content_type.map(|ct| ("content-type", ct)));
    let uri = req.uri.to_string();
    let signable = SignableRequest::new(
        req.method.as_str(),
        uri,
        headers.into_iter(),
        SignableBody::Bytes(&req.body),
    )
    .map_err(|e| format!("cannot sign the request: {e}"))?;
    let params = v4::SigningParams::builder()
        .identity(identity)
        .region(region)
        .name(SERVICE)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| format!("cannot sign the request: {e}"))?
        .into();
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| format!("cannot sign the request: {e}"))?
        .into_parts();
    let (fields, _) = instructions.into_parts();
    fields
        .into_iter()
        .map(|h| {
            let name = HeaderName::from_bytes(h.name().as_bytes())
                .map_err(|_| format!("the signer gave a bad field name `{}`", h.name()))?;
            let mut value = HeaderValue::from_str(h.value()).map_err(|_| {
                format!(
                    "the value of `{}` is not a valid header value (check the credentials for stray characters)",
                    h.name()
                )
            })?;
            // The signature is kept out of debug output too.
            value.set_sensitive(h.sensitive() || name == http::header::AUTHORIZATION);
            Ok((name, value))
        })
        .collect()
}

/// The `host` a request to `uri` carries: its host, and its port unless it
/// is the scheme's default.
fn host_of(uri: &Uri) -> Option<String> {
    let host = uri.host()?;
    let default = if uri.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    Some(match uri.port_u16() {
        Some(port) if port != default => format!("{host}:{port}"),
        _ => host.to_string(),
    })
}

#[cfg(test)]
mod tests;
