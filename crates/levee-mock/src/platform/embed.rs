//! Bedrock's embedding models by `InvokeModel` (`--api bedrock`), each
//! body checked as strictly as Bedrock checks it, then answered by the
//! OpenAI embeddings endpoint and written back in the model's own shape:
//!
//! - Amazon Titan Text Embeddings (`amazon.titan-embed-text-v1`, `-v2:0`):
//!   `{"inputText"}` (one text), v2 also `dimensions` (256, 512 or 1024,
//!   default 1024), `normalize`, `embeddingTypes`; answered
//!   `{"embedding": [...], "inputTextTokenCount"}`. v1 takes `inputText`
//!   only and answers 1,536 values.
//! - Cohere Embed (`cohere.embed-english-v3`, `cohere.embed-multilingual-v3`):
//!   `{"texts": [1 to 96], "input_type"}` (`search_document`,
//!   `search_query`, `classification`, `clustering`; required), `truncate`,
//!   `embedding_types`; answered `{"embeddings": [[...]], "id",
//!   "response_type": "embeddings_floats", "texts"}`, 1,024 values each.
//!
//! Both carry the input token count in `x-amzn-bedrock-input-token-count`.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::Refused;

/// An embedding model family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    TitanV1,
    TitanV2,
    Cohere,
}

/// The family of an embedding model id (`None`: not one).
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

fn malformed(why: &str) -> Refused {
    super::bedrock::validation(&format!(
        "Malformed input request: {why}, please reformat your input and try again."
    ))
}

/// The OpenAI embeddings request for a Titan or Cohere body.
pub(super) fn native_body(family: Family, body: &[u8], model: &str) -> Result<Bytes, Refused> {
    let fields: Map<String, Value> =
        serde_json::from_slice(body).map_err(|_| malformed("#: the body is not a JSON object"))?;
    let allowed: &[&str] = match family {
        Family::TitanV1 => &["inputText"],
        Family::TitanV2 => &["inputText", "dimensions", "normalize", "embeddingTypes"],
        Family::Cohere => &[
            "texts",
            "input_type",
            "truncate",
            "embedding_types",
            "images",
        ],
    };
    if let Some(k) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(malformed(&format!(
            "#: extraneous key [{k}] is not permitted"
        )));
    }
    let (input, dimensions) = match family {
        Family::TitanV1 | Family::TitanV2 => {
            let text = fields
                .get("inputText")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed("#: required key [inputText] not found"))?;
            let dims = match fields.get("dimensions") {
                None if family == Family::TitanV1 => 1536,
                None => 1024,
                Some(d) => match d.as_u64() {
                    Some(n @ (256 | 512 | 1024)) => n,
                    _ => return Err(malformed("#/dimensions: must be 256, 512 or 1024")),
                },
            };
            (json!([text]), dims)
        }
        Family::Cohere => {
            let texts = fields
                .get("texts")
                .and_then(Value::as_array)
                .filter(|t| (1..=96).contains(&t.len()) && t.iter().all(Value::is_string))
                .ok_or_else(|| malformed("#/texts: expected 1 to 96 strings"))?;
            match fields.get("input_type").and_then(Value::as_str) {
                Some("search_document" | "search_query" | "classification" | "clustering") => {}
                _ => return Err(malformed("#: required key [input_type] not found or not one of search_document, search_query, classification, clustering")),
            }
            (Value::Array(texts.clone()), 1024)
        }
    };
    let out = json!({ "model": model, "input": input, "dimensions": dimensions });
    Ok(Bytes::from(out.to_string()))
}

/// An OpenAI embeddings answer in the family's shape, and its input token
/// count.
pub(super) fn answer(family: Family, native: &[u8]) -> (Bytes, u64) {
    let v: Value = serde_json::from_slice(native).unwrap_or(Value::Null);
    let vectors: Vec<Value> = v
        .get("data")
        .and_then(Value::as_array)
        .map(|d| d.iter().map(|e| e["embedding"].clone()).collect())
        .unwrap_or_default();
    let tokens = v
        .pointer("/usage/prompt_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let out = match family {
        Family::TitanV1 | Family::TitanV2 => json!({
            "embedding": vectors.first().cloned().unwrap_or(Value::Null),
            "inputTextTokenCount": tokens,
        }),
        Family::Cohere => json!({
            "embeddings": vectors,
            "id": "levee-mock-embed",
            "response_type": "embeddings_floats",
            "texts": [],
        }),
    };
    (Bytes::from(out.to_string()), tokens)
}
