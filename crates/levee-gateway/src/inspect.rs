//! Request inspection: the model and the stream flag, from the JSON body.
//! The body is parsed once, borrowed; it is re-serialised only when a target
//! rewrites the model name.

use bytes::Bytes;
use serde::Deserialize;
use std::borrow::Cow;

/// What routing needs from a request body.
#[derive(Debug, PartialEq, Eq)]
pub struct Inspected {
    pub model: String,
    pub stream: bool,
}

/// Why a body cannot be routed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("request body has no `model` string")]
    MissingModel,
}

#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<serde_json::Value>,
}

/// Reads `model` and `stream` from a JSON object body.
pub fn inspect(body: &[u8]) -> Result<Inspected, InspectError> {
    let peek: Peek<'_> = serde_json::from_slice(body).map_err(|e| {
        let mut m = e.to_string();
        m.truncate(200);
        InspectError::InvalidJson(m)
    })?;
    let model = peek
        .model
        .filter(|m| !m.is_empty())
        .ok_or(InspectError::MissingModel)?;
    Ok(Inspected {
        model: model.into_owned(),
        stream: matches!(peek.stream, Some(serde_json::Value::Bool(true))),
    })
}

/// The body with `model` replaced (the original bytes when unchanged).
pub fn rewrite_model(body: &Bytes, from: &str, to: &str) -> Bytes {
    if from == to {
        return body.clone();
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(mut v) => {
            if let Some(obj) = v.as_object_mut() {
                obj.insert("model".into(), serde_json::Value::String(to.to_string()));
            }
            serde_json::to_vec(&v)
                .map(Bytes::from)
                .unwrap_or_else(|_| body.clone())
        }
        Err(_) => body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_and_stream() {
        assert_eq!(
            inspect(br#"{"model":"a/b","stream":true,"messages":[]}"#),
            Ok(Inspected {
                model: "a/b".into(),
                stream: true
            })
        );
        assert_eq!(
            inspect(br#"{"model":"x\u0041"}"#).map(|i| i.model),
            Ok("xA".into())
        );
        assert_eq!(
            inspect(br#"{"messages":[]}"#),
            Err(InspectError::MissingModel)
        );
        assert_eq!(inspect(br#"{"model":""}"#), Err(InspectError::MissingModel));
        assert!(matches!(
            inspect(b"{nope"),
            Err(InspectError::InvalidJson(_))
        ));
        assert!(matches!(inspect(b"[1]"), Err(InspectError::InvalidJson(_))));
        assert!(matches!(
            inspect(br#"{"model":5}"#),
            Err(InspectError::InvalidJson(_))
        ));
    }

    #[test]
    fn rewrite_keeps_everything_else() {
        let b = Bytes::from_static(br#"{"model":"anthropic/claude","max_tokens":5}"#);
        let out = rewrite_model(&b, "anthropic/claude", "claude");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["model"], "claude");
        assert_eq!(v["max_tokens"], 5);
        assert_eq!(rewrite_model(&b, "x", "x"), b);
    }
}
