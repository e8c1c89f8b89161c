//! Google Vertex AI's face (`--api vertex`): Anthropic models through
//! `rawPredict` / `streamRawPredict`, the OpenAI-compatible endpoint, and
//! the OAuth2 token endpoint that issues the bearer tokens both require.
//!
//! - `POST /token`: the JWT bearer grant (RFC 7523) as Google's token
//!   endpoint takes it. The assertion must be signed (RS256) by the test
//!   service account in `testdata/vertex-test-service-account.json` (the
//!   mock knows its public key), name it as `iss`, the token endpoint
//!   itself as `aud`, ask for the `cloud-platform` scope, and be current
//!   (`iat` not in the future, at most an hour to `exp`). The answer is an
//!   access token that lives [`DEFAULT_LIFETIME`] (Google's hour), or what
//!   a test set with `set_token_lifetime`, on the mock's clock (tokio's, so
//!   tests under paused time can let one expire).
//! - `POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:rawPredict`
//!   (`:streamRawPredict`): an issued, unexpired bearer token; a body with
//!   `anthropic_version` (`vertex-2023-10-16`, or a dated Anthropic API
//!   version as Anthropic's Vertex client sends it), no `model` (it is in
//!   the path), and `stream: true` exactly when streaming. Answered as
//!   Anthropic's `POST /v1/messages`; `…/models/count-tokens:rawPredict`
//!   as `POST /v1/messages/count_tokens` (the model in the body).
//! - `POST /v1/projects/{p}/locations/{r}/endpoints/openapi/chat/completions`
//!   (and `/embeddings`): answered as OpenAI's, the body unchanged.
//!
//! Error answers take Google's shape (`{"error":{"code","message","status"}}`)
//! with the same status; streams stay SSE.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{Response, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::{json, Value};

use super::{set_path, Accepted, Ctx, Refused};
use crate::body::MockBody;
use crate::stats::Collector;
use crate::{clock, MockApi};

/// The public half of the test service account's key.
const TEST_PUBLIC_KEY: &str = include_str!("../../testdata/vertex-test-service-account.pub.pem");
/// The test service account (`client_email` in its key file).
pub const TEST_ACCOUNT: &str = "levee-test@levee-test.iam.gserviceaccount.com";
/// The test key's `private_key_id`.
const TEST_KEY_ID: &str = "6fb9f414eaa09705def5622e6755e92a8ea55c14";
/// How long an issued token lives unless a test says otherwise.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(3599);
/// Google's token endpoint, the audience Google's auth library writes.
const GOOGLE_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
/// The grant type of a JWT bearer grant.
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The scope Vertex AI needs.
const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
/// The longest an assertion may be valid, and the clock skew allowed.
const MAX_ASSERTION_S: u64 = 3600;
const SKEW_S: u64 = 60;
/// Issued tokens kept at most; the oldest expire first.
const MAX_TOKENS: usize = 100_000;
/// The `anthropic_version` Vertex AI documents for Anthropic models.
const VERTEX_VERSION: &str = "vertex-2023-10-16";

/// The tokens one mock has issued.
pub(crate) struct Issuer {
    lifetime: Mutex<Duration>,
    /// Token → when it expires, on the mock's clock.
    issued: Mutex<HashMap<String, Instant>>,
    /// Drawn once per mock, so that no two mocks (nor a restarted one)
    /// hand out the same token.
    salt: u64,
    next: AtomicU64,
    stats: Arc<Collector>,
}

impl Issuer {
    pub(crate) fn new(stats: Arc<Collector>) -> Issuer {
        Issuer {
            lifetime: Mutex::new(DEFAULT_LIFETIME),
            issued: Mutex::new(HashMap::new()),
            salt: rand::RngCore::next_u64(
                &mut <rand::rngs::SmallRng as rand::SeedableRng>::from_entropy(),
            ),
            next: AtomicU64::new(1),
            stats,
        }
    }

    /// Tokens issued from now on live `lifetime`.
    pub(crate) fn set_lifetime(&self, lifetime: Duration) {
        *self.lifetime.lock().unwrap_or_else(|e| e.into_inner()) =
            lifetime.max(Duration::from_secs(1));
    }

