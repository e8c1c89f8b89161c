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
        }),
        (m, "rawPredict" | "streamRawPredict") if !m.is_empty() && !m.contains('/') => {
            Some(Native {
                path: paths::MESSAGES,
                model: Some(model),
                strip: &["anthropic_version"],
            })
        }
        _ => None,
    }
}

/// `body` as the served endpoint takes it: the path's model set, the
/// cloud's own fields taken out. `None`: not a JSON object.
pub(crate) fn body(n: &Native, body: &Bytes) -> Option<Bytes> {
    if n.model.is_none() && n.strip.is_empty() {
        return Some(body.clone());
    }
    let mut object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).ok()?;
    for f in n.strip {
        object.remove(*f);
    }
    if let Some(m) = &n.model {
        object.insert("model".into(), serde_json::Value::String(m.clone()));
    }
    serde_json::to_vec(&object).ok().map(Bytes::from)
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
        let b = body(
            &n,
            &Bytes::from_static(br#"{"anthropic_version":"vertex-2023-10-16","max_tokens":5}"#),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["model"], "claude-x");
        assert!(v.get("anthropic_version").is_none());
        assert_eq!(body(&n, &Bytes::from_static(b"[1]")), None);
    }
}
