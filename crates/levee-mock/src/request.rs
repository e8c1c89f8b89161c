//! Reading provider requests: which endpoint, which dialect, and the few body
//! fields the mock needs (model, stream flags, token limits, inputs).
//! Everything else in the body is skipped without being materialised.

use std::borrow::Cow;
use std::fmt;

use http::Method;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use levee_wire::{paths, Dialect};

/// The provider endpoints the mock answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Chat,
    Messages,
    /// Anthropic's `POST /v1/messages/count_tokens`.
    CountTokens,
    Embeddings,
    Responses,
    /// `GET /v1/responses/{id}`: a stored response.
    ResponseGet(String),
    /// `GET /v1/responses/{id}/input_items`.
    ResponseInputItems(String),
    /// `POST /v1/responses/{id}/cancel`.
    ResponseCancel(String),
    /// `DELETE /v1/responses/{id}`.
    ResponseDelete(String),
    Models,
    Model(String),
    NotFound,
    MethodNotAllowed,
}

impl Endpoint {
    pub(crate) fn route(method: &Method, path: &str) -> Endpoint {
        let only = |m: Method, e| {
            if method == m {
                e
            } else {
                Endpoint::MethodNotAllowed
            }
        };
        match path {
            paths::CHAT_COMPLETIONS => only(Method::POST, Endpoint::Chat),
            paths::MESSAGES => only(Method::POST, Endpoint::Messages),
            paths::COUNT_TOKENS => only(Method::POST, Endpoint::CountTokens),
            paths::EMBEDDINGS => only(Method::POST, Endpoint::Embeddings),
            paths::RESPONSES => only(Method::POST, Endpoint::Responses),
            paths::MODELS => only(Method::GET, Endpoint::Models),
            _ => {
                if let Some(id) = path.strip_prefix("/v1/models/") {
                    return match id.is_empty() {
                        true => Endpoint::NotFound,
                        false => only(Method::GET, Endpoint::Model(percent_decoded(id))),
                    };
                }
                match path.strip_prefix(paths::RESPONSE_ITEM) {
                    Some(rest) => Endpoint::stored_response(method, rest),
                    None => Endpoint::NotFound,
                }
            }
        }
    }

    /// `/v1/responses/` followed by `rest`: `{id}`, `{id}/input_items` or
    /// `{id}/cancel`.
    fn stored_response(method: &Method, rest: &str) -> Endpoint {
        let (id, tail) = match rest.split_once('/') {
            Some((id, tail)) => (id, Some(tail)),
            None => (rest, None),
        };
        if id.is_empty() {
            return Endpoint::NotFound;
        }
        let id = percent_decoded(id);
        let (get, post, delete) = (
            method == Method::GET,
            method == Method::POST,
            method == Method::DELETE,
        );
        match tail {
            None if get => Endpoint::ResponseGet(id),
            None if delete => Endpoint::ResponseDelete(id),
            Some("input_items") if get => Endpoint::ResponseInputItems(id),
            Some("cancel") if post => Endpoint::ResponseCancel(id),
            None | Some("input_items" | "cancel") => Endpoint::MethodNotAllowed,
            Some(_) => Endpoint::NotFound,
        }
    }

    fn has_body(&self) -> bool {
        matches!(
            self,
            Endpoint::Chat
                | Endpoint::Messages
                | Endpoint::CountTokens
                | Endpoint::Embeddings
                | Endpoint::Responses
        )
    }
}

/// The body fields the mock looks at. Unknown fields are ignored.
#[derive(Deserialize, Default)]
pub(crate) struct Body<'a> {
    #[serde(borrow, default)]
    pub model: Option<Cow<'a, str>>,
    #[serde(default)]
    messages: Option<Shape>,
    #[serde(default)]
    input: Option<Shape>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
    #[serde(default)]
    dimensions: Option<u64>,
    #[serde(borrow, default)]
    encoding_format: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_choice: Option<serde_json::Value>,
    /// Responses: `false` keeps the response from being stored.
    #[serde(default)]
    store: Option<bool>,
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

