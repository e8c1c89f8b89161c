//! An answer in the Messages API's own wire format: the event stream's
//! frames (CRCs checked) as SSE events, and error answers as Anthropic
//! error bodies.

use super::*;

/// The longest event-stream frame read (AWS caps a message at 16 MiB).
pub(super) const MAX_FRAME: usize = 16 * 1024 * 1024 + 1024;

/// The most of an error body read to find its message.
pub(super) const MAX_ERROR_BODY: usize = 64 * 1024;

pub(super) fn is_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/vnd.amazon.eventstream"))
}

/// The AWS error name of an answer (`x-amzn-errortype`, without its
/// `:namespace` suffix).
pub(super) fn error_name(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get("x-amzn-errortype")?.to_str().ok()?;
    let name = v.split(':').next().unwrap_or(v).trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// The Anthropic error type for an AWS error or exception name (either
/// case: HTTP answers say `ThrottlingException`, stream events
/// `throttlingException`); `None` for a name not listed here.
pub(super) fn anthropic_type(aws_name: &str) -> Option<&'static str> {
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
pub(super) fn anthropic_error(kind: &str, message: &str) -> Bytes {
    let v = serde_json::json!({
        "type": "error",
        "error": { "type": kind, "message": message },
    });
    Bytes::from(v.to_string())
}

/// Bedrock's error message in `body` (`{"message": …}`, or `Message`), else
/// the body's text, else a line naming the status.
pub(super) fn error_message(body: &[u8], status: StatusCode) -> String {
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
pub(super) struct ErrorAnswer {
    read: Vec<u8>,
    status: StatusCode,
    name: Option<String>,
    /// Taken out of the message.
    redact: Secrets,
    /// Written as an OpenAI error (an embeddings request's caller).
    openai: bool,
}

impl ErrorAnswer {
    pub(super) fn new(status: StatusCode, name: Option<String>, redact: Secrets) -> Self {
        ErrorAnswer {
            read: Vec::new(),
            status,
            name,
            redact,
            openai: false,
        }
    }

    /// The error in OpenAI's shape, for an OpenAI caller.
    pub(super) fn in_openai_shape(mut self) -> Self {
        self.openai = true;
        self
    }

    fn mapped(&mut self) -> Bytes {
        let message = self.redact.text(error_message(&self.read, self.status));
        if self.openai {
            let (kind, code) =
                levee_wire::error::labels(levee_wire::Dialect::OpenAi, self.status.as_u16());
            let message = match &self.name {
                Some(name) => format!("Amazon Bedrock {name}: {message}"),
                None => message,
            };
            let v = serde_json::json!({
                "error": { "message": message, "type": kind, "param": null, "code": code },
            });
            return Bytes::from(v.to_string());
        }
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
pub(super) enum StreamError {
    #[error("Amazon Bedrock's event stream is broken: {0}")]
    Frame(String),
    #[error("Amazon Bedrock's event stream announced a {0}-byte frame (the limit is 16 MiB)")]
    TooLarge(usize),
    #[error("Amazon Bedrock's event stream ended inside a frame ({0} bytes left over)")]
    Truncated(usize),
}

/// Bedrock's event stream read as the Messages API's SSE: each whole
/// frame (CRCs checked) becomes one event; an exception ends the stream.
pub(super) struct EventStreamSse {
    buf: BytesMut,
    /// An exception was relayed: nothing more is read.
    done: bool,
    /// Taken out of exception messages.
    redact: Secrets,
    /// A Converse stream's translation into Messages events.
    converse: Option<levee_translate::converse::ConverseToMessages>,
}

impl EventStreamSse {
    pub(super) fn new(redact: Secrets) -> Self {
        EventStreamSse {
            buf: BytesMut::new(),
            done: false,
            redact,
            converse: None,
        }
    }

    /// The stream of a Converse attempt for `model`, its message named `id`.
    pub(super) fn conversing(mut self, model: &str, id: &str) -> Self {
        self.converse = Some(levee_translate::converse::ConverseToMessages::new(
            model, id,
        ));
        self
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
            let converse_event = frame_str(&message, ":message-type").unwrap_or("event") == "event";
            if let (Some(t), true) = (self.converse.as_mut(), converse_event) {
                let kind = frame_str(&message, ":event-type").unwrap_or("");
                t.event(kind, message.payload(), &mut out)
                    .map_err(|e| StreamError::Frame(e.to_string()))?;
                continue;
            }
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
            let mut out = Vec::new();
            if let Some(t) = self.converse.as_mut().filter(|_| !self.done) {
                t.finish(&mut out);
            }
            Step::Last((!out.is_empty()).then(|| Bytes::from(out)))
        } else {
            Step::Fail(StreamError::Truncated(self.buf.len()).into())
        }
    }
}

/// A frame header's string value.
pub(super) fn frame_str<'m>(message: &'m Message, name: &str) -> Option<&'m str> {
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
pub(super) fn sse_of(message: &Message, redact: &Secrets, out: &mut Vec<u8>) -> Option<bool> {
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

pub(super) fn error_event(out: &mut Vec<u8>, kind: &str, message: &str) {
    out.extend_from_slice(b"event: error\ndata: ");
    out.extend_from_slice(&anthropic_error(kind, message));
    out.extend_from_slice(b"\n\n");
}

/// The Anthropic event inside a `chunk` payload (`{"bytes": "<base64>"}`),
/// on one line.
pub(super) fn chunk_json(payload: &[u8]) -> Option<Vec<u8>> {
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
pub(super) fn event_type(json: &[u8]) -> Option<String> {
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
