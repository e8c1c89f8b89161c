//! Answers in the shape AWS's Bedrock clients read, for requests that came
//! in their shape (`/model/{id}/invoke`, `/invoke-with-response-stream`,
//! `/converse`, `/converse-stream`):
//!
//! - a JSON answer is the Messages answer as it is (InvokeModel answers
//!   with the model's own body), or written as a `ConverseResponse`;
//! - a stream is AWS event-stream framing: each SSE event one `chunk`
//!   frame, its JSON base64-encoded in `{"bytes": …}` (or, for Converse,
//!   the Converse events it stands for: `messageStart`,
//!   `contentBlockDelta`, …), and an `error` event an exception frame
//!   (`throttlingException`, …) that ends the stream;
//! - an error is `{"message": …}` named by `x-amzn-errortype`, the status
//!   kept (529 becomes 503, Bedrock's status for an overload), so boto3
//!   raises the matching exception class and the Anthropic SDK's Bedrock
//!   client its status error.

use std::pin::Pin;
use std::task::{Context, Poll};

use aws_smithy_types::event_stream::{Header, HeaderValue as FrameValue, Message};
use base64::Engine as _;
use http_body::Frame;

use super::*;

/// The most of an error body read to find its message.
const MAX_ERROR: usize = 64 * 1024;

/// The AWS error name for an answer's status (the Anthropic error type it
/// carries, when there is one, first).
fn error_name(status: u16, kind: Option<&str>) -> &'static str {
    match (kind, status) {
        (Some("rate_limit_error"), _) | (_, 429) => "ThrottlingException",
        (Some("overloaded_error"), _) | (_, 503 | 529) => "ServiceUnavailableException",
        (Some("timeout_error"), _) | (_, 408 | 504) => "ModelTimeoutException",
        (Some("authentication_error"), _) | (_, 401) => "UnrecognizedClientException",
        (Some("permission_error"), _) | (_, 403) => "AccessDeniedException",
        (Some("not_found_error"), _) | (_, 404) => "ResourceNotFoundException",
        (_, 400..=499) => "ValidationException",
        _ => "InternalServerException",
    }
}

/// The Anthropic error type and message of an error body (Levee's own or a
/// provider's), else its text.
fn type_and_message(body: &[u8]) -> (Option<String>, String) {
    let v: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let error = v.as_ref().and_then(|v| v.get("error"));
    let kind = error
        .and_then(|e| e.get("type"))
        .and_then(|t| t.as_str())
        .map(str::to_string);
    let message = error
        .and_then(|e| e.get("message"))
        .or_else(|| v.as_ref().and_then(|v| v.get("message")))
        .and_then(|m| m.as_str())
        .map_or_else(
            || String::from_utf8_lossy(body).into_owned(),
            str::to_string,
        );
    (kind, message)
}

/// The most of a JSON answer read to write it as a Converse answer.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// `resp` in the AWS shape.
pub(super) async fn reshape(resp: Response<Body>, shape: native::AwsShape) -> Response<Body> {
    let (mut parts, mut body) = resp.into_parts();
    // Reshaped answers are rare: every field goes through the map.
    body.take_raw().move_into(&mut parts.headers);
    body.unstamp(&mut parts.headers);
    if !parts.status.is_success() {
        let read = collect_limited(body, MAX_ERROR).await.unwrap_or_default();
        let (kind, message) = type_and_message(&read);
        let name = error_name(parts.status.as_u16(), kind.as_deref());
        if parts.status.as_u16() == 529 {
            parts.status = StatusCode::SERVICE_UNAVAILABLE;
        }
        parts
            .headers
            .insert("x-amzn-errortype", HeaderValue::from_static(name));
        parts
            .headers
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        parts.headers.remove(CONTENT_LENGTH);
        let out = serde_json::json!({ "message": message }).to_string();
        return Response::from_parts(parts, full(out));
    }
    let sse = parts
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !sse && shape.converse {
        let read = collect_limited(body, MAX_ANSWER).await.unwrap_or_default();
        let out = levee_translate::converse::converse_from_message(&read).unwrap_or_default();
        parts.headers.remove(CONTENT_LENGTH);
        return Response::from_parts(parts, full(out));
    }
    if !shape.stream || !sse {
        return Response::from_parts(parts, body);
    }
    parts.headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/vnd.amazon.eventstream"),
    );
    if !shape.converse {
        parts.headers.insert(
            "x-amzn-bedrock-content-type",
            HeaderValue::from_static("application/json"),
        );
    }
    parts.headers.remove(CONTENT_LENGTH);
    let framed = Framed {
        inner: body,
        pending: Vec::new(),
        done: false,
        converse: shape
            .converse
            .then(levee_translate::converse::MessagesToConverse::default),
    };
    Response::from_parts(parts, Body::new(framed))
}

