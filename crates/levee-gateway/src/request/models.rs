//! `GET /v1/models` and `GET /v1/models/{id}`: the models a caller can
//! send, in the caller's dialect.
//!
//! For each route, in file order, only its first entry (the primary, or a
//! balanced group's members): an exact-match route's names; else the
//! primary's configured `model`, or, when it has none (the caller's model
//! is passed through), every model the primary provider's own `/v1/models`
//! lists; with the route's `match.model_prefix` in front when the prefix
//! ends at a separator (it is removed on the way up), as they are when the
//! prefix is part of model names (`claude-`). A name is listed only where a
//! request for it takes the route that listed it (an earlier route or an
//! exact name hides it) and reaches the model it names, and once: a
//! fallback's model is never listed under its primary's prefix.
//!
//! A provider's list is fetched with its own key through the gateway's
//! upstream pool, within [`FETCH_TIMEOUT`], and kept [`FRESH`] (a failed
//! fetch [`FAILED_FRESH`]: a provider that is down is not asked on every
//! call); a provider that fails is left out of the answer and logged, never
//! failing the whole list.

use crate::http::collect::collect_limited;
use crate::http::respond::{full, Body, LeveeError, Verdict, Why};
use crate::runtime::shared::Shared;
use crate::upstream::listed::Fetched;
pub use crate::upstream::listed::Listed;
use crate::upstream::{build_request_with, ProviderRuntime};
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::{Method, Response};
use levee_config::Api;
use levee_wire::models::Page;
use levee_wire::Dialect;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How long a provider's list is kept.
pub const FRESH: Duration = Duration::from_secs(60);
/// How long a failed fetch keeps the provider out of the list before it is
/// asked again.
pub const FAILED_FRESH: Duration = Duration::from_secs(10);
/// The longest a fetch of one provider's list (every page) may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of one page of a provider's list.
const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024;
/// Most pages of an Anthropic list followed (1,000 models each).
const MAX_PAGES: usize = 10;

/// The provider's list: kept, or fetched now. `None` when the provider
/// could not be asked or gave no usable list.
async fn list_of(p: &ProviderRuntime) -> Option<Arc<[Listed]>> {
    let clock = p.clock();
    let mut state = p.models.state.lock().await;
    if let Some(f) = state.as_ref() {
        let keep = if f.models.is_some() {
            FRESH
        } else {
            FAILED_FRESH
        };
        if clock.since(f.at) < keep {
            return f.models.clone();
        }
    }
    let models = match tokio::time::timeout(FETCH_TIMEOUT, fetch(p)).await {
        Ok(Ok(list)) => Some(Arc::from(list)),
        Ok(Err(why)) => {
            tracing::warn!(target: "levee::models", provider = %p.name, reason = %why, "the provider's model list could not be read; it is left out of GET /v1/models");
            None
        }
        Err(_) => {
            let ms = FETCH_TIMEOUT.as_millis();
            tracing::warn!(target: "levee::models", provider = %p.name, "the provider's model list did not arrive within {ms} ms; it is left out of GET /v1/models");
            None
        }
    };
    *state = Some(Fetched {
        at: clock.now(),
        models: models.clone(),
    });
    models
}

