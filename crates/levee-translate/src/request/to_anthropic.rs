//! OpenAI Chat Completions → Anthropic Messages: the system prompt,
//! messages and their parts, tools and the tool choice.

use super::{check_other, refuse, refuse_param, DEFAULT_MAX_TOKENS};
use crate::anthropic as a;
use crate::openai as o;
use crate::{Reason, Untranslatable};
use serde_json::{Map, Value};

/// Image types Anthropic accepts inline.
const ANTHROPIC_IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

impl TryFrom<o::ChatRequest> for a::MessagesRequest {
    type Error = Untranslatable;

    /// OpenAI Chat Completions → Anthropic Messages.
    fn try_from(mut r: o::ChatRequest) -> Result<Self, Untranslatable> {
        let top_k = sampling_to_anthropic(&mut r)?;
        let (system, messages) = messages_to_anthropic(r.messages)?;
        let tools = r
            .tools
            .map(|ts| ts.into_iter().map(tool_to_anthropic).collect())
            .transpose()?;
        let mut tool_choice = r.tool_choice.map(choice_to_anthropic).transpose()?;
        if r.parallel_tool_calls == Some(false) {
            match &mut tool_choice {
                Some(c) if c.kind == "none" => {}
                Some(c) => c.disable_parallel_tool_use = Some(true),
                None => {
                    tool_choice = Some(a::ToolChoice {
                        kind: "auto".into(),
                        name: None,
                        disable_parallel_tool_use: Some(true),
                    })
                }
            }
        }
        let user_id = match (r.user, r.safety_identifier) {
            (Some(u), Some(s)) if u != s => {
                return Err(refuse_param(
                    Reason::Metadata,
                    "safety_identifier",
                    "`user` and `safety_identifier` differ; Anthropic has one `user_id`",
                ))
            }
            (u, s) => u.or(s),
        };
        let stop_sequences = r.stop.map(|s| match s {
            o::Stop::One(s) => vec![s],
            o::Stop::Many(v) => v,
        });
        Ok(a::MessagesRequest {
            model: r.model,
            max_tokens: r
                .max_completion_tokens
                .or(r.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS),
            messages,
            system,
            stop_sequences,
            temperature: r.temperature,
            top_p: r.top_p,
            top_k,
            tools,
            tool_choice,
            metadata: user_id.map(|u| a::Metadata { user_id: Some(u) }),
            stream: r.stream,
            cache_control: None,
            other: Map::new(),
        })
    }
}

fn text_to_system(c: o::TextContent) -> a::System {
    match c {
        o::TextContent::Text(s) => a::System::Text(s),
        o::TextContent::Parts(ps) => a::System::Blocks(
            ps.into_iter()
                .map(|p| a::TextBlock {
                    kind: o::TextTag::Text,
                    text: p.text,
                    cache_control: None,
                    citations: None,
                })
                .collect(),
        ),
    }
}

fn no_name(name: &Option<String>) -> Result<(), Untranslatable> {
    match name {
        Some(_) => Err(refuse(
            Reason::MessageName,
            "a message `name` has no counterpart in Anthropic Messages",
        )),
        None => Ok(()),
    }
}