    fn lifetime(&self) -> Duration {
        *self.lifetime.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn issue(&self, now: Instant) -> (String, Duration) {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let token = format!("ya29.levee-mock-{:016x}-{n}", self.salt);
        let lifetime = self.lifetime();
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        issued.retain(|_, expires| *expires > now);
        if issued.len() >= MAX_TOKENS {
            issued.clear();
        }
        issued.insert(token.clone(), now + lifetime);
        self.stats.token_issued();
        (token, lifetime)
    }

    fn valid(&self, token: &str, now: Instant) -> bool {
        let issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        issued.get(token).is_some_and(|e| now < *e)
    }
}

/// Google's error body.
fn google(status: StatusCode, message: &str) -> serde_json::Value {
    json!({ "error": { "code": status.as_u16(), "message": message, "status": google_status(status.as_u16()) } })
}

/// The canonical status name Google gives an HTTP status.
pub(crate) fn google_status(status: u16) -> &'static str {
    match status {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        503 | 529 => "UNAVAILABLE",
        408 | 504 => "DEADLINE_EXCEEDED",
        s if s < 500 => "FAILED_PRECONDITION",
        _ => "UNKNOWN",
    }
}

fn refused(status: StatusCode, message: &str) -> Refused {
    Refused::json(
        status,
        status == StatusCode::UNAUTHORIZED,
        google(status, message),
    )
}

/// The token endpoint's refusal (RFC 6749 §5.2), as Google words it.
fn grant_refused(error: &str, description: &str) -> Refused {
    Refused::json(
        StatusCode::BAD_REQUEST,
        true,
        json!({ "error": error, "error_description": description }),
    )
}

pub(super) fn accept(
    parts: &mut http::request::Parts,
    body: Bytes,
    now_unix_s: u64,
    issuer: &Issuer,
) -> Result<Accepted, Refused> {
    let path = parts.uri.path().to_string();
    if path == "/token" {
        // Not an API call: the token endpoint answers itself.
        return Err(token(parts, &body, now_unix_s, issuer));
    }
    let call = route(&path)?;
    if parts.method != http::Method::POST {
        return Err(refused(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("Method {} is not allowed on {path}.", parts.method),
        ));
    }
    bearer(parts, issuer)?;
    match call {
        Call::OpenAi(native) => {
            set_path(parts, native)?;
            Ok(Accepted {
                body,
                native: MockApi::OpenAi,
                ctx: Ctx::Vertex,
            })
        }
        Call::CountTokens => count_tokens(parts, &body),
        Call::Messages { model, stream } => messages(parts, &body, model, stream),
    }
}

/// What a Vertex AI URL asks for.
enum Call {
    Messages {
        model: String,
        stream: bool,
    },
    CountTokens,
    /// The OpenAI-compatible endpoint, and the native path it answers as.
    OpenAi(&'static str),
}

/// The call a URL names under `/v1/projects/{p}/locations/{r}/` (or
/// `/v1beta1/…`); any other URL is Google's 404.
fn route(path: &str) -> Result<Call, Refused> {
    let rest = path
        .strip_prefix("/v1/")
        .or_else(|| path.strip_prefix("/v1beta1/"))
        .and_then(|r| r.strip_prefix("projects/"))
        .and_then(|r| r.split_once("/locations/"))
        .and_then(|(project, r)| {
            let (region, r) = r.split_once('/')?;
            (!project.is_empty() && !region.is_empty() && !project.contains('/')).then_some(r)
        })
        .ok_or_else(|| not_found(path))?;
    if let Some(m) = rest.strip_prefix("publishers/anthropic/models/") {
        return anthropic_call(m, path);
    }
    match rest {
        "endpoints/openapi/chat/completions" => Ok(Call::OpenAi("/v1/chat/completions")),
        "endpoints/openapi/embeddings" => Ok(Call::OpenAi("/v1/embeddings")),
        _ => Err(not_found(path)),
    }
}

/// `{model}:{verb}` under `publishers/anthropic/models/`: the model
/// percent-decoded, the verb `rawPredict` or `streamRawPredict`.
fn anthropic_call(m: &str, path: &str) -> Result<Call, Refused> {
    let (model, verb) = m.rsplit_once(':').ok_or_else(|| not_found(path))?;
    let model = percent_decode_str(model)
        .decode_utf8()
        .map_err(|_| not_found(path))?
        .into_owned();
    match verb {
        _ if model.is_empty() || model.contains('/') => Err(not_found(path)),
        "rawPredict" if model == "count-tokens" => Ok(Call::CountTokens),
        "rawPredict" => Ok(Call::Messages {
            model,
            stream: false,
        }),
        "streamRawPredict" => Ok(Call::Messages {
            model,
            stream: true,
        }),
        _ => Err(not_found(path)),
    }
}

/// `count-tokens:rawPredict`, answered as `POST /v1/messages/count_tokens`:
/// the model is in the body.
fn count_tokens(parts: &mut http::request::Parts, body: &Bytes) -> Result<Accepted, Refused> {
    let map = anthropic_body(body)?;
    if !map.get("model").is_some_and(Value::is_string) {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "count-tokens:rawPredict needs the `model` in the body.",
        ));
    }
    as_native_anthropic(parts, map, None, "/v1/messages/count_tokens")
}

