//! OpenAI chunks → Anthropic events: `message_start`, one content block at
//! a time (text or a tool call's argument deltas), `message_delta` with the
//! stop reason and usage, `message_stop`.

use super::borrowed::{BlockDeltaOut, ChunkIn, DeltaBody, ToolCallIn};
use super::{write_json, CUT_SHORT};
use crate::anthropic as a;
use crate::openai as o;
use crate::response::{anthropic_id, stop_reason, usage_to_anthropic};
use crate::Dialect;
use levee_wire::error;
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text(u32),
    /// (Anthropic block index, OpenAI tool-call index)
    Tool(u32, u32),
}

#[derive(Debug, Default)]
pub(super) struct ToAnthropic {
    started: bool,
    done: bool,
    open: Option<Open>,
    next_index: u32,
    finish: Option<String>,
    refused: bool,
    saw_tools: bool,
    usage: Option<o::Usage>,
}

fn anthropic_event(out: &mut Vec<u8>, name: &str, ev: &impl Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    write_json(out, ev);
    out.extend_from_slice(b"\n\n");
}

/// An `event: error` whose type is the one Anthropic gives `status`.
fn anthropic_error(out: &mut Vec<u8>, status: u16, message: &str) {
    out.extend_from_slice(&Dialect::Anthropic.stream_error(status, "upstream_error", message));
}

impl ToAnthropic {
    pub(super) fn on_event(&mut self, data: &str, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if data.trim() == "[DONE]" {
            self.end_message(out);
            return;
        }
        match serde_json::from_str::<ChunkIn<'_>>(data) {
            Ok(ChunkIn { error: Some(e), .. }) => {
                self.done = true;
                let status = e
                    .kind
                    .as_deref()
                    .map_or(500, |k| error::status_of_type(Dialect::OpenAi, k));
                anthropic_error(out, status, &e.message);
            }
            Ok(c) => self.on_chunk(c, out),
            Err(_) => {
                self.done = true;
                anthropic_error(
                    out,
                    502,
                    "levee: upstream_error: the backup sent a stream event that could not be translated",
                );
            }
        }
    }

    fn on_chunk(&mut self, c: ChunkIn<'_>, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            let message = a::MessageResponse {
                id: anthropic_id(c.id.as_deref().unwrap_or("")),
                kind: "message".into(),
                role: "assistant".into(),
                model: c.model.as_deref().unwrap_or("").to_string(),
                content: Vec::new(),
                stop_reason: None,
                stop_sequence: None,
                usage: a::Usage::default(),
            };
            anthropic_event(
                out,
                "message_start",
                &a::StreamEvent::MessageStart { message },
            );
        }
        if let Some(u) = c.usage {
            self.usage = Some(u);
        }
        for choice in c.choices.into_iter().filter(|ch| ch.index == 0) {
            let d = choice.delta;
            if let Some(text) = d.content.filter(|t| !t.is_empty()) {
                self.text(&text, out);
            }
            if let Some(text) = d.refusal.filter(|t| !t.is_empty()) {
                self.refused = true;
                self.text(&text, out);
            }
            for tc in d.tool_calls.unwrap_or_default() {
                self.tool_delta(tc, out);
            }
            if let Some(f) = choice.finish_reason {
                self.finish = Some(f.into_owned());
                self.close(out);
            }
        }
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        let index = match self.open {
            Some(Open::Text(i)) => i,
            _ => {
                self.close(out);
                let i = self.start_block(
                    a::ResponseBlock::Text {
                        text: String::new(),
                    },
                    out,
                );
                self.open = Some(Open::Text(i));
                i
            }
        };
        let ev = BlockDeltaOut {
            kind: "content_block_delta",
            index,
            delta: DeltaBody::TextDelta { text },
        };
        anthropic_event(out, "content_block_delta", &ev);
    }

    fn tool_delta(&mut self, tc: ToolCallIn<'_>, out: &mut Vec<u8>) {
        let f = tc.function.unwrap_or_default();
        let index = match self.open {
            Some(Open::Tool(i, k)) if k == tc.index && tc.id.is_none() => i,
            _ => {
                self.close(out);
                self.saw_tools = true;
                let block = a::ResponseBlock::ToolUse {
                    id: tc
                        .id
                        .map(Cow::into_owned)
                        .unwrap_or_else(|| format!("toolu_levee_{}", tc.index)),
                    name: f.name.as_deref().unwrap_or("").to_string(),
                    input: Value::Object(Map::new()),
                };
                let i = self.start_block(block, out);
                self.open = Some(Open::Tool(i, tc.index));
                i
            }
        };
        if let Some(partial_json) = f.arguments.as_deref().filter(|a| !a.is_empty()) {
            let ev = BlockDeltaOut {
                kind: "content_block_delta",
                index,
                delta: DeltaBody::InputJsonDelta { partial_json },
            };
            anthropic_event(out, "content_block_delta", &ev);
        }
    }

    fn start_block(&mut self, content_block: a::ResponseBlock, out: &mut Vec<u8>) -> u32 {
        let index = self.next_index;
        self.next_index += 1;
        let ev = a::StreamEvent::ContentBlockStart {
            index,
            content_block,
        };
        anthropic_event(out, "content_block_start", &ev);
        index
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some(Open::Text(index) | Open::Tool(index, _)) = self.open.take() {
            anthropic_event(
                out,
                "content_block_stop",
                &a::StreamEvent::ContentBlockStop { index },
            );
        }
    }

    fn end_message(&mut self, out: &mut Vec<u8>) {
        self.close(out);
        self.done = true;
        let stop = if self.refused {
            "refusal"
        } else {
            stop_reason(self.finish.as_deref(), self.saw_tools)
        };
        let u = self
            .usage
            .as_ref()
            .map(usage_to_anthropic)
            .unwrap_or_default();
        let ev = a::StreamEvent::MessageDelta {
            delta: a::MessageDelta {
                stop_reason: Some(stop.into()),
                stop_sequence: None,
            },
            usage: a::DeltaUsage {
                output_tokens: u.output_tokens,
                input_tokens: Some(u.input_tokens),
                cache_creation_input_tokens: None,
                cache_read_input_tokens: u.cache_read_input_tokens,
            },
        };
        anthropic_event(out, "message_delta", &ev);
        anthropic_event(out, "message_stop", &a::StreamEvent::MessageStop);
    }

    pub(super) fn on_end(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if self.finish.is_some() {
            // Finished but no `[DONE]`: the answer is whole.
            self.end_message(out);
        } else {
            self.done = true;
            anthropic_error(out, 502, CUT_SHORT);
        }
    }
}
