//! The gateway's side of a provider account's allowance: what a request is
//! estimated to cost at admission, what its answer says it used, and what
//! the provider reports it has left. The rules themselves are the policy
//! core's ([`levee_policy::allowance`]).

use levee_policy::allowance::{Cost, Meter, Reported};
use memchr::memmem::Finder;
use std::sync::LazyLock;

/// A searcher for a fixed byte string, built once: building one costs a few
/// hundred instructions (its prefilter and its shift table), and searching
/// a 600-byte answer for a key costs less than that. Built per search, the
/// ten searches a request makes were 3,100 instructions of its ~45,000.
type Needle = LazyLock<Finder<'static>>;

macro_rules! needles {
    ($($name:ident = $text:literal;)*) => {
        $(static $name: Needle = LazyLock::new(|| Finder::new($text));)*
    };
}

needles! {
    MAX_TOKENS = "max_tokens";
    MAX_COMPLETION_TOKENS = "max_completion_tokens";
    MAX_OUTPUT_TOKENS = "max_output_tokens";
    ANY_TOKENS = "_tokens\"";
    PROMPT_TOKENS = "prompt_tokens";
    INPUT_TOKENS = "input_tokens";
    COMPLETION_TOKENS = "completion_tokens";
    OUTPUT_TOKENS = "output_tokens";
    CACHE = "cache";
    CACHED_TOKENS = "cached_tokens";
    CACHE_READ = "cache_read_input_tokens";
    CACHE_CREATION = "cache_creation_input_tokens";
    DELTA = "\"delta\"";
}

/// A request's tokens before it is sent: a token per 4 bytes of its
/// `len`-byte body (the usual ratio for English text and JSON; the
/// providers reserve by their own tokenizer) and the output it may produce,
/// its `output_cap` (`max_tokens`, `max_completion_tokens` or
/// `max_output_tokens`; none: nothing reserved). The request inspection
/// reads the cap in the pass that finds the model: searching the body for
/// the three keys again cost ~650 instructions a request.
pub fn estimate_with(len: usize, output_cap: Option<u64>) -> Cost {
    Cost {
        input: u32::try_from(len / 4).unwrap_or(u32::MAX),
        output: u32::try_from(output_cap.unwrap_or(0)).unwrap_or(u32::MAX),
    }
}

/// The largest output cap a body gives, found by searching its bytes, for a
/// body no inspection read (a pass-through's).
pub fn output_cap(body: &[u8]) -> Option<u64> {
    [&MAX_TOKENS, &MAX_COMPLETION_TOKENS, &MAX_OUTPUT_TOKENS]
        .into_iter()
        .filter_map(|k| number_after_key(body, k))
        .max()
}

/// The tokens an answer (a JSON body, or one SSE event) reports in its
/// `usage`, both dialects: OpenAI's `prompt_tokens`/`completion_tokens` (or
/// the Responses API's and Anthropic's `input_tokens`/`output_tokens`).
/// `None` when it reports neither.
pub fn usage(body: &[u8]) -> Option<Cost> {
    // Most stream events carry no count: one search tells.
    ANY_TOKENS.find(body)?;
    let input =
        number_after_key(body, &PROMPT_TOKENS).or_else(|| number_after_key(body, &INPUT_TOKENS));
    let output = number_after_key(body, &COMPLETION_TOKENS)
        .or_else(|| number_after_key(body, &OUTPUT_TOKENS));
    if input.is_none() && output.is_none() {
        return None;
    }
    let n = |v: Option<u64>| u32::try_from(v.unwrap_or(0)).unwrap_or(u32::MAX);
    Some(Cost {
        input: n(input),
        output: n(output),
    })
}

/// The input an answer (or a stream event) says was read from or written
/// to the provider's prompt cache: OpenAI's `cached_tokens` (part of its
/// input count), Anthropic's `cache_read_input_tokens` and
/// `cache_creation_input_tokens` (apart from it).
pub fn cached(body: &[u8]) -> levee_config::prices::Cached {
    let mut c = levee_config::prices::Cached::default();
    if CACHE.find(body).is_none() {
        return c;
    }
    let n = |k: &Needle| number_after_key(body, k).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
    if let Some(read) = n(&CACHED_TOKENS) {
        c.read = read;
        c.in_input = true;
    } else {
        c.read = n(&CACHE_READ).unwrap_or(0);
        c.write = n(&CACHE_CREATION).unwrap_or(0);
    }
    c
}

/// A stream's usage so far: each event's counts, the largest kept
/// (Anthropic sends input in `message_start` and the running output in
/// `message_delta`; OpenAI the whole in its last chunk), and the number of
/// delta events, for a stream cut before it said its output.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamUsage {
    reported: Option<Cost>,
    deltas: u32,
    cached: levee_config::prices::Cached,
}

