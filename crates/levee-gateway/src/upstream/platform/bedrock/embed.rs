//! OpenAI's embeddings requests on Bedrock's embedding models, by
//! `InvokeModel`: Amazon Titan Text Embeddings (`amazon.titan-embed-text-v1`,
//! `-v2:0`; one text per request, `dimensions` 256, 512 or 1024 on v2) and
//! Cohere Embed (`cohere.embed-english-v3`, `-multilingual-v3`; 1 to 96
//! texts, `input_type` from the request's own `input_type` field, else
//! `search_document`). The answer is read back as OpenAI's embeddings
//! list, floats, its `usage` from the model's token count (Titan's
//! `inputTextTokenCount`, else Bedrock's `x-amzn-bedrock-input-token-count`);
//! a request for `encoding_format: base64` is answered with floats too,
//! which the OpenAI SDKs read as they read base64. An error is answered in
//! OpenAI's shape, the caller's.

use super::*;

/// An embedding model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Family {
    TitanV1,
    TitanV2,
    Cohere,
}

/// The family of an embedding model id (`None`: not an embedding model).
pub(super) fn family(model: &str) -> Option<Family> {
    let id = model.rsplit('/').next().unwrap_or(model);
    if id.contains("amazon.titan-embed-text-v1") {
        Some(Family::TitanV1)
    } else if id.contains("amazon.titan-embed-text-v2") {
        Some(Family::TitanV2)
    } else if id.contains("cohere.embed-") {
        Some(Family::Cohere)
    } else {
        None
    }
}

/// The family of an `InvokeModel` attempt's path, when it is an embedding
/// model's.
pub(super) fn family_of_path(path: &str) -> Option<Family> {
    let rest = path.split('?').next()?.strip_prefix("/model/")?;
    let (id, op) = rest.rsplit_once('/')?;
    if op != "invoke" {
        return None;
    }
    family(&percent_encoding::percent_decode_str(id).decode_utf8_lossy())
}

/// The texts of an OpenAI `input`: one string, or an array of strings.
fn texts(input: Option<&Value>) -> Result<Vec<Value>, String> {
    match input {
        Some(Value::String(s)) => Ok(vec![Value::String(s.clone())]),
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_string) => {
            Ok(items.clone())
        }
        _ => Err("Bedrock's embedding models take text: `input` must be a string or an array of strings (not tokens)".to_string()),
    }
}

/// The `InvokeModel` path and body for an OpenAI embeddings request.
pub(super) fn target(fields: &Map<String, Value>, model: &str) -> Result<(String, Bytes), String> {
    let family = family(model).ok_or_else(|| {
        format!("`{model}` is not one of Bedrock's Titan or Cohere embedding models (amazon.titan-embed-text-v2:0, cohere.embed-english-v3, …)")
    })?;
    for key in fields.keys() {
        let known = matches!(
            key.as_str(),
            "model" | "input" | "dimensions" | "encoding_format" | "user"
        ) || (key == "input_type" && family == Family::Cohere);
        if !known {
            return Err(format!(
                "Bedrock's embedding models have no counterpart for `{key}`"
            ));
        }
    }
    let texts = texts(fields.get("input"))?;
    let dims = fields.get("dimensions");
    let body = match family {
        Family::TitanV1 | Family::TitanV2 => {
            let [text] = &texts[..] else {
                return Err(format!("Titan embeds one text per request, and this one has {}: send one input, or route to a Cohere model", texts.len()));
            };
            let mut body = Map::new();
            body.insert("inputText".into(), text.clone());
            match (family, dims.and_then(Value::as_u64)) {
                (_, None) => {}
                (Family::TitanV2, Some(d @ (256 | 512 | 1024))) => {
                    body.insert("dimensions".into(), Value::from(d));
                }
                _ => {
                    return Err(format!(
                        "`{model}` takes no `dimensions` but 256, 512 or 1024 (Titan v2)"
                    ))
                }
            }
            Value::Object(body)
        }
        Family::Cohere => {
            if dims.is_some() {
                return Err(format!(
                    "`{model}` has a fixed number of dimensions: leave out `dimensions`"
                ));
            }
            if texts.len() > 96 {
                return Err(format!(
                    "Cohere embeds at most 96 texts per request, and this one has {}",
                    texts.len()
                ));
            }
            let input_type = fields
                .get("input_type")
                .cloned()
                .unwrap_or_else(|| Value::from("search_document"));
            serde_json::json!({ "texts": texts, "input_type": input_type })
        }
    };
    let path = format!("/model/{}/invoke", utf8_percent_encode(model, LABEL));
    let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
    Ok((path, Bytes::from(body)))
}

