//! Request translation, both ways: total where both dialects can say the
//! same thing, and a [`Untranslatable`] value naming the first thing that
//! cannot be carried otherwise. Nothing is dropped silently; the few fields
//! that are dropped are hints with no effect on the answer (cache markers,
//! `store: false`, default service tiers), listed in [`droppable`].

mod to_anthropic;
mod to_openai;

use crate::{Reason, Untranslatable};
use serde_json::{Map, Value};

/// `max_tokens` sent to Anthropic when an OpenAI caller set no limit
/// (Anthropic requires one; OpenAI's default is the model's maximum).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

fn refuse(reason: Reason, detail: impl Into<String>) -> Untranslatable {
    Untranslatable {
        reason,
        detail: detail.into(),
        param: None,
    }
}

/// [`refuse`] for a top-level parameter that the request could go without.
fn refuse_param(reason: Reason, param: &'static str, detail: impl Into<String>) -> Untranslatable {
    Untranslatable {
        reason,
        detail: detail.into(),
        param: Some(param),
    }
}

/// The top-level parameters a translation may refuse by name, for
/// [`Untranslatable::param`] (a `'static` name for any the caller sent).
const PARAMS: [&str; 31] = [
    "logprobs",
    "top_logprobs",
    "n",
    "response_format",
    "modalities",
    "audio",
    "prediction",
    "output_config",
    "temperature",
    "top_p",
    "top_k",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "seed",
    "reasoning_effort",
    "thinking",
    "verbosity",
    "functions",
    "function_call",
    "web_search_options",
    "container",
    "mcp_servers",
    "metadata",
    "user",
    "safety_identifier",
    "stop_sequences",
    "service_tier",
    "store",
    "parallel_tool_calls",
    "stream_options",
];

/// `key` as a `'static` name when it is a parameter a translation may
/// refuse by name.
pub(crate) fn known_param(key: &str) -> Option<&'static str> {
    PARAMS.iter().find(|p| **p == key).copied()
}

/// Why a top-level field with no counterpart cannot be carried.
pub(crate) fn reason_of(field: &str) -> Reason {
    reason_for(field)
}

/// Fields that change nothing about the answer and may be left behind.
pub fn droppable(field: &str, value: &Value) -> bool {
    match field {
        "prompt_cache_key" | "prompt_cache_retention" | "prompt_cache_options" => true,
        "cache_control" | "include_obfuscation" => true,
        "store" => matches!(value, Value::Null | Value::Bool(false)),
        "service_tier" => matches!(
            value.as_str(),
            None | Some("auto" | "default" | "standard_only")
        ),
        _ => false,
    }
}

/// Why a field with no counterpart cannot be carried, as a metric label.
fn reason_for(field: &str) -> Reason {
    match field {
        "logprobs" | "top_logprobs" => Reason::Logprobs,
        "n" => Reason::SeveralChoices,
        "response_format" | "modalities" | "audio" | "prediction" | "output_config" => {
            Reason::OutputFormat
        }
        "temperature" | "top_p" | "top_k" | "frequency_penalty" | "presence_penalty"
        | "logit_bias" | "seed" => Reason::Sampling,
        "reasoning_effort" | "thinking" | "verbosity" => Reason::Reasoning,
        "functions" | "function_call" | "web_search_options" | "container" | "mcp_servers" => {
            Reason::ToolKind
        }
        "metadata" | "user" | "safety_identifier" => Reason::Metadata,
        _ => Reason::UnknownField,
    }
}

fn check_other(other: &Map<String, Value>) -> Result<(), Untranslatable> {
    for (k, v) in other {
        if v.is_null() || droppable(k, v) {
            continue;
        }
        let detail = format!("`{k}` has no counterpart in the other dialect");
        return Err(match PARAMS.iter().find(|p| **p == k.as_str()) {
            Some(p) => refuse_param(reason_for(k), p, detail),
            None => refuse(reason_for(k), detail),
        });
    }
    Ok(())
}
