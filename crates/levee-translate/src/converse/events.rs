//! A `ConverseStream` written as the Messages API's SSE, event by event.
//!
//! Converse opens a text block implicitly (its first `contentBlockDelta`),
//! ends the message with `messageStop` (the stop reason) and then sends the
//! usage in `metadata`; the Messages stream opens every block with
//! `content_block_start` and carries the stop reason and usage together in
//! `message_delta`. So blocks are opened when first seen, the stop reason
//! is held until the usage comes (or the stream ends), and `message_start`
//! counts no input tokens: they arrive with `message_delta`.

use serde_json::{json, Value};

use super::answer::{stop_reason, usage};
use crate::BadAnswer;

/// What a Messages block opened for a Converse block is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
    Tool,
}

/// The state of one stream's translation.
pub struct ConverseToMessages {
    model: String,
    id: String,
    started: bool,
    /// Blocks opened and not yet stopped, by index.
    open: Vec<(u64, Open)>,
    stop: Option<&'static str>,
    finished: bool,
}

impl ConverseToMessages {
    /// A stream answered for `model`, its message named `id`.
    pub fn new(model: &str, id: &str) -> Self {
        ConverseToMessages {
            model: model.to_string(),
            id: id.to_string(),
            started: false,
            open: Vec::new(),
            stop: None,
            finished: false,
        }
    }

    /// Whether the message's last event (`message_stop`) was written.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Appends the SSE events for one Converse event (its `:event-type`
    /// and JSON payload) to `out`. Event types Converse may add later are
    /// passed over.
    pub fn event(
        &mut self,
        kind: &str,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), BadAnswer> {
        let v: Value = serde_json::from_slice(payload)
            .map_err(|e| BadAnswer(format!("Amazon Bedrock's `{kind}` event is not JSON: {e}")))?;
        let index = v
            .get("contentBlockIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        match kind {
            "messageStart" => self.start(out),
            "contentBlockStart" => {
                self.start(out);
                if let Some(tool) = v.get("start").and_then(|s| s.get("toolUse")) {
                    self.open_block(index, Open::Tool, Some(tool), out);
                }
            }
            "contentBlockDelta" => self.delta(index, v.get("delta"), out),
            "contentBlockStop" => {
                self.start(out);
                if !self.open.iter().any(|(i, _)| *i == index) {
                    // An empty block: opened and closed, as Messages says it.
                    self.open_block(index, Open::Text, None, out);
                }
                self.close(index, out);
            }
            "messageStop" => {
                self.start(out);
                self.close_all(out);
                let reason = v.get("stopReason").and_then(Value::as_str);
                self.stop = Some(reason.map_or("end_turn", stop_reason));
            }
            "metadata" => self.end(v.get("usage"), out),
            _ => {}
        }
        Ok(())
    }

    /// The stream ended: a message whose usage never came is ended now, as
    /// long as its stop reason came (a stream cut before it stays cut).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.stop.is_some() && !self.finished {
            self.end(None, out);
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let event = json!({
            "type": "message_start",
            "message": {
                "id": self.id,
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": Value::Null,
                "stop_sequence": Value::Null,
                "usage": { "input_tokens": 0, "output_tokens": 0 },
            },
        });
        sse(out, "message_start", &event);
    }

    fn open_block(&mut self, index: u64, kind: Open, tool: Option<&Value>, out: &mut Vec<u8>) {
        let block = match kind {
            Open::Text => json!({ "type": "text", "text": "" }),
            Open::Thinking => json!({ "type": "thinking", "thinking": "", "signature": "" }),
            Open::Tool => json!({
                "type": "tool_use",
                "id": tool.and_then(|t| t.get("toolUseId")).cloned().unwrap_or(Value::Null),
                "name": tool.and_then(|t| t.get("name")).cloned().unwrap_or(Value::Null),
                "input": {},
            }),
        };
        self.open.push((index, kind));
        let event =
            json!({ "type": "content_block_start", "index": index, "content_block": block });
        sse(out, "content_block_start", &event);
    }

    fn delta(&mut self, index: u64, delta: Option<&Value>, out: &mut Vec<u8>) {
        let Some(delta) = delta else { return };
        self.start(out);
        let (kind, body) = if let Some(t) = delta.get("text").and_then(Value::as_str) {
            (Open::Text, json!({ "type": "text_delta", "text": t }))
        } else if let Some(u) = delta.get("toolUse") {
            let input = u.get("input").and_then(Value::as_str).unwrap_or("");
            (
                Open::Tool,
                json!({ "type": "input_json_delta", "partial_json": input }),
            )
        } else if let Some(r) = delta.get("reasoningContent") {
            if let Some(t) = r.get("text").and_then(Value::as_str) {
                (
                    Open::Thinking,
                    json!({ "type": "thinking_delta", "thinking": t }),
                )
            } else if let Some(s) = r.get("signature").and_then(Value::as_str) {
                (
                    Open::Thinking,
                    json!({ "type": "signature_delta", "signature": s }),
                )
            } else if let Some(d) = r.get("redactedContent") {
                // A redacted block is whole in its start event.
                let block = json!({ "type": "redacted_thinking", "data": d });
                self.open.push((index, Open::Thinking));
                let event = json!({ "type": "content_block_start", "index": index, "content_block": block });
                sse(out, "content_block_start", &event);
                return;
            } else {
                return;
            }
        } else {
            return;
        };
        if !self.open.iter().any(|(i, _)| *i == index) {
            self.open_block(index, kind, None, out);
        }
        let event = json!({ "type": "content_block_delta", "index": index, "delta": body });
        sse(out, "content_block_delta", &event);
    }

    fn close(&mut self, index: u64, out: &mut Vec<u8>) {
        if let Some(at) = self.open.iter().position(|(i, _)| *i == index) {
            self.open.remove(at);
            let event = json!({ "type": "content_block_stop", "index": index });
            sse(out, "content_block_stop", &event);
        }
    }

    fn close_all(&mut self, out: &mut Vec<u8>) {
        while let Some(&(index, _)) = self.open.first() {
            self.close(index, out);
        }
    }

    fn end(&mut self, converse_usage: Option<&Value>, out: &mut Vec<u8>) {
        if self.finished {
            return;
        }
        self.start(out);
        self.close_all(out);
        self.finished = true;
        let event = json!({
            "type": "message_delta",
            "delta": { "stop_reason": self.stop.unwrap_or("end_turn"), "stop_sequence": Value::Null },
            "usage": usage(converse_usage),
        });
        sse(out, "message_delta", &event);
        sse(out, "message_stop", &json!({ "type": "message_stop" }));
    }
}

/// Appends `event: <kind>` and its one-line JSON data.
fn sse(out: &mut Vec<u8>, kind: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Writing a `Value` to a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}
