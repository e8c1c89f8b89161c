//! Answer bodies in the providers' wire formats: OpenAI chat completions,
//! embeddings, Responses and models; Anthropic messages and models; both as
//! JSON and as SSE event sequences. Error bodies come from `levee_wire`.
//!
//! Bodies are written straight into a byte buffer from fixed fragments; the
//! only per-request inputs are the model name, an id, a timestamp and token
//! counts.

use std::fmt::Write as _;

use bytes::Bytes;
use http::StatusCode;
use levee_wire::models::Page;
use levee_wire::Dialect;

/// The assistant's answer, cut into stream pieces (one token each).
const PIECES: [&str; 8] = [
    "This",
    " is",
    " a",
    " mock",
    " response",
    " from",
    " Levee",
    ".",
];

/// What one successful answer is made of.
pub(crate) struct Reply<'a> {
    pub model: &'a str,
    pub id: u64,
    pub created: u64,
    pub prompt_tokens: u64,
    /// Number of `PIECES` to answer with (1..=8); fewer means truncated.
    pub pieces: usize,
    /// The tool the request forced: answered with one call to it, arguments `{}`.
    pub tool: Option<&'a str>,
    /// A Responses answer the provider keeps (`store`, default `true`).
    pub stored: bool,
}

impl Reply<'_> {
    /// Honours a `max_tokens`-style limit by answering fewer pieces.
    pub(crate) fn pieces_for(max_tokens: Option<u64>) -> usize {
        match max_tokens {
            Some(n) => usize::try_from(n)
                .unwrap_or(usize::MAX)
                .clamp(1, PIECES.len()),
            None => PIECES.len(),
        }
    }

    fn truncated(&self) -> bool {
        self.pieces < PIECES.len()
    }

    fn completion_tokens(&self) -> u64 {
        self.pieces as u64
    }

    fn text(&self) -> String {
        PIECES[..self.pieces].concat()
    }
}

fn json_str(out: &mut String, s: &str) {
    // Writing into a String cannot fail; a str always serializes.
    if let Ok(quoted) = serde_json::to_string(s) {
        out.push_str(&quoted);
    }
}

// ---------------------------------------------------------------------------
// OpenAI chat completions
// ---------------------------------------------------------------------------

fn openai_usage(out: &mut String, r: &Reply<'_>) {
    let _ = write!(
        out,
        r#"{{"prompt_tokens":{p},"completion_tokens":{c},"total_tokens":{t},"prompt_tokens_details":{{"cached_tokens":0,"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}}"#,
        p = r.prompt_tokens,
        c = r.completion_tokens(),
        t = r.prompt_tokens + r.completion_tokens()
    );
}

/// Completion tokens a forced tool call is counted as.
pub(crate) const TOOL_CALL_TOKENS: u64 = 12;

fn tool_call_id(out: &mut String, prefix: &str, r: &Reply<'_>) {
    let _ = write!(out, "\"{prefix}levee{:012}\"", r.id);
}

