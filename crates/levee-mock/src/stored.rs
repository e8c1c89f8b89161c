//! The responses an OpenAI mock keeps, as OpenAI keeps the Responses API
//! answers created with `store` (the default): `GET /v1/responses/{id}`
//! reads one back, `…/input_items` lists what it was asked, `…/cancel`
//! cancels one created with `background: true` (any other is a 400), and
//! `DELETE` forgets it. An id the mock did not create, or has forgotten, is
//! a 404. The most recent [`MAX_STORED`] are kept.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use serde_json::{json, Value};

/// Most responses kept; the oldest is forgotten first.
pub(crate) const MAX_STORED: usize = 4096;

/// One kept response.
struct Kept {
    /// The completed response object, as it was answered.
    body: Bytes,
    /// The request's `input` as sent.
    input: Value,
    background: bool,
}

/// The kept responses, oldest first in `order`.
#[derive(Default)]
pub(crate) struct Stored {
    by_id: HashMap<String, Kept>,
    order: VecDeque<String>,
}

/// What a stored-response request is answered with: a status and a JSON body.
pub(crate) type Answered = (u16, Bytes);

impl Stored {
    /// Keeps the response `id` (`body`, the completed object) created from
    /// `request` (its `input` and `background` are read).
    pub(crate) fn keep(&mut self, id: String, body: Bytes, request: &[u8]) {
        let request: Value = serde_json::from_slice(request).unwrap_or(Value::Null);
        let kept = Kept {
            body,
            input: request.get("input").cloned().unwrap_or(Value::Null),
            background: request.get("background") == Some(&Value::Bool(true)),
        };
        if self.by_id.insert(id.clone(), kept).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > MAX_STORED {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
    }

    /// `GET /v1/responses/{id}`.
    pub(crate) fn get(&self, id: &str) -> Answered {
        match self.by_id.get(id) {
            Some(k) => (200, k.body.clone()),
            None => not_found(id),
        }
    }

    /// `POST /v1/responses/{id}/cancel`: the response as it now stands
    /// (the mock's have all completed, and cancelling a finished background
    /// response changes nothing).
    pub(crate) fn cancel(&self, id: &str) -> Answered {
        match self.by_id.get(id) {
            Some(k) if k.background => (200, k.body.clone()),
            Some(_) => invalid("Only responses created with background=true can be cancelled."),
            None => not_found(id),
        }
    }

    /// `DELETE /v1/responses/{id}`.
    pub(crate) fn delete(&mut self, id: &str) -> Answered {
        if self.by_id.remove(id).is_none() {
            return not_found(id);
        }
        self.order.retain(|k| k != id);
        let body = json!({"id": id, "object": "response", "deleted": true});
        (200, Bytes::from(body.to_string()))
    }

    /// `GET /v1/responses/{id}/input_items`: the request's input as items,
    /// newest first unless `order=asc`, `limit` (1 to 100, default 20) at a
    /// time after the item `after`.
    pub(crate) fn input_items(&self, id: &str, query: Option<&str>) -> Answered {
        let Some(k) = self.by_id.get(id) else {
            return not_found(id);
        };
        let (mut limit, mut asc, mut after) = (20usize, false, None);
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = crate::request::percent_decoded(v);
            match name {
                "limit" => match v.parse::<usize>() {
                    Ok(n) if (1..=100).contains(&n) => limit = n,
                    _ => {
                        return invalid(&format!(
                            "Invalid 'limit': expected an integer from 1 to 100, but got {v}."
                        ))
                    }
                },
                "order" if v == "asc" || v == "desc" => asc = v == "asc",
                "order" => {
                    return invalid(&format!(
                        "Invalid 'order': expected one of 'asc' or 'desc', but got '{v}'."
                    ))
                }
                "after" => after = Some(v),
                _ => {}
            }
        }
        let mut items = input_items(id, &k.input);
        if !asc {
            items.reverse();
        }
        let start = match after {
            Some(a) => match items.iter().position(|i| i["id"] == a.as_str()) {
                Some(p) => p + 1,
                None => items.len(),
            },
            None => 0,
        };
        let end = (start + limit).min(items.len());
        let page = &items[start.min(end)..end];
        let body = json!({
            "object": "list",
            "data": page,
            "first_id": page.first().map(|i| i["id"].clone()),
            "last_id": page.last().map(|i| i["id"].clone()),
            "has_more": end < items.len(),
        });
        (200, Bytes::from(body.to_string()))
    }
}