impl Body<'_> {
    pub(crate) fn streaming(&self) -> bool {
        self.stream == Some(true)
    }

    /// Whether a Responses request's answer is stored (`store` defaults to
    /// `true`).
    pub(crate) fn stored(&self) -> bool {
        self.store != Some(false)
    }

    pub(crate) fn include_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    pub(crate) fn max_tokens(&self) -> Option<u64> {
        self.max_completion_tokens
            .or(self.max_tokens)
            .or(self.max_output_tokens)
    }

    pub(crate) fn embedding_inputs(&self) -> usize {
        match self.input {
            Some(Shape::Array {
                len,
                of_numbers: false,
            }) => len.max(1),
            _ => 1,
        }
    }

    pub(crate) fn dimensions(&self) -> usize {
        self.dimensions.map_or(16, |d| d.clamp(1, 4096) as usize)
    }

    pub(crate) fn base64(&self) -> bool {
        self.encoding_format.as_deref() == Some("base64")
    }

    /// The tool a request forces by name, in its dialect's shape: OpenAI
    /// `{"type":"function","function":{"name"}}`, Anthropic
    /// `{"type":"tool","name"}`.
    pub(crate) fn forced_tool(&self, dialect: Dialect) -> Option<&str> {
        let choice = self.tool_choice.as_ref()?;
        match (dialect, choice.get("type")?.as_str()?) {
            (Dialect::OpenAi, "function") => choice.get("function")?.get("name")?.as_str(),
            (Dialect::Anthropic, "tool") => choice.get("name")?.as_str(),
            _ => None,
        }
    }
}

