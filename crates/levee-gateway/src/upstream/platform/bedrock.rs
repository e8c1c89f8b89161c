//! Amazon Bedrock, Anthropic models: the Messages API under Bedrock's
//! `InvokeModel` and `InvokeModelWithResponseStream`.
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

use super::PlatformError;
use crate::error::BoxError;
use crate::http::outbound::Outbound;
use crate::observe::redact::Secrets;
use crate::upstream::body::{Reframe, Step, UpstreamBody};

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

/// The longest event-stream frame read (AWS caps a message at 16 MiB).
const MAX_FRAME: usize = 16 * 1024 * 1024 + 1024;

/// The most of an error body read to find its message.
const MAX_ERROR_BODY: usize = 64 * 1024;

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

/// The shared credentials file and the keys last read from it.
struct CredentialsFile {
    path: PathBuf,
    profile: String,
    state: Mutex<FileState>,
}

#[derive(Default)]
struct FileState {
    /// Modification time and length when last read.
    stamp: Option<(Option<SystemTime>, u64)>,
    loaded: Option<Result<Arc<Keys>, String>>,
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
        };
        d.finish()
    }
}

impl Bedrock {
    /// The provider `provider` in `region`, its credentials found as the
    /// module's documentation says, with the process's environment.
    pub(crate) fn new(
        provider: &str,
        region: &str,
        profile: Option<&str>,
        credentials_file: Option<&Path>,
    ) -> Result<Self, PlatformError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self::with_env(provider, region, profile, credentials_file, &env)
    }

    /// [`Bedrock::new`] with the environment given as a lookup.
    pub(crate) fn with_env(
        provider: &str,
        region: &str,
        profile: Option<&str>,
        credentials_file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, PlatformError> {
        let fail = |detail: String| PlatformError::Credentials {
            provider: provider.to_string(),
            detail,
        };
        let missing = |detail: String| PlatformError::MissingCredentials {
            provider: provider.to_string(),
            detail,
        };
        let region_ok = !region.is_empty()
            && region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !region_ok {
            return Err(fail(format!(
                "`region: {region}` is not an AWS region name (like `us-east-1`)"
            )));
        }
        let source = if profile.is_none() && credentials_file.is_none() {
            match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                (Some(id), Some(secret)) => Some(Source::Env(Arc::new(Keys::new(
                    id,
                    secret,
                    env("AWS_SESSION_TOKEN"),
                )))),
                (Some(_), None) => {
                    return Err(fail(
                        "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both, or neither to read the shared credentials file".into(),
                    ))
                }
                (None, Some(_)) => {
                    return Err(fail(
                        "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not: set both, or neither to read the shared credentials file".into(),
                    ))
                }
                (None, None) => None,
            }
        } else {
            None
        };
        let source = match source {
            Some(s) => s,
            None => {
                let path = credentials_path(credentials_file, env).ok_or_else(|| {
                    missing("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the provider's `credentials_file:`, or AWS_SHARED_CREDENTIALS_FILE or HOME so the shared credentials file can be found".into())
                })?;
                let profile = profile
                    .map(str::to_string)
                    .or_else(|| env("AWS_PROFILE"))
                    .unwrap_or_else(|| "default".to_string());
                Source::File(CredentialsFile {
                    path,
                    profile,
                    state: Mutex::new(FileState::default()),
                })
            }
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
                let ambient = profile.is_none() && credentials_file.is_none();
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

    /// The path (model id in it) and body Bedrock takes for a Messages
    /// request; `Err` for what Bedrock does not serve.
    pub(crate) fn target(
        &self,
        path: &str,
        body: &Bytes,
    ) -> Result<Option<(String, Bytes)>, String> {
        let bare = path.split_once('?').map_or(path, |(p, _)| p);
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

    fn not_served(&self, path: &str) -> String {
        let provider = &self.provider;
        if path.starts_with("/v1/messages/count_tokens") {
            format!("Amazon Bedrock does not count tokens: POST {path} cannot go to provider `{provider}`; route token counting to an Anthropic provider")
        } else if path.starts_with("/v1/messages/batches") {
            format!("Amazon Bedrock has no Message Batches API: {path} cannot go to provider `{provider}`")
        } else if path.starts_with("/v1/models") {
            format!("Amazon Bedrock lists models in its control-plane API, not at {path}: provider `{provider}` cannot answer it")
        } else {
            format!("Amazon Bedrock serves only POST /v1/messages (InvokeModel and InvokeModelWithResponseStream), not {path}: provider `{provider}` cannot answer it")
        }
    }

    /// Signs the attempt (SigV4 at `unix_ms`), after moving a caller's
    /// `anthropic-beta` into the body.
    pub(crate) async fn authorize(
        &self,
        req: &mut Outbound<Bytes>,
        unix_ms: u64,
    ) -> Result<(), PlatformError> {
        let keys = self.keys()?;
        let beta = HeaderName::from_static("anthropic-beta");
        if let Some(betas) = req.fields.get(&beta).and_then(|v| v.to_str().ok()) {
            if let Some(body) = with_betas(&req.body, betas) {
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

    /// The answer in the Messages API's own wire format.
    pub(crate) fn answer(
        &self,
        resp: Response<UpstreamBody>,
        stream: bool,
    ) -> Response<UpstreamBody> {
        let (mut parts, body) = resp.into_parts();
        if parts.status.is_success() {
            if !stream || !is_event_stream(&parts.headers) {
                return Response::from_parts(parts, body);
            }
            parts.headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream; charset=utf-8"),
            );
            parts.headers.remove(CONTENT_LENGTH);
            let sse = body.reframed(EventStreamSse::new(self.redactor()));
            return Response::from_parts(parts, sse);
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
        let mapped = body.reframed(ErrorAnswer::new(parts.status, name, self.redactor()));
        parts
            .headers
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        parts.headers.remove(CONTENT_LENGTH);
        Response::from_parts(parts, mapped)
    }

    /// The credentials' values, to redact from everything Levee passes on.
    pub(crate) fn secrets(&self) -> Vec<String> {
        match self.keys() {
            Ok(k) => {
                let mut v = vec![k.access_key_id.clone(), k.secret_access_key.clone()];
                v.extend(k.session_token.clone());
                v
            }
            Err(_) => Vec::new(),
        }
    }

    /// The current keys' redactor (none when they do not load).
    fn redactor(&self) -> Secrets {
        self.keys().map(|k| k.redact.clone()).unwrap_or_default()
    }

    /// `levee check --probe`: the credentials load.
    pub(crate) async fn probe(&self) -> Result<(), PlatformError> {
        self.keys().map(|_| ())
    }

    /// The credentials now: the environment's, or the file's (read again
    /// when it changed since it was last read).
    fn keys(&self) -> Result<Arc<Keys>, PlatformError> {
        match &self.source {
            Source::Env(keys) => Ok(Arc::clone(keys)),
            Source::File(file) => file.keys().map_err(|detail| self.error(detail)),
        }
    }

    fn error(&self, detail: String) -> PlatformError {
        PlatformError::Credentials {
            provider: self.provider.clone(),
            detail,
        }
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

impl CredentialsFile {
    /// The profile's keys; the file is read again when its modification time
    /// or length is not what it was at the last read (one `stat` a call).
    fn keys(&self) -> Result<Arc<Keys>, String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let path = self.path.display();
        let stamp = match std::fs::metadata(&self.path) {
            Ok(m) => (m.modified().ok(), m.len()),
            Err(e) => {
                state.stamp = None;
                state.loaded = None;
                return Err(format!(
                    "cannot read the AWS shared credentials file {path}: {e}; create it, or point `credentials_file:` (or AWS_SHARED_CREDENTIALS_FILE) at it"
                ));
            }
        };
        if state.stamp != Some(stamp) || state.loaded.is_none() {
            let loaded = match std::fs::read_to_string(&self.path) {
                Ok(text) => parse_profile(&text, &self.profile)
                    .map(|(id, secret, token)| Arc::new(Keys::new(id, secret, token)))
                    .map_err(|why| format!("AWS shared credentials file {path}: {why}")),
                Err(e) => Err(format!(
                    "cannot read the AWS shared credentials file {path}: {e}"
                )),
            };
            state.stamp = Some(stamp);
            state.loaded = Some(loaded);
        }
        match &state.loaded {
            Some(loaded) => loaded.clone(),
            None => Err(format!("AWS shared credentials file {path}: not read")),
        }
    }
}

/// Where the shared credentials file is: the provider's `credentials_file`
/// (a leading `~/` is the home directory), else
/// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`.
fn credentials_path(
    configured: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<PathBuf> {
    let home = || env("HOME").map(PathBuf::from);
    let expand = |p: &Path| match p.strip_prefix("~") {
        Ok(rest) => home().map(|h| h.join(rest)),
        Err(_) => Some(p.to_path_buf()),
    };
    match configured {
        Some(p) => expand(p),
        None => match env("AWS_SHARED_CREDENTIALS_FILE") {
            Some(p) => expand(Path::new(&p)),
            None => home().map(|h| h.join(".aws").join("credentials")),
        },
    }
}

type Parsed = (String, String, Option<String>);

/// The access key id, secret key and session token of `profile` in a
/// shared credentials file (INI: `[profile]` sections, `key = value`
/// lines, `#` and `;` comments). Errors name what is missing, never a value.
fn parse_profile(text: &str, profile: &str) -> Result<Parsed, String> {
    let mut found = false;
    let mut inside = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == profile;
            found |= inside;
            continue;
        }
        if !inside {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim().to_string();
        match key.trim().to_ascii_lowercase().as_str() {
            "aws_access_key_id" => id = Some(value),
            "aws_secret_access_key" => secret = Some(value),
            "aws_session_token" | "aws_security_token" => token = Some(value),
            _ => {}
        }
    }
    if !found {
        return Err(format!(
            "it has no `[{profile}]` profile; add one, or name another with `profile:` or AWS_PROFILE"
        ));
    }
    let id = id
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("profile `{profile}` has no aws_access_key_id"))?;
    let secret = secret
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("profile `{profile}` has no aws_secret_access_key"))?;
    Ok((id, secret, token.filter(|v| !v.is_empty())))
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

fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/vnd.amazon.eventstream"))
}

/// The AWS error name of an answer (`x-amzn-errortype`, without its
/// `:namespace` suffix).
fn error_name(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get("x-amzn-errortype")?.to_str().ok()?;
    let name = v.split(':').next().unwrap_or(v).trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// The Anthropic error type for an AWS error or exception name (either
/// case: HTTP answers say `ThrottlingException`, stream events
/// `throttlingException`); `None` for a name not listed here.
pub(crate) fn anthropic_type(aws_name: &str) -> Option<&'static str> {
    let name = aws_name.to_ascii_lowercase();
    Some(match name.as_str() {
        "throttlingexception" => "rate_limit_error",
        "serviceunavailableexception" | "modelnotreadyexception" => "overloaded_error",
        "modeltimeoutexception" => "timeout_error",
        "validationexception" => "invalid_request_error",
        "accessdeniedexception" => "permission_error",
        "resourcenotfoundexception" => "not_found_error",
        "internalserverexception" | "modelstreamerrorexception" | "modelerrorexception" => {
            "api_error"
        }
        "unrecognizedclientexception"
        | "invalidsignatureexception"
        | "incompletesignatureexception"
        | "missingauthenticationtokenexception"
        | "expiredtokenexception"
        | "invalidclienttokenid" => "authentication_error",
        _ => return None,
    })
}

/// An Anthropic error body.
fn anthropic_error(kind: &str, message: &str) -> Bytes {
    let v = serde_json::json!({
        "type": "error",
        "error": { "type": kind, "message": message },
    });
    Bytes::from(v.to_string())
}

/// Bedrock's error message in `body` (`{"message": …}`, or `Message`), else
/// the body's text, else a line naming the status.
fn error_message(body: &[u8], status: StatusCode) -> String {
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        #[serde(borrow, alias = "Message")]
        message: Option<Cow<'a, str>>,
    }
    if let Ok(Shape { message: Some(m) }) = serde_json::from_slice::<Shape<'_>>(body) {
        return m.into_owned();
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        format!("Amazon Bedrock answered {status} without a message")
    } else {
        text.chars().take(1024).collect()
    }
}

/// An error answer's body rewritten as an Anthropic error: read whole (up to
/// [`MAX_ERROR_BODY`]), then given as one frame.
struct ErrorAnswer {
    read: Vec<u8>,
    status: StatusCode,
    name: Option<String>,
    /// Taken out of the message.
    redact: Secrets,
}

impl ErrorAnswer {
    fn new(status: StatusCode, name: Option<String>, redact: Secrets) -> Self {
        ErrorAnswer {
            read: Vec::new(),
            status,
            name,
            redact,
        }
    }

    fn mapped(&mut self) -> Bytes {
        let message = self.redact.text(error_message(&self.read, self.status));
        let by_status =
            levee_wire::error::labels(levee_wire::Dialect::Anthropic, self.status.as_u16()).0;
        let (kind, message) = match &self.name {
            Some(name) => (
                anthropic_type(name).unwrap_or(by_status),
                format!("Amazon Bedrock {name}: {message}"),
            ),
            None => (by_status, message),
        };
        anthropic_error(kind, &message)
    }
}

impl Reframe for ErrorAnswer {
    fn data(&mut self, data: Bytes) -> Step {
        let room = MAX_ERROR_BODY.saturating_sub(self.read.len());
        self.read.extend_from_slice(&data[..data.len().min(room)]);
        if room > data.len() {
            Step::More
        } else {
            Step::Last(Some(self.mapped()))
        }
    }

    fn end(&mut self) -> Step {
        Step::Last(Some(self.mapped()))
    }

    /// A body cut short still names its status: what arrived is the
    /// message.
    fn failed(&mut self, _: BoxError) -> Step {
        self.end()
    }
}

/// Why an event stream could not be read.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("Amazon Bedrock's event stream is broken: {0}")]
    Frame(String),
    #[error("Amazon Bedrock's event stream announced a {0}-byte frame (the limit is 16 MiB)")]
    TooLarge(usize),
    #[error("Amazon Bedrock's event stream ended inside a frame ({0} bytes left over)")]
    Truncated(usize),
}

/// Bedrock's event stream read as the Messages API's SSE: each whole
/// frame (CRCs checked) becomes one event; an exception ends the stream.
pub(crate) struct EventStreamSse {
    buf: BytesMut,
    /// An exception was relayed: nothing more is read.
    done: bool,
    /// Taken out of exception messages.
    redact: Secrets,
}

impl EventStreamSse {
    pub(crate) fn new(redact: Secrets) -> Self {
        EventStreamSse {
            buf: BytesMut::new(),
            done: false,
            redact,
        }
    }

    /// The SSE text of every whole frame in the buffer (empty when none is
    /// whole yet, or the whole ones carried nothing to relay).
    fn drain(&mut self) -> Result<Vec<u8>, StreamError> {
        let mut out = Vec::new();
        while !self.done && self.buf.len() >= 4 {
            let total = (&self.buf[..4]).get_u32() as usize;
            if total > MAX_FRAME {
                return Err(StreamError::TooLarge(total));
            }
            if self.buf.len() < total {
                break;
            }
            let frame = self.buf.split_to(total).freeze();
            let message = aws_smithy_eventstream::frame::read_message_from(frame)
                .map_err(|e| StreamError::Frame(e.to_string()))?;
            if let Some(end) = sse_of(&message, &self.redact, &mut out) {
                self.done = end;
            }
        }
        Ok(out)
    }
}

impl Reframe for EventStreamSse {
    fn data(&mut self, data: Bytes) -> Step {
        self.buf.extend_from_slice(&data);
        match self.drain() {
            Err(e) => Step::Fail(e.into()),
            Ok(sse) => {
                let sse = (!sse.is_empty()).then(|| Bytes::from(sse));
                if self.done {
                    Step::Last(sse)
                } else {
                    sse.map_or(Step::More, Step::Give)
                }
            }
        }
    }

    fn end(&mut self) -> Step {
        if self.buf.is_empty() {
            Step::Last(None)
        } else {
            Step::Fail(StreamError::Truncated(self.buf.len()).into())
        }
    }
}

/// A frame header's string value.
fn frame_str<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            FrameValue::String(s) => Some(s.as_str()),
            _ => None,
        })
}