/// An SSE body as event-stream frames, event by event.
struct Framed {
    inner: Body,
    pending: Vec<u8>,
    done: bool,
    /// A Converse stream's writer.
    converse: Option<levee_translate::converse::MessagesToConverse>,
}

impl Framed {
    /// The frames of every whole event in `pending`.
    fn frames(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            if self.done {
                continue;
            }
            for (message, end) in frames_of(&event, self.converse.as_mut()) {
                self.done |= end;
                // Only a header over 32 KiB or a frame over 4 GiB fails;
                // neither is made here.
                let _ = aws_smithy_eventstream::frame::write_message_to(&message, &mut out);
            }
        }
        out
    }
}

impl http_body::Body for Framed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            let polled = Pin::new(&mut self.inner).poll_frame(cx);
            match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    // A last event without its blank line still counts.
                    self.pending.extend_from_slice(b"\n\n");
                    let out = self.frames();
                    self.done = true;
                    self.pending.clear();
                    if out.is_empty() {
                        return Poll::Ready(None);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    self.pending.extend_from_slice(&data);
                    let out = self.frames();
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                Poll::Ready(Some(Err(never))) => match never {},
            }
        }
    }
}

fn header(name: &'static str, value: String) -> Header {
    Header::new(name, FrameValue::String(value.into()))
}

/// The frames of one SSE event, each with whether it ends the stream (an
/// exception): a `chunk`, or the Converse events it stands for when
/// `converse` writes them; none for an event with no data.
fn frames_of(
    event: &[u8],
    converse: Option<&mut levee_translate::converse::MessagesToConverse>,
) -> Vec<(Message, bool)> {
    let Ok(text) = std::str::from_utf8(event) else {
        return Vec::new();
    };
    let mut kind = None;
    let mut data: Vec<&str> = Vec::new();
    for line in text.lines() {
        if let Some(k) = line.strip_prefix("event:") {
            kind = Some(k.trim());
        } else if let Some(d) = line.strip_prefix("data:") {
            data.push(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    if data.is_empty() {
        return Vec::new();
    }
    let json = data.join("\n");
    if kind == Some("error") {
        let (kind, message) = type_and_message(json.as_bytes());
        let name = error_name(500, kind.as_deref());
        // Stream exceptions are named in lower camel case.
        let mut lower = name.to_string();
        lower[..1].make_ascii_lowercase();
        let payload = serde_json::json!({ "message": message }).to_string();
        let headers = vec![
            header(":exception-type", lower),
            header(":content-type", "application/json".into()),
            header(":message-type", "exception".into()),
        ];
        return vec![(Message::new_from_parts(headers, Bytes::from(payload)), true)];
    }
    if let Some(writer) = converse {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&json) else {
            return Vec::new();
        };
        return writer
            .event(&v)
            .into_iter()
            .map(|(kind, payload)| {
                let headers = vec![
                    header(":event-type", kind.to_string()),
                    header(":content-type", "application/json".into()),
                    header(":message-type", "event".into()),
                ];
                (
                    Message::new_from_parts(headers, Bytes::from(payload.to_string())),
                    false,
                )
            })
            .collect();
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(json.as_bytes());
    let payload = serde_json::json!({ "bytes": b64 }).to_string();
    let headers = vec![
        header(":event-type", "chunk".into()),
        header(":content-type", "application/json".into()),
        header(":message-type", "event".into()),
    ];
    vec![(
        Message::new_from_parts(headers, Bytes::from(payload)),
        false,
    )]
}
