//! An attempt's outbound request: the caller fields forwarded, the
//! provider's own, the idempotency key and the timeout.

use crate::http::outbound::Outbound;
use crate::upstream::ProviderRuntime;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Uri;
use levee_config::Api;
use levee_wire::headers;
use std::time::Duration;

/// The caller headers forwarded upstream: an allow-list, so nothing that
/// selects an account, a billing project or an identity at the provider
/// (`openai-organization`, `openai-project`, `cookie`, `api-key`,
/// `x-goog-api-key`, `forwarded`, `x-forwarded-for`, …) ever travels beside
/// Levee's own key. Levee sets `authorization`/`x-api-key`, `x-timeout-ms`
/// and `idempotency-key` itself; framing headers are the connection's.
pub fn is_forwarded(api: Api, name: &HeaderName) -> bool {
    match name.as_str() {
        "content-type" | "accept" | "user-agent" | "traceparent" | "tracestate" => true,
        "anthropic-version" | "anthropic-beta" => api == Api::Anthropic,
        "openai-beta" => api == Api::OpenAi,
        _ => false,
    }
}

/// Builds one attempt's request (a `POST`).
#[cfg(test)]
pub fn build_request(
    provider: &ProviderRuntime,
    inbound: &HeaderMap,
    uri: Uri,
    body: Bytes,
    timeout: Duration,
    idempotency_key: &HeaderValue,
) -> Outbound<Bytes> {
    let mut req = Outbound::post(uri, body);
    request_fields(provider, &mut req, inbound, timeout, Some(idempotency_key));
    req
}

/// Builds a request of any method: an attempt of a pass-through request,
/// or Levee's own (the model list, with no caller fields and no key).
pub fn build_request_with(
    provider: &ProviderRuntime,
    method: http::Method,
    inbound: &HeaderMap,
    uri: Uri,
    body: Bytes,
    timeout: Duration,
    idempotency_key: Option<&HeaderValue>,
) -> Outbound<Bytes> {
    let mut req = Outbound::post(uri, body);
    req.method = method;
    request_fields(provider, &mut req, inbound, timeout, idempotency_key);
    req
}

