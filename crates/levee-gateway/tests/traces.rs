//! Traces: spans received by a real OTLP/HTTP receiver (a hyper server that
//! decodes the protobuf), linked parent to child under the caller's trace,
//! with each upstream attempt carrying its own span's `traceparent`; and a
//! collector that hangs never slows a request.

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;
use tokio::sync::Notify;

const LIMIT: Duration = Duration::from_secs(30);
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[derive(Default)]
struct Seen {
    spans: Mutex<Vec<Span>>,
    /// `traceparent` of each request the upstream received.
    traceparents: Mutex<Vec<String>>,
    content_types: Mutex<Vec<String>>,
    more: Notify,
}

async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = http::Response<Full<Bytes>>> + Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let h = handler.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let h = h.clone();
                    async move { Ok::<_, Infallible>(h(req).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// An OTLP/HTTP receiver: decodes each `/v1/traces` protobuf request.
async fn collector(seen: Arc<Seen>) -> SocketAddr {
    serve(move |req: http::Request<hyper::body::Incoming>| {
        let seen = Arc::clone(&seen);
        async move {
            assert_eq!(req.uri().path(), "/v1/traces");
            let ct = req.headers()["content-type"].to_str().unwrap().to_string();
            seen.content_types.lock().unwrap().push(ct);
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let export = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
            for rs in export.resource_spans {
                for ss in rs.scope_spans {
                    seen.spans.lock().unwrap().extend(ss.spans);
                }
            }
            seen.more.notify_waiters();
            let mut resp = http::Response::new(Full::new(Bytes::from(
                ExportTraceServiceResponse::default().encode_to_vec(),
            )));
            resp.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("application/x-protobuf"),
            );
            resp
        }
    })
    .await
}

/// A provider whose first answer is 503 and the rest 200; records `traceparent`.
async fn upstream(seen: Arc<Seen>) -> SocketAddr {
    serve(move |req: http::Request<hyper::body::Incoming>| {
        let seen = Arc::clone(&seen);
        async move {
            let tp = req
                .headers()
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let first = {
                let mut t = seen.traceparents.lock().unwrap();
                t.push(tp);
                t.len() == 1
            };
            let _ = req.into_body().collect().await;
            let (status, body) = if first {
                (503, r#"{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}"#)
            } else {
                (200, r#"{"id":"c1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#)
            };
            let mut resp = http::Response::new(Full::new(Bytes::from(body)));
            *resp.status_mut() = http::StatusCode::from_u16(status).unwrap();
            resp.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("application/json"),
            );
            resp
        }
    })
    .await
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr(s: &Span, key: &str) -> Option<Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value)
}

fn int(s: &Span, key: &str) -> Option<i64> {
    match attr(s, key) {
        Some(Value::IntValue(i)) => Some(i),
        _ => None,
    }
}

fn text(s: &Span, key: &str) -> Option<String> {
    match attr(s, key) {
        Some(Value::StringValue(v)) => Some(v),
        _ => None,
    }
}

async fn gateway(config: String) -> levee_gateway::Running {
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nshutdown_grace: 1s\n{config}"
    );
    spawn_text(&text, 42).await
}

async fn post(addr: SocketAddr, headers: &[(&str, &str)]) -> u16 {
    let req = post_request(&format!("http://{addr}/v1/chat/completions"), CHAT, headers);
    let resp = http_client().request(req).await.expect("gateway answers");
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    status
}

