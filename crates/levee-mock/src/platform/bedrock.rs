//! Amazon Bedrock's face (`--api bedrock`): `InvokeModel` and
//! `InvokeModelWithResponseStream` for Anthropic models, as strictly as
//! Bedrock checks them.
//!
//! - Auth: AWS Signature Version 4 (`AWS4-HMAC-SHA256`, service `bedrock`,
//!   any region), recomputed with the AWS SDK's own signer from the request
//!   as it arrived and compared. Two test key pairs are known (AWS's
//!   documentation example pair, not a secret; it grants nothing):
//!   [`TEST_ACCESS_KEY_ID`] with [`TEST_SECRET_ACCESS_KEY`], and
//!   [`TEST_SESSION_ACCESS_KEY_ID`] with the same secret key, temporary
//!   credentials that require `x-amz-security-token: `[`TEST_SESSION_TOKEN`]
//!   (signed). A missing, malformed, wrongly signed or skewed (over 15
//!   minutes from the mock's clock) signature and an unknown key are 403s in
//!   Bedrock's shape, counted as `unauthorized`.
//! - Request: `POST /model/{modelId}/invoke` or
//!   `/invoke-with-response-stream`, the model id percent-decoded (`%3A` and
//!   a raw `:` alike, as the SDKs send either) and naming an Anthropic
//!   model; the body must carry `anthropic_version: bedrock-2023-05-31` (or
//!   a dated Messages API version, which the official SDK's Bedrock client
//!   sends) and no `model` or `stream`; `anthropic_beta` (an array) becomes the
//!   `anthropic-beta` field. The request then goes to the strict Anthropic
//!   API as `/v1/messages` with `model` (and `stream`) set.
//! - Answer: a stream as `application/vnd.amazon.eventstream` frames (CRCs
//!   by the AWS SDK's encoder), one `chunk` event per SSE event, its JSON
//!   base64-encoded in `{"bytes": …}`; a `cut_stream_after` fault sends a
//!   `modelStreamErrorException` event in place of the cut and ends the
//!   stream, as Bedrock reports a failure mid-stream. Errors as
//!   `{"message": …}` with `x-amzn-errortype` (429 `ThrottlingException`,
//!   503 and 529 as 503 `ServiceUnavailableException`, 408
//!   `ModelTimeoutException`, 400 `ValidationException`, …).

use aws_smithy_types::event_stream::{Header, HeaderValue as FrameValue, Message};
use base64::Engine as _;
use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};

use super::sigv4::verify;
use super::{set_path, Accepted, Ctx, Refused};
use crate::body::{MockBody, Reframe};
use crate::MockApi;

/// The test access key id (long-term credentials).
pub const TEST_ACCESS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
/// The test access key id of temporary credentials: requests must carry
/// [`TEST_SESSION_TOKEN`].
pub const TEST_SESSION_ACCESS_KEY_ID: &str = "ASIAIOSFODNN7EXAMPLE";
/// The secret access key of both test key ids.
pub const TEST_SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
/// The session token of [`TEST_SESSION_ACCESS_KEY_ID`].
pub const TEST_SESSION_TOKEN: &str = "levee-mock-session-token";

/// The `anthropic_version` Bedrock requires.
const ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// A Bedrock error answer: `{"message"}`, `x-amzn-errortype` and a request id.
fn aws_error(status: StatusCode, auth: bool, name: &str, message: &str) -> Refused {
    let mut r = Refused::json(status, auth, serde_json::json!({ "message": message }));
    r.headers.extend(error_fields(name));
    r
}

fn error_fields(name: &str) -> Vec<(&'static str, HeaderValue)> {
    let namespace = match name {
        "MissingAuthenticationTokenException"
        | "IncompleteSignatureException"
        | "InvalidSignatureException"
        | "UnrecognizedClientException" => "com.amazon.coral.service",
        _ => "com.amazon.bedrock",
    };
    let mut fields = vec![("x-amzn-requestid", request_id())];
    if let Ok(v) = HeaderValue::from_str(&format!(
        "{name}:http://internal.amazon.com/coral/{namespace}/"
    )) {
        fields.push(("x-amzn-errortype", v));
    }
    fields
}

fn request_id() -> HeaderValue {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    HeaderValue::from_str(&format!("00000000-0000-4000-8000-{n:012x}")).unwrap_or(
        HeaderValue::from_static("00000000-0000-4000-8000-000000000000"),
    )
}