/// A request's `input` as the items OpenAI lists: a string is one user
/// message of `input_text`; a list's messages with string content get
/// their text as one content part (`output_text` for the assistant's);
/// every item gets an id.
fn input_items(response: &str, input: &Value) -> Vec<Value> {
    let tail = response.strip_prefix("resp_").unwrap_or(response);
    let text_message = |i: usize, role: &str, text: &Value| {
        let part = if role == "assistant" {
            "output_text"
        } else {
            "input_text"
        };
        json!({
            "id": format!("msg_in{tail}_{i}"),
            "type": "message",
            "role": role,
            "status": "completed",
            "content": [{"type": part, "text": text}],
        })
    };
    match input {
        Value::String(_) => vec![text_message(0, "user", input)],
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let role = item.get("role").and_then(Value::as_str);
                match (role, item.get("content")) {
                    (Some(role), Some(text @ Value::String(_))) => text_message(i, role, text),
                    _ => {
                        let mut item = item.clone();
                        if let Value::Object(fields) = &mut item {
                            fields
                                .entry("id")
                                .or_insert_with(|| json!(format!("item_in{tail}_{i}")));
                            if role.is_some() {
                                fields.entry("type").or_insert_with(|| json!("message"));
                                fields.entry("status").or_insert_with(|| json!("completed"));
                            }
                        }
                        item
                    }
                }
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// OpenAI's 404 for a response it does not have.
fn not_found(id: &str) -> Answered {
    let body = json!({"error": {
        "message": format!("Response with id '{id}' not found."),
        "type": "invalid_request_error",
        "param": null,
        "code": null,
    }});
    (404, Bytes::from(body.to_string()))
}

fn invalid(message: &str) -> Answered {
    let body = json!({"error": {
        "message": message,
        "type": "invalid_request_error",
        "param": null,
        "code": null,
    }});
    (400, Bytes::from(body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(b: &Bytes) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn a_kept_response_is_read_listed_and_forgotten() {
        let mut s = Stored::default();
        s.keep(
            "resp_1".into(),
            Bytes::from_static(br#"{"id":"resp_1"}"#),
            br#"{"model":"m","input":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}"#,
        );
        assert_eq!(s.get("resp_1").0, 200);
        assert_eq!(s.get("resp_2").0, 404);
        let (status, body) = s.input_items("resp_1", Some("limit=2"));
        let v = json(&body);
        assert_eq!(status, 200);
        assert_eq!(v["data"][0]["content"][0]["text"], "c", "newest first");
        assert_eq!(v["data"][1]["content"][0]["type"], "output_text");
        assert_eq!(v["has_more"], true);
        let after = v["last_id"].as_str().unwrap().to_string();
        let v = json(&s.input_items("resp_1", Some(&format!("after={after}"))).1);
        assert_eq!(v["data"].as_array().unwrap().len(), 1);
        assert_eq!(v["has_more"], false);
        assert_eq!(s.input_items("resp_1", Some("limit=0")).0, 400);
        assert_eq!(s.cancel("resp_1").0, 400, "not a background response");
        assert_eq!(s.delete("resp_1").0, 200);
        assert_eq!(s.get("resp_1").0, 404);
        assert_eq!(s.delete("resp_1").0, 404);
    }

    #[test]
    fn only_the_most_recent_are_kept() {
        let mut s = Stored::default();
        for i in 0..=MAX_STORED {
            s.keep(format!("resp_{i}"), Bytes::new(), b"{}");
        }
        assert_eq!(s.get("resp_0").0, 404);
        assert_eq!(s.get(&format!("resp_{MAX_STORED}")).0, 200);
    }
}