/// The most of an embeddings answer read.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// A Titan or Cohere answer read whole, then given as OpenAI's list.
pub(super) struct EmbedAnswer {
    read: Vec<u8>,
    model: String,
    /// Bedrock's `x-amzn-bedrock-input-token-count`.
    tokens: Option<u64>,
}

impl EmbedAnswer {
    pub(super) fn new(model: String, headers: &http::HeaderMap) -> Self {
        let tokens = headers
            .get("x-amzn-bedrock-input-token-count")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        EmbedAnswer {
            read: Vec::new(),
            model,
            tokens,
        }
    }

    fn list(&self) -> Result<Vec<u8>, String> {
        let v: Value = serde_json::from_slice(&self.read)
            .map_err(|e| format!("Bedrock's embeddings answer is not JSON: {e}"))?;
        let vectors: Vec<Value> = if let Some(one) = v.get("embedding") {
            vec![one.clone()]
        } else {
            match v.get("embeddings") {
                Some(Value::Array(all)) => all.clone(),
                Some(by_type) => by_type
                    .get("float")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                None => {
                    return Err(
                        "Bedrock's embeddings answer has no `embedding` or `embeddings`".into(),
                    )
                }
            }
        };
        let tokens = v
            .get("inputTextTokenCount")
            .and_then(Value::as_u64)
            .or(self.tokens)
            .unwrap_or(0);
        let data: Vec<Value> = vectors
            .into_iter()
            .enumerate()
            .map(|(index, embedding)| serde_json::json!({ "object": "embedding", "index": index, "embedding": embedding }))
            .collect();
        let out = serde_json::json!({
            "object": "list",
            "data": data,
            "model": self.model,
            "usage": { "prompt_tokens": tokens, "total_tokens": tokens },
        });
        serde_json::to_vec(&out).map_err(|e| e.to_string())
    }
}

impl Reframe for EmbedAnswer {
    fn data(&mut self, data: Bytes) -> Step {
        if self.read.len() + data.len() > MAX_ANSWER {
            let e = format!("Bedrock's embeddings answer is over {MAX_ANSWER} bytes");
            return Step::Fail(e.into());
        }
        self.read.extend_from_slice(&data);
        Step::More
    }

    fn end(&mut self) -> Step {
        match self.list() {
            Ok(body) => Step::Last(Some(Bytes::from(body))),
            Err(e) => Step::Fail(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn openai_embeddings_requests_become_titan_and_cohere_bodies() {
        let (path, body) = target(
            &fields(serde_json::json!({ "model": "x", "input": "hello", "dimensions": 512 })),
            "amazon.titan-embed-text-v2:0",
        )
        .unwrap();
        assert_eq!(path, "/model/amazon.titan-embed-text-v2%3A0/invoke");
        assert_eq!(&body[..], br#"{"dimensions":512,"inputText":"hello"}"#);
        let (_, body) = target(
            &fields(serde_json::json!({ "model": "x", "input": ["a", "b"], "input_type": "search_query" })),
            "cohere.embed-english-v3",
        )
        .unwrap();
        assert_eq!(
            &body[..],
            br#"{"input_type":"search_query","texts":["a","b"]}"#
        );
        let refused = |v: Value, m: &str| target(&fields(v), m).unwrap_err();
        assert!(refused(
            serde_json::json!({ "input": ["a", "b"] }),
            "amazon.titan-embed-text-v2:0"
        )
        .contains("one text"));
        assert!(refused(
            serde_json::json!({ "input": [1, 2] }),
            "cohere.embed-english-v3"
        )
        .contains("tokens"));
        assert!(refused(serde_json::json!({ "input": "a" }), "meta.llama3").contains("not one of"));
        assert_eq!(
            family_of_path("/model/cohere.embed-english-v3/invoke"),
            Some(Family::Cohere)
        );
        assert_eq!(family_of_path("/model/anthropic.claude/invoke"), None);
    }
}