/// `{model}:rawPredict` (`:streamRawPredict`), answered as
/// `POST /v1/messages`: the model is in the URL, and `stream: true` is in
/// the body exactly when the verb streams.
fn messages(
    parts: &mut http::request::Parts,
    body: &Bytes,
    model: String,
    stream: bool,
) -> Result<Accepted, Refused> {
    let map = anthropic_body(body)?;
    if map.contains_key("model") {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "levee mock: the model is named in the URL (`…/models/{model}:rawPredict`); a `model` in the body is refused",
        ));
    }
    let streams = map.get("stream") == Some(&Value::Bool(true));
    if streams != stream {
        let message = match stream {
            true => "levee mock: `:streamRawPredict` needs `stream: true` in the body, as Anthropic's Vertex client sends it",
            false => "levee mock: `stream: true` goes to `:streamRawPredict`, not `:rawPredict`",
        };
        return Err(refused(StatusCode::BAD_REQUEST, message));
    }
    as_native_anthropic(parts, map, Some(model), "/v1/messages")
}

/// A checked rawPredict body as the native Messages API's request to
/// `native`: `anthropic_version` taken out, then `model` (when the URL
/// named it) put in.
fn as_native_anthropic(
    parts: &mut http::request::Parts,
    mut map: serde_json::Map<String, Value>,
    model: Option<String>,
    native: &'static str,
) -> Result<Accepted, Refused> {
    map.remove("anthropic_version");
    if let Some(model) = model {
        map.insert("model".into(), Value::String(model));
    }
    set_path(parts, native)?;
    native_anthropic(parts);
    Ok(Accepted {
        body: Bytes::from(Value::Object(map).to_string()),
        native: MockApi::Anthropic,
        ctx: Ctx::Vertex,
    })
}

/// Google answers an unknown URL with a 404.
fn not_found(path: &str) -> Refused {
    refused(
        StatusCode::NOT_FOUND,
        &format!("The requested URL {path} was not found on this server."),
    )
}

/// The request must carry a token this mock issued that has not expired.
/// A Vertex AI credential travels in `authorization` only: an `x-api-key`
/// beside it would be a key sent where Google does not read it.
fn bearer(parts: &http::request::Parts, issuer: &Issuer) -> Result<(), Refused> {
    const HELP: &str = "Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.";
    if parts.headers.contains_key("x-api-key") {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "levee mock: `x-api-key` is not a Vertex AI credential; send the OAuth2 access token as `authorization: Bearer` only",
        ));
    }
    let Some(value) = parts.headers.get(AUTHORIZATION) else {
        return Err(unauthenticated(&format!(
            "Request is missing required authentication credential. {HELP}"
        )));
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match token {
        Some(t) if issuer.valid(t, clock::now()) => Ok(()),
        _ => Err(unauthenticated(&format!(
            "Request had invalid authentication credentials. {HELP}"
        ))),
    }
}

fn unauthenticated(message: &str) -> Refused {
    let mut r = refused(StatusCode::UNAUTHORIZED, message);
    r.headers.push((
        "www-authenticate",
        HeaderValue::from_static(
            "Bearer realm=\"https://accounts.google.com/\", error=\"invalid_token\"",
        ),
    ));
    r
}