/// Appends the SSE event of one frame to `out`. `Some(true)`: the frame
/// ends the stream (an exception or error); `Some(false)`: an event;
/// `None`: nothing to relay (an event type Levee does not relay).
fn sse_of(message: &Message, redact: &Secrets, out: &mut Vec<u8>) -> Option<bool> {
    match frame_str(message, ":message-type").unwrap_or("event") {
        "event" => {
            if frame_str(message, ":event-type") != Some("chunk") {
                return None;
            }
            let json = chunk_json(message.payload())?;
            let kind = event_type(&json)?;
            out.extend_from_slice(b"event: ");
            out.extend_from_slice(kind.as_bytes());
            out.extend_from_slice(b"\ndata: ");
            out.extend_from_slice(&json);
            out.extend_from_slice(b"\n\n");
            Some(false)
        }
        "exception" => {
            let name = frame_str(message, ":exception-type").unwrap_or("internalServerException");
            let kind = anthropic_type(name).unwrap_or("api_error");
            let text = error_message(message.payload(), StatusCode::INTERNAL_SERVER_ERROR);
            let text = redact.text(format!("Amazon Bedrock {name}: {text}"));
            error_event(out, kind, &text);
            Some(true)
        }
        _ => {
            let code = frame_str(message, ":error-code").unwrap_or("error");
            let text = frame_str(message, ":error-message").unwrap_or("the stream failed");
            let text = redact.text(format!("Amazon Bedrock {code}: {text}"));
            error_event(out, "api_error", &text);
            Some(true)
        }
    }
}