impl StreamUsage {
    /// Reads one relayed chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        let deltas = DELTA.find_iter(chunk).count();
        self.deltas = self
            .deltas
            .saturating_add(u32::try_from(deltas).unwrap_or(u32::MAX));
        if let Some(c) = usage(chunk) {
            let cached = cached(chunk);
            self.cached = levee_config::prices::Cached {
                read: self.cached.read.max(cached.read),
                write: self.cached.write.max(cached.write),
                in_input: self.cached.in_input || cached.in_input,
            };
            let prev = self.reported.unwrap_or_default();
            self.reported = Some(Cost {
                input: prev.input.max(c.input),
                output: prev.output.max(c.output),
            });
        }
    }

    /// What the stream reported (`None`: nothing).
    pub fn get(self) -> Option<Cost> {
        self.reported
    }

    /// The input the stream said came from or went to the prompt cache.
    pub fn cached(self) -> levee_config::prices::Cached {
        self.cached
    }

    /// What a stream cut short is known to have used: what it reported,
    /// its output at least a token per delta event that arrived (OpenAI's
    /// chunks carry about one token each, Anthropic's deltas a few: an
    /// undercount there).
    pub fn arrived(self) -> Cost {
        let r = self.reported.unwrap_or_default();
        Cost {
            input: r.input,
            output: r.output.max(self.deltas),
        }
    }
}

/// The number after `"key":` where `"key"` is a JSON key (its opening quote
/// not escaped: inside a string a quote is always `\"`), first occurrence.
fn number_after_key(body: &[u8], key: &Needle) -> Option<u64> {
    let k = key.needle();
    let mut from = 0;
    while let Some(i) = key.find(&body[from..]).map(|i| i + from) {
        from = i + k.len();
        let quoted = i >= 1
            && body[i - 1] == b'"'
            && (i < 2 || body[i - 2] != b'\\')
            && body.get(i + k.len()) == Some(&b'"');
        if !quoted {
            continue;
        }
        let mut j = i + k.len() + 1;
        while body.get(j).is_some_and(|b| b.is_ascii_whitespace()) {
            j += 1;
        }
        if body.get(j) != Some(&b':') {
            continue;
        }
        j += 1;
        while body.get(j).is_some_and(|b| b.is_ascii_whitespace()) {
            j += 1;
        }
        let start = j;
        while body.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        if j > start && j - start <= 12 {
            // At most 12 digits: no overflow, and no text to re-check.
            return Some(
                body[start..j]
                    .iter()
                    .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
            );
        }
    }
    None
}

/// What the provider's answer head reports of each meter, for the core;
/// `unix_ms` reads the wall clock, called only for a reset time.
pub fn reported(
    headers: &http::HeaderMap,
    unix_ms: impl FnMut() -> u64,
) -> impl Iterator<Item = (Meter, Reported)> {
    let r = levee_wire::ratelimit::read_with(headers, unix_ms);
    let meters = r.map(|r| {
        [
            (Meter::Requests, r.requests),
            (Meter::Tokens, r.tokens),
            (Meter::InputTokens, r.input_tokens),
            (Meter::OutputTokens, r.output_tokens),
        ]
    });
    meters.into_iter().flatten().filter_map(|(m, v)| {
        let v = v?;
        Some((
            m,
            Reported {
                limit: v.limit,
                remaining: v.remaining,
            },
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_holds_the_input_and_the_output_asked_for() {
        let body = br#"{"model":"m","max_tokens":1024,"messages":[{"role":"user","content":"hello there"}]}"#;
        let estimate = |b: &[u8]| estimate_with(b.len(), output_cap(b));
        let c = estimate(body);
        assert_eq!(c.output, 1024);
        assert_eq!(c.input, (body.len() / 4) as u32);
        // A key inside a string is not a key.
        let tricky = br#"{"messages":[{"content":"say \"max_tokens\": 99"}]}"#;
        assert_eq!(estimate(tricky).output, 0);
    }

    #[test]
    fn cached_input_is_read_in_both_dialects() {
        let openai = br#"{"usage":{"prompt_tokens":1000,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":800,"audio_tokens":0}}}"#;
        let c = cached(openai);
        assert_eq!((c.read, c.write, c.in_input), (800, 0, true));
        let anthropic = br#"{"usage":{"input_tokens":200,"cache_creation_input_tokens":100,"cache_read_input_tokens":800,"output_tokens":5}}"#;
        let c = cached(anthropic);
        assert_eq!((c.read, c.write, c.in_input), (800, 100, false));
        // The input count is Anthropic's own input_tokens, not a cache key's.
        assert_eq!(usage(anthropic).map(|u| u.input), Some(200));
        assert_eq!(
            cached(br#"{"usage":{"input_tokens":3}}"#),
            Default::default()
        );
        let mut s = StreamUsage::default();
        s.push(b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":2,\"cache_read_input_tokens\":50,\"output_tokens\":1}}}\n\n");
        assert_eq!(s.cached().read, 50);
    }

    #[test]
    fn usage_is_read_in_both_dialects_and_from_stream_events() {
        let openai =
            br#"{"id":"x","usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}"#;
        assert_eq!(
            usage(openai),
            Some(Cost {
                input: 12,
                output: 30
            })
        );
        let anthropic = br#"{"type":"message","usage":{"input_tokens":7,"output_tokens":9}}"#;
        assert_eq!(
            usage(anthropic),
            Some(Cost {
                input: 7,
                output: 9
            })
        );
        let mut s = StreamUsage::default();
        s.push(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n");
        s.push(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n");
        s.push(b"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n");
        assert_eq!(
            s.get(),
            Some(Cost {
                input: 25,
                output: 15
            })
        );
        assert_eq!(usage(b"{\"text\":\"no usage here\"}"), None);
    }
}
