//! Streaming translation, event by event: OpenAI `chat.completion.chunk`s ⇄
//! Anthropic `message_start` … `message_stop`, tool-call argument deltas and
//! the final usage included.
//!
//! A translator is a small state machine fed upstream bytes as they arrive,
//! split anywhere: it parses SSE lines itself, holds only an unfinished
//! line, and writes each translated event as soon as the upstream event that
//! causes it is complete. Nothing is buffered beyond one event, so a stream
//! is never held back to be translated whole.

use crate::anthropic as a;
use crate::openai as o;
use crate::response::{anthropic_id, finish_reason, openai_id, stop_reason, usage_to_anthropic};
use crate::Dialect;
use bytes::Bytes;
use levee_wire::error;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Incremental SSE parser (`\n`, `\r\n` and `\r` line ends; `data:` lines
/// joined with `\n`; comments and unknown fields skipped).
#[derive(Debug, Default)]
struct SseParser {
    line: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    after_cr: bool,
}

impl SseParser {
    fn push(&mut self, chunk: &[u8], mut on_event: impl FnMut(&str, &str)) {
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut on_event);
                }
                b'\n' => self.end_line(&mut on_event),
                _ => self.line.push(b),
            }
        }
    }

    /// The stream ended: an unterminated last line and event still count.
    fn finish(&mut self, mut on_event: impl FnMut(&str, &str)) {
        if !self.line.is_empty() {
            self.end_line(&mut on_event);
        }
        if self.has_data {
            self.end_line(&mut on_event);
        }
    }

    fn end_line(&mut self, on_event: &mut impl FnMut(&str, &str)) {
        if self.line.is_empty() {
            if self.has_data {
                on_event(&self.event, &self.data);
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        let line = String::from_utf8_lossy(&self.line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        self.line.clear();
    }
}

/// What a stream translation needs to know about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// The OpenAI caller asked for `stream_options.include_usage`.
    pub include_usage: bool,
    /// Unix seconds for OpenAI chunks' `created` (Anthropic has no timestamp).
    pub created: u64,
}

/// Translates one SSE stream from the upstream's dialect to the caller's.
#[derive(Debug)]
pub struct StreamTranslator {
    parser: SseParser,
    state: State,
    out: Vec<u8>,
}

#[derive(Debug)]
enum State {
    ToAnthropic(ToAnthropic),
    ToOpenAi(ToOpenAi),
}

impl StreamTranslator {
    /// A translator from `upstream`'s events to `caller`'s; `None` when they
    /// are the same dialect.
    pub fn new(upstream: Dialect, caller: Dialect, opts: StreamOptions) -> Option<Self> {
        let state = match (upstream, caller) {
            (Dialect::OpenAi, Dialect::Anthropic) => State::ToAnthropic(ToAnthropic::default()),
            (Dialect::Anthropic, Dialect::OpenAi) => State::ToOpenAi(ToOpenAi::new(opts)),
            _ => return None,
        };
        Some(StreamTranslator {
            parser: SseParser::default(),
            state,
            out: Vec::with_capacity(512),
        })
    }

    /// Feeds upstream bytes (split anywhere); returns the translated events
    /// they complete (possibly none).
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        let (state, out) = (&mut self.state, &mut self.out);
        self.parser
            .push(chunk, |event, data| state.on_event(event, data, out));
        Bytes::from(std::mem::take(&mut self.out))
    }

    /// The upstream ended cleanly: whatever its last events complete, and
    /// an error event if it stopped before its final event.
    pub fn finish(&mut self) -> Bytes {
        let (state, out) = (&mut self.state, &mut self.out);
        self.parser
            .finish(|event, data| state.on_event(event, data, out));
        state.on_end(out);
        Bytes::from(std::mem::take(&mut self.out))
    }
}

impl State {
    fn on_event(&mut self, event: &str, data: &str, out: &mut Vec<u8>) {
        match self {
            State::ToAnthropic(s) => s.on_event(data, out),
            State::ToOpenAi(s) => s.on_event(event, data, out),
        }
    }

    fn on_end(&mut self, out: &mut Vec<u8>) {
        match self {
            State::ToAnthropic(s) => s.on_end(out),
            State::ToOpenAi(s) => s.on_end(out),
        }
    }
}

const CUT_SHORT: &str =
    "levee: upstream_error: the backup's stream ended before its final event; the partial answer above is all there is";

fn write_json(out: &mut Vec<u8>, v: &impl Serialize) {
    // Serializing these plain structs into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

// ---------------------------------------------------------------------------
// OpenAI chunks → Anthropic events
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text(u32),
    /// (Anthropic block index, OpenAI tool-call index)
    Tool(u32, u32),
}

#[derive(Debug, Default)]
struct ToAnthropic {
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
    fn on_event(&mut self, data: &str, out: &mut Vec<u8>) {
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

    fn on_end(&mut self, out: &mut Vec<u8>) {
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

// ---------------------------------------------------------------------------
// Anthropic events → OpenAI chunks
// ---------------------------------------------------------------------------

#[derive(Debug)]
struct ToOpenAi {
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
    fn new(opts: StreamOptions) -> Self {
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

    fn on_event(&mut self, _event: &str, data: &str, out: &mut Vec<u8>) {
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

    fn on_end(&mut self, out: &mut Vec<u8>) {
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

// ---------------------------------------------------------------------------
// The hot path: text and argument deltas are most of a stream's events, so
// they are read and written through borrowed views of the same fields (no
// per-event copies of ids, model names or text); every other event goes
// through the typed models.
// ---------------------------------------------------------------------------

use std::borrow::Cow;

/// An OpenAI chunk (or error), read borrowed.
#[derive(Deserialize)]
struct ChunkIn<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Vec<ChoiceIn<'a>>,
    #[serde(default)]
    usage: Option<o::Usage>,
    #[serde(default)]
    error: Option<o::ErrorObject>,
}

#[derive(Deserialize)]
struct ChoiceIn<'a> {
    index: u32,
    #[serde(borrow, default)]
    delta: DeltaIn<'a>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct DeltaIn<'a> {
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallIn<'a> {
    index: u32,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize, Default)]
struct FunctionIn<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<Cow<'a, str>>,
}

/// Any Anthropic event, read borrowed: enough to handle a delta without
/// parsing it twice.
#[derive(Deserialize)]
struct EventIn<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    delta: Option<BlockDeltaIn<'a>>,
}

#[derive(Deserialize)]
struct BlockDeltaIn<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
}

/// `content_block_delta`, written borrowed.
#[derive(Serialize)]
struct BlockDeltaOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    index: u32,
    delta: DeltaBody<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DeltaBody<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

/// A one-choice OpenAI chunk, written borrowed.
#[derive(Serialize)]
struct ChunkOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChoiceOut<'a>; 1],
}

#[derive(Serialize)]
struct ChoiceOut<'a> {
    index: u32,
    delta: DeltaOut<'a>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct DeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ArgsOut<'a>; 1]>,
}

#[derive(Serialize)]
struct ArgsOut<'a> {
    index: u32,
    function: ArgsFunction<'a>,
}

#[derive(Serialize)]
struct ArgsFunction<'a> {
    arguments: &'a str,
}