/// A rawPredict body: a JSON object with an `anthropic_version`.
fn anthropic_body(body: &Bytes) -> Result<serde_json::Map<String, Value>, Refused> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "Invalid JSON payload received. The request body must be a JSON object.",
        ));
    };
    match map.get("anthropic_version").and_then(Value::as_str) {
        Some(v) if v == VERTEX_VERSION || is_dated_version(v) => Ok(map),
        Some(v) => Err(refused(
            StatusCode::BAD_REQUEST,
            &format!(
                "anthropic_version: `{v}` is not a version Vertex AI serves (`{VERTEX_VERSION}`)"
            ),
        )),
        None => Err(refused(
            StatusCode::BAD_REQUEST,
            &format!("anthropic_version: Field required (`{VERTEX_VERSION}`)"),
        )),
    }
}

/// `YYYY-MM-DD`: the Anthropic API version Anthropic's own Vertex client
/// puts in `anthropic_version`.
fn is_dated_version(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// The native Messages API reads its version from the header.
fn native_anthropic(parts: &mut http::request::Parts) {
    parts.headers.remove(AUTHORIZATION);
    parts
        .headers
        .entry("anthropic-version")
        .or_insert(HeaderValue::from_static("2023-06-01"));
}

/// The token endpoint: a JWT bearer grant checked and answered.
fn token(parts: &http::request::Parts, body: &Bytes, now_unix_s: u64, issuer: &Issuer) -> Refused {
    if parts.method != http::Method::POST {
        return Refused::json(
            StatusCode::METHOD_NOT_ALLOWED,
            false,
            json!({ "error": "invalid_request", "error_description": "The token endpoint takes POST." }),
        );
    }
    let form = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return grant_refused(
            "invalid_request",
            "The token request must be application/x-www-form-urlencoded.",
        );
    }
    let fields = form_fields(body);
    let field = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    match field("grant_type") {
        Some(JWT_BEARER) => {}
        Some(other) => {
            return grant_refused(
                "unsupported_grant_type",
                &format!("Invalid grant_type: {other}"),
            )
        }
        None => return grant_refused("invalid_request", "Missing required parameter: grant_type"),
    }
    let Some(assertion) = field("assertion") else {
        return grant_refused("invalid_request", "Missing required parameter: assertion");
    };
    let host = parts.headers.get(HOST).and_then(|v| v.to_str().ok());
    if let Err((error, description)) = check_assertion(assertion, host, now_unix_s) {
        return grant_refused(error, &description);
    }
    let (token, lifetime) = issuer.issue(clock::now());
    Refused::json(
        StatusCode::OK,
        false,
        json!({ "access_token": token, "expires_in": lifetime.as_secs(), "token_type": "Bearer" }),
    )
}

/// `name=value&…`, percent-decoded (`+` is a space).
fn form_fields(body: &[u8]) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

