//! Anthropic Messages, as typed values: the request, the response, the
//! stream events and the error body. Field names and shapes follow the
//! official `anthropic` SDK's `types` definitions.
//!
//! As for OpenAI: unknown top-level request fields land in
//! [`MessagesRequest::other`] to be refused by name; block types this
//! translation does not carry parse as an `Unsupported` variant.

use crate::de::{string_or, tagged};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST /v1/messages` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: u64,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<System>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// Sampling: the Messages API takes `temperature` (0 to 1), `top_p`
    /// and `top_k` (the `anthropic` SDK 2.14's types no longer list them;
    /// its callers send them as extra body fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Top-level cache marker: a caching hint, not carried and not needed.
    #[serde(default, skip_serializing)]
    pub cache_control: Option<Value>,
    /// Every other top-level field, kept so it can be refused by name.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `system`: a string or text blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum System {
    Text(String),
    Blocks(Vec<TextBlock>),
}

/// `{"type":"text","text":…}` in a system prompt or a system message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextBlock {
    #[serde(rename = "type")]
    pub kind: crate::openai::TextTag,
    pub text: String,
    #[serde(default, skip_serializing)]
    pub cache_control: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citations: Option<Value>,
}

/// `metadata`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

/// One message, by `role`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    User(Turn),
    Assistant(Turn),
    System(SystemTurn),
}

/// A user or assistant turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    pub content: Content,
}

/// A system message inside `messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemTurn {
    pub content: System,
}

/// A turn's content: a string or blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

/// One content block of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
        #[serde(default, skip_serializing)]
        cache_control: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        citations: Option<Value>,
    },
    Image {
        source: ImageSource,
        #[serde(default, skip_serializing)]
        cache_control: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        transformations: Option<Value>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Map<String, Value>,
        #[serde(default, skip_serializing)]
        cache_control: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        caller: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        toolset_name: Option<String>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<ToolResultContent>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
        #[serde(default, skip_serializing)]
        cache_control: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        toolset_name: Option<String>,
    },
    /// `document`, `thinking`, server tool blocks, and any type added later.
    #[serde(other)]
    Unsupported,
}

/// An image's source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    Base64 {
        media_type: String,
        data: String,
    },
    Url {
        url: String,
    },
    /// `file` (Files API) and any source added later.
    #[serde(other)]
    Unsupported,
}

/// A tool result's content: a string or blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolResultContent {
    Text(String),
    Blocks(Vec<Block>),
}

/// A tool definition. Client tools have `input_schema`; server tools a
/// versioned `type` and none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Map<String, Value>>,
    #[serde(default, skip_serializing)]
    pub cache_control: Option<Value>,
    /// Anything else (`strict`, `defer_loading`, server tools' settings).
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolChoice {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_parallel_tool_use: Option<bool>,
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/// A `message` object (the non-streaming answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageResponse {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub role: String,
    pub model: String,
    pub content: Vec<ResponseBlock>,
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

/// One block of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// `thinking`, `redacted_thinking`, server tool blocks: nothing an
    /// OpenAI caller's message has a place for.
    #[serde(other)]
    Other,
}

/// Token counts. `input_tokens` excludes cache reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
}

/// Token counts on `message_delta` (cumulative; optional ones may be absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeltaUsage {
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
}

/// One SSE event's `data`, by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart {
        message: MessageResponse,
    },
    ContentBlockStart {
        index: u32,
        content_block: ResponseBlock,
    },
    ContentBlockDelta {
        index: u32,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: MessageDelta,
        usage: DeltaUsage,
    },
    MessageStop,
    Ping,
    Error {
        error: ErrorObject,
    },
    /// Event types added later: skipped, as the SDKs skip them.
    #[serde(other)]
    Unknown,
}

/// What a `content_block_delta` adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    /// Thinking, signature and citation deltas.
    #[serde(other)]
    Other,
}

/// `message_delta.delta`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageDelta {
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub stop_sequence: Option<String>,
}

/// `{"type":"error","error":{"type","message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(rename = "type")]
    pub kind: String,
    pub error: ErrorObject,
}

/// The error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
}

string_or!(System, Text, seq Blocks);
string_or!(Content, Text, seq Blocks);
string_or!(ToolResultContent, Text, seq Blocks);
tagged!(Message, "role", {
    "user" => User(Turn),
    "assistant" => Assistant(Turn),
    "system" => System(SystemTurn),
});
