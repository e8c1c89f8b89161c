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
/// ten searches a request once made were 3,100 instructions of its ~45,000.
type Needle = LazyLock<Finder<'static>>;

/// How common each byte is in JSON, for a searcher's prefilter, which
/// looks first for the needle's two rarest bytes. memchr's own ranking is
/// of prose and code, where `"` and `_` are rare: searching an answer for
/// `_tokens"` by them stopped at each of its ~80 quotes.
struct InJson;

impl memchr::arch::all::packedpair::HeuristicFrequencyRank for InJson {
    fn rank(&self, byte: u8) -> u8 {
        match byte {
            b'"' | b':' | b',' | b'{' | b'}' | b'[' | b']' | b' ' | b'_' | b'\n' => 255,
            b'0'..=b'9' => 250,
            b'e' | b't' | b'a' | b'o' | b'i' | b'n' | b's' | b'r' | b'l' | b'c' => 200,
            b'a'..=b'z' => 100,
            _ => 50,
        }
    }
}

macro_rules! needles {
    ($($name:ident = $text:literal;)*) => {
        $(static $name: Needle = LazyLock::new(|| {
            memchr::memmem::FinderBuilder::new().build_forward_with_ranker(InJson, $text)
        });)*
    };
}

needles! {
    MAX_TOKENS = "max_tokens";
    MAX_COMPLETION_TOKENS = "max_completion_tokens";
    MAX_OUTPUT_TOKENS = "max_output_tokens";
    TOKENS_KEY = "_tokens\"";
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
        .filter_map(|k| number_after_key(body, 0, k))
        .max()
}

/// What an answer (a JSON body, or one SSE event) reports of its tokens:
/// the counts in both dialects, and the prompt cache's. Each count is its
/// key's first occurrence as a JSON key (`"key":` with its opening quote
/// not escaped: inside a string a quote is always `\"`) followed by at most
/// 12 digits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    cost: Option<Cost>,
    cached: levee_config::prices::Cached,
}

impl Counts {
    /// Reads `body`. Every key read ends in `_tokens"`: its keys are
    /// searched for from the first such ending on, less the longest key's
    /// stem (an answer's counts lie in its `usage`, at the end of OpenAI's
    /// ~600-byte chat answer). Searched for from the start, each key cost
    /// ~330 instructions; one pass over every `_tokens"` ending (ten in that
    /// answer) cost more still, ~2,000: a search resumed ten times.
    pub fn read(body: &[u8]) -> Counts {
        // The longest key read, less the ending.
        const STEM: usize = "cache_creation_input".len();
        let Some(first) = TOKENS_KEY.find(body) else {
            return Counts::default();
        };
        let from = first.saturating_sub(STEM + 1);
        let n = |key: &Needle| number_after_key(body, from, key);
        let input = n(&PROMPT_TOKENS).or_else(|| n(&INPUT_TOKENS));
        let output = n(&COMPLETION_TOKENS).or_else(|| n(&OUTPUT_TOKENS));
        let count = |v: Option<u64>| u32::try_from(v.unwrap_or(0)).unwrap_or(u32::MAX);
        let cost = (input.is_some() || output.is_some()).then(|| Cost {
            input: count(input),
            output: count(output),
        });
        let mut cached = levee_config::prices::Cached::default();
        if CACHE.find(&body[from..]).is_some() {
            if let Some(read) = n(&CACHED_TOKENS) {
                cached.read = count(Some(read));
                cached.in_input = true;
            } else {
                cached.read = count(n(&CACHE_READ));
                cached.write = count(n(&CACHE_CREATION));
            }
        }
        Counts { cost, cached }
    }

    /// The tokens reported: OpenAI's `prompt_tokens`/`completion_tokens`
    /// (or the Responses API's and Anthropic's `input_tokens`/
    /// `output_tokens`). `None` when it reports neither.
    pub fn cost(&self) -> Option<Cost> {
        self.cost
    }