fn error_event(out: &mut Vec<u8>, kind: &str, message: &str) {
    out.extend_from_slice(b"event: error\ndata: ");
    out.extend_from_slice(&anthropic_error(kind, message));
    out.extend_from_slice(b"\n\n");
}

/// The Anthropic event inside a `chunk` payload (`{"bytes": "<base64>"}`),
/// on one line.
fn chunk_json(payload: &[u8]) -> Option<Vec<u8>> {
    #[derive(serde::Deserialize)]
    struct Chunk<'a> {
        #[serde(borrow)]
        bytes: Cow<'a, str>,
    }
    let chunk: Chunk<'_> = serde_json::from_slice(payload).ok()?;
    let json = base64::engine::general_purpose::STANDARD
        .decode(chunk.bytes.as_bytes())
        .ok()?;
    if json.iter().any(|&b| b == b'\n' || b == b'\r') {
        // A data line cannot hold a line break: the event written compactly.
        let v: Value = serde_json::from_slice(&json).ok()?;
        return serde_json::to_vec(&v).ok();
    }
    Some(json)
}

/// The `type` of an Anthropic stream event.
fn event_type(json: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Cow<'a, str>,
    }
    let t: Typed<'_> = serde_json::from_slice(json).ok()?;
    let ok = !t.kind.is_empty()
        && t.kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    ok.then(|| t.kind.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_types::event_stream::Header;
    use http_body::{Body, Frame};
    use http_body_util::{BodyExt, StreamBody};
    use std::collections::HashMap;

    const AKID: &str = "AKIAIOSFODNN7EXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    fn from_env(pairs: &[(&str, &str)]) -> Bedrock {
        Bedrock::with_env("bedrock", "us-east-1", None, None, &env_of(pairs)).unwrap()
    }

    fn env_keys() -> Bedrock {
        from_env(&[
            ("AWS_ACCESS_KEY_ID", AKID),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
        ])
    }

    /// A scratch directory under the target dir, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("levee-bedrock-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
        fn write(&self, file: &str, text: &str) -> PathBuf {
            let p = self.0.join(file);
            std::fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_messages_request_goes_to_invoke_with_the_model_in_the_path() {
        let b = env_keys();
        let body = Bytes::from_static(
            br#"{"model":"anthropic.claude-3-5-sonnet-20241022-v2:0","max_tokens":5,"messages":[]}"#,
        );
        let (path, out) = b.target("/v1/messages", &body).unwrap().unwrap();
        assert_eq!(
            path,
            "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/invoke"
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["anthropic_version"], "bedrock-2023-05-31");
        assert_eq!(v["max_tokens"], 5);
        assert!(v.get("model").is_none());
        assert!(v.get("stream").is_none());
    }

    #[test]
    fn a_stream_goes_to_invoke_with_response_stream_and_arns_are_escaped() {
        let b = env_keys();
        let body = Bytes::from_static(
            br#"{"model":"arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude","stream":true,"max_tokens":5,"messages":[],"anthropic_version":"bedrock-2023-05-31"}"#,
        );
        let (path, out) = b.target("/v1/messages?beta=true", &body).unwrap().unwrap();
        assert_eq!(
            path,
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.anthropic.claude/invoke-with-response-stream"
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v.get("stream").is_none());
    }

    #[test]
    fn what_bedrock_does_not_serve_is_refused_with_the_reason() {
        let b = env_keys();
        let body = Bytes::from_static(br#"{"model":"m","messages":[]}"#);
        let count = b.target("/v1/messages/count_tokens", &body).unwrap_err();
        assert!(count.contains("does not count tokens"), "{count}");
        let batches = b.target("/v1/messages/batches", &body).unwrap_err();
        assert!(batches.contains("Batches"), "{batches}");
        let models = b.target("/v1/models", &body).unwrap_err();
        assert!(models.contains("lists models"), "{models}");
        let chat = b.target("/v1/chat/completions", &body).unwrap_err();
        assert!(chat.contains("serves only POST /v1/messages"), "{chat}");
        let no_model = b
            .target("/v1/messages", &Bytes::from_static(b"{}"))
            .unwrap_err();
        assert!(no_model.contains("no `model`"), "{no_model}");
    }

    #[test]
    fn an_anthropic_beta_header_becomes_the_body_array_unless_the_body_has_one() {
        let body = Bytes::from_static(br#"{"max_tokens":1}"#);
        let out = with_betas(&body, "a-2024, b-2025").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["anthropic_beta"], serde_json::json!(["a-2024", "b-2025"]));
        let has = Bytes::from_static(br#"{"anthropic_beta":["x"]}"#);
        assert!(with_betas(&has, "a").is_none());
    }

    fn outbound(uri: &str, body: &'static str) -> Outbound<Bytes> {
        let mut req = Outbound::post(uri.parse().unwrap(), Bytes::from_static(body.as_bytes()));
        req.fields
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        req
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// The AWS Signature Version 4 reference computation for this request:
    /// the canonical request, string to sign and signature written out from
    /// the specification (double-encoded path, signed headers sorted).
    #[test]
    fn the_signature_is_the_one_the_specification_gives() {
        let b = env_keys();
        let mut req = outbound(
            "http://127.0.0.1:8080/model/m%3A0/invoke",
            r#"{"max_tokens":1}"#,
        );
        // 2024-01-02T03:04:05Z
        block_on(b.authorize(&mut req, 1_704_164_645_000)).unwrap();
        let get = |n: &str| {
            req.fields
                .get(&HeaderName::from_bytes(n.as_bytes()).unwrap())
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(get("x-amz-date").as_deref(), Some("20240102T030405Z"));
        assert!(get("x-amz-security-token").is_none());
        let auth = get("authorization").unwrap();
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20240102/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature="
            ),
            "{auth}"
        );
        // The same signature from the AWS SDK's primitives, over the
        // canonical request as the specification writes it.
        use sha2::Digest as _;
        let payload = format!("{:x}", sha2::Sha256::digest(br#"{"max_tokens":1}"#));
        let canonical = format!(
            "POST\n/model/m%253A0/invoke\n\ncontent-type:application/json\nhost:127.0.0.1:8080\nx-amz-date:20240102T030405Z\n\ncontent-type;host;x-amz-date\n{payload}"
        );
        let hashed = format!("{:x}", sha2::Sha256::digest(canonical.as_bytes()));
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n20240102T030405Z\n20240102/us-east-1/bedrock/aws4_request\n{hashed}"
        );
        let time = UNIX_EPOCH + Duration::from_secs(1_704_164_645);
        let key = v4::generate_signing_key(SECRET, time, "us-east-1", "bedrock");
        let expected = v4::calculate_signature(key, to_sign.as_bytes());
        assert!(auth.ends_with(&format!("Signature={expected}")), "{auth}");
        let debug = format!("{:?}", req.fields);
        assert!(!debug.contains(SECRET));
    }

    #[test]
    fn a_session_token_is_sent_and_signed() {
        let b = from_env(&[
            ("AWS_ACCESS_KEY_ID", "ASIAIOSFODNN7EXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
            ("AWS_SESSION_TOKEN", "token-1"),
        ]);
        let mut req = outbound(
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/invoke",
            "{}",
        );
        block_on(b.authorize(&mut req, 1_704_164_645_000)).unwrap();
        let token = HeaderName::from_static("x-amz-security-token");
        assert_eq!(req.fields.get(&token).unwrap(), "token-1");
        let auth = req.fields.get(&http::header::AUTHORIZATION).unwrap();
        assert!(auth
            .to_str()
            .unwrap()
            .contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"));
        assert!(auth.is_sensitive());
        assert_eq!(b.secrets(), vec!["ASIAIOSFODNN7EXAMPLE", SECRET, "token-1"]);
    }

    #[test]
    fn anthropic_headers_are_not_sent_and_betas_reach_the_body() {
        let b = env_keys();
        let mut req = outbound("http://h/model/m/invoke", r#"{"max_tokens":1}"#);
        req.fields.insert(
            HeaderName::from_static("anthropic-beta"),
            HeaderValue::from_static("tools-2024"),
        );
        req.fields.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static("2023-06-01"),
        );
        block_on(b.authorize(&mut req, 1_704_164_645_000)).unwrap();
        assert!(!req
            .fields
            .iter()
            .any(|(n, _)| n.as_str().starts_with("anthropic")));
        let v: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(v["anthropic_beta"], serde_json::json!(["tools-2024"]));
    }

    #[test]
    fn credentials_come_from_the_environment_or_the_file_as_the_sdks_choose() {
        let dir = Scratch::new("choose");
        let file = dir.write(
            "credentials",
            "# comment\n[default]\naws_access_key_id = FILEDEFAULT\naws_secret_access_key = s1\n\n[work]\naws_access_key_id=FILEWORK\naws_secret_access_key=s2\naws_session_token=t2\n",
        );
        let f = file.to_str().unwrap();
        // The environment's keys win when no profile or file is named.
        let b = from_env(&[
            ("AWS_ACCESS_KEY_ID", "ENVKEY"),
            ("AWS_SECRET_ACCESS_KEY", "envsecret"),
            ("AWS_SHARED_CREDENTIALS_FILE", f),
        ]);
        assert_eq!(b.secrets()[0], "ENVKEY");
        // Without them, the file's default profile, or AWS_PROFILE's.
        let b = from_env(&[("AWS_SHARED_CREDENTIALS_FILE", f)]);
        assert_eq!(b.secrets(), vec!["FILEDEFAULT", "s1"]);
        let b = from_env(&[("AWS_SHARED_CREDENTIALS_FILE", f), ("AWS_PROFILE", "work")]);
        assert_eq!(b.secrets(), vec!["FILEWORK", "s2", "t2"]);
        // An explicit profile reads the file even with the variables set.
        let env = env_of(&[
            ("AWS_ACCESS_KEY_ID", "ENVKEY"),
            ("AWS_SECRET_ACCESS_KEY", "envsecret"),
        ]);
        let b = Bedrock::with_env("p", "eu-west-1", Some("work"), Some(&file), &env).unwrap();
        assert_eq!(b.secrets()[0], "FILEWORK");
        // ~/.aws/credentials under HOME.
        std::fs::create_dir_all(dir.0.join(".aws")).unwrap();
        std::fs::copy(&file, dir.0.join(".aws/credentials")).unwrap();
        let b = from_env(&[("HOME", dir.0.to_str().unwrap())]);
        assert_eq!(b.secrets()[0], "FILEDEFAULT");
    }

    #[test]
    fn missing_credentials_say_what_to_set_and_never_show_a_secret() {
        let half = Bedrock::with_env(
            "p",
            "us-east-1",
            None,
            None,
            &env_of(&[("AWS_ACCESS_KEY_ID", "AKIAHALF")]),
        )
        .unwrap_err()
        .to_string();
        assert!(half.contains("AWS_SECRET_ACCESS_KEY is not"), "{half}");
        let none = Bedrock::with_env("p", "us-east-1", None, None, &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(none.contains("no AWS credentials"), "{none}");
        let region = Bedrock::with_env("p", "US East", None, None, &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(region.contains("not an AWS region"), "{region}");

        let dir = Scratch::new("missing");
        let file = dir.write("c", "[default]\naws_secret_access_key = topsecret\n");
        let e = Bedrock::with_env("p", "us-east-1", None, Some(&file), &env_of(&[])).unwrap_err();
        assert!(matches!(e, PlatformError::Credentials { .. }), "{e}");
        let e = e.to_string();
        assert!(e.contains("has no aws_access_key_id"), "{e}");
        assert!(!e.contains("topsecret"), "{e}");
        let e = Bedrock::with_env("p", "us-east-1", Some("prod"), Some(&file), &env_of(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no `[prod]` profile"), "{e}");
        // An absent file is missing credentials, like an unset variable.
        let gone = dir.0.join("absent");
        let e = Bedrock::with_env("p", "us-east-1", None, Some(&gone), &env_of(&[])).unwrap_err();
        assert!(matches!(e, PlatformError::MissingCredentials { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("cannot read the AWS shared credentials file"),
            "{e}"
        );
        assert!(e.starts_with("provider `p`"), "{e}");
        // One that goes away later fails the attempt, saying what to fix.
        let file = dir.write(
            "later",
            "[default]\naws_access_key_id=K\naws_secret_access_key=s\n",
        );
        let b = Bedrock::with_env("p", "us-east-1", None, Some(&file), &env_of(&[])).unwrap();
        std::fs::remove_file(&file).unwrap();
        let mut req = outbound("http://h/model/m/invoke", "{}");
        let e = block_on(b.authorize(&mut req, 0)).unwrap_err().to_string();
        assert!(
            e.contains("cannot read the AWS shared credentials file"),
            "{e}"
        );
        assert!(block_on(b.probe()).is_err());
    }

    #[test]
    fn a_credentials_file_that_changes_is_read_again() {
        let dir = Scratch::new("reread");
        let file = dir.write(
            "c",
            "[default]\naws_access_key_id=OLDKEY\naws_secret_access_key=old\n",
        );
        let b = Bedrock::with_env("p", "us-east-1", None, Some(&file), &env_of(&[])).unwrap();
        assert_eq!(b.secrets()[0], "OLDKEY");
        // A different length is a change even within the file system's
        // time resolution.
        dir.write(
            "c",
            "[default]\naws_access_key_id=NEWKEY1\naws_secret_access_key=new\naws_session_token=tok\n",
        );
        let mut req = outbound("http://h/model/m/invoke", "{}");
        block_on(b.authorize(&mut req, 1_704_164_645_000)).unwrap();
        let auth = req.fields.get(&http::header::AUTHORIZATION).unwrap();
        assert!(auth.to_str().unwrap().contains("Credential=NEWKEY1/"));
        assert_eq!(b.secrets(), vec!["NEWKEY1", "new", "tok"]);
        // A file that goes away is an error, and one that comes back is read.
        std::fs::remove_file(&file).unwrap();
        assert!(b.secrets().is_empty());
        dir.write(
            "c",
            "[default]\naws_access_key_id=BACK\naws_secret_access_key=b\n",
        );
        assert_eq!(b.secrets()[0], "BACK");
    }

    #[test]
    fn debug_output_names_the_source_not_the_keys() {
        let b = env_keys();
        let d = format!("{b:?}");
        assert!(d.contains("environment"), "{d}");
        assert!(!d.contains(SECRET) && !d.contains(AKID), "{d}");
    }

    // Answers.

    fn frame(headers: Vec<Header>, payload: &[u8]) -> Bytes {
        let message = Message::new_from_parts(headers, Bytes::copy_from_slice(payload));
        let mut out = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
        Bytes::from(out)
    }

    fn string(name: &'static str, value: &'static str) -> Header {
        Header::new(name, FrameValue::String(value.into()))
    }

    fn chunk(event: &str) -> Bytes {
        let b64 = base64::engine::general_purpose::STANDARD.encode(event);
        let payload = format!(r#"{{"bytes":"{b64}","p":"abcdefgh"}}"#);
        frame(
            vec![
                string(":event-type", "chunk"),
                string(":content-type", "application/json"),
                string(":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    fn exception(kind: &'static str, message: &str) -> Bytes {
        frame(
            vec![
                string(":exception-type", kind),
                string(":content-type", "application/json"),
                string(":message-type", "exception"),
            ],
            format!(r#"{{"message":"{message}"}}"#).as_bytes(),
        )
    }

    type Chunks = Vec<Result<Frame<Bytes>, BoxError>>;

    fn body_of(parts: Vec<Bytes>) -> UpstreamBody {
        let frames: Chunks = parts.into_iter().map(|b| Ok(Frame::data(b))).collect();
        UpstreamBody::Mapped(Box::pin(StreamBody::new(futures_util::stream::iter(
            frames,
        ))))
    }

    /// The SSE events of Bedrock's event stream in `parts`.
    fn sse(parts: Vec<Bytes>) -> UpstreamBody {
        body_of(parts).reframed(EventStreamSse::new(Secrets::default()))
    }

    fn read_all<B>(body: B) -> Result<String, BoxError>
    where
        B: Body<Data = Bytes, Error = BoxError>,
    {
        let bytes = block_on(body.collect())?.to_bytes();
        Ok(String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[test]
    fn chunk_events_become_sse_events_whatever_the_read_boundaries() {
        let start = r#"{"type":"message_start","message":{"id":"m1"}}"#;
        let delta = "{\"type\":\"content_block_delta\",\n\"index\":0}";
        let mut wire = Vec::new();
        wire.extend_from_slice(&chunk(start));
        wire.extend_from_slice(&chunk(delta));
        wire.extend_from_slice(&frame(
            vec![
                string(":event-type", "metrics"),
                string(":message-type", "event"),
            ],
            b"{}",
        ));
        wire.extend_from_slice(&chunk(r#"{"type":"message_stop"}"#));
        let expected = format!(
            "event: message_start\ndata: {start}\n\nevent: content_block_delta\ndata: {{\"index\":0,\"type\":\"content_block_delta\"}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        );
        for split in [1, 7, 64, wire.len()] {
            let parts: Vec<Bytes> = wire.chunks(split).map(Bytes::copy_from_slice).collect();
            let text = read_all(sse(parts)).unwrap();
            assert_eq!(text, expected, "read {split} bytes at a time");
        }
    }

    #[test]
    fn an_exception_mid_stream_is_an_anthropic_error_event_and_the_end() {
        for (aws, anthropic) in [
            ("throttlingException", "rate_limit_error"),
            ("modelStreamErrorException", "api_error"),
            ("internalServerException", "api_error"),
            ("serviceUnavailableException", "overloaded_error"),
            ("modelTimeoutException", "timeout_error"),
            ("validationException", "invalid_request_error"),
        ] {
            let parts = vec![
                chunk(r#"{"type":"message_start"}"#),
                exception(aws, "stop"),
                chunk(r#"{"type":"ping"}"#),
            ];
            let text = read_all(sse(parts)).unwrap();
            let events = levee_wire::sse::events(&text);
            assert_eq!(events.len(), 2, "{text}");
            assert_eq!(events[1].0, "error");
            assert_eq!(events[1].1["type"], "error");
            assert_eq!(events[1].1["error"]["type"], anthropic, "{aws}");
            let msg = events[1].1["error"]["message"].as_str().unwrap();
            assert_eq!(msg, format!("Amazon Bedrock {aws}: stop"));
        }
    }

    #[test]
    fn a_frame_with_a_bad_crc_or_cut_short_fails_the_body() {
        let mut bad = chunk(r#"{"type":"ping"}"#).to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        let e = read_all(sse(vec![Bytes::from(bad)])).unwrap_err();
        assert!(e.to_string().contains("event stream is broken"), "{e}");
        let whole = chunk(r#"{"type":"ping"}"#);
        let cut = whole.slice(..whole.len() - 3);
        let e = read_all(sse(vec![cut])).unwrap_err();
        assert!(e.to_string().contains("ended inside a frame"), "{e}");
        let mut huge = vec![0u8; 16];
        huge[..4].copy_from_slice(&(64u32 << 20).to_be_bytes());
        let e = read_all(sse(vec![Bytes::from(huge)])).unwrap_err();
        assert!(e.to_string().contains("16 MiB"), "{e}");
    }

    fn error_answer(status: u16, errortype: Option<&str>, body: &'static str) -> Value {
        let mut headers = http::HeaderMap::new();
        if let Some(t) = errortype {
            headers.insert("x-amzn-errortype", HeaderValue::from_str(t).unwrap());
        }
        let name = error_name(&headers);
        let status = StatusCode::from_u16(status).unwrap();
        let parts = vec![Bytes::from_static(body.as_bytes())];
        let answer = ErrorAnswer::new(status, name, Secrets::default());
        let text = read_all(body_of(parts).reframed(answer)).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn error_answers_become_anthropic_errors_of_the_matching_type() {
        for (status, name, kind) in [
            (429, "ThrottlingException", "rate_limit_error"),
            (503, "ServiceUnavailableException", "overloaded_error"),
            (503, "ModelNotReadyException", "overloaded_error"),
            (429, "ModelNotReadyException", "overloaded_error"),
            (408, "ModelTimeoutException", "timeout_error"),
            (400, "ValidationException", "invalid_request_error"),
            (403, "AccessDeniedException", "permission_error"),
            (404, "ResourceNotFoundException", "not_found_error"),
            (500, "InternalServerException", "api_error"),
            (403, "InvalidSignatureException", "authentication_error"),
            (
                400,
                "ServiceQuotaExceededException",
                "invalid_request_error",
            ),
        ] {
            let t = format!("{name}:http://internal.amazon.com/coral/com.amazon.bedrock/");
            let v = error_answer(status, Some(&t), r#"{"message":"Too many requests"}"#);
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], kind, "{name}");
            assert_eq!(
                v["error"]["message"],
                format!("Amazon Bedrock {name}: Too many requests")
            );
        }
        // Without a name, the status decides, and a non-JSON body is the message.
        let v = error_answer(502, None, "<html>Bad Gateway</html>");
        assert_eq!(v["error"]["type"], "api_error");
        assert_eq!(v["error"]["message"], "<html>Bad Gateway</html>");
        let v = error_answer(503, None, "");
        assert_eq!(v["error"]["type"], "overloaded_error");
    }
}