/// The assertion's signature, issuer, audience, scope and times, as
/// Google's token endpoint checks them.
fn check_assertion(
    assertion: &str,
    host: Option<&str>,
    now: u64,
) -> Result<(), (&'static str, String)> {
    #[derive(serde::Deserialize)]
    struct Claims {
        iss: Option<String>,
        sub: Option<String>,
        aud: Option<String>,
        scope: Option<String>,
        iat: Option<u64>,
        exp: Option<u64>,
    }
    let invalid = |d: &str| ("invalid_grant", d.to_string());
    let header = jsonwebtoken::decode_header(assertion)
        .map_err(|_| invalid("Invalid JWT: the assertion is not a JWT."))?;
    if header.alg != jsonwebtoken::Algorithm::RS256 {
        return Err(invalid(
            "Invalid JWT: the assertion must be signed with RS256.",
        ));
    }
    if header.kid.as_deref().is_some_and(|k| k != TEST_KEY_ID) {
        return Err(invalid("Invalid JWT Signature."));
    }
    let key = jsonwebtoken::DecodingKey::from_rsa_pem(TEST_PUBLIC_KEY.as_bytes())
        .map_err(|_| invalid("levee mock: the test public key does not load"))?;
    let mut rules = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    // Times and audience are checked below, against the mock's clock and host.
    rules.validate_exp = false;
    rules.validate_aud = false;
    rules.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<Claims>(assertion, &key, &rules)
        .map_err(|_| invalid("Invalid JWT Signature."))?
        .claims;
    if claims.iss.as_deref() != Some(TEST_ACCOUNT) {
        return Err(invalid("Invalid grant: account not found"));
    }
    if claims.sub.as_deref().is_some_and(|s| s != TEST_ACCOUNT) {
        return Err((
            "unauthorized_client",
            "Client is unauthorized to retrieve access tokens using this method, or client not authorized for any of the scopes requested.".into(),
        ));
    }
    // Google's token endpoint (as Google's own auth library writes it,
    // wherever it sends the request), or this one's own URL.
    let aud = claims.aud.unwrap_or_default();
    let aud_ok = aud == GOOGLE_TOKEN_URL
        || aud.parse::<http::Uri>().is_ok_and(|u| {
            u.path() == "/token"
                && host.is_none_or(|h| u.authority().is_some_and(|a| a.as_str() == h))
        });
    if !aud_ok {
        return Err(invalid(&format!(
            "Invalid JWT: Failed audience check. The right audience is {GOOGLE_TOKEN_URL} (or this endpoint's own URL); the assertion has `{aud}`."
        )));
    }
    let scopes = claims.scope.unwrap_or_default();
    if !scopes.split(' ').any(|s| s == CLOUD_PLATFORM) {
        return Err((
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.".into(),
        ));
    }
    let timely = match (claims.iat, claims.exp) {
        (Some(iat), Some(exp)) => {
            iat <= now + SKEW_S && exp + SKEW_S > now && exp > iat && exp - iat <= MAX_ASSERTION_S
        }
        _ => false,
    };
    if !timely {
        return Err(invalid("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."));
    }
    Ok(())
}