/// Reads the provider's whole list (following Anthropic's pages).
async fn fetch(p: &ProviderRuntime) -> Result<Vec<Listed>, String> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let path = match (p.api, &after) {
            (Api::OpenAi, _) => levee_wire::paths::MODELS.to_string(),
            (Api::Anthropic, None) => format!("{}?limit=1000", levee_wire::paths::MODELS),
            (Api::Anthropic, Some(a)) => {
                let a =
                    percent_encoding::utf8_percent_encode(a, percent_encoding::NON_ALPHANUMERIC);
                format!("{}?limit=1000&after_id={a}", levee_wire::paths::MODELS)
            }
        };
        let uri = match p.platform.target(&path, &Bytes::new())? {
            Some((path, _)) => p.platform_uri(&path),
            None => p.uri_for(&path),
        }
        .ok_or_else(|| "the provider's base_url gives no model list URI".to_string())?;
        let mut req = build_request_with(
            p,
            Method::GET,
            &HeaderMap::new(),
            uri,
            Bytes::new(),
            FETCH_TIMEOUT,
            None,
        );
        if p.platform.authorizes() {
            let unix_ms = p.clock().unix_ms();
            p.platform
                .authorize(&mut req, unix_ms)
                .await
                .map_err(|e| e.to_string())?;
        }
        let resp = p
            .send(req, p.clock().now())
            .await
            .map_err(|e| e.to_string())?;
        let resp = match p.platform.maps_answers() {
            true => p.platform.answer(resp, false, &path),
            false => resp,
        };
        let status = resp.status();
        let body = collect_limited(resp.into_body(), MAX_PAGE_BYTES)
            .await
            .map_err(|_| {
                format!(
                    "the list (HTTP {}) could not be read whole",
                    status.as_u16()
                )
            })?;
        if !status.is_success() {
            return Err(format!("HTTP {}", status.as_u16()));
        }
        let page: Value =
            serde_json::from_slice(&body).map_err(|e| format!("the list is not JSON: {e}"))?;
        let data = page
            .get("data")
            .and_then(Value::as_array)
            .ok_or("the list has no `data` array")?;
        out.extend(data.iter().filter_map(listed));
        let more = page.get("has_more").and_then(Value::as_bool) == Some(true);
        match page.get("last_id").and_then(Value::as_str) {
            Some(last) if more && p.api == Api::Anthropic => after = Some(last.to_string()),
            _ => return Ok(out),
        }
    }
    Ok(out)
}

/// One item of a provider's list (an item without a string `id` is skipped).
fn listed(v: &Value) -> Option<Listed> {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let id = text("id").filter(|id| !id.is_empty())?;
    let created_at = text("created_at");
    let created = v
        .get("created")
        .and_then(Value::as_i64)
        .or_else(|| created_at.as_deref().and_then(unix_secs_of))
        .unwrap_or(0);
    Some(Listed {
        id,
        created,
        created_at,
        display_name: text("display_name"),
        owned_by: text("owned_by"),
        lifecycle: text("lifecycle"),
    })
}

/// One model the gateway lists: the name a caller sends, and what is known
/// of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub created: i64,
    pub created_at: Option<String>,
    pub display_name: String,
    pub owned_by: String,
    pub lifecycle: String,
    /// The model a request for `id` is sent upstream as.
    pub upstream: String,
}

impl Entry {
    fn new(id: String, provider: &str, upstream: &str, known: Option<&Listed>) -> Entry {
        Entry {
            id,
            upstream: upstream.to_string(),
            created: known.map_or(0, |l| l.created),
            created_at: known.and_then(|l| l.created_at.clone()),
            display_name: known
                .and_then(|l| l.display_name.clone())
                .unwrap_or_else(|| upstream.to_string()),
            owned_by: known
                .and_then(|l| l.owned_by.clone())
                .unwrap_or_else(|| provider.to_string()),
            lifecycle: known
                .and_then(|l| l.lifecycle.clone())
                .unwrap_or_else(|| "active".to_string()),
        }
    }

    /// The model in `dialect`'s shape (OpenAI's `Model`, Anthropic's
    /// `ModelInfo`).
    fn to_json(&self, dialect: Dialect) -> Value {
        match dialect {
            Dialect::OpenAi => json!({
                "id": self.id,
                "object": "model",
                "created": self.created,
                "owned_by": self.owned_by,
            }),
            Dialect::Anthropic => json!({
                "type": "model",
                "id": self.id,
                "display_name": self.display_name,
                "created_at": self.created_at.clone().unwrap_or_else(|| rfc3339(self.created)),
                "lifecycle": self.lifecycle,
            }),
        }
    }
}