    /// The input said to be read from or written to the provider's prompt
    /// cache: OpenAI's `cached_tokens` (part of its input count),
    /// Anthropic's `cache_read_input_tokens` and
    /// `cache_creation_input_tokens` (apart from it).
    pub fn cached(&self) -> levee_config::prices::Cached {
        self.cached
    }
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
        let counts = Counts::read(chunk);
        if let Some(c) = counts.cost() {
            let cached = counts.cached();
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
/// not escaped: inside a string a quote is always `\"`), its first
/// occurrence at or after `from`.
fn number_after_key(body: &[u8], from: usize, key: &Needle) -> Option<u64> {
    let k = key.needle();
    let mut from = from;
    while let Some(i) = key.find(&body[from..]).map(|i| i + from) {
        from = i + k.len();
        let quoted = i >= 1
            && body[i - 1] == b'"'
            && (i < 2 || body[i - 2] != b'\\')
            && body.get(i + k.len()) == Some(&b'"');
        if !quoted {
            continue;
        }
        if let Some(n) = number_at(body, i + k.len() + 1) {
            return Some(n);
        }
    }
    None
}

/// The number of at most 12 digits after the `:` that follows `at` (a key's
/// closing quote's next byte), spaces allowed around the colon.
fn number_at(body: &[u8], at: usize) -> Option<u64> {
    let mut j = at;
    while body.get(j).is_some_and(|b| b.is_ascii_whitespace()) {
        j += 1;
    }
    if body.get(j) != Some(&b':') {
        return None;
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
    use proptest::prelude::*;

    fn usage(body: &[u8]) -> Option<Cost> {
        Counts::read(body).cost()
    }

    fn cached(body: &[u8]) -> levee_config::prices::Cached {
        Counts::read(body).cached()
    }

    /// The plain reading [`Counts::read`] must agree with: each key
    /// searched for from the start, its first occurrence as a JSON key.
    fn key(body: &[u8], key: &str) -> Option<u64> {
        let k = key.as_bytes();
        let mut from = 0;
        while let Some(i) = memchr::memmem::find(&body[from..], k).map(|i| i + from) {
            from = i + k.len();
            let quoted = i >= 1
                && body[i - 1] == b'"'
                && (i < 2 || body[i - 2] != b'\\')
                && body.get(i + k.len()) == Some(&b'"');
            if quoted {
                if let Some(n) = number_at(body, i + k.len() + 1) {
                    return Some(n);
                }
            }
        }
        None
    }

    fn plain(body: &[u8]) -> (Option<Cost>, levee_config::prices::Cached) {
        let n = |v: Option<u64>| u32::try_from(v.unwrap_or(0)).unwrap_or(u32::MAX);
        let input = key(body, "prompt_tokens").or_else(|| key(body, "input_tokens"));
        let output = key(body, "completion_tokens").or_else(|| key(body, "output_tokens"));
        let cost = (input.is_some() || output.is_some()).then(|| Cost {
            input: n(input),
            output: n(output),
        });
        let mut cached = levee_config::prices::Cached::default();
        if let Some(read) = key(body, "cached_tokens") {
            cached.read = n(Some(read));
            cached.in_input = true;
        } else {
            cached.read = n(key(body, "cache_read_input_tokens"));
            cached.write = n(key(body, "cache_creation_input_tokens"));
        }
        (cost, cached)
    }

    /// Bodies made of the pieces a usage report and its near misses are
    /// made of: the keys read, keys that end alike, escaped quotes, spaces,
    /// numbers too long to be read.
    fn bodies() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop::sample::select(vec![
            "\"prompt_tokens\"",
            "\"input_tokens\"",
            "\"completion_tokens\"",
            "\"output_tokens\"",
            "\"cached_tokens\"",
            "\"cache_read_input_tokens\"",
            "\"cache_creation_input_tokens\"",
            "\"total_tokens\"",
            "\"reasoning_tokens\"",
            "\"prompt_tokens_details\"",
            "\"a_very_long_key_that_ends_in_cached_tokens\"",
            "prompt_tokens\"",
            "_tokens\"",
            "\\\"",
            "\\",
            "\"",
            ":",
            " : ",
            " ",
            "\n",
            ",",
            "{",
            "}",
            "0",
            "7",
            "42",
            "123456789012",
            "1234567890123",
            "-1",
            "x",
        ]);
        prop::collection::vec(piece, 0..24).prop_map(|p| p.concat().into_bytes())
    }

    #[test]
    fn the_counts_are_what_a_search_for_each_key_from_the_start_reads() {
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(Config::with_cases(4000), rng);
        let checked = runner.run(&bodies(), |body| {
            let c = Counts::read(&body);
            prop_assert_eq!(
                (c.cost(), c.cached()),
                plain(&body),
                "{}",
                String::from_utf8_lossy(&body)
            );
            Ok(())
        });
        if let Err(e) = checked {
            panic!("{e}");
        }
        // A real answer, each count read.
        let openai = br#"{"usage":{"prompt_tokens":18,"completion_tokens":8,"total_tokens":26,"prompt_tokens_details":{"cached_tokens":3,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}"#;
        let c = Counts::read(openai);
        assert_eq!((c.cost(), c.cached()), plain(openai));
        assert_eq!(
            (c.cost(), c.cached().read),
            (
                Some(Cost {
                    input: 18,
                    output: 8
                }),
                3
            )
        );
    }

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
