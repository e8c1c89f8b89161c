//! Anthropic events → OpenAI chunks: one `chat.completion.chunk` per text
//! or tool-call delta, the finish reason, and the usage chunk when the
//! caller asked for it.

use super::borrowed::{
    ArgsFunction, ArgsOut, BlockDeltaIn, ChoiceOut, ChunkOut, DeltaOut, EventIn,
};
use super::{write_json, StreamOptions, CUT_SHORT};
use crate::anthropic as a;
use crate::openai as o;
use crate::response::{finish_reason, openai_id};
use crate::Dialect;
use levee_wire::error;

#[derive(Debug)]
pub(super) struct ToOpenAi {
    opts: StreamOptions,
    id: String,
    model: String,
    usage: a::Usage,
    started: bool,
    done: bool,
    finished: bool,
    tools: u32,
    /// (Anthropic block index, OpenAI tool-call index) of the open tool block.
    tool: Option<(u32, u32)>,
}

impl ToOpenAi {
    pub(super) fn new(opts: StreamOptions) -> Self {
        ToOpenAi {
            opts,
            id: String::new(),
            model: String::new(),
            usage: a::Usage::default(),
            started: false,
            done: false,
            finished: false,
            tools: 0,
            tool: None,
        }
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: o::Delta, finish: Option<&str>) {
        let c = o::ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.opts.created,
            model: self.model.clone(),
            choices: vec![o::ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish.map(str::to_string),
            }],
            usage: None,
        };
        out.extend_from_slice(b"data: ");
        write_json(out, &c);
        out.extend_from_slice(b"\n\n");
    }

    pub(super) fn on_event(&mut self, _event: &str, data: &str, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if let Ok(peek) = serde_json::from_str::<EventIn<'_>>(data) {
            match (peek.kind.as_ref(), peek.index, peek.delta) {
                ("ping", ..) => return,
                ("content_block_delta", Some(index), Some(d)) => {
                    self.fast_delta(index, d, out);
                    return;
                }
                _ => {}
            }
        }
        let ev = match serde_json::from_str::<a::StreamEvent>(data) {
            Ok(ev) => ev,
            Err(_) => {
                self.done = true;
                openai_error(out, 502, "levee: upstream_error: the backup sent a stream event that could not be translated");
                return;
            }
        };
        match ev {
            a::StreamEvent::MessageStart { message } => {
                self.started = true;
                self.id = openai_id(&message.id);
                self.model = message.model;
                self.usage = message.usage;
                let delta = o::Delta {
                    role: Some("assistant".into()),
                    content: Some(String::new()),
                    ..o::Delta::default()
                };
                self.chunk(out, delta, None);
            }
            a::StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => self.block_start(index, content_block, out),
            a::StreamEvent::ContentBlockDelta { index, delta } => {
                self.block_delta(index, delta, out)
            }
            a::StreamEvent::MessageDelta { delta, usage } => {
                self.usage.output_tokens = usage.output_tokens;
                if let Some(i) = usage.input_tokens {
                    self.usage.input_tokens = i;
                }
                if let Some(r) = usage.cache_read_input_tokens {
                    self.usage.cache_read_input_tokens = Some(r);
                }
                if let Some(c) = usage.cache_creation_input_tokens {
                    self.usage.cache_creation_input_tokens = Some(c);
                }
                self.finished = true;
                let f = finish_reason(delta.stop_reason.as_deref());
                self.chunk(out, o::Delta::default(), Some(f));
            }
            a::StreamEvent::MessageStop => self.end(out),
            a::StreamEvent::Error { error } => {
                self.done = true;
                let status = error::status_of_type(Dialect::Anthropic, &error.kind);
                openai_error(out, status, &error.message);
            }
            a::StreamEvent::ContentBlockStop { .. }
            | a::StreamEvent::Ping
            | a::StreamEvent::Unknown => {}
        }
    }

    fn block_start(&mut self, index: u32, block: a::ResponseBlock, out: &mut Vec<u8>) {
        match block {
            a::ResponseBlock::Text { text } if !text.is_empty() => {
                let delta = o::Delta {
                    content: Some(text),
                    ..o::Delta::default()
                };
                self.chunk(out, delta, None);
            }
            a::ResponseBlock::ToolUse { id, name, .. } => {
                let k = self.tools;
                self.tools += 1;
                self.tool = Some((index, k));
                let delta = o::Delta {
                    tool_calls: Some(vec![o::ToolCallDelta {
                        index: k,
                        id: Some(id),
                        kind: Some(o::FunctionTag::Function),
                        function: Some(o::FunctionDelta {
                            name: Some(name),
                            arguments: Some(String::new()),
                        }),
                    }]),
                    ..o::Delta::default()
                };
                self.chunk(out, delta, None);
            }
            _ => {}
        }
    }

    fn write_chunk(&self, out: &mut Vec<u8>, delta: DeltaOut<'_>) {
        let c = ChunkOut {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.opts.created,
            model: &self.model,
            choices: [ChoiceOut {
                index: 0,
                delta,
                finish_reason: None,
            }],
        };
        out.extend_from_slice(b"data: ");
        write_json(out, &c);
        out.extend_from_slice(b"\n\n");
    }

    fn fast_delta(&mut self, index: u32, d: BlockDeltaIn<'_>, out: &mut Vec<u8>) {
        match (d.kind.as_deref(), d.text, d.partial_json) {
            (Some("text_delta"), Some(text), _) => {
                let delta = DeltaOut {
                    content: Some(&text),
                    tool_calls: None,
                };
                self.write_chunk(out, delta);
            }
            (Some("input_json_delta"), _, Some(arguments)) => {
                let Some((_, k)) = self.tool.filter(|(i, _)| *i == index) else {
                    return;
                };
                let delta = DeltaOut {
                    content: None,
                    tool_calls: Some([ArgsOut {
                        index: k,
                        function: ArgsFunction {
                            arguments: &arguments,
                        },
                    }]),
                };
                self.write_chunk(out, delta);
            }
            // Thinking, signature and citation deltas have no counterpart.
            _ => {}
        }
    }

    fn block_delta(&mut self, index: u32, delta: a::BlockDelta, out: &mut Vec<u8>) {
        match delta {
            a::BlockDelta::TextDelta { text } => {
                let delta = o::Delta {
                    content: Some(text),
                    ..o::Delta::default()
                };
                self.chunk(out, delta, None);
            }
            a::BlockDelta::InputJsonDelta { partial_json } => {
                let Some((_, k)) = self.tool.filter(|(i, _)| *i == index) else {
                    return;
                };
                let delta = o::Delta {
                    tool_calls: Some(vec![o::ToolCallDelta {
                        index: k,
                        id: None,
                        kind: None,
                        function: Some(o::FunctionDelta {
                            name: None,
                            arguments: Some(partial_json),
                        }),
                    }]),
                    ..o::Delta::default()
                };
                self.chunk(out, delta, None);
            }
            a::BlockDelta::Other => {}
        }
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        self.done = true;
        if self.opts.include_usage {
            let c = o::ChatChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk".into(),
                created: self.opts.created,
                model: self.model.clone(),
                choices: Vec::new(),
                usage: Some(crate::response::usage_to_openai(&self.usage)),
            };
            out.extend_from_slice(b"data: ");
            write_json(out, &c);
            out.extend_from_slice(b"\n\n");
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }

    pub(super) fn on_end(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        if self.finished {
            self.end(out);
        } else {
            self.done = true;
            openai_error(out, 502, CUT_SHORT);
        }
    }
}

/// A `data:` event with an `error` whose type is the one OpenAI gives
/// `status`, code `upstream_error`.
fn openai_error(out: &mut Vec<u8>, status: u16, message: &str) {
    out.extend_from_slice(&Dialect::OpenAi.stream_error(status, "upstream_error", message));
}