/// The fields of a request to `provider`: the caller's allowed ones, the
/// provider's auth and `headers:`, `anthropic-version`, a JSON
/// `content-type` for a body that has none, the idempotency key, and the
/// attempt's timeout.
fn request_fields(
    provider: &ProviderRuntime,
    req: &mut Outbound<Bytes>,
    inbound: &HeaderMap,
    timeout: Duration,
    idempotency_key: Option<&HeaderValue>,
) {
    let has_body = !req.body.is_empty();
    let h = &mut req.fields;
    // Names listed in the caller's `Connection` header are hop-by-hop.
    let listed: Vec<String> = inbound
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in inbound {
        if is_forwarded(provider.api, name) && !listed.iter().any(|l| l == name.as_str()) {
            h.append(name.clone(), value.clone());
        }
    }
    if let Some((n, v)) = &provider.auth {
        h.insert(n.clone(), v.clone());
    }
    for (n, v) in &provider.extra_headers {
        h.insert(n.clone(), v.clone());
    }
    if provider.api == Api::Anthropic && !h.contains(&headers::ANTHROPIC_VERSION) {
        h.append(
            headers::ANTHROPIC_VERSION,
            HeaderValue::from_static("2023-06-01"),
        );
    }
    if has_body && !h.contains(&header::CONTENT_TYPE) {
        h.append(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(key) = idempotency_key {
        h.insert(headers::IDEMPOTENCY_KEY, key.clone());
    }
    req.timeout_ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_forwarded_to_a_provider_is_one_the_front_keeps() {
        // The front leaves the fields no part of Levee reads out of the
        // request's map: a forwarded one left out would never be sent.
        let names = [
            "content-type",
            "accept",
            "user-agent",
            "traceparent",
            "tracestate",
            "anthropic-version",
            "anthropic-beta",
            "openai-beta",
            "openai-organization",
            "accept-encoding",
            "x-stainless-lang",
            "x-stainless-os",
            "cookie",
            "x-forwarded-for",
        ];
        for api in [Api::OpenAi, Api::Anthropic] {
            for n in names {
                let name = HeaderName::from_static(n);
                if is_forwarded(api, &name) {
                    assert!(
                        crate::http::callerfields::levee_reads(n.as_bytes()),
                        "{n} is forwarded to {api:?} but left out of the request"
                    );
                }
            }
        }
    }
    use crate::clock::Clock;
    use crate::observe::histogram::Histogram;

    #[test]
    fn the_callers_vendor_headers_reach_only_their_own_providers() {
        let name = |n: &'static str| HeaderName::from_static(n);
        for n in ["anthropic-version", "anthropic-beta"] {
            assert!(is_forwarded(Api::Anthropic, &name(n)), "{n}");
            assert!(!is_forwarded(Api::OpenAi, &name(n)), "{n}");
        }
        assert!(is_forwarded(Api::OpenAi, &name("openai-beta")));
        assert!(!is_forwarded(Api::Anthropic, &name("openai-beta")));
        for n in [
            "openai-organization",
            "x-stainless-lang",
            "authorization",
            "x-api-key",
        ] {
            assert!(!is_forwarded(Api::OpenAi, &name(n)), "{n}");
            assert!(!is_forwarded(Api::Anthropic, &name(n)), "{n}");
        }
        assert!(is_forwarded(Api::OpenAi, &name("traceparent")));
    }

    #[test]
    fn a_providers_key_goes_where_its_auth_says_with_its_extra_fields() {
        std::env::set_var("LEVEE_UPSTREAM_TEST_KEY", "k-123456789");
        std::env::set_var("LEVEE_UPSTREAM_TEST_ORG", "org-from-env");
        let cases = [
            ("openai", "", Some(("authorization", "Bearer k-123456789"))),
            ("anthropic", "", Some(("x-api-key", "k-123456789"))),
            (
                "openai",
                ", auth: header api-key",
                Some(("api-key", "k-123456789")),
            ),
            (
                "anthropic",
                ", auth: bearer",
                Some(("authorization", "Bearer k-123456789")),
            ),
        ];
        for (api, extra, want) in cases {
            let cfg = levee_config::Config::parse(&format!(
                "providers:\n  p: {{ api: {api}, base_url: \"http://h.test\", api_key_env: LEVEE_UPSTREAM_TEST_KEY{extra}, headers: {{ OpenAI-Organization: {{ env: LEVEE_UPSTREAM_TEST_ORG }}, x-static: s }} }}\nroutes:\n  - targets: [p]\n"
            ))
            .unwrap();
            let p =
                ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
                    .unwrap();
            let out = bare_request(&p);
            let (name, value) = want.unwrap_or(("", ""));
            assert_eq!(
                out.fields
                    .get(&HeaderName::from_bytes(name.as_bytes()).unwrap())
                    .map(|v| v.as_bytes()),
                Some(value.as_bytes()),
                "{api}{extra}"
            );
            assert_eq!(
                out.fields
                    .get(&HeaderName::from_static("openai-organization"))
                    .map(|v| v.as_bytes()),
                Some(&b"org-from-env"[..])
            );
            assert_eq!(
                out.fields
                    .get(&HeaderName::from_static("x-static"))
                    .map(|v| v.as_bytes()),
                Some(&b"s"[..])
            );
            assert!(
                p.secrets().any(|s| s == "org-from-env"),
                "an env value is redacted"
            );
        }
        let cfg = levee_config::Config::parse(
            "providers:\n  p: { api: openai, base_url: \"http://h.test\", auth: none }\nroutes:\n  - targets: [p]\n",
        )
        .unwrap();
        let p = ProviderRuntime::new(&cfg.providers[0], Histogram::new([1.0]), Clock::new(), None)
            .unwrap();
        let out = bare_request(&p);
        assert!(out
            .fields
            .get(&HeaderName::from_static("authorization"))
            .is_none());
        // Config errors: a reserved field, a key with auth none.
        for bad in [
            "headers: { Host: x }",
            "headers: { content-length: \"1\" }",
            "auth: none, api_key_env: X",
            "auth: basic",
        ] {
            let text = format!("providers:\n  p: {{ api: openai, base_url: \"http://h.test\", {bad} }}\nroutes:\n  - targets: [p]\n");
            assert!(levee_config::Config::parse(&text).is_err(), "{bad}");
        }
    }

    /// A chat-completions attempt of `p`'s with no caller fields and an
    /// empty body.
    fn bare_request(p: &ProviderRuntime) -> Outbound<Bytes> {
        let uri = p.uri_for("/v1/chat/completions").unwrap();
        build_request(
            p,
            &HeaderMap::new(),
            uri,
            Bytes::new(),
            Duration::from_secs(1),
            &HeaderValue::from_static("k"),
        )
    }
}