pub(super) fn forbidden(name: &str, message: &str) -> Refused {
    aws_error(StatusCode::FORBIDDEN, true, name, message)
}

/// A `ValidationException` saying `message`.
pub(super) fn validation(message: &str) -> Refused {
    invalid(message)
}

fn invalid(message: &str) -> Refused {
    aws_error(
        StatusCode::BAD_REQUEST,
        false,
        "ValidationException",
        message,
    )
}

pub(super) fn accept(
    parts: &mut http::request::Parts,
    body: Bytes,
    now_unix_s: u64,
) -> Result<Accepted, Refused> {
    verify(parts, &body, now_unix_s)?;
    let (model, op) = operation(parts)?;
    if let (Op::Invoke, Some(family)) = (op, super::embed::family(&model)) {
        let native = super::embed::native_body(family, &body, &model)?;
        set_path(parts, "/v1/embeddings")?;
        signed_fields_removed(parts);
        return Ok(Accepted {
            body: native,
            native: MockApi::OpenAi,
            ctx: Ctx::Bedrock {
                converse: false,
                embed: Some(family),
            },
        });
    }
    let stream = matches!(op, Op::InvokeStream | Op::ConverseStream);
    let converse = matches!(op, Op::Converse | Op::ConverseStream);
    let (native, beta) = match converse {
        true => (super::converse::native_body(&body, &model, stream)?, None),
        false => native_body(&body, &model, stream)?,
    };
    set_path(parts, "/v1/messages")?;
    signed_fields_removed(parts);
    parts
        .headers
        .insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    if let Some(beta) = beta.and_then(|b| HeaderValue::from_str(&b).ok()) {
        parts.headers.insert("anthropic-beta", beta);
    }
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(Accepted {
        body: native,
        native: MockApi::Anthropic,
        ctx: Ctx::Bedrock {
            converse,
            embed: None,
        },
    })
}

/// The request without SigV4's fields (the dialect API wants none).
fn signed_fields_removed(parts: &mut http::request::Parts) {
    for name in [
        "authorization",
        "x-amz-date",
        "x-amz-security-token",
        "x-amz-content-sha256",
    ] {
        parts.headers.remove(name);
    }
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
}

/// The operations served.
#[derive(Clone, Copy)]
enum Op {
    Invoke,
    InvokeStream,
    Converse,
    ConverseStream,
}

/// The model id and the operation, from the path.
fn operation(parts: &http::request::Parts) -> Result<(String, Op), Refused> {
    let unknown = || {
        aws_error(
            StatusCode::NOT_FOUND,
            false,
            "UnknownOperationException",
            "levee mock (bedrock) serves POST /model/{modelId}/invoke, /invoke-with-response-stream, /converse and /converse-stream",
        )
    };
    if parts.method != http::Method::POST {
        return Err(unknown());
    }
    let rest = parts
        .uri
        .path()
        .strip_prefix("/model/")
        .ok_or_else(unknown)?;
    let (id, op) = rest.split_once('/').ok_or_else(unknown)?;
    let op = match op {
        "invoke" => Op::Invoke,
        "invoke-with-response-stream" => Op::InvokeStream,
        "converse" => Op::Converse,
        "converse-stream" => Op::ConverseStream,
        _ => return Err(unknown()),
    };
    let id = percent_encoding::percent_decode_str(id)
        .decode_utf8()
        .map_err(|_| invalid("The provided model identifier is invalid."))?;
    let any_model = matches!(op, Op::Converse | Op::ConverseStream);
    if id.is_empty() || id.contains(char::is_whitespace) {
        return Err(invalid("The provided model identifier is invalid."));
    }
    let embeds = matches!(op, Op::Invoke) && super::embed::family(&id).is_some();
    if !any_model && !embeds && !id.contains("anthropic") {
        return Err(invalid(&format!(
            "The provided model identifier is invalid: '{id}' is not an Anthropic model id (like anthropic.claude-3-5-sonnet-20241022-v2:0) or inference profile."
        )));
    }
    Ok((id.into_owned(), op))
}

/// Whether `v` is an `anthropic_version` Bedrock takes: Bedrock's own
/// `bedrock-2023-05-31`, or a Messages API version (`2023-06-01` on), which
/// the official SDK's Bedrock client sends (anthropic 2.14 sends its own
/// API version there).
fn is_version(v: &str) -> bool {
    if v == ANTHROPIC_VERSION {
        return true;
    }
    let b = v.as_bytes();
    let dated = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b[..4]
            .iter()
            .chain(&b[5..7])
            .chain(&b[8..])
            .all(u8::is_ascii_digit);
    dated && v >= "2023-06-01"
}