/// Leading system/developer messages become `system`; later ones stay in place.
fn messages_to_anthropic(
    msgs: Vec<o::Message>,
) -> Result<(Option<a::System>, Vec<a::Message>), Untranslatable> {
    let mut system: Vec<a::System> = Vec::new();
    let mut out: Vec<a::Message> = Vec::with_capacity(msgs.len());
    let mut last_was_tool = false;
    for m in msgs {
        let is_tool = matches!(m, o::Message::Tool(_));
        match m {
            o::Message::System(s) | o::Message::Developer(s) => {
                no_name(&s.name)?;
                if out.is_empty() {
                    system.push(text_to_system(s.content));
                } else {
                    out.push(a::Message::System(a::SystemTurn {
                        content: text_to_system(s.content),
                    }));
                }
            }
            o::Message::User(u) => {
                no_name(&u.name)?;
                let content = match u.content {
                    o::UserContent::Text(s) => a::Content::Text(s),
                    o::UserContent::Parts(ps) => a::Content::Blocks(
                        ps.into_iter()
                            .map(user_part_to_anthropic)
                            .collect::<Result<_, _>>()?,
                    ),
                };
                out.push(a::Message::User(a::Turn { content }));
            }
            o::Message::Assistant(m) => out.push(assistant_to_anthropic(m)?),
            o::Message::Tool(t) => {
                let block = a::Block::ToolResult {
                    tool_use_id: t.tool_call_id,
                    content: Some(match t.content {
                        o::TextContent::Text(s) => a::ToolResultContent::Text(s),
                        o::TextContent::Parts(ps) => a::ToolResultContent::Blocks(
                            ps.into_iter().map(|p| text_block(p.text)).collect(),
                        ),
                    }),
                    is_error: None,
                    cache_control: None,
                    toolset_name: None,
                };
                // Results of one turn's parallel calls go back in one user turn.
                match out.last_mut() {
                    Some(a::Message::User(a::Turn {
                        content: a::Content::Blocks(bs),
                    })) if last_was_tool => bs.push(block),
                    _ => out.push(a::Message::User(a::Turn {
                        content: a::Content::Blocks(vec![block]),
                    })),
                }
            }
        }
        last_was_tool = is_tool;
    }
    let system = match system.len() {
        0 => None,
        1 => system.pop(),
        _ => Some(a::System::Blocks(
            system
                .into_iter()
                .flat_map(|s| match s {
                    a::System::Text(t) => vec![a::TextBlock {
                        kind: o::TextTag::Text,
                        text: t,
                        cache_control: None,
                        citations: None,
                    }],
                    a::System::Blocks(b) => b,
                })
                .collect(),
        )),
    };
    Ok((system, out))
}

fn text_block(text: String) -> a::Block {
    a::Block::Text {
        text,
        cache_control: None,
        citations: None,
    }
}

fn user_part_to_anthropic(p: o::UserPart) -> Result<a::Block, Untranslatable> {
    match p {
        o::UserPart::Text { text } => Ok(text_block(text)),
        o::UserPart::ImageUrl { image_url, .. } => {
            if !matches!(image_url.detail.as_deref(), None | Some("auto")) {
                return Err(refuse(
                    Reason::ContentPart,
                    "image `detail` other than `auto` has no counterpart in Anthropic",
                ));
            }
            let source = match parse_data_url(&image_url.url) {
                Some((media_type, data)) => {
                    if !ANTHROPIC_IMAGE_TYPES.contains(&media_type) {
                        return Err(refuse(
                            Reason::ContentPart,
                            format!("image type `{media_type}` is not accepted by Anthropic"),
                        ));
                    }
                    a::ImageSource::Base64 {
                        media_type: media_type.to_string(),
                        data: data.to_string(),
                    }
                }
                None if image_url.url.starts_with("https://")
                    || image_url.url.starts_with("http://") =>
                {
                    a::ImageSource::Url { url: image_url.url }
                }
                None => {
                    return Err(refuse(
                        Reason::ContentPart,
                        "image URL is neither http(s) nor a base64 data URL",
                    ))
                }
            };
            Ok(a::Block::Image {
                source,
                cache_control: None,
                transformations: None,
            })
        }
        o::UserPart::Unsupported => Err(refuse(
            Reason::ContentPart,
            "audio and file parts have no counterpart in Anthropic Messages",
        )),
    }
}

/// `data:image/png;base64,AAAA` → (`image/png`, `AAAA`).
fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let media_type = meta.strip_suffix(";base64")?;
    Some((media_type, data))
}