/// Every model a caller can send, in route order.
pub async fn list(shared: &Shared) -> Vec<Entry> {
    let config = &shared.config;
    // Each provider's list, fetched at most once per answer.
    let mut lists: Vec<Option<Option<Arc<[Listed]>>>> = vec![None; shared.providers.len()];
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, route) in config.routes.iter().enumerate() {
        let mut candidates = Vec::new();
        // Only the route's first entry (its primary, or the members of a
        // balanced group in first place): a fallback's model answers when
        // the primary cannot, and is not what the id names.
        for (t, target) in route.targets.iter().enumerate().take(route.first_entry) {
            let p = target.provider;
            let provider = &shared.providers[p];
            if route.matcher.is_exact() {
                let known = match &target.model {
                    Some(_) => None,
                    None => {
                        if lists[p].is_none() {
                            lists[p] = Some(list_of(provider).await);
                        }
                        lists[p].clone().flatten()
                    }
                };
                for name in &route.matcher.models {
                    let sent = route.rewrite_model(t, name);
                    let meta = known
                        .as_deref()
                        .and_then(|l| l.iter().find(|x| x.id == sent));
                    candidates.push((t, Entry::new(name.clone(), &provider.name, sent, meta)));
                }
                continue;
            }
            if lists[p].is_none() {
                lists[p] = Some(list_of(provider).await);
            }
            let known = lists[p].clone().flatten();
            match &target.model {
                Some(m) => {
                    let meta = known.as_deref().and_then(|l| l.iter().find(|x| x.id == *m));
                    if let Some(id) = id_for(route, m) {
                        candidates.push((t, Entry::new(id, &provider.name, m, meta)));
                    }
                }
                None => {
                    for l in known.as_deref().unwrap_or_default() {
                        if let Some(id) = id_for(route, &l.id) {
                            candidates.push((t, Entry::new(id, &provider.name, &l.id, Some(l))));
                        }
                    }
                }
            }
        }
        for (t, e) in candidates {
            // Listed only where a request for the id takes this route and
            // reaches the model the id names.
            let reaches = route.rewrite_model(t, &e.id) == e.upstream;
            if reaches && carried_by(config, i, &e.id) && seen.insert(e.id.clone()) {
                out.push(e);
            }
        }
    }
    out
}

/// The id a caller sends on `route` for the provider's `model`: the
/// route's prefix in front when it ends at a separator (it is removed
/// again on the way up); the model itself when the prefix is part of
/// model names (`claude-`) and the model has it; else none.
fn id_for(route: &levee_config::Route, model: &str) -> Option<String> {
    let Some(prefix) = route.matcher.prefix() else {
        return Some(model.to_string());
    };
    if route.matcher.ends_at_separator() {
        return Some(format!("{prefix}{model}"));
    }
    if model.starts_with(prefix) {
        return Some(model.to_string());
    }
    // `openai` strips `openai/` (the separator in the name).
    Some(format!("{prefix}/{model}")).filter(|id| route.matcher.strip(id) == model)
}

/// Whether a request for `model` takes route `i` on some path it serves.
fn carried_by(config: &levee_config::Config, i: usize, model: &str) -> bool {
    match config.routes[i].matcher.path.as_deref() {
        Some(path) => config.route_for(path, model) == Some(i),
        None => levee_wire::paths::POST
            .iter()
            .any(|path| config.route_for(path, model) == Some(i)),
    }
}

/// Answers `GET /v1/models` or `GET /v1/models/{id}` (`asked`, with its
/// `query`) in the caller's dialect.
pub async fn answer(
    shared: &Shared,
    dialect: Dialect,
    asked: &str,
    query: Option<&str>,
) -> Result<Response<Body>, LeveeError> {
    let models = list(shared).await;
    let body = match asked.strip_prefix("/v1/models/") {
        Some(id) => {
            let id = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
            let Some(m) = models.iter().find(|m| m.id == id) else {
                let shown: String = id.chars().take(100).filter(|c| !c.is_control()).collect();
                let msg = match dialect {
                    Dialect::OpenAi => format!(
                        "The model `{shown}` does not exist or you do not have access to it."
                    ),
                    Dialect::Anthropic => format!("model: {shown}"),
                };
                // The providers' own 404 for a model (OpenAI's code
                // `model_not_found`), which the SDKs raise as `NotFoundError`.
                let mut e = LeveeError::of(Why::NotFound, msg.clone());
                e.verdict = Some(Box::new(Verdict {
                    status: 404,
                    headers: HeaderMap::new(),
                    body: levee_wire::error::body(dialect, 404, &msg, None, None),
                }));
                return Err(e);
            };
            m.to_json(dialect)
        }
        None => match dialect {
            Dialect::OpenAi => {
                let data: Vec<Value> = models.iter().map(|m| m.to_json(dialect)).collect();
                json!({"object": "list", "data": data})
            }
            Dialect::Anthropic => {
                let page = Page::of_query(query).map_err(LeveeError::bad_request)?;
                anthropic_page(&page, &models)
            }
        },
    };
    let mut out = Response::new(full(body.to_string()));
    out.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(out)
}

