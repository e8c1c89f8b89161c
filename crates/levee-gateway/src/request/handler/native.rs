//! The request shapes of the clouds' own clients, accepted at the front so
//! that a service written against a cloud SDK needs only a new base URL:
//!
//! - the `AzureOpenAI` client: `/openai/deployments/{deployment}/chat/
//!   completions` and `…/embeddings` (`?api-version=`), the deployment
//!   naming the model; and Azure's v1 API under `/openai/v1/…`;
//! - the `AnthropicVertex` client: `[/v1]/projects/{p}/locations/{r}/
//!   publishers/anthropic/models/{model}:rawPredict` (`:streamRawPredict`
//!   for a stream; `…/models/count-tokens:rawPredict`), the model in the
//!   path and `anthropic_version` in the body.
//!
//! - anthropic's `AnthropicBedrock` client and boto3's `invoke_model` and
//!   `invoke_model_with_response_stream`: `/model/{id}/invoke` and
//!   `/model/{id}/invoke-with-response-stream`, the model id in the path,
//!   `anthropic_version` and an `anthropic_beta` array in the body; and
//!   boto3's `converse` and `converse_stream`: `/model/{id}/converse` and
//!   `/converse-stream`, a Converse request read as a Messages request. Its
//!   answer goes back in AWS's shapes (`aws_answer`).
//!
//! Each becomes the endpoint Levee serves (its route found by the model
//! in the path, so fallback, retries and the breaker apply as to any
//! request), and its answer, already in the dialect the client reads, goes
//! back as it is.

use bytes::Bytes;
use levee_wire::paths;

/// A native request, as the endpoint Levee serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Native {
    /// The endpoint it is served as.
    pub(crate) path: &'static str,
    /// The model its path names, put into the body (`None`: the body's).
    pub(crate) model: Option<String>,
    /// Fields of the cloud's own to take out of the body.
    pub(crate) strip: &'static [&'static str],
    /// The path says the answer streams (`stream: true` is set in the body).
    pub(crate) stream: bool,
    /// The body is a Converse request, read as a Messages request.
    pub(crate) converse: bool,
}

/// How a request that came in AWS's Bedrock shape is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AwsShape {
    pub(crate) stream: bool,
    pub(crate) converse: bool,
}

/// Whether a request to `path` came in AWS's Bedrock shape, and so is
/// answered in it.
pub(crate) fn aws_shape(path: &str) -> Option<AwsShape> {
    if !path.starts_with("/model/") {
        return None;
    }
    of(path).map(|n| AwsShape {
        stream: n.stream,
        converse: n.converse,
    })
}

/// The endpoint a native path is served as (the path itself when it is
/// not one).
pub(crate) fn canonical(path: &str) -> &str {
    match of(path) {
        Some(n) => n.path,
        None => path,
    }
}

/// The native shape of a request to `path`, if it is one.
pub(crate) fn of(path: &str) -> Option<Native> {
    if let Some(rest) = path.strip_prefix("/openai/") {
        return resource_path(rest);
    }
    if let Some(rest) = path.strip_prefix("/model/") {
        return invoke_path(rest);
    }
    let rest = path.strip_prefix("/v1").unwrap_or(path);
    let rest = rest.strip_prefix("/projects/")?;
    publisher_path(rest)
}

fn resource_path(rest: &str) -> Option<Native> {
    if let Some(v1) = rest.strip_prefix("v1/") {
        let path = match v1 {
            "chat/completions" => paths::CHAT_COMPLETIONS,
            "embeddings" => paths::EMBEDDINGS,
            "responses" => paths::RESPONSES,
            _ => return None,
        };
        return Some(Native {
            path,
            model: None,
            strip: &[],
            stream: false,
            converse: false,
        });
    }
    let (deployment, op) = rest.strip_prefix("deployments/")?.split_once('/')?;
    let path = match op {
        "chat/completions" => paths::CHAT_COMPLETIONS,
        "embeddings" => paths::EMBEDDINGS,
        _ => return None,
    };
    let deployment = percent_encoding::percent_decode_str(deployment)
        .decode_utf8()
        .ok()?
        .into_owned();
    (!deployment.is_empty()).then_some(Native {
        path,
        model: Some(deployment),
        strip: &[],
        stream: false,
        converse: false,
    })
}

fn invoke_path(rest: &str) -> Option<Native> {
    let (id, op) = rest.rsplit_once('/')?;
    let (stream, converse) = match op {
        "invoke" => (false, false),
        "invoke-with-response-stream" => (true, false),
        "converse" => (false, true),
        "converse-stream" => (true, true),
        _ => return None,
    };
    let model = percent_encoding::percent_decode_str(id)
        .decode_utf8()
        .ok()?
        .into_owned();
    (!model.is_empty()).then_some(Native {
        path: paths::MESSAGES,
        model: Some(model),
        strip: &["anthropic_version", "anthropic_beta"],
        stream,
        converse,
    })
}

