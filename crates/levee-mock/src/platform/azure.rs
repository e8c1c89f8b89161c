//! Azure OpenAI's face: the v1 API (`/openai/v1/...`) and deployments
//! (`/openai/deployments/{deployment}/{operation}?api-version=…`), an
//! `api-key` or an Entra ID bearer token required, OpenAI's error shape
//! with Azure's `retry-after-ms` on a 429.

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION};
use http::{Response, StatusCode};

use super::{set_path, Accepted, Ctx, Refused};
use crate::body::MockBody;
use crate::MockApi;

/// Azure's 401 and 404 bodies.
fn refused(status: StatusCode, auth: bool, message: &str) -> Refused {
    Refused::json(
        status,
        auth,
        serde_json::json!({ "error": { "code": status.as_u16().to_string(), "message": message } }),
    )
}

pub(super) fn accept(parts: &mut http::request::Parts, body: Bytes) -> Result<Accepted, Refused> {
    let key = parts
        .headers
        .get("api-key")
        .filter(|v| !v.as_bytes().trim_ascii().is_empty());
    let bearer = parts
        .headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|t| !t.trim().is_empty());
    if key.is_none() && bearer.is_none() {
        return Err(refused(
            StatusCode::UNAUTHORIZED,
            true,
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
        ));
    }
    let path = parts.uri.path().to_string();
    let query: Vec<(String, String)> = parts
        .uri
        .query()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .unwrap_or_default();
    let version = query.iter().find(|(k, _)| k == "api-version");
    let rest_query: Vec<String> = query
        .iter()
        .filter(|(k, _)| k != "api-version")
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let with_query = |p: String| match rest_query.is_empty() {
        true => p,
        false => format!("{p}?{}", rest_query.join("&")),
    };
    let native = if let Some(rest) = path.strip_prefix("/openai/v1/") {
        with_query(format!("/v1/{rest}"))
    } else if let Some(rest) = path.strip_prefix("/openai/deployments/") {
        let Some((_, op)) = rest.split_once('/') else {
            return Err(refused(StatusCode::NOT_FOUND, false, "Resource not found"));
        };
        if version.is_none_or(|(_, v)| v.is_empty()) {
            return Err(refused(
                StatusCode::NOT_FOUND,
                false,
                "Resource not found: the deployments API needs an `api-version` query parameter",
            ));
        }
        if !matches!(op, "chat/completions" | "completions" | "embeddings") {
            return Err(refused(StatusCode::NOT_FOUND, false, "Resource not found"));
        }
        with_query(format!("/v1/{op}"))
    } else if path == "/openai/models" && version.is_some() {
        "/v1/models".to_string()
    } else {
        return Err(refused(StatusCode::NOT_FOUND, false, "Resource not found"));
    };
    set_path(parts, &native)?;
    parts.headers.remove("api-key");
    Ok(Accepted {
        body,
        native: MockApi::OpenAi,
        ctx: Ctx::Azure,
    })
}

/// Azure's 429 carries `retry-after-ms` beside `retry-after`, and the
/// request-rate fields.
pub(super) fn encode(mut resp: Response<MockBody>) -> Response<MockBody> {
    if resp.status() == StatusCode::TOO_MANY_REQUESTS {
        let seconds = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(s) = seconds {
            if let Ok(v) = HeaderValue::from_str(&(s * 1000).to_string()) {
                resp.headers_mut().insert("retry-after-ms", v);
            }
        }
        // A limiter that refused on tokens has set the true counts already.
        resp.headers_mut()
            .entry("x-ratelimit-remaining-requests")
            .or_insert(HeaderValue::from_static("0"));
    }
    resp
}