/// The native answer in Vertex AI's shapes: an error becomes Google's
/// error body with the same status (and its headers kept); anything else,
/// streams included, goes as it is.
pub(super) fn encode(resp: Response<MockBody>) -> Response<MockBody> {
    let status = resp.status();
    if status.as_u16() < 400 {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    parts.headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    let body = body.map_full(|native| {
        let message = levee_wire::Dialect::provider_message(native)
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("Error").to_string());
        Bytes::from(google(status, &message).to_string())
    });
    Response::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut b = http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    fn issuer() -> Issuer {
        Issuer::new(Arc::new(Collector::default()))
    }

    fn json_of(r: &Refused) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn dated_and_vertex_versions_are_known_and_others_are_not() {
        assert!(is_dated_version("2023-06-01"));
        assert!(!is_dated_version("bedrock-2023-05-31"));
        assert!(!is_dated_version("2023-6-01"));
    }

    #[test]
    fn google_names_each_status() {
        assert_eq!(google_status(429), "RESOURCE_EXHAUSTED");
        assert_eq!(google_status(503), "UNAVAILABLE");
        assert_eq!(google_status(401), "UNAUTHENTICATED");
        assert_eq!(google_status(504), "DEADLINE_EXCEEDED");
    }

    #[tokio::test]
    async fn a_request_without_an_issued_token_is_unauthenticated() {
        let i = issuer();
        let uri = "/v1/projects/p/locations/us-east5/publishers/anthropic/models/m:rawPredict";
        let body = Bytes::from_static(
            br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":1,"messages":[]}"#,
        );
        let e = accept(&mut parts("POST", uri, &[]), body.clone(), 0, &i)
            .err()
            .unwrap();
        assert_eq!(e.status, 401);
        assert!(e.auth);
        assert_eq!(json_of(&e)["error"]["status"], "UNAUTHENTICATED");
        let e = accept(
            &mut parts("POST", uri, &[("authorization", "Bearer ya29.forged")]),
            body.clone(),
            0,
            &i,
        )
        .err()
        .unwrap();
        assert_eq!(e.status, 401);
        let (token, _) = i.issue(clock::now());
        let auth = format!("Bearer {token}");
        let mut p = parts("POST", uri, &[("authorization", &auth)]);
        let a = accept(&mut p, body, 0, &i).ok().unwrap();
        assert_eq!(p.uri.path(), "/v1/messages");
        assert!(p.headers.get("authorization").is_none());
        assert_eq!(a.native, MockApi::Anthropic);
        let b: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(b["model"], "m");
        assert!(b.get("anthropic_version").is_none());
    }

    #[test]
    fn an_issued_token_expires_after_its_lifetime() {
        let i = issuer();
        i.set_lifetime(Duration::from_secs(60));
        let t0 = clock::now();
        let (token, lifetime) = i.issue(t0);
        assert_eq!(lifetime, Duration::from_secs(60));
        assert!(i.valid(&token, t0));
        assert!(i.valid(&token, t0 + Duration::from_secs(59)));
        assert!(!i.valid(&token, t0 + Duration::from_secs(60)));
        assert!(!i.valid("ya29.levee-mock-0000000000000000-1", t0));
    }

    #[tokio::test]
    async fn a_raw_predict_body_must_match_its_verb_and_carry_a_version() {
        let i = issuer();
        let (token, _) = i.issue(clock::now());
        let auth = format!("Bearer {token}");
        let base = "/v1/projects/p/locations/r/publishers/anthropic/models/claude@1";
        let cases: [(&str, &[u8], &str); 4] = [
            (":rawPredict", br#"{"max_tokens":1,"messages":[]}"#, "anthropic_version"),
            (":rawPredict", br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":1,"messages":[]}"#, "bedrock-2023-05-31"),
            (":rawPredict", br#"{"anthropic_version":"vertex-2023-10-16","stream":true,"max_tokens":1,"messages":[]}"#, "streamRawPredict"),
            (":streamRawPredict", br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":1,"messages":[]}"#, "stream: true"),
        ];
        for (verb, body, says) in cases {
            let mut p = parts(
                "POST",
                &format!("{base}{verb}"),
                &[("authorization", &auth)],
            );
            let e = accept(&mut p, Bytes::from_static(body), 0, &i)
                .err()
                .unwrap();
            assert_eq!(e.status, 400);
            let msg = json_of(&e)["error"]["message"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(msg.contains(says), "{msg}");
        }
        let body = br#"{"anthropic_version":"vertex-2023-10-16","model":"x","max_tokens":1,"messages":[]}"#;
        let mut p = parts(
            "POST",
            &format!("{base}:rawPredict"),
            &[("authorization", &auth)],
        );
        let e = accept(&mut p, Bytes::from_static(body), 0, &i)
            .err()
            .unwrap();
        assert_eq!(e.status, 400);
        // The SDK's stream, model escaped in the path.
        let body =
            br#"{"anthropic_version":"2023-06-01","stream":true,"max_tokens":1,"messages":[]}"#;
        let mut p = parts(
            "POST",
            "/v1/projects/p/locations/r/publishers/anthropic/models/claude%40x:streamRawPredict",
            &[("authorization", &auth)],
        );
        let a = accept(&mut p, Bytes::from_static(body), 0, &i)
            .ok()
            .unwrap();
        let b: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(
            (b["model"].as_str(), b["stream"].as_bool()),
            (Some("claude@x"), Some(true))
        );
    }

    #[tokio::test]
    async fn the_openai_compatible_endpoint_is_openais_chat_completions() {
        let i = issuer();
        let (token, _) = i.issue(clock::now());
        let auth = format!("Bearer {token}");
        let body = Bytes::from_static(br#"{"model":"google/gemini-2.0-flash","messages":[]}"#);
        let mut p = parts(
            "POST",
            "/v1/projects/p/locations/us-central1/endpoints/openapi/chat/completions",
            &[("authorization", &auth)],
        );
        let a = accept(&mut p, body.clone(), 0, &i).ok().unwrap();
        assert_eq!(p.uri.path(), "/v1/chat/completions");
        assert_eq!((a.native, a.body), (MockApi::OpenAi, body));
        let mut p = parts(
            "POST",
            "/v1/projects/p/locations/r/endpoints/other",
            &[("authorization", &auth)],
        );
        let e = accept(&mut p, Bytes::new(), 0, &i).err().unwrap();
        assert_eq!(e.status, 404);
        let mut p = parts(
            "POST",
            "/v1/projects/p/locations/r/endpoints/openapi/chat/completions",
            &[("authorization", &auth), ("x-api-key", &token)],
        );
        let e = accept(&mut p, Bytes::new(), 0, &i).err().unwrap();
        assert_eq!(e.status, 400);
    }

    #[tokio::test]
    async fn the_token_endpoint_refuses_what_is_not_a_signed_grant() {
        let i = issuer();
        let form = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("host", "mock.test"),
        ];
        let e = accept(
            &mut parts("POST", "/token", &form),
            Bytes::from_static(b"grant_type=client_credentials"),
            0,
            &i,
        )
        .err()
        .unwrap();
        assert_eq!(json_of(&e)["error"], "unsupported_grant_type");
        // A JWT signed with another key (HS256, here) is refused.
        let forged = jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &json!({"iss": TEST_ACCOUNT, "aud": "http://mock.test/token", "scope": CLOUD_PLATFORM, "iat": 1, "exp": 2}),
            &jsonwebtoken::EncodingKey::from_secret(b"k"),
        )
        .unwrap();
        let body = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={forged}"
        );
        let e = accept(
            &mut parts("POST", "/token", &form),
            Bytes::from(body),
            1,
            &i,
        )
        .err()
        .unwrap();
        assert_eq!((e.status, e.auth), (StatusCode::BAD_REQUEST, true));
        assert_eq!(json_of(&e)["error"], "invalid_grant");
    }

    /// An assertion signed with the test key, as a client would send it.
    fn signed(claims: Value) -> Bytes {
        let file: Value = serde_json::from_str(include_str!(
            "../../testdata/vertex-test-service-account.json"
        ))
        .unwrap();
        let pem = file["private_key"].as_str().unwrap();
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
        header.kid = Some(TEST_KEY_ID.into());
        let jwt = jsonwebtoken::encode(
            &header,
            &claims,
            &jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap(),
        )
        .unwrap();
        Bytes::from(format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={jwt}"
        ))
    }

    #[test]
    fn a_signed_grant_gets_a_token_and_each_wrong_claim_is_refused() {
        let i = issuer();
        let form = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("host", "mock.test"),
        ];
        let now = 1_700_000_000u64;
        let good = json!({"iss": TEST_ACCOUNT, "sub": TEST_ACCOUNT, "aud": "http://mock.test/token", "scope": CLOUD_PLATFORM, "iat": now, "exp": now + 3600});
        let ok = accept(
            &mut parts("POST", "/token", &form),
            signed(good.clone()),
            now,
            &i,
        )
        .err()
        .unwrap();
        assert_eq!(ok.status, StatusCode::OK);
        let granted = json_of(&ok);
        assert_eq!(granted["expires_in"], 3599);
        assert_eq!(granted["token_type"], "Bearer");
        assert!(i.valid(granted["access_token"].as_str().unwrap(), clock::now()));
        // Google's own endpoint as the audience, as google-auth writes it.
        let mut canonical = good.clone();
        canonical["aud"] = json!(GOOGLE_TOKEN_URL);
        let ok = accept(
            &mut parts("POST", "/token", &form),
            signed(canonical),
            now,
            &i,
        )
        .err()
        .unwrap();
        assert_eq!(ok.status, StatusCode::OK);
        let cases = [
            ("aud", json!("http://elsewhere.test/token"), "invalid_grant"),
            (
                "aud",
                json!("https://oauth2.googleapis.com/revoke"),
                "invalid_grant",
            ),
            (
                "iss",
                json!("someone@else.iam.gserviceaccount.com"),
                "invalid_grant",
            ),
            (
                "scope",
                json!("https://www.googleapis.com/auth/devstorage.read_only"),
                "invalid_scope",
            ),
            ("iat", json!(now + 600), "invalid_grant"),
            ("exp", json!(now + 7200), "invalid_grant"),
        ];
        for (claim, value, error) in cases {
            let mut claims = good.clone();
            claims[claim] = value;
            let e = accept(&mut parts("POST", "/token", &form), signed(claims), now, &i)
                .err()
                .unwrap();
            assert_eq!(
                (e.status, e.auth),
                (StatusCode::BAD_REQUEST, true),
                "{claim}"
            );
            assert_eq!(json_of(&e)["error"], error, "{claim}");
        }
        // An assertion that expired a while ago.
        let e = accept(
            &mut parts("POST", "/token", &form),
            signed(good),
            now + 7200,
            &i,
        )
        .err()
        .unwrap();
        assert_eq!(json_of(&e)["error"], "invalid_grant");
    }
}