#[tokio::test]
async fn spans_reach_an_otlp_receiver_under_the_callers_trace() {
    let seen = Arc::new(Seen::default());
    let otlp = collector(Arc::clone(&seen)).await;
    let provider = upstream(Arc::clone(&seen)).await;
    let gw = gateway(format!(
        "telemetry: {{ otlp_endpoint: \"http://{otlp}\" }}\nproviders:\n  p: {{ api: openai, base_url: \"http://{provider}\" }}\nroutes:\n  - targets: [p]\n    expected_attempt_ms: 1000\n    retry: {{ max_attempts: 2, backoff: {{ base_ms: 5, max_ms: 10 }} }}\n"
    ))
    .await;
    watchdog(LIMIT, async {
        let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
        let status = post(gw.addr, &[("traceparent", traceparent.as_str())]).await;
        assert_eq!(status, 200);
        loop {
            let wait = seen.more.notified();
            if seen.spans.lock().unwrap().len() >= 3 {
                break;
            }
            wait.await;
        }
    })
    .await;
    let spans = seen.spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 3, "{spans:#?}");
    assert!(seen.content_types.lock().unwrap()[0].starts_with("application/x-protobuf"));
    for s in &spans {
        assert_eq!(hex(&s.trace_id), TRACE_ID, "{s:?}");
    }
    let request = spans
        .iter()
        .find(|s| s.name == "levee.request")
        .expect("request span");
    assert_eq!(request.kind, 2, "SERVER");
    assert_eq!(hex(&request.parent_span_id), CALLER_SPAN);
    assert_eq!(int(request, "http.response.status_code"), Some(200));
    assert_eq!(text(request, "levee.route").as_deref(), Some("default"));
    assert_eq!(text(request, "levee.target").as_deref(), Some("p"));
    assert!(
        request.events.iter().any(|e| e.name == "levee.wait"),
        "the backoff wait is an event: {request:?}"
    );
    let mut attempts: Vec<&Span> = spans.iter().filter(|s| s.name == "levee.attempt").collect();
    attempts.sort_by_key(|s| int(s, "levee.attempt"));
    assert_eq!(attempts.len(), 2);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.kind, 3, "CLIENT");
        assert_eq!(
            a.parent_span_id, request.span_id,
            "child of the request span"
        );
        assert_eq!(int(a, "levee.attempt"), Some(i as i64 + 1));
        assert_eq!(text(a, "levee.target").as_deref(), Some("p"));
        assert_eq!(text(a, "levee.route").as_deref(), Some("default"));
    }
    assert_eq!(int(attempts[0], "http.response.status_code"), Some(503));
    assert_eq!(
        text(attempts[0], "levee.reason").as_deref(),
        Some("http_5xx")
    );
    assert_eq!(int(attempts[1], "http.response.status_code"), Some(200));
    assert_eq!(text(attempts[1], "levee.reason"), None);
    // Each attempt went upstream with its own span as the parent.
    let sent = seen.traceparents.lock().unwrap().clone();
    assert_eq!(sent.len(), 2);
    for (a, tp) in attempts.iter().zip(&sent) {
        assert_eq!(
            tp,
            &format!("00-{TRACE_ID}-{}-01", hex(&a.span_id)),
            "upstream traceparent"
        );
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn a_collector_that_hangs_costs_requests_nothing() {
    // Accepts connections and never answers.
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = hang.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((s, _)) = hang.accept().await {
            conns.push(s);
        }
    });
    let mock = mock("").await;
    let gw = gateway(format!(
        "telemetry: {{ otlp_endpoint: \"http://{otlp}\" }}\nproviders:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n",
        mock.url()
    ))
    .await;
    // 50 requests while the exporter is stuck on its first batch: each is
    // answered (the watchdog is far below 50 x the 5 s export timeout).
    watchdog(Duration::from_secs(4), async {
        for _ in 0..50 {
            assert_eq!(post(gw.addr, &[]).await, 200);
        }
    })
    .await;
    gw.shutdown().await;
    mock.shutdown().await;
    held.abort();
}

#[tokio::test]
async fn an_unreachable_collector_counts_the_spans_it_lost() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mock = mock("").await;
    let gw = gateway(format!(
        "telemetry: {{ otlp_endpoint: \"http://127.0.0.1:{port}\" }}\nproviders:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n",
        mock.url()
    ))
    .await;
    let env_metrics = |gw: &levee_gateway::Running| {
        gw.shared.refresh_gauges();
        gw.shared.metrics().encode()
    };
    watchdog(LIMIT, async {
        for _ in 0..3 {
            assert_eq!(post(gw.addr, &[]).await, 200);
        }
    })
    .await;
    // The export fails at once (connection refused), on the exporter's task.
    until(LIMIT, "six spans counted as lost", || {
        metric(
            &env_metrics(&gw),
            "levee_trace_spans_dropped_total",
            &["export_failed"],
        ) >= 6.0
    })
    .await;
    gw.shutdown().await;
    mock.shutdown().await;
}

#[test]
fn otlp_endpoint_must_be_a_collector_address() {
    for bad in ["127.0.0.1:4318", "http://h:4318/v1/traces", "grpc://h:4317"] {
        let e =
            levee_config::Config::parse(&format!("telemetry: {{ otlp_endpoint: \"{bad}\" }}\n"))
                .expect_err(bad)
                .to_string();
        assert!(e.contains("otlp_endpoint") && e.contains("line 1"), "{e}");
    }
    let ok =
        levee_config::Config::parse("telemetry: { otlp_endpoint: \"http://127.0.0.1:4318/\" }\n")
            .unwrap();
    assert_eq!(
        ok.telemetry.otlp_endpoint.as_deref(),
        Some("http://127.0.0.1:4318")
    );
}