/// Top-level fields of a Chat Completions request (the `openai` SDK's
/// `CompletionCreateParams`).
const OPENAI_CHAT_FIELDS: [&str; 37] = [
    "messages",
    "model",
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "metadata",
    "modalities",
    "moderation",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// Top-level fields of a Messages request (the `anthropic` SDK's
/// `MessageCreateParams`, and the sampling fields the API takes that the
/// SDK 2.14's types no longer list: `temperature`, `top_k`, `top_p`).
const ANTHROPIC_MESSAGES_FIELDS: [&str; 22] = [
    "max_tokens",
    "messages",
    "model",
    "cache_control",
    "container",
    "diagnostics",
    "inference_geo",
    "metadata",
    "output_config",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
    "user_profile_id",
    "workspace_id",
];

/// Top-level fields of a token count request (the `anthropic` SDK's
/// `MessageCountTokensParams`): a Messages request without `max_tokens`,
/// `stream`, sampling or metadata fields.
const ANTHROPIC_COUNT_TOKENS_FIELDS: [&str; 11] = [
    "messages",
    "model",
    "cache_control",
    "output_config",
    "speed",
    "system",
    "thinking",
    "tool_choice",
    "tools",
    "user_profile_id",
    "workspace_id",
];

/// What a provider serving one dialect refuses beyond [`parse`]: a field it
/// does not know (both providers answer 400), and for Anthropic a missing
/// `max_tokens`.
pub(crate) fn strict_check(
    endpoint: &Endpoint,
    dialect: Dialect,
    bytes: &[u8],
) -> Result<(), Invalid> {
    let known: &[&str] = match endpoint {
        Endpoint::Chat => &OPENAI_CHAT_FIELDS,
        Endpoint::Messages => &ANTHROPIC_MESSAGES_FIELDS,
        Endpoint::CountTokens => &ANTHROPIC_COUNT_TOKENS_FIELDS,
        _ => return Ok(()),
    };
    let fields: std::collections::BTreeMap<Cow<'_, str>, IgnoredAny> =
        serde_json::from_slice(bytes).unwrap_or_default();
    if let Some(unknown) = fields.keys().find(|k| !known.contains(&k.as_ref())) {
        let message = match dialect {
            Dialect::OpenAi => format!("Unrecognized request argument supplied: {unknown}"),
            Dialect::Anthropic => format!("{unknown}: Extra inputs are not permitted"),
        };
        return Err(Invalid {
            message,
            param: None,
            code: None,
        });
    }
    if *endpoint == Endpoint::Messages && !fields.contains_key("max_tokens") {
        return Err(invalid(dialect, "max_tokens", Problem::Missing));
    }
    // Sampling ranges: Anthropic's temperature and top_p run from 0 to 1,
    // OpenAI's temperature from 0 to 2.
    let numbers: std::collections::BTreeMap<Cow<'_, str>, serde_json::Value> =
        serde_json::from_slice(bytes).unwrap_or_default();
    let top = match endpoint {
        Endpoint::Messages | Endpoint::CountTokens => 1.0,
        _ => 2.0,
    };
    for (field, max) in [("temperature", top), ("top_p", 1.0)] {
        let Some(v) = numbers.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        if !v.as_f64().is_some_and(|x| (0.0..=max).contains(&x)) {
            let message = match dialect {
                Dialect::OpenAi => format!("Invalid '{field}': must be a number from 0 to {max}."),
                Dialect::Anthropic => format!("{field}: Input should be a number from 0 to {max}"),
            };
            return Err(Invalid {
                message,
                param: None,
                code: None,
            });
        }
    }
    Ok(())
}

/// A rejected request: message plus the offending parameter (OpenAI `param`)
/// and OpenAI `code`.
#[derive(Debug)]
pub(crate) struct Invalid {
    pub message: String,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

/// Parses and validates a body for `endpoint`. On failure the model is still
/// returned when it could be read, so stats can count it.
pub(crate) fn parse<'a>(
    endpoint: &Endpoint,
    dialect: Dialect,
    bytes: &'a [u8],
) -> Result<Body<'a>, (Option<Cow<'a, str>>, Invalid)> {
    if !endpoint.has_body() {
        return Ok(Body::default());
    }
    let body: Body<'a> = serde_json::from_slice(bytes).map_err(|e| {
        let message = match dialect {
            Dialect::OpenAi => format!(
                "We could not parse the JSON body of your request. ({e}) \
                 Send a JSON object with `model` and `messages`."
            ),
            Dialect::Anthropic => format!("There was an error parsing the body: {e}"),
        };
        (
            None,
            Invalid {
                message,
                param: None,
                code: None,
            },
        )
    })?;
    let required: &[&'static str] = match endpoint {
        Endpoint::Chat | Endpoint::Messages | Endpoint::CountTokens => &["model", "messages"],
        Endpoint::Embeddings => &["model", "input"],
        _ => &["model"],
    };
    for &field in required {
        let problem = match field {
            "model" => match body.model.as_deref() {
                None => Some(Problem::Missing),
                Some("") => Some(Problem::Empty),
                Some(_) => None,
            },
            "messages" => match body.messages {
                None => Some(Problem::Missing),
                Some(Shape::Array { .. }) => None,
                Some(Shape::Other(kind)) => Some(Problem::NotArray(kind)),
            },
            _ => body.input.is_none().then_some(Problem::Missing),
        };
        if let Some(problem) = problem {
            return Err((body.model.clone(), invalid(dialect, field, problem)));
        }
    }
    Ok(body)
}

enum Problem {
    Missing,
    Empty,
    NotArray(&'static str),
}

fn invalid(dialect: Dialect, field: &'static str, problem: Problem) -> Invalid {
    let (message, code) = match (dialect, problem) {
        (Dialect::OpenAi, Problem::Missing) => (
            format!("Missing required parameter: '{field}'."),
            "missing_required_parameter",
        ),
        (Dialect::OpenAi, Problem::Empty) => (
            format!("Invalid '{field}': empty string. Expected a non-empty string."),
            "invalid_value",
        ),
        (Dialect::OpenAi, Problem::NotArray(kind)) => (
            format!(
                "Invalid type for '{field}': expected an array of objects, but got {kind} instead."
            ),
            "invalid_type",
        ),
        (Dialect::Anthropic, Problem::Missing) => (format!("{field}: Field required"), ""),
        (Dialect::Anthropic, Problem::Empty) => (
            format!("{field}: String should have at least 1 character"),
            "",
        ),
        (Dialect::Anthropic, Problem::NotArray(_)) => {
            (format!("{field}: Input should be a valid list"), "")
        }
    };
    Invalid {
        message,
        param: Some(field),
        code: (!code.is_empty()).then_some(code),
    }
}

/// Whether a field is an array (and of what), read without allocating.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Array { len: usize, of_numbers: bool },
    Other(&'static str),
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor)
    }
}

