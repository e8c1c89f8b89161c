//! The hot path: text and argument deltas are most of a stream's events, so
//! they are read and written through borrowed views of the same fields (no
//! per-event copies of ids, model names or text); every other event goes
//! through the typed models.

use crate::openai as o;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// An OpenAI chunk (or error), read borrowed.
#[derive(Deserialize)]
pub(super) struct ChunkIn<'a> {
    #[serde(borrow, default)]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) choices: Vec<ChoiceIn<'a>>,
    #[serde(default)]
    pub(super) usage: Option<o::Usage>,
    #[serde(default)]
    pub(super) error: Option<o::ErrorObject>,
}

#[derive(Deserialize)]
pub(super) struct ChoiceIn<'a> {
    pub(super) index: u32,
    #[serde(borrow, default)]
    pub(super) delta: DeltaIn<'a>,
    #[serde(borrow, default)]
    pub(super) finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
pub(super) struct DeltaIn<'a> {
    #[serde(borrow, default)]
    pub(super) content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) tool_calls: Option<Vec<ToolCallIn<'a>>>,
}

#[derive(Deserialize)]
pub(super) struct ToolCallIn<'a> {
    pub(super) index: u32,
    #[serde(borrow, default)]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) function: Option<FunctionIn<'a>>,
}

#[derive(Deserialize, Default)]
pub(super) struct FunctionIn<'a> {
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) arguments: Option<Cow<'a, str>>,
}

/// Any Anthropic event, read borrowed: enough to handle a delta without
/// parsing it twice.
#[derive(Deserialize)]
pub(super) struct EventIn<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    #[serde(default)]
    pub(super) index: Option<u32>,
    #[serde(borrow, default)]
    pub(super) delta: Option<BlockDeltaIn<'a>>,
}

#[derive(Deserialize)]
pub(super) struct BlockDeltaIn<'a> {
    #[serde(rename = "type", borrow, default)]
    pub(super) kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) partial_json: Option<Cow<'a, str>>,
}

/// `content_block_delta`, written borrowed.
#[derive(Serialize)]
pub(super) struct BlockDeltaOut<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) index: u32,
    pub(super) delta: DeltaBody<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum DeltaBody<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

/// A one-choice OpenAI chunk, written borrowed.
#[derive(Serialize)]
pub(super) struct ChunkOut<'a> {
    pub(super) id: &'a str,
    pub(super) object: &'static str,
    pub(super) created: u64,
    pub(super) model: &'a str,
    pub(super) choices: [ChoiceOut<'a>; 1],
}

#[derive(Serialize)]
pub(super) struct ChoiceOut<'a> {
    pub(super) index: u32,
    pub(super) delta: DeltaOut<'a>,
    pub(super) finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
pub(super) struct DeltaOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_calls: Option<[ArgsOut<'a>; 1]>,
}

#[derive(Serialize)]
pub(super) struct ArgsOut<'a> {
    pub(super) index: u32,
    pub(super) function: ArgsFunction<'a>,
}

#[derive(Serialize)]
pub(super) struct ArgsFunction<'a> {
    pub(super) arguments: &'a str,
}