fn publisher_path(rest: &str) -> Option<Native> {
    // {p}/locations/{r}/publishers/anthropic/models/{model}:{method}
    let mut parts = rest.splitn(6, '/');
    let (_project, locations, _region, publishers, anthropic, models_and_rest) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if locations != "locations" || publishers != "publishers" || anthropic != "anthropic" {
        return None;
    }
    let (model, method) = models_and_rest.strip_prefix("models/")?.rsplit_once(':')?;
    let model = percent_encoding::percent_decode_str(model)
        .decode_utf8()
        .ok()?
        .into_owned();
    match (model.as_str(), method) {
        ("count-tokens", "rawPredict") => Some(Native {
            path: paths::COUNT_TOKENS,
            model: None,
            strip: &["anthropic_version"],
            stream: false,
            converse: false,
        }),
        (m, "rawPredict" | "streamRawPredict") if !m.is_empty() && !m.contains('/') => {
            Some(Native {
                path: paths::MESSAGES,
                model: Some(model),
                strip: &["anthropic_version"],
                stream: false,
                converse: false,
            })
        }
        _ => None,
    }
}

/// `body` as the served endpoint takes it: the path's model set (and
/// `stream` when the path says so), the cloud's own fields taken out, an
/// `anthropic_beta` array moved into the `anthropic-beta` field of
/// `headers`; a Converse request read as a Messages request. `Err`: why
/// it cannot be (not a JSON object, a Converse field with no Messages
/// counterpart).
pub(crate) fn body(
    n: &Native,
    body: &Bytes,
    headers: &mut http::HeaderMap,
) -> Result<Bytes, String> {
    if n.model.is_none() && n.strip.is_empty() {
        return Ok(body.clone());
    }
    let model = n.model.as_deref().unwrap_or("");
    if n.converse {
        return levee_translate::converse::messages_from_converse(body, model, n.stream)
            .map(Bytes::from)
            .map_err(|e| e.to_string());
    }
    let not_object = || "the request body must be a JSON object".to_string();
    let mut object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(|_| not_object())?;
    if let Some(serde_json::Value::Array(betas)) = object.get("anthropic_beta") {
        let names: Vec<&str> = betas.iter().filter_map(|b| b.as_str()).collect();
        if let Ok(v) = http::HeaderValue::from_str(&names.join(",")) {
            if !names.is_empty() {
                headers.insert("anthropic-beta", v);
            }
        }
    }
    for f in n.strip {
        object.remove(*f);
    }
    if n.stream {
        object.insert("stream".into(), serde_json::Value::Bool(true));
    }
    if let Some(m) = &n.model {
        object.insert("model".into(), serde_json::Value::String(m.clone()));
    }
    serde_json::to_vec(&object)
        .map(Bytes::from)
        .map_err(|_| not_object())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clouds_client_paths_are_read() {
        let d = of("/openai/deployments/my-gpt%2D4o/chat/completions").unwrap();
        assert_eq!(
            (d.path, d.model.as_deref()),
            (paths::CHAT_COMPLETIONS, Some("my-gpt-4o"))
        );
        assert_eq!(of("/openai/v1/embeddings").unwrap().path, paths::EMBEDDINGS);
        assert_eq!(of("/openai/deployments/x/completions"), None);
        let v = of("/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict").unwrap();
        assert_eq!(
            (v.path, v.model.as_deref()),
            (paths::MESSAGES, Some("claude-sonnet-4-5@20250929"))
        );
        let c =
            of("/projects/p/locations/global/publishers/anthropic/models/count-tokens:rawPredict")
                .unwrap();
        assert_eq!(c.path, paths::COUNT_TOKENS);
        assert_eq!(
            of("/v1/projects/p/locations/r/publishers/google/models/g:rawPredict"),
            None
        );
        assert_eq!(of("/v1/chat/completions"), None);
        assert_eq!(canonical("/v1/messages"), "/v1/messages");
    }

    #[test]
    fn the_body_gets_the_paths_model_and_loses_the_clouds_fields() {
        let n = of("/v1/projects/p/locations/r/publishers/anthropic/models/claude-x:rawPredict")
            .unwrap();
        let mut h = http::HeaderMap::new();
        let b = body(
            &n,
            &Bytes::from_static(br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":5}"#),
            &mut h,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["model"], "claude-x");
        assert!(v.get("anthropic_version").is_none());
        assert!(body(&n, &Bytes::from_static(b"[1]"), &mut h).is_err());
        let n = of("/model/anthropic.claude-x%3A0/invoke-with-response-stream").unwrap();
        assert_eq!(
            (n.path, n.model.as_deref(), n.stream),
            (paths::MESSAGES, Some("anthropic.claude-x:0"), true)
        );
        let b = body(
            &n,
            &Bytes::from_static(br#"{"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["a-1","b-2"],"max_tokens":5}"#),
            &mut h,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            (v["model"].as_str(), v["stream"].as_bool()),
            (Some("anthropic.claude-x:0"), Some(true))
        );
        assert!(v.get("anthropic_beta").is_none() && v.get("anthropic_version").is_none());
        assert_eq!(h["anthropic-beta"], "a-1,b-2");
        assert_eq!(
            aws_shape("/model/m/converse-stream"),
            Some(AwsShape {
                stream: true,
                converse: true
            })
        );
        assert_eq!(aws_shape("/model/m/converse-x"), None);
    }
}