struct ShapeVisitor;

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Shape;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
        let mut len = 0;
        let mut of_numbers = false;
        while let Some(is_number) = seq.next_element::<IsNumber>()? {
            if len == 0 {
                of_numbers = is_number.0;
            }
            len += 1;
        }
        Ok(Shape::Array { len, of_numbers })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Shape::Other("an object"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Other("a string"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Shape, E> {
        Ok(Shape::Other("a boolean"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Shape, E> {
        Ok(Shape::Other("a number"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Shape, E> {
        Ok(Shape::Other("null"))
    }
}

/// One array element: is it a number (a token id)?
struct IsNumber(bool);

impl<'de> Deserialize<'de> for IsNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ShapeVisitor)
            .map(|shape| IsNumber(matches!(shape, Shape::Other("a number"))))
    }
}

/// `text` with its `%XX` escapes decoded (a path segment or a query value);
/// an escape that is not two hex digits is kept as written, and bytes that
/// are not UTF-8 are replaced.
pub(crate) fn percent_decoded(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A rough token count: about four bytes of request per token.
pub(crate) fn prompt_tokens(body_len: usize) -> u64 {
    (body_len as u64 / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Result<Body<'_>, (Option<Cow<'_, str>>, Invalid)> {
        parse(&Endpoint::Chat, Dialect::OpenAi, body.as_bytes())
    }

    #[test]
    fn reads_the_fields_it_needs() {
        let b = chat(r#"{"model":"gpt","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"extra":{"a":[1,2]}}"#).unwrap();
        assert_eq!(b.model.as_deref(), Some("gpt"));
        assert!(b.streaming() && b.include_usage());
        assert_eq!(b.max_tokens(), Some(3));
    }

    #[test]
    fn rejects_what_providers_reject() {
        let (_, e) = chat("{not json").err().unwrap();
        assert!(e.message.contains("could not parse the JSON"));
        let (_, e) = chat(r#"{"messages":[]}"#).err().unwrap();
        assert_eq!(e.param, Some("model"));
        let (model, e) = chat(r#"{"model":"m"}"#).err().unwrap();
        assert_eq!(
            (model.as_deref(), e.param, e.code),
            (
                Some("m"),
                Some("messages"),
                Some("missing_required_parameter")
            )
        );
        let (_, e) = chat(r#"{"model":"m","messages":"hi"}"#).err().unwrap();
        assert_eq!(e.code, Some("invalid_type"));
        let (_, e) = parse(&Endpoint::Messages, Dialect::Anthropic, br#"{"model":"m"}"#)
            .err()
            .unwrap();
        assert_eq!(e.message, "messages: Field required");
    }

    #[test]
    fn embedding_inputs() {
        let p = |s: &'static str| {
            parse(&Endpoint::Embeddings, Dialect::OpenAi, s.as_bytes())
                .ok()
                .unwrap()
        };
        assert_eq!(p(r#"{"model":"e","input":"a"}"#).embedding_inputs(), 1);
        assert_eq!(
            p(r#"{"model":"e","input":["a","b","c"]}"#).embedding_inputs(),
            3
        );
        assert_eq!(p(r#"{"model":"e","input":[1,2,3]}"#).embedding_inputs(), 1);
        assert_eq!(
            p(r#"{"model":"e","input":[[1],[2]]}"#).embedding_inputs(),
            2
        );
    }
}
