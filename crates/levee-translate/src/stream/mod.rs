//! Streaming translation, event by event: OpenAI `chat.completion.chunk`s ⇄
//! Anthropic `message_start` … `message_stop`, tool-call argument deltas and
//! the final usage included.
//!
//! A translator is a small state machine fed upstream bytes as they arrive,
//! split anywhere: it parses SSE lines itself, holds only an unfinished
//! line, and writes each translated event as soon as the upstream event that
//! causes it is complete. Nothing is buffered beyond one event, so a stream
//! is never held back to be translated whole.

mod borrowed;
mod sse;
mod to_anthropic;
mod to_openai;

use crate::Dialect;
use bytes::Bytes;
use serde::Serialize;
use sse::SseParser;
use to_anthropic::ToAnthropic;
use to_openai::ToOpenAi;

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
