//! `levee-translate`: translation between the two wire dialects Levee
//! speaks, OpenAI Chat Completions and Anthropic Messages, so that a route
//! may fall back from a provider of one dialect to a provider of the other.
//! Requests, responses, SSE streams (event by event) and error bodies are
//! translated both ways through typed models of each dialect ([`openai`],
//! [`anthropic`]) and `TryFrom` conversions between them. Messages requests
//! are also written for Amazon Bedrock's Converse API, and its answers
//! read back as Messages answers ([`converse`]).
//!
//! It is honest about limits: where a request uses something the other
//! dialect cannot carry (several choices, logprobs, audio, documents,
//! thinking, server tools…), translation fails with an [`Untranslatable`]
//! value naming the reason, and the gateway skips that target for the
//! request instead of sending a request that means something else. It does
//! no I/O and reads no clock (timestamps come in as arguments).
//!
//! Not a goal: the OpenAI Responses and Embeddings APIs, and Anthropic's
//! beta features, have no counterpart on the other side and are refused.
#![forbid(unsafe_code)]

pub mod anthropic;
pub mod converse;
mod de;
pub mod error;
pub mod openai;
pub mod request;
pub mod response;
pub mod stream;

use bytes::Bytes;

pub use request::DEFAULT_MAX_TOKENS;
pub use stream::{StreamOptions, StreamTranslator};

/// The two dialects (`levee_wire` names them for every Levee crate).
pub use levee_wire::Dialect;

/// Why a request cannot be carried into the other dialect: a fixed set, so
/// it can label a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The body is not a valid request of the caller's dialect.
    InvalidBody,
    /// The endpoint has no counterpart (embeddings, Responses API).
    Endpoint,
    /// A top-level field this translation does not know.
    UnknownField,
    /// `n` > 1.
    SeveralChoices,
    /// `logprobs`, `top_logprobs`.
    Logprobs,
    /// Sampling knobs the target lacks (temperature, top_p, top_k, penalties, seed).
    Sampling,
    /// Reasoning/thinking settings.
    Reasoning,
    /// `response_format`, audio output, predictions, output configs.
    OutputFormat,
    /// A content part or block the target lacks (audio, files, documents,
    /// thinking blocks, citations, image details).
    ContentPart,
    /// Custom, strict or server tools, and tool choices without a counterpart.
    ToolKind,
    /// Assistant tool-call arguments that are not a JSON object.
    ToolArguments,
    /// A tool result marked as an error.
    ToolError,
    /// A message's `name`.
    MessageName,
    /// Request metadata without a counterpart.
    Metadata,
    /// More stop sequences than OpenAI accepts.
    TooManyStops,
}

impl Reason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Reason::InvalidBody => "invalid_body",
            Reason::Endpoint => "endpoint",
            Reason::UnknownField => "unknown_field",
            Reason::SeveralChoices => "several_choices",
            Reason::Logprobs => "logprobs",
            Reason::Sampling => "sampling",
            Reason::Reasoning => "reasoning",
            Reason::OutputFormat => "output_format",
            Reason::ContentPart => "content_part",
            Reason::ToolKind => "tool_kind",
            Reason::ToolArguments => "tool_arguments",
            Reason::ToolError => "tool_error",
            Reason::MessageName => "message_name",
            Reason::Metadata => "metadata",
            Reason::TooManyStops => "too_many_stops",
        }
    }
}

/// A request that cannot be carried: the reason, and the detail for logs
/// and error messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct Untranslatable {
    pub reason: Reason,
    pub detail: String,
    /// The request's top-level parameter at fault, when leaving it out
    /// would let the request be carried (`temperature`, `seed`, `n`).
    pub param: Option<&'static str>,
}

/// A backup's answer that cannot be put into the caller's dialect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadAnswer(pub String);

/// A request body ready for the other dialect.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslatedRequest {
    pub body: Bytes,
    /// Where to send it.
    pub path: &'static str,
    /// The OpenAI caller asked for usage in its stream.
    pub include_usage: bool,
}

fn invalid(dialect: Dialect, e: serde_json::Error) -> Untranslatable {
    let mut detail = format!("not a valid {} request: {e}", dialect.name());
    detail.truncate(300);
    Untranslatable {
        reason: Reason::InvalidBody,
        detail,
        param: None,
    }
}

/// Translates a chat request body from `caller`'s dialect to `target`'s,
/// with `model` as the model name.
pub fn translate_request(
    caller: Dialect,
    target: Dialect,
    body: &[u8],
    model: &str,
) -> Result<TranslatedRequest, Untranslatable> {
    let (bytes, include_usage) = match (caller, target) {
        (Dialect::OpenAi, Dialect::Anthropic) => {
            let r: openai::ChatRequest =
                serde_json::from_slice(body).map_err(|e| invalid(caller, e))?;
            let include_usage = r
                .stream_options
                .as_ref()
                .and_then(|o| o.include_usage)
                .unwrap_or(false);
            let mut t = anthropic::MessagesRequest::try_from(r)?;
            t.model = model.to_string();
            (serde_json::to_vec(&t), include_usage)
        }
        (Dialect::Anthropic, Dialect::OpenAi) => {
            let r: anthropic::MessagesRequest =
                serde_json::from_slice(body).map_err(|e| invalid(caller, e))?;
            let mut t = openai::ChatRequest::try_from(r)?;
            t.model = model.to_string();
            (serde_json::to_vec(&t), false)
        }
        _ => {
            return Err(Untranslatable {
                reason: Reason::Endpoint,
                detail: "caller and target speak the same dialect".into(),
                param: None,
            })
        }
    };
    let body = bytes.map_err(|e| invalid(caller, e))?;
    Ok(TranslatedRequest {
        body: Bytes::from(body),
        path: target.chat_path(),
        include_usage,
    })
}

/// Translates a non-streaming success body from `upstream`'s dialect to
/// `caller`'s. `created` (unix seconds) stamps an OpenAI completion made
/// from an Anthropic message.
pub fn translate_response(
    upstream: Dialect,
    caller: Dialect,
    body: &[u8],
    created: u64,
) -> Result<Bytes, BadAnswer> {
    let bad = |e: serde_json::Error| {
        BadAnswer(format!(
            "the backup's answer is not a {} response: {e}",
            upstream.name()
        ))
    };
    let out = match (upstream, caller) {
        (Dialect::OpenAi, Dialect::Anthropic) => {
            let c: openai::ChatCompletion = serde_json::from_slice(body).map_err(bad)?;
            serde_json::to_vec(&anthropic::MessageResponse::try_from(c)?)
        }
        (Dialect::Anthropic, Dialect::OpenAi) => {
            let m: anthropic::MessageResponse = serde_json::from_slice(body).map_err(bad)?;
            serde_json::to_vec(&response::to_openai(m, created))
        }
        _ => return Ok(Bytes::copy_from_slice(body)),
    };
    out.map(Bytes::from).map_err(bad)
}