/// The Messages API body for a Bedrock body, and its betas as one field
/// value.
fn native_body(body: &[u8], model: &str, stream: bool) -> Result<(Bytes, Option<String>), Refused> {
    let malformed = |why: &str| {
        invalid(&format!(
            "Malformed input request: {why}, please reformat your input and try again."
        ))
    };
    let mut fields: Map<String, Value> =
        serde_json::from_slice(body).map_err(|_| malformed("#: the body is not a JSON object"))?;
    for key in ["model", "stream"] {
        if fields.contains_key(key) {
            return Err(malformed(&format!(
                "#: extraneous key [{key}] is not permitted"
            )));
        }
    }
    match fields.remove("anthropic_version") {
        Some(Value::String(v)) if is_version(&v) => {}
        Some(v) => {
            return Err(malformed(&format!(
                "#/anthropic_version: {v} is not a valid enum value (bedrock-2023-05-31, or a Messages API version like 2023-06-01)"
            )))
        }
        None => return Err(malformed("#: required key [anthropic_version] not found")),
    }
    let beta = match fields.remove("anthropic_beta") {
        None => None,
        Some(Value::Array(items)) => {
            let names: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            let names =
                names.ok_or_else(|| malformed("#/anthropic_beta: expected an array of strings"))?;
            Some(names.join(","))
        }
        Some(_) => return Err(malformed("#/anthropic_beta: expected type: JSONArray")),
    };
    fields.insert("model".to_string(), Value::String(model.to_string()));
    if stream {
        fields.insert("stream".to_string(), Value::Bool(true));
    }
    let bytes = serde_json::to_vec(&fields).map_err(|_| malformed("#: cannot be re-encoded"))?;
    Ok((Bytes::from(bytes), beta))
}

/// The Anthropic answer in Bedrock's framing and error shapes (a Converse
/// operation's when `converse`).
pub(super) fn encode(
    resp: Response<MockBody>,
    converse: bool,
    embed: Option<super::embed::Family>,
) -> Response<MockBody> {
    let (mut parts, body) = resp.into_parts();
    parts.headers.insert("x-amzn-requestid", request_id());
    if parts.status.is_success() {
        let sse = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if let (false, Some(family)) = (sse, embed) {
            let native = body.full_bytes().cloned().unwrap_or_default();
            let (answer, tokens) = super::embed::answer(family, &native);
            parts.headers.remove(http::header::CONTENT_LENGTH);
            parts.headers.insert(
                "x-amzn-bedrock-input-token-count",
                HeaderValue::from(tokens),
            );
            return Response::from_parts(parts, body.map_full(move |_| answer));
        }
        if !sse && converse {
            parts.headers.remove(http::header::CONTENT_LENGTH);
            return Response::from_parts(parts, body.map_full(super::converse::answer));
        }
        if !sse {
            return Response::from_parts(parts, body);
        }
        parts.headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/vnd.amazon.eventstream"),
        );
        if !converse {
            parts.headers.insert(
                "x-amzn-bedrock-content-type",
                HeaderValue::from_static("application/json"),
            );
        }
        parts.headers.remove(CACHE_CONTROL);
        let framer = Framer {
            converse: converse.then_some((0, 0)),
            ..Framer::default()
        };
        return Response::from_parts(parts, body.reframed(Box::new(framer)));
    }
    let (status, name) = error_of(parts.status);
    parts.status = status;
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (n, v) in error_fields(name) {
        parts.headers.insert(n, v);
    }
    let body = body.map_full(|native| {
        let message = native_message(native);
        Bytes::from(serde_json::json!({ "message": message }).to_string())
    });
    Response::from_parts(parts, body)
}

/// Bedrock's status and error name for a native error status.
fn error_of(status: StatusCode) -> (StatusCode, &'static str) {
    let name = match status.as_u16() {
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 | 529 => "ServiceUnavailableException",
        400..=499 => "ValidationException",
        _ => "InternalServerException",
    };
    let status = match status.as_u16() {
        401 => StatusCode::FORBIDDEN,
        413 | 422 => StatusCode::BAD_REQUEST,
        529 => StatusCode::SERVICE_UNAVAILABLE,
        _ => status,
    };
    (status, name)
}