fn assistant_to_anthropic(m: o::AssistantMessage) -> Result<a::Message, Untranslatable> {
    no_name(&m.name)?;
    if m.audio.is_some() || m.function_call.is_some() || m.refusal.is_some() {
        return Err(refuse(
            Reason::ContentPart,
            "assistant `audio`, `function_call` or `refusal` has no counterpart in Anthropic",
        ));
    }
    let calls = m.tool_calls.unwrap_or_default();
    let content = match (m.content, calls.is_empty()) {
        (Some(o::AssistantContent::Text(s)), true) => {
            return Ok(a::Message::Assistant(a::Turn {
                content: a::Content::Text(s),
            }))
        }
        (None, true) => {
            return Ok(a::Message::Assistant(a::Turn {
                content: a::Content::Text(String::new()),
            }))
        }
        (c, _) => c,
    };
    let mut blocks = Vec::with_capacity(calls.len() + 1);
    match content {
        None => {}
        Some(o::AssistantContent::Text(s)) if s.is_empty() => {}
        Some(o::AssistantContent::Text(s)) => blocks.push(text_block(s)),
        Some(o::AssistantContent::Parts(ps)) => {
            for p in ps {
                match p {
                    o::AssistantPart::Text { text } => blocks.push(text_block(text)),
                    o::AssistantPart::Refusal { .. } => {
                        return Err(refuse(
                            Reason::ContentPart,
                            "a refusal part has no counterpart in Anthropic",
                        ))
                    }
                }
            }
        }
    }
    for c in calls {
        let input: Map<String, Value> =
            serde_json::from_str(&c.function.arguments).map_err(|_| {
                refuse(
                    Reason::ToolArguments,
                    format!(
                        "tool call `{}` arguments are not a JSON object",
                        c.function.name
                    ),
                )
            })?;
        blocks.push(a::Block::ToolUse {
            id: c.id,
            name: c.function.name,
            input,
            cache_control: None,
            caller: None,
            toolset_name: None,
        });
    }
    Ok(a::Message::Assistant(a::Turn {
        content: a::Content::Blocks(blocks),
    }))
}

fn tool_to_anthropic(t: o::Tool) -> Result<a::Tool, Untranslatable> {
    let f = match (t.kind.as_str(), t.function) {
        ("function", Some(f)) => f,
        (kind, _) => {
            return Err(refuse(
                Reason::ToolKind,
                format!("`{kind}` tools have no counterpart in Anthropic"),
            ))
        }
    };
    if f.strict == Some(true) {
        return Err(refuse(
            Reason::ToolKind,
            "`strict` function schemas have no counterpart in Anthropic tools",
        ));
    }
    let schema = f.parameters.unwrap_or_else(|| {
        let mut m = Map::new();
        m.insert("type".into(), Value::String("object".into()));
        m.insert("properties".into(), Value::Object(Map::new()));
        m
    });
    Ok(a::Tool {
        name: f.name,
        kind: None,
        description: f.description,
        input_schema: Some(schema),
        cache_control: None,
        other: Map::new(),
    })
}

fn choice_to_anthropic(c: o::ToolChoice) -> Result<a::ToolChoice, Untranslatable> {
    let (kind, name) = match c {
        o::ToolChoice::Mode(m) => match m.as_str() {
            "none" => ("none", None),
            "auto" => ("auto", None),
            "required" => ("any", None),
            other => {
                return Err(refuse(
                    Reason::ToolKind,
                    format!("tool_choice `{other}` is not known"),
                ))
            }
        },
        o::ToolChoice::Named(n) => match (n.kind.as_str(), n.function) {
            ("function", Some(f)) => ("tool", Some(f.name)),
            (kind, _) => {
                return Err(refuse(
                    Reason::ToolKind,
                    format!("tool_choice of type `{kind}` has no counterpart in Anthropic"),
                ))
            }
        },
    };
    Ok(a::ToolChoice {
        kind: kind.into(),
        name,
        disable_parallel_tool_use: None,
    })
}

/// The sampling parameters Anthropic has no room for refused (by name, so
/// a route that drops them can), and `top_k` taken from the extra fields.
fn sampling_to_anthropic(r: &mut o::ChatRequest) -> Result<Option<u64>, Untranslatable> {
    // `top_k` is not an OpenAI field, but OpenAI-compatible servers take
    // it and callers send it as an extra body field: Anthropic has it.
    let top_k = match r.other.remove("top_k") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            refuse_param(
                Reason::Sampling,
                "top_k",
                "`top_k` must be a whole number for Anthropic",
            )
        })?),
    };
    check_other(&r.other)?;
    if r.n.is_some_and(|n| n != 1) {
        return Err(refuse_param(
            Reason::SeveralChoices,
            "n",
            "`n` > 1: Anthropic answers with one message",
        ));
    }
    // OpenAI's temperature runs from 0 to 2, Anthropic's from 0 to 1:
    // the same number means the same below 1, and nothing above it.
    if let Some(t) = r.temperature.filter(|t| *t > 1.0) {
        return Err(refuse_param(
            Reason::Sampling,
            "temperature",
            format!("`temperature` {t} is above Anthropic's maximum of 1"),
        ));
    }
    Ok(top_k)
}
