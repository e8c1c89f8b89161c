//! Response translation, both ways: content, tool calls ⇄ `tool_use` blocks,
//! finish ⇄ stop reasons, usage, and ids in the shape the caller's SDK
//! expects. The model name is the one that answered (the backup's).

use crate::anthropic as a;
use crate::openai as o;
use crate::BadAnswer;
use serde_json::Value;

/// `chatcmpl-X` ⇄ `msg_X`, so an id stays recognisable across the hop.
pub fn anthropic_id(openai_id: &str) -> String {
    format!(
        "msg_{}",
        openai_id.strip_prefix("chatcmpl-").unwrap_or(openai_id)
    )
}

/// `msg_X` → `chatcmpl-X`.
pub fn openai_id(anthropic_id: &str) -> String {
    format!(
        "chatcmpl-{}",
        anthropic_id.strip_prefix("msg_").unwrap_or(anthropic_id)
    )
}

/// OpenAI `finish_reason` → Anthropic `stop_reason`. A call to a tool is
/// `tool_use` whatever the finish reason says (OpenAI answers a forced
/// function with `stop`).
pub fn stop_reason(finish: Option<&str>, has_tool_calls: bool) -> &'static str {
    if has_tool_calls {
        return "tool_use";
    }
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// Anthropic `stop_reason` → OpenAI `finish_reason`.
pub fn finish_reason(stop: Option<&str>) -> &'static str {
    match stop {
        Some("max_tokens" | "model_context_window_exceeded") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

/// OpenAI usage → Anthropic usage (`input_tokens` excludes cache reads).
pub fn usage_to_anthropic(u: &o::Usage) -> a::Usage {
    let cached = u.prompt_tokens_details.and_then(|d| d.cached_tokens);
    a::Usage {
        input_tokens: u.prompt_tokens.saturating_sub(cached.unwrap_or(0)),
        output_tokens: u.completion_tokens,
        cache_creation_input_tokens: None,
        cache_read_input_tokens: cached,
    }
}

/// Anthropic usage → OpenAI usage (`prompt_tokens` includes the cache).
pub fn usage_to_openai(u: &a::Usage) -> o::Usage {
    let read = u.cache_read_input_tokens;
    // Counts come from the network: saturate rather than overflow.
    let prompt = u
        .input_tokens
        .saturating_add(read.unwrap_or(0))
        .saturating_add(u.cache_creation_input_tokens.unwrap_or(0));
    o::Usage {
        prompt_tokens: prompt,
        completion_tokens: u.output_tokens,
        total_tokens: prompt.saturating_add(u.output_tokens),
        prompt_tokens_details: read.map(|r| o::PromptTokensDetails {
            cached_tokens: Some(r),
        }),
    }
}

impl TryFrom<o::ChatCompletion> for a::MessageResponse {
    type Error = BadAnswer;

    /// An OpenAI completion → an Anthropic message.
    fn try_from(c: o::ChatCompletion) -> Result<Self, BadAnswer> {
        let mut choices = c.choices.into_iter();
        let (Some(choice), None) = (choices.next(), choices.next()) else {
            return Err(BadAnswer(
                "the backup answered with other than one choice".into(),
            ));
        };
        let m = choice.message;
        let calls = m.tool_calls.unwrap_or_default();
        let mut content = Vec::with_capacity(calls.len() + 1);
        let refused = m.refusal.is_some();
        if let Some(text) = m.content.or(m.refusal).filter(|t| !t.is_empty()) {
            content.push(a::ResponseBlock::Text { text });
        }
        for call in &calls {
            let input: Value = serde_json::from_str(&call.function.arguments)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| {
                    BadAnswer(format!(
                        "the backup's call to `{}` has arguments that are not a JSON object",
                        call.function.name
                    ))
                })?;
            content.push(a::ResponseBlock::ToolUse {
                id: call.id.clone(),
                name: call.function.name.clone(),
                input,
            });
        }
        let stop = if refused {
            "refusal"
        } else {
            stop_reason(choice.finish_reason.as_deref(), !calls.is_empty())
        };
        Ok(a::MessageResponse {
            id: anthropic_id(&c.id),
            kind: "message".into(),
            role: "assistant".into(),
            model: c.model,
            content,
            stop_reason: Some(stop.into()),
            stop_sequence: None,
            usage: c.usage.as_ref().map(usage_to_anthropic).unwrap_or_default(),
        })
    }
}

/// An Anthropic message → an OpenAI completion created at `created` (unix
/// seconds; Anthropic messages carry no timestamp).
pub fn to_openai(m: a::MessageResponse, created: u64) -> o::ChatCompletion {
    let mut texts: Vec<String> = Vec::new();
    let mut calls = Vec::new();
    for b in m.content {
        match b {
            a::ResponseBlock::Text { text } => texts.push(text),
            a::ResponseBlock::ToolUse { id, name, input } => calls.push(o::ToolCall {
                id,
                kind: o::FunctionTag::Function,
                function: o::FunctionCall {
                    name,
                    // Serializing a `Value` cannot fail.
                    arguments: serde_json::to_string(&input).unwrap_or_default(),
                },
            }),
            // Thinking and server-tool blocks: an OpenAI message has no place
            // for them, as an OpenAI model's reasoning is not returned either.
            a::ResponseBlock::Other => {}
        }
    }
    let content = (!texts.is_empty()).then(|| texts.concat());
    o::ChatCompletion {
        id: openai_id(&m.id),
        object: "chat.completion".into(),
        created,
        model: m.model,
        choices: vec![o::Choice {
            index: 0,
            message: o::ResponseMessage {
                role: "assistant".into(),
                content,
                tool_calls: (!calls.is_empty()).then_some(calls),
                refusal: None,
            },
            finish_reason: Some(finish_reason(m.stop_reason.as_deref()).into()),
        }],
        usage: Some(usage_to_openai(&m.usage)),
    }
}