/// The message of a native (Anthropic) error body, else its text.
fn native_message(body: &[u8]) -> String {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    match v
        .as_ref()
        .and_then(|v| v.pointer("/error/message"))
        .and_then(Value::as_str)
    {
        Some(m) => m.to_string(),
        None => String::from_utf8_lossy(body).into_owned(),
    }
}

/// SSE events to event-stream frames: one `chunk` frame per event, or a
/// Converse stream's events (with the usage seen so far).
#[derive(Default)]
struct Framer {
    pending: Vec<u8>,
    converse: Option<(u64, u64)>,
}

impl Reframe for Framer {
    fn chunk(&mut self, chunk: &[u8]) -> Bytes {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            let Some(data) = sse_data(&event) else {
                continue;
            };
            match self.converse.as_mut() {
                None => write_frame(&mut out, &chunk_message(&data)),
                Some(usage) => {
                    let json: Value = serde_json::from_slice(&data).unwrap_or(Value::Null);
                    for (kind, payload) in super::converse::events(&json, usage) {
                        write_frame(&mut out, &converse_message(kind, payload));
                    }
                }
            }
        }
        Bytes::from(out)
    }

    fn cut(&mut self) -> Option<Bytes> {
        let message = Message::new_from_parts(
            vec![
                string(":exception-type", "modelStreamErrorException"),
                string(":content-type", "application/json"),
                string(":message-type", "exception"),
            ],
            Bytes::from_static(
                br#"{"message":"levee mock: the model stream failed (cut_stream_after)","originalStatusCode":500}"#,
            ),
        );
        let mut out = Vec::new();
        write_frame(&mut out, &message);
        Some(Bytes::from(out))
    }
}

fn string(name: &'static str, value: &'static str) -> Header {
    Header::new(name, FrameValue::String(value.into()))
}

/// The `data:` lines of one SSE event, joined.
fn sse_data(event: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(event).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n").into_bytes())
}

/// A `chunk` event carrying `json` as Bedrock does: base64 in `bytes`, with
/// Bedrock's `p` padding field beside it.
fn chunk_message(json: &[u8]) -> Message {
    let b64 = base64::engine::general_purpose::STANDARD.encode(json);
    let padding = &"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[..(json.len() % 57)];
    let payload = serde_json::json!({ "bytes": b64, "p": padding }).to_string();
    Message::new_from_parts(
        vec![
            string(":event-type", "chunk"),
            string(":content-type", "application/json"),
            string(":message-type", "event"),
        ],
        Bytes::from(payload),
    )
}

/// A Converse stream event `kind` carrying `payload`, with Bedrock's `p`
/// padding field in it.
fn converse_message(kind: &'static str, mut payload: Value) -> Message {
    let len = payload.to_string().len();
    payload["p"] =
        Value::from(&"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123"[..(len % 57)]);
    Message::new_from_parts(
        vec![
            string(":event-type", kind),
            string(":content-type", "application/json"),
            string(":message-type", "event"),
        ],
        Bytes::from(payload.to_string()),
    )
}

