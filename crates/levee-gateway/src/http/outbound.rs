//! One attempt's request to a provider before it is put on a connection:
//! its method, URI, body and header fields as a short list.
//!
//! An attempt carries five to eight fields (the caller's forwarded few,
//! Levee's key, timeout and idempotency key). Built as an `http::HeaderMap`
//! they cost two allocations and a hash and a probe per field before a
//! second pass wrote them: building and writing a plain request's head
//! took ~2,500 instructions, ~1,500 as a list written straight into the
//! HTTP/1.1 head. HTTP/2 takes the map hyper needs
//! ([`Outbound::to_request`]).
//!
//! Not a general header container: a name set twice with [`Fields::insert`]
//! keeps only the last value, and lookups scan the list.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use levee_wire::headers::X_TIMEOUT_MS;

/// A request to a provider, before a connection is chosen.
#[derive(Clone, Debug)]
pub struct Outbound<B> {
    pub method: Method,
    pub uri: Uri,
    pub fields: Fields,
    /// `x-timeout-ms`: how long the provider has for this attempt, written
    /// as digits with the head (a header value made from a number is an
    /// allocation and ~200 instructions per attempt).
    pub timeout_ms: Option<u64>,
    pub body: B,
}

impl<B> Outbound<B> {
    /// A `POST` of `body` to `uri` with no fields yet.
    pub fn post(uri: Uri, body: B) -> Self {
        Outbound {
            method: Method::POST,
            uri,
            fields: Fields::with_capacity(8),
            timeout_ms: None,
            body,
        }
    }

    /// The same request with its body mapped.
    pub fn map<C>(self, f: impl FnOnce(B) -> C) -> Outbound<C> {
        Outbound {
            method: self.method,
            uri: self.uri,
            fields: self.fields,
            timeout_ms: self.timeout_ms,
            body: f(self.body),
        }
    }
}

impl<B: Clone> Outbound<B> {
    /// The request as hyper's HTTP/2 client takes it.
    pub fn to_request(&self) -> Request<B> {
        let mut req = Request::new(self.body.clone());
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        let h = req.headers_mut();
        *h = self.fields.to_map();
        if let Some(ms) = self.timeout_ms {
            h.insert(X_TIMEOUT_MS, HeaderValue::from(ms));
        }
        req
    }
}

/// Header fields in the order they were set.
#[derive(Clone, Debug, Default)]
pub struct Fields(Vec<(HeaderName, HeaderValue)>);

impl Fields {
    /// Room for `n` fields.
    pub fn with_capacity(n: usize) -> Self {
        Fields(Vec::with_capacity(n))
    }

    /// Adds a field, keeping any of the same name.
    pub fn append(&mut self, name: HeaderName, value: HeaderValue) {
        self.0.push((name, value));
    }

    /// Sets a field, replacing every value of the same name.
    pub fn insert(&mut self, name: HeaderName, value: HeaderValue) {
        self.0.retain(|(n, _)| *n != name);
        self.0.push((name, value));
    }

    /// The first value of `name`.
    pub fn get(&self, name: &HeaderName) -> Option<&HeaderValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Whether `name` is set.
    pub fn contains(&self, name: &HeaderName) -> bool {
        self.get(name).is_some()
    }

    /// Every field, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
        self.0.iter().map(|(n, v)| (n, v))
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The fields as a header map.
    pub fn to_map(&self) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.0.len());
        for (n, v) in &self.0 {
            map.append(n.clone(), v.clone());
        }
        map
    }
}

/// Trace context propagation writes `traceparent` here.
impl opentelemetry::propagation::Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.insert(n, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{CONTENT_TYPE, USER_AGENT};

    #[test]
    fn insert_replaces_every_value_of_its_name_and_append_keeps_them() {
        let mut f = Fields::default();
        f.append(USER_AGENT, HeaderValue::from_static("a"));
        f.append(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        f.append(USER_AGENT, HeaderValue::from_static("b"));
        assert_eq!(f.len(), 3);
        f.insert(USER_AGENT, HeaderValue::from_static("c"));
        let all: Vec<_> = f
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(all, [("content-type", "text/plain"), ("user-agent", "c")]);
        assert!(f.contains(&CONTENT_TYPE));
        assert_eq!(f.get(&USER_AGENT).unwrap(), "c");
    }

    #[test]
    fn the_http2_request_carries_every_field_in_a_map() {
        let mut out = Outbound::post("http://p.test/v1/x".parse().unwrap(), "{}");
        out.timeout_ms = Some(2500);
        out.fields.append(USER_AGENT, HeaderValue::from_static("a"));
        out.fields.append(USER_AGENT, HeaderValue::from_static("b"));
        let req = out.to_request();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri(), "http://p.test/v1/x");
        let ua: Vec<_> = req.headers().get_all(USER_AGENT).iter().collect();
        assert_eq!(ua, ["a", "b"]);
        assert_eq!(req.headers()["x-timeout-ms"], "2500");
    }

    #[test]
    fn a_trace_context_replaces_the_callers() {
        use opentelemetry::propagation::Injector;
        let mut f = Fields::default();
        f.append(
            HeaderName::from_static("traceparent"),
            HeaderValue::from_static("00-caller"),
        );
        f.set("traceparent", "00-levee".to_string());
        assert_eq!(f.len(), 1);
        assert_eq!(
            f.get(&HeaderName::from_static("traceparent")).unwrap(),
            "00-levee"
        );
    }
}
