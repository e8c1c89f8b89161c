//! Where each stored object lives: the provider (and route) that created a
//! response OpenAI keeps (`POST /v1/responses`), so that its reads
//! (`GET`, `DELETE`, `…/input_items`, `…/cancel` on `/v1/responses/{id}`)
//! go to the account that holds it. With two OpenAI-dialect providers, a
//! read sent by a fixed rule reached the wrong account (404) or was
//! refused.
//!
//! Kept in this process (bounded: the oldest entries go first) and, with
//! `state: { backend: redis }`, in Redis under the key prefix for the
//! object's lifetime, so that any replica finds it. A Redis that is down
//! leaves the local record, as the other shared state does.

use crate::state::{RedisState, StateUse};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// How long a stored response's origin is kept: OpenAI keeps stored
/// responses 30 days.
pub const LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// Most origins kept in this process.
const MAX_LOCAL: usize = 100_000;

/// Where one stored object was created: route and provider, by name (the
/// names outlive a config reload, the indices do not).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    pub route: String,
    pub provider: String,
}

impl Origin {
    fn encode(&self) -> String {
        format!("{}\n{}", self.route, self.provider)
    }

    fn decode(s: &str) -> Option<Origin> {
        let (route, provider) = s.split_once('\n')?;
        Some(Origin {
            route: route.to_string(),
            provider: provider.to_string(),
        })
    }
}

/// The origins of stored objects.
#[derive(Debug, Default)]
pub struct Origins {
    local: Mutex<Local>,
}

#[derive(Debug, Default)]
struct Local {
    map: HashMap<String, Origin>,
    order: VecDeque<String>,
}

/// An id worth keeping: 1 to 256 visible ASCII characters.
fn usable(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256 && id.bytes().all(|b| b.is_ascii_graphic())
}

impl Origins {
    /// Notes that object `id` was created at `origin`.
    pub async fn put(&self, redis: Option<&RedisState>, id: &str, origin: Origin) {
        if !usable(id) {
            return;
        }
        if let Some(r) = redis {
            let key = format!("{}resp:{id}", r.prefix());
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key)
                .arg(origin.encode())
                .arg("EX")
                .arg(LIFETIME.as_secs());
            let _: Option<()> = r
                .query_within(StateUse::StoredObjects, cmd, r.timeout())
                .await;
        }
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        if local.map.insert(id.to_string(), origin).is_none() {
            local.order.push_back(id.to_string());
        }
        while local.order.len() > MAX_LOCAL {
            if let Some(old) = local.order.pop_front() {
                local.map.remove(&old);
            }
        }
    }

    /// Where object `id` was created, if known here or in Redis.
    pub async fn get(&self, redis: Option<&RedisState>, id: &str) -> Option<Origin> {
        if !usable(id) {
            return None;
        }
        if let Some(o) = self
            .local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .get(id)
        {
            return Some(o.clone());
        }
        let r = redis?;
        let mut cmd = redis::cmd("GET");
        cmd.arg(format!("{}resp:{id}", r.prefix()));
        let found: Option<Option<String>> = r
            .query_within(StateUse::StoredObjects, cmd, r.timeout())
            .await;
        found.flatten().as_deref().and_then(Origin::decode)
    }
}

/// The `id` of a created response: the top-level `id` of a JSON body, or
/// of the `response` object of a stream's first event
/// (`response.created`).
pub fn response_id(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Created {
        id: Option<String>,
        response: Option<Inner>,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        id: Option<String>,
    }
    let c: Created = serde_json::from_slice(body).ok()?;
    c.id.or(c.response.and_then(|r| r.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn origins_are_kept_and_found() {
        let o = Origins::default();
        let at = Origin {
            route: "default".into(),
            provider: "azure".into(),
        };
        o.put(None, "resp_1", at.clone()).await;
        assert_eq!(o.get(None, "resp_1").await, Some(at));
        assert_eq!(o.get(None, "resp_2").await, None);
        assert_eq!(o.get(None, "bad id").await, None);
    }

    #[test]
    fn ids_are_read_from_bodies_and_first_events() {
        assert_eq!(
            response_id(br#"{"id":"resp_9","object":"response"}"#).as_deref(),
            Some("resp_9")
        );
        let event = br#"{"type":"response.created","response":{"id":"resp_7"}}"#;
        assert_eq!(response_id(event).as_deref(), Some("resp_7"));
        assert_eq!(response_id(b"not json"), None);
    }
}