/// A chat completion up to its assistant message's `"content":`.
fn chat_completion_head(r: &Reply<'_>, capacity: usize) -> String {
    let mut out = String::with_capacity(capacity);
    let _ = write!(
        out,
        r#"{{"id":"chatcmpl-levee{:012}","object":"chat.completion","created":{},"model":"#,
        r.id, r.created
    );
    json_str(&mut out, r.model);
    out.push_str(r#","choices":[{"index":0,"message":{"role":"assistant","content":"#);
    out
}

pub(crate) fn chat_completion(r: &Reply<'_>) -> Bytes {
    if let Some(tool) = r.tool {
        return chat_completion_tool(r, tool);
    }
    let mut out = chat_completion_head(r, 768);
    json_str(&mut out, &r.text());
    out.push_str(r#","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"#);
    out.push_str(if r.truncated() {
        "\"length\""
    } else {
        "\"stop\""
    });
    out.push_str(r#"}],"usage":"#);
    openai_usage(&mut out, r);
    out.push_str(r#","service_tier":"default","system_fingerprint":"fp_levee_mock"}"#);
    Bytes::from(out)
}

fn openai_tool_usage(out: &mut String, r: &Reply<'_>) {
    let _ = write!(
        out,
        r#"{{"prompt_tokens":{p},"completion_tokens":{c},"total_tokens":{t}}}"#,
        p = r.prompt_tokens,
        c = TOOL_CALL_TOKENS,
        t = r.prompt_tokens + TOOL_CALL_TOKENS
    );
}

/// A forced function answered with one call. OpenAI reports a call forced by
/// name with `finish_reason: "stop"`, not `"tool_calls"`.
fn chat_completion_tool(r: &Reply<'_>, tool: &str) -> Bytes {
    let mut out = chat_completion_head(r, 512);
    out.push_str(r#"null,"refusal":null,"annotations":[],"tool_calls":[{"id":"#);
    tool_call_id(&mut out, "call_", r);
    out.push_str(r#","type":"function","function":{"name":"#);
    json_str(&mut out, tool);
    out.push_str(r#","arguments":"{}"}}]},"logprobs":null,"finish_reason":"stop"}],"usage":"#);
    openai_tool_usage(&mut out, r);
    out.push_str(r#","service_tier":"default","system_fingerprint":"fp_levee_mock"}"#);
    Bytes::from(out)
}

/// `data: {chunk}\n\n` events ending with `data: [DONE]\n\n`. With
/// `include_usage`, every chunk carries `"usage":null` and one extra chunk
/// with empty `choices` carries the usage, as OpenAI does.
pub(crate) fn chat_completion_stream(r: &Reply<'_>, include_usage: bool) -> Vec<Bytes> {
    let mut head = String::with_capacity(192);
    let _ = write!(
        head,
        r#"data: {{"id":"chatcmpl-levee{:012}","object":"chat.completion.chunk","created":{},"model":"#,
        r.id, r.created
    );
    json_str(&mut head, r.model);
    head.push_str(r#","service_tier":"default","system_fingerprint":"fp_levee_mock","choices":["#);
    let tail = if include_usage {
        "],\"usage\":null}\n\n"
    } else {
        "]}\n\n"
    };
    let chunk = |choice: &str| Bytes::from(format!("{head}{choice}{tail}"));

    if let Some(tool) = r.tool {
        let mut start = String::from(r#"{"index":0,"delta":{"tool_calls":[{"index":0,"id":"#);
        tool_call_id(&mut start, "call_", r);
        start.push_str(r#","type":"function","function":{"name":"#);
        json_str(&mut start, tool);
        start.push_str(r#","arguments":""}}]},"logprobs":null,"finish_reason":null}"#);
        let mut chunks = vec![
            chunk(
                r#"{"index":0,"delta":{"role":"assistant","content":null,"refusal":null},"logprobs":null,"finish_reason":null}"#,
            ),
            chunk(&start),
            chunk(
                r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"logprobs":null,"finish_reason":null}"#,
            ),
            chunk(r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#),
        ];
        stream_end(&mut chunks, &head, include_usage, openai_tool_usage, r);
        return chunks;
    }

    let mut chunks = Vec::with_capacity(r.pieces + 4);
    chunks.push(chunk(
        r#"{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}"#,
    ));
    for piece in &PIECES[..r.pieces] {
        let mut choice = String::from(r#"{"index":0,"delta":{"content":"#);
        json_str(&mut choice, piece);
        choice.push_str(r#"},"logprobs":null,"finish_reason":null}"#);
        chunks.push(chunk(&choice));
    }
    chunks.push(chunk(if r.truncated() {
        r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}"#
    } else {
        r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#
    }));
    stream_end(&mut chunks, &head, include_usage, openai_usage, r);
    chunks
}

/// With `include_usage`, one chunk with empty `choices` carrying the usage
/// (`usage` writes it); then `data: [DONE]`.
fn stream_end(
    chunks: &mut Vec<Bytes>,
    head: &str,
    include_usage: bool,
    usage: fn(&mut String, &Reply<'_>),
    r: &Reply<'_>,
) {
    if include_usage {
        let mut last = format!("{head}],\"usage\":");
        usage(&mut last, r);
        last.push_str("}\n\n");
        chunks.push(Bytes::from(last));
    }
    chunks.push(Bytes::from_static(b"data: [DONE]\n\n"));
}

// ---------------------------------------------------------------------------
// Anthropic messages
// ---------------------------------------------------------------------------

fn anthropic_stop_reason(r: &Reply<'_>) -> &'static str {
    if r.truncated() {
        "\"max_tokens\""
    } else {
        "\"end_turn\""
    }
}

fn anthropic_message_head(out: &mut String, r: &Reply<'_>) {
    let _ = write!(
        out,
        r#"{{"id":"msg_levee{:012}","type":"message","role":"assistant","model":"#,
        r.id
    );
    json_str(out, r.model);
}

pub(crate) fn anthropic_message(r: &Reply<'_>) -> Bytes {
    let mut out = String::with_capacity(512);
    anthropic_message_head(&mut out, r);
    if let Some(tool) = r.tool {
        out.push_str(r#","content":[{"type":"tool_use","id":"#);
        tool_call_id(&mut out, "toolu_", r);
        out.push_str(r#","name":"#);
        json_str(&mut out, tool);
        let _ = write!(
            out,
            r#","input":{{}}}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{TOOL_CALL_TOKENS}}}}}"#,
            r.prompt_tokens
        );
        return Bytes::from(out);
    }
    out.push_str(r#","content":[{"type":"text","text":"#);
    json_str(&mut out, &r.text());
    out.push_str(r#"}],"stop_reason":"#);
    out.push_str(anthropic_stop_reason(r));
    let _ = write!(
        out,
        r#","stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":{}}}}}"#,
        r.prompt_tokens,
        r.completion_tokens()
    );
    Bytes::from(out)
}

fn event(name: &str, data: &str) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// message_start, content_block_start, ping, content_block_delta…,
/// content_block_stop, message_delta (with usage), message_stop.
pub(crate) fn anthropic_message_stream(r: &Reply<'_>) -> Vec<Bytes> {
    let mut chunks = Vec::with_capacity(r.pieces + 6);
    let mut start = String::from(r#"{"type":"message_start","message":"#);
    anthropic_message_head(&mut start, r);
    let _ = write!(
        start,
        r#","content":[],"stop_reason":null,"stop_sequence":null,"usage":{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}}}}"#,
        r.prompt_tokens
    );
    chunks.push(event("message_start", &start));
    if let Some(tool) = r.tool {
        let mut block = String::from(
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"#,
        );
        tool_call_id(&mut block, "toolu_", r);
        block.push_str(r#","name":"#);
        json_str(&mut block, tool);
        block.push_str(r#","input":{}}}"#);
        chunks.push(event("content_block_start", &block));
        block_deltas(
            &mut chunks,
            r#""input_json_delta","partial_json""#,
            &["", "{}"],
        );
        message_end(&mut chunks, "\"tool_use\"", TOOL_CALL_TOKENS);
        return chunks;
    }
    chunks.push(event(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    ));
    chunks.push(event("ping", r#"{"type":"ping"}"#));
    block_deltas(&mut chunks, r#""text_delta","text""#, &PIECES[..r.pieces]);
    message_end(&mut chunks, anthropic_stop_reason(r), r.completion_tokens());
    chunks
}

/// One `content_block_delta` per piece; `kind` is the delta's type and the
/// name of its field (`"text_delta","text"`).
fn block_deltas(chunks: &mut Vec<Bytes>, kind: &str, pieces: &[&str]) {
    for piece in pieces {
        let mut delta =
            format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":{kind}:"#);
        json_str(&mut delta, piece);
        delta.push_str("}}");
        chunks.push(event("content_block_delta", &delta));
    }
}

/// content_block_stop, message_delta (the stop reason, as JSON, and the
/// output tokens) and message_stop.
fn message_end(chunks: &mut Vec<Bytes>, stop_reason: &str, output_tokens: u64) {
    chunks.push(event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    ));
    chunks.push(event(
        "message_delta",
        &format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":{stop_reason},"stop_sequence":null}},"usage":{{"output_tokens":{output_tokens}}}}}"#
        ),
    ));
    chunks.push(event("message_stop", r#"{"type":"message_stop"}"#));
}

// ---------------------------------------------------------------------------
// OpenAI embeddings
// ---------------------------------------------------------------------------

/// What an embeddings request asked for.
pub(crate) struct EmbeddingsAsk {
    pub inputs: usize,
    pub dimensions: usize,
    pub base64: bool,
}

pub(crate) fn embeddings(model: &str, prompt_tokens: u64, ask: &EmbeddingsAsk) -> Bytes {
    let mut out = String::with_capacity(128 + ask.inputs * ask.dimensions * 12);
    out.push_str(r#"{"object":"list","data":["#);
    for index in 0..ask.inputs {
        if index > 0 {
            out.push(',');
        }
        let values = (0..ask.dimensions).map(|i| {
            let k = (i * 7 + index * 3) % 17;
            (k as f32 - 8.0) / 17.0
        });
        let _ = write!(
            out,
            r#"{{"object":"embedding","index":{index},"embedding":"#
        );
        if ask.base64 {
            let bytes: Vec<u8> = values.flat_map(f32::to_le_bytes).collect();
            out.push('"');
            base64_into(&mut out, &bytes);
            out.push('"');
        } else {
            out.push('[');
            for (i, v) in values.enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{v}");
            }
            out.push(']');
        }
        out.push('}');
    }
    out.push_str(r#"],"model":"#);
    json_str(&mut out, model);
    let _ = write!(
        out,
        r#","usage":{{"prompt_tokens":{prompt_tokens},"total_tokens":{prompt_tokens}}}}}"#
    );
    Bytes::from(out)
}

fn base64_into(out: &mut String, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= group.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
}

// ---------------------------------------------------------------------------
// OpenAI Responses API (minimal)
// ---------------------------------------------------------------------------

fn response_object(out: &mut String, r: &Reply<'_>, completed: bool) {
    let _ = write!(
        out,
        r#"{{"id":"resp_levee{:012}","object":"response","created_at":{},"status":"{}","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"#,
        r.id,
        r.created,
        if completed {
            "completed"
        } else {
            "in_progress"
        }
    );
    json_str(out, r.model);
    out.push_str(r#","output":["#);
    if completed {
        response_message(out, r, true);
    }
    out.push_str(
        r#"],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":"#,
    );
    out.push_str(if r.stored { "true" } else { "false" });
    out.push_str(
        r#","temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":"#,
    );
    if completed {
        let _ = write!(
            out,
            r#"{{"input_tokens":{p},"input_tokens_details":{{"cached_tokens":0}},"output_tokens":{c},"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{t}}}"#,
            p = r.prompt_tokens,
            c = r.completion_tokens(),
            t = r.prompt_tokens + r.completion_tokens()
        );
    } else {
        out.push_str("null");
    }
    out.push_str(r#","user":null,"metadata":{}}"#);
}

fn response_message(out: &mut String, r: &Reply<'_>, completed: bool) {
    let _ = write!(
        out,
        r#"{{"type":"message","id":"msg_levee{:012}","status":"{}","role":"assistant","content":["#,
        r.id,
        if completed {
            "completed"
        } else {
            "in_progress"
        }
    );
    if completed {
        out.push_str(r#"{"type":"output_text","text":"#);
        json_str(out, &r.text());
        out.push_str(r#","annotations":[]}"#);
    }
    out.push_str("]}");
}

/// The id of the Responses answer numbered `id`.
pub(crate) fn response_id(id: u64) -> String {
    format!("resp_levee{id:012}")
}

pub(crate) fn response(r: &Reply<'_>) -> Bytes {
    let mut out = String::with_capacity(1024);
    response_object(&mut out, r, true);
    Bytes::from(out)
}

/// The Responses API event sequence, from `response.created` to
/// `response.completed`, each with a `sequence_number`.
pub(crate) fn response_stream(r: &Reply<'_>) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut seq = 0u64;
    let mut push = |name: &str, body: &str| {
        let data = format!(r#"{{"type":"{name}","sequence_number":{seq},{body}}}"#);
        seq += 1;
        chunks.push(event(name, &data));
    };
    let item_id = format!("msg_levee{:012}", r.id);
    let mut created = String::from(r#""response":"#);
    response_object(&mut created, r, false);
    push("response.created", &created);
    push("response.in_progress", &created);
    let mut item = String::from(r#""output_index":0,"item":"#);
    response_message(&mut item, r, false);
    push("response.output_item.added", &item);
    let part = format!(r#""item_id":"{item_id}","output_index":0,"content_index":0"#);
    push(
        "response.content_part.added",
        &format!(r#"{part},"part":{{"type":"output_text","text":"","annotations":[]}}"#),
    );
    for piece in &PIECES[..r.pieces] {
        let mut delta = format!(r#"{part},"delta":"#);
        json_str(&mut delta, piece);
        delta.push_str(r#","logprobs":[]"#);
        push("response.output_text.delta", &delta);
    }
    let mut text = String::new();
    json_str(&mut text, &r.text());
    push(
        "response.output_text.done",
        &format!(r#"{part},"text":{text},"logprobs":[]"#),
    );
    push(
        "response.content_part.done",
        &format!(r#"{part},"part":{{"type":"output_text","text":{text},"annotations":[]}}"#),
    );
    let mut item = String::from(r#""output_index":0,"item":"#);
    response_message(&mut item, r, true);
    push("response.output_item.done", &item);
    let mut done = String::from(r#""response":"#);
    response_object(&mut done, r, true);
    push("response.completed", &done);
    chunks
}

// ---------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------

const OPENAI_MODELS: [&str; 5] = [
    "gpt-4.1",
    "gpt-4o",
    "gpt-4o-mini",
    "text-embedding-3-small",
    "mock-model",
];
const ANTHROPIC_MODELS: [&str; 3] = ["claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"];

fn model_object(out: &mut String, dialect: Dialect, id: &str) {
    match dialect {
        Dialect::OpenAi => {
            out.push_str(r#"{"id":"#);
            json_str(out, id);
            out.push_str(r#","object":"model","created":1700000000,"owned_by":"levee-mock"}"#);
        }
        Dialect::Anthropic => {
            out.push_str(r#"{"type":"model","id":"#);
            json_str(out, id);
            out.push_str(r#","display_name":"#);
            json_str(out, id);
            out.push_str(r#","created_at":"2025-01-01T00:00:00Z","lifecycle":"active"}"#);
        }
    }
}

/// The models a provider of `dialect` lists: `served` when the fault set
/// names them, else the built-in catalogue.
pub(crate) fn catalogue(dialect: Dialect, served: Option<&[String]>) -> Vec<&str> {
    match (served, dialect) {
        (Some(s), _) => s.iter().map(String::as_str).collect(),
        (None, Dialect::OpenAi) => OPENAI_MODELS.to_vec(),
        (None, Dialect::Anthropic) => ANTHROPIC_MODELS.to_vec(),
    }
}

/// The model list `all`: OpenAI's whole, Anthropic's one page of `page`
/// (20 by default, as Anthropic answers).
pub(crate) fn models(dialect: Dialect, all: &[&str], page: &Page) -> Bytes {
    let ids = match dialect {
        Dialect::OpenAi => all,
        Dialect::Anthropic => {
            let limit = page.limit.unwrap_or(20);
            let at = |id: &Option<String>| {
                id.as_deref()
                    .and_then(|id| all.iter().position(|m| *m == id))
            };
            match (at(&page.after_id), at(&page.before_id)) {
                (Some(a), _) => &all[a + 1..(a + 1 + limit).min(all.len())],
                (None, Some(b)) => &all[b.saturating_sub(limit)..b],
                (None, None) if page.after_id.is_some() || page.before_id.is_some() => &[],
                (None, None) => &all[..limit.min(all.len())],
            }
        }
    };
    let mut out = String::from(if dialect == Dialect::OpenAi {
        r#"{"object":"list","data":["#
    } else {
        r#"{"data":["#
    });
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        model_object(&mut out, dialect, id);
    }
    out.push(']');
    if dialect == Dialect::Anthropic {
        let (first, last) = match (ids.first(), ids.last()) {
            (Some(f), Some(l)) => (format!("\"{f}\""), format!("\"{l}\"")),
            _ => ("null".to_string(), "null".to_string()),
        };
        let more = match (ids.first(), ids.last()) {
            _ if page.before_id.is_some() => ids.first().is_some_and(|f| all[0] != *f),
            (_, Some(l)) => all.last() != Some(l),
            _ => false,
        };
        let _ = write!(
            out,
            r#","has_more":{more},"first_id":{first},"last_id":{last}"#
        );
    }
    out.push('}');
    Bytes::from(out)
}

/// One model of `all`, or `None` when the provider has no model of that id.
pub(crate) fn model(dialect: Dialect, all: &[&str], id: &str) -> Option<Bytes> {
    if !all.contains(&id) {
        return None;
    }
    let mut out = String::new();
    model_object(&mut out, dialect, id);
    Some(Bytes::from(out))
}

/// The 404 for a model the provider does not have, as each words it.
pub(crate) fn no_such_model(dialect: Dialect, id: &str) -> String {
    match dialect {
        Dialect::OpenAi => {
            format!("The model `{id}` does not exist or you do not have access to it.")
        }
        Dialect::Anthropic => format!("model: {id}"),
    }
}

/// Anthropic's token count for a Messages request.
pub(crate) fn token_count(input_tokens: u64) -> Bytes {
    Bytes::from(format!(r#"{{"input_tokens":{input_tokens}}}"#))
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// The message a fault-injected error carries.
pub(crate) fn injected_message(dialect: Dialect, status: StatusCode) -> String {
    let what = match status.as_u16() {
        429 => "Rate limit reached",
        503 | 529 if dialect == Dialect::Anthropic => "Overloaded",
        503 | 529 => "The server is overloaded or not ready yet",
        500 => "The server had an error while processing your request",
        _ => status.canonical_reason().unwrap_or("Error"),
    };
    format!("{what} (injected by levee mock: HTTP {})", status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(pieces: usize) -> Reply<'static> {
        Reply {
            model: "m\"x",
            id: 7,
            created: 1,
            prompt_tokens: 5,
            pieces,
            tool: None,
            stored: false,
        }
    }

    fn json(b: &[u8]) -> serde_json::Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn all_json_bodies_parse() {
        let r = reply(8);
        let c = json(&chat_completion(&r));
        assert_eq!(c["model"], "m\"x");
        assert_eq!(c["usage"]["total_tokens"], 13);
        assert_eq!(
            c["choices"][0]["message"]["content"],
            "This is a mock response from Levee."
        );
        let m = json(&anthropic_message(&reply(3)));
        assert_eq!(m["stop_reason"], "max_tokens");
        assert_eq!(m["content"][0]["text"], "This is a");
        let e = json(&embeddings(
            "e",
            3,
            &EmbeddingsAsk {
                inputs: 2,
                dimensions: 4,
                base64: false,
            },
        ));
        assert_eq!(e["data"][1]["embedding"].as_array().unwrap().len(), 4);
        let resp = json(&response(&r));
        assert_eq!(resp["output"][0]["content"][0]["type"], "output_text");
        json(&models(Dialect::OpenAi, &OPENAI_MODELS, &Page::default()));
        json(&models(
            Dialect::Anthropic,
            &ANTHROPIC_MODELS,
            &Page::default(),
        ));
        let m = json(
            &model(Dialect::Anthropic, &ANTHROPIC_MODELS, "claude-haiku-4-5").unwrap_or_default(),
        );
        assert_eq!(m["id"], "claude-haiku-4-5");
        assert!(model(Dialect::Anthropic, &ANTHROPIC_MODELS, "x").is_none());
    }

    #[test]
    fn streams_are_sse() {
        let r = reply(8);
        let chunks = chat_completion_stream(&r, true);
        assert_eq!(chunks.last().unwrap().as_ref(), b"data: [DONE]\n\n");
        for c in &chunks[..chunks.len() - 1] {
            let s = std::str::from_utf8(c).unwrap();
            let body = s
                .strip_prefix("data: ")
                .unwrap()
                .strip_suffix("\n\n")
                .unwrap();
            json(body.as_bytes());
        }
        let usage = &chunks[chunks.len() - 2];
        assert!(std::str::from_utf8(usage)
            .unwrap()
            .contains("\"choices\":[],\"usage\":{"));
        for c in anthropic_message_stream(&r)
            .iter()
            .chain(&response_stream(&r))
        {
            let s = std::str::from_utf8(c).unwrap();
            let (ev, data) = s.split_once('\n').unwrap();
            assert!(ev.starts_with("event: "));
            let v = json(data.strip_prefix("data: ").unwrap().trim_end().as_bytes());
            assert_eq!(v["type"], ev.trim_start_matches("event: "));
        }
    }

    #[test]
    fn base64_matches_known_vectors() {
        for (input, want) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
        ] {
            let mut out = String::new();
            base64_into(&mut out, input);
            assert_eq!(out, want);
        }
    }
}
