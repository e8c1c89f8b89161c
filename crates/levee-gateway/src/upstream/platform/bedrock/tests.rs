//! The Bedrock platform's unit tests: credentials, URLs and bodies,
//! signatures, and the event stream and error answers as the Messages API's.

use super::events::*;
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
        let dir = std::env::temp_dir().join(format!("levee-bedrock-{name}-{}", std::process::id()));
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
    assert!(chat.contains("serves POST /v1/messages"), "{chat}");
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
    // Nothing in the environment or the files: the chain ends at the
    // instance profile, as the AWS SDKs' does; with IMDS off, nothing is
    // left, and the error says what to set.
    let imds = Bedrock::with_env("p", "us-east-1", None, None, &env_of(&[])).unwrap();
    assert!(format!("{imds:?}").contains("IMDSv2"), "{imds:?}");
    let off = [("AWS_EC2_METADATA_DISABLED", "true")];
    let none = Bedrock::with_env("p", "us-east-1", None, None, &env_of(&off))
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
    assert!(block_on(b.probe(0)).is_err());
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

fn converse_event(kind: &'static str, payload: &str) -> Bytes {
    frame(
        vec![
            string(":event-type", kind),
            string(":content-type", "application/json"),
            string(":message-type", "event"),
        ],
        payload.as_bytes(),
    )
}

#[test]
fn a_converse_stream_reads_as_messages_events_and_its_exceptions_as_errors() {
    let wire = [
        converse_event("messageStart", r#"{"role":"assistant","p":"ab"}"#),
        converse_event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hi"},"p":"abcd"}"#,
        ),
        converse_event("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        converse_event("messageStop", r#"{"stopReason":"end_turn"}"#),
        converse_event(
            "metadata",
            r#"{"usage":{"inputTokens":5,"outputTokens":2,"totalTokens":7},"metrics":{"latencyMs":3}}"#,
        ),
    ]
    .concat();
    for split in [1, 13, wire.len()] {
        let parts: Vec<Bytes> = wire.chunks(split).map(Bytes::copy_from_slice).collect();
        let events = EventStreamSse::new(Secrets::default()).conversing("meta.llama", "msg_bdrk_x");
        let text = read_all(body_of(parts).reframed(events)).unwrap();
        let events = levee_wire::sse::events(&text);
        let kinds: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ],
            "read {split} bytes at a time"
        );
        assert_eq!(events[4].1["usage"]["input_tokens"], 5);
    }
    // A throttling exception mid-stream: the Messages error event, then the end.
    let parts = vec![
        converse_event("messageStart", r#"{"role":"assistant"}"#),
        exception("throttlingException", "slow down"),
        converse_event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"x"}}"#,
        ),
    ];
    let events = EventStreamSse::new(Secrets::default()).conversing("m", "i");
    let text = read_all(body_of(parts).reframed(events)).unwrap();
    let events = levee_wire::sse::events(&text);
    assert_eq!(events.len(), 2, "{text}");
    assert_eq!(events[1].1["error"]["type"], "rate_limit_error");
}

#[test]
fn a_converse_model_goes_to_converse_and_an_anthropic_one_to_invoke() {
    let b = env_keys();
    let body = Bytes::from_static(
        br#"{"model":"mistral.mistral-large-2407-v1:0","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    );
    let (path, out) = b.target("/v1/messages", &body).unwrap().unwrap();
    assert_eq!(
        path,
        "/model/mistral.mistral-large-2407-v1%3A0/converse-stream"
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["inferenceConfig"]["maxTokens"], 9);
    assert_eq!(v["messages"][0]["content"][0]["text"], "hi");
    assert!(v.get("anthropic_version").is_none(), "{v}");
    let claude =
        Bytes::from_static(br#"{"model":"anthropic.claude-x","max_tokens":9,"messages":[]}"#);
    let (path, _) = b.target("/v1/messages", &claude).unwrap().unwrap();
    assert_eq!(path, "/model/anthropic.claude-x/invoke");
}