/// The page of the list an Anthropic caller asks for (`limit` 20 when not
/// given, as Anthropic pages), after `after_id` or before `before_id`.
fn anthropic_page(asked: &Page, all: &[Entry]) -> Value {
    let limit = asked.limit.unwrap_or(20);
    let at = |id: &Option<String>| id.as_deref().map(|id| all.iter().position(|m| m.id == id));
    let (start, end) = match (at(&asked.after_id), at(&asked.before_id)) {
        (Some(Some(a)), _) => (a + 1, (a + 1 + limit).min(all.len())),
        (Some(None), _) | (None, Some(None)) => (0, 0),
        (None, Some(Some(b))) => (b.saturating_sub(limit), b),
        (None, None) => (0, limit.min(all.len())),
    };
    let page = &all[start..end];
    let has_more = match asked.before_id {
        Some(_) => start > 0,
        None => end < all.len(),
    };
    json!({
        "data": page.iter().map(|m| m.to_json(Dialect::Anthropic)).collect::<Vec<_>>(),
        "has_more": has_more,
        "first_id": page.first().map(|m| m.id.clone()),
        "last_id": page.last().map(|m| m.id.clone()),
    })
}

/// Unix seconds as an RFC 3339 UTC time (`1970-01-01T00:00:00Z`).
pub fn rfc3339(secs: i64) -> String {
    levee_wire::civil::rfc3339(secs)
}

/// The unix seconds of an RFC 3339 time (`2025-02-19T00:00:00Z`, a
/// fraction and a `±HH:MM` offset read too); `None` when it is not one.
pub fn unix_secs_of(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    let offset = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    Some(levee_wire::civil::days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_go_both_ways_between_unix_seconds_and_rfc_3339() {
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (-86_400, "1969-12-31T00:00:00Z"),
        ] {
            assert_eq!(rfc3339(secs), text);
            assert_eq!(unix_secs_of(text), Some(secs), "{text}");
        }
        assert_eq!(
            unix_secs_of("2023-11-14T23:13:20.123+01:00"),
            Some(1_700_000_000)
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20",
            "x023-11-14T22:13:20Z",
        ] {
            assert_eq!(unix_secs_of(bad), None, "{bad}");
        }
    }

    fn entries(n: usize) -> Vec<Entry> {
        (0..n)
            .map(|i| Entry::new(format!("m{i}"), "p", &format!("m{i}"), None))
            .collect()
    }

    #[test]
    fn an_anthropic_page_is_cut_as_anthropic_cuts_it() {
        let all = entries(5);
        let page = |q: &str| anthropic_page(&Page::of_query(Some(q)).unwrap(), &all);
        let first = page("limit=2");
        assert_eq!(first["first_id"], "m0");
        assert_eq!(first["last_id"], "m1");
        assert_eq!(first["has_more"], true);
        let next = page("limit=2&after_id=m3");
        assert_eq!(next["data"].as_array().unwrap().len(), 1);
        assert_eq!(next["has_more"], false);
        let before = page("limit=2&before_id=m3");
        assert_eq!(
            (before["first_id"].as_str(), before["has_more"].as_bool()),
            (Some("m1"), Some(true))
        );
        let whole = page("");
        assert_eq!(whole["data"].as_array().unwrap().len(), 5);
        assert_eq!(whole["has_more"], false);
        assert_eq!(whole["data"][0]["created_at"], "1970-01-01T00:00:00Z");
        assert_eq!(page("after_id=nope")["data"].as_array().unwrap().len(), 0);
        assert!(Page::of_query(Some("limit=1001")).is_err());
    }

    #[test]
    fn a_list_item_without_an_id_is_skipped_and_times_are_read_in_either_shape() {
        assert_eq!(listed(&json!({"object": "model"})), None);
        let openai = listed(&json!({"id": "gpt", "created": 5, "owned_by": "system"})).unwrap();
        assert_eq!(
            (openai.created, openai.owned_by.as_deref()),
            (5, Some("system"))
        );
        let anthropic =
            listed(&json!({"id": "claude", "created_at": "1970-01-01T00:00:07Z", "display_name": "Claude"}))
                .unwrap();
        assert_eq!(anthropic.created, 7);
        let e = Entry::new("a/claude".into(), "anthropic", "claude", Some(&anthropic));
        assert_eq!(
            e.to_json(Dialect::Anthropic)["created_at"],
            "1970-01-01T00:00:07Z"
        );
        assert_eq!(e.to_json(Dialect::OpenAi)["owned_by"], "anthropic");
    }
}