fn write_frame(out: &mut Vec<u8>, message: &Message) {
    // Only a header over 32 KiB or a frame over 4 GiB fails; neither is made here.
    let _ = aws_smithy_eventstream::frame::write_message_to(message, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::Credentials;
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    use aws_sigv4::sign::v4;
    use aws_smithy_runtime_api::client::identity::Identity;
    use std::time::{Duration, UNIX_EPOCH};

    const NOW: u64 = 1_704_164_645; // 2024-01-02T03:04:05Z

    /// A request signed by the AWS SDK's signer, as a client would.
    fn signed(
        path: &str,
        body: &'static str,
        access_key_id: &str,
        secret: &str,
        token: Option<&str>,
        at: u64,
    ) -> (http::request::Parts, Bytes) {
        let host = "127.0.0.1:9100";
        let uri = format!("http://{host}{path}");
        let identity = Identity::from(Credentials::new(
            access_key_id,
            secret,
            token.map(str::to_string),
            None,
            "test",
        ));
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region("us-east-1")
            .name("bedrock")
            .time(UNIX_EPOCH + Duration::from_secs(at))
            .settings(SigningSettings::default())
            .build()
            .unwrap()
            .into();
        let headers = [("host", host), ("content-type", "application/json")];
        let req = SignableRequest::new(
            "POST",
            uri.as_str(),
            headers.into_iter(),
            SignableBody::Bytes(body.as_bytes()),
        )
        .unwrap();
        let (instructions, _) = sign(req, &params).unwrap().into_parts();
        let mut builder = http::Request::post(path)
            .header("host", host)
            .header("content-type", "application/json")
            .header("user-agent", "test/1.0");
        for (n, v) in instructions.headers() {
            builder = builder.header(n, v);
        }
        let (parts, ()) = builder.body(()).unwrap().into_parts();
        (parts, Bytes::from_static(body.as_bytes()))
    }

    /// `body` to `path` signed at `at` with the test key pair.
    fn signed_by_test_key(
        path: &str,
        body: &'static str,
        at: u64,
    ) -> (http::request::Parts, Bytes) {
        signed(
            path,
            body,
            TEST_ACCESS_KEY_ID,
            TEST_SECRET_ACCESS_KEY,
            None,
            at,
        )
    }

    const BODY: &str = r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
    const MODEL_PATH: &str = "/model/anthropic.claude-3-5-sonnet-20241022-v2%3A0/invoke";

    fn refusal(r: Result<Accepted, Refused>) -> (u16, String, String) {
        let Err(r) = r else { panic!("accepted") };
        let name = r
            .headers
            .iter()
            .find(|(n, _)| *n == "x-amzn-errortype")
            .map(|(_, v)| v.to_str().unwrap().split(':').next().unwrap().to_string())
            .unwrap_or_default();
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        (
            r.status.as_u16(),
            name,
            v["message"].as_str().unwrap().to_string(),
        )
    }

    #[test]
    fn a_signed_request_becomes_a_native_messages_request() {
        let (mut parts, body) = signed_by_test_key(MODEL_PATH, BODY, NOW - 60);
        let a = accept(&mut parts, body, NOW)
            .unwrap_or_else(|r| panic!("{}", String::from_utf8_lossy(&r.body)));
        assert_eq!(parts.uri.path(), "/v1/messages");
        assert!(parts.headers.get("authorization").is_none());
        assert_eq!(parts.headers["anthropic-version"], "2023-06-01");
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["model"], "anthropic.claude-3-5-sonnet-20241022-v2:0");
        assert!(v.get("anthropic_version").is_none());
        assert!(v.get("stream").is_none());
        assert_eq!(a.native, MockApi::Anthropic);
    }

    #[test]
    fn a_raw_colon_in_the_path_and_temporary_credentials_are_accepted() {
        let path = "/model/us.anthropic.claude-3-5-haiku-20241022-v1:0/invoke-with-response-stream";
        // anthropic 2.14's Bedrock client sends its own API version.
        let body = r#"{"anthropic_version":"2026-10-21","anthropic_beta":["a-1","b-2"],"max_tokens":8,"messages":[]}"#;
        let (mut parts, body) = signed(
            path,
            body,
            TEST_SESSION_ACCESS_KEY_ID,
            TEST_SECRET_ACCESS_KEY,
            Some(TEST_SESSION_TOKEN),
            NOW,
        );
        let a = accept(&mut parts, body, NOW)
            .unwrap_or_else(|r| panic!("{}", String::from_utf8_lossy(&r.body)));
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["stream"], true);
        assert_eq!(v["model"], "us.anthropic.claude-3-5-haiku-20241022-v1:0");
        assert_eq!(parts.headers["anthropic-beta"], "a-1,b-2");
    }

    /// How the mock, at `NOW`, refuses `BODY` to `MODEL_PATH` signed with
    /// these credentials at `at`.
    fn refusal_signed_with(access_key_id: &str, secret: &str, at: u64) -> (u16, String, String) {
        let (mut parts, body) = signed(MODEL_PATH, BODY, access_key_id, secret, None, at);
        refusal(accept(&mut parts, body, NOW))
    }

    #[test]
    fn a_bad_missing_or_stale_signature_is_refused_as_bedrock_refuses_it() {
        let (status, name, message) =
            refusal_signed_with(TEST_ACCESS_KEY_ID, "not-the-secret", NOW);
        assert_eq!((status, name.as_str()), (403, "InvalidSignatureException"));
        assert!(message.starts_with("The request signature we calculated"));

        let (mut parts, body) = signed_by_test_key(MODEL_PATH, BODY, NOW);
        let tampered = Bytes::from_static(
            br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":9999,"messages":[]}"#,
        );
        let (status, name, _) = refusal(accept(&mut parts.clone(), tampered, NOW));
        assert_eq!((status, name.as_str()), (403, "InvalidSignatureException"));
        parts.headers.remove("authorization");
        let (status, name, _) = refusal(accept(&mut parts, body, NOW));
        assert_eq!(
            (status, name.as_str()),
            (403, "MissingAuthenticationTokenException")
        );

        let (status, name, message) =
            refusal_signed_with(TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, NOW - 16 * 60);
        assert_eq!((status, name.as_str()), (403, "InvalidSignatureException"));
        assert_eq!(
            message,
            "Signature expired: 20240102T024805Z is now earlier than 20240102T024905Z (20240102T030405Z - 15 min.)"
        );

        let (status, name, _) =
            refusal_signed_with("AKIAUNKNOWNKEY000000", TEST_SECRET_ACCESS_KEY, NOW);
        assert_eq!(
            (status, name.as_str()),
            (403, "UnrecognizedClientException")
        );

        // Temporary credentials without their token.
        let (status, name, _) =
            refusal_signed_with(TEST_SESSION_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY, NOW);
        assert_eq!(
            (status, name.as_str()),
            (403, "UnrecognizedClientException")
        );
    }

    #[test]
    fn paths_and_bodies_bedrock_would_not_take_are_refused() {
        let sign_at = |path: &str, body: &'static str| signed_by_test_key(path, body, NOW);
        let (mut p, b) = sign_at("/v1/messages", BODY);
        assert_eq!(refusal(accept(&mut p, b, NOW)).0, 404);
        let (mut p, b) = sign_at("/model/meta.llama3-8b/invoke", BODY);
        let (status, name, _) = refusal(accept(&mut p, b, NOW));
        assert_eq!((status, name.as_str()), (400, "ValidationException"));
        for (body, why) in [
            (
                r#"{"max_tokens":8,"messages":[]}"#,
                "required key [anthropic_version] not found",
            ),
            (
                r#"{"anthropic_version":"2023-01-01","max_tokens":8,"messages":[]}"#,
                "not a valid enum value",
            ),
            (
                r#"{"anthropic_version":"vertex-2023-10-16","max_tokens":8,"messages":[]}"#,
                "not a valid enum value",
            ),
            (
                r#"{"anthropic_version":"bedrock-2023-05-31","model":"x","max_tokens":8,"messages":[]}"#,
                "extraneous key [model]",
            ),
            (
                r#"{"anthropic_version":"bedrock-2023-05-31","stream":true,"max_tokens":8,"messages":[]}"#,
                "extraneous key [stream]",
            ),
        ] {
            let (mut p, b) = sign_at(MODEL_PATH, body);
            let (status, name, message) = refusal(accept(&mut p, b, NOW));
            assert_eq!((status, name.as_str()), (400, "ValidationException"));
            assert!(message.contains(why), "{message}");
        }
    }

    #[test]
    fn sse_events_become_chunk_frames_the_aws_decoder_reads() {
        let mut f = Framer::default();
        let half = f.chunk(b"event: message_start\ndata: {\"type\":\"message_start\"}");
        assert!(half.is_empty());
        let out = f.chunk(b"\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n");
        let mut buf = out.clone();
        let mut events = Vec::new();
        while !buf.is_empty() {
            let m = aws_smithy_eventstream::frame::read_message_from(&mut buf).unwrap();
            let payload: Value = serde_json::from_slice(m.payload()).unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(payload["bytes"].as_str().unwrap())
                .unwrap();
            events.push(String::from_utf8(bytes).unwrap());
        }
        assert_eq!(
            events,
            [r#"{"type":"message_start"}"#, r#"{"type":"ping"}"#]
        );
        let mut cut = f.cut().unwrap();
        let m = aws_smithy_eventstream::frame::read_message_from(&mut cut).unwrap();
        let kind = m
            .headers()
            .iter()
            .find(|h| h.name().as_str() == ":exception-type")
            .unwrap();
        assert_eq!(
            kind.value(),
            &FrameValue::String("modelStreamErrorException".into())
        );
    }

    #[test]
    fn native_error_statuses_get_bedrock_names() {
        for (native, status, name) in [
            (429, 429, "ThrottlingException"),
            (529, 503, "ServiceUnavailableException"),
            (503, 503, "ServiceUnavailableException"),
            (408, 408, "ModelTimeoutException"),
            (400, 400, "ValidationException"),
            (404, 404, "ResourceNotFoundException"),
            (500, 500, "InternalServerException"),
        ] {
            let (s, n) = error_of(StatusCode::from_u16(native).unwrap());
            assert_eq!((s.as_u16(), n), (status, name));
        }
        assert_eq!(
            native_message(br#"{"type":"error","error":{"type":"x","message":"slow down"}}"#),
            "slow down"
        );
    }
}
