//! Traces: one `levee.request` span (kind SERVER) per request and one
//! `levee.attempt` span (kind CLIENT) per upstream attempt, exported as
//! OTLP/HTTP protobuf to `{telemetry.otlp_endpoint}/v1/traces`.
//!
//! An inbound W3C `traceparent` is continued, and each attempt carries its own
//! span's `traceparent` upstream, so the caller's trace shows every attempt
//! and the provider's spans hang under them. Waits (backoff, Retry-After)
//! are events on the request span.
//!
//! Export never slows a request: finished spans go into a bounded queue of
//! [`QUEUE_SPANS`]; when it is full (the collector is slow or gone) the span
//! is dropped and counted in `levee_trace_spans_dropped_total{why="queue_full"}`,
//! and a batch the collector refuses is counted as `why="export_failed"`.
//! Spans, IDs and the wire format come from the OpenTelemetry SDK and its OTLP
//! exporter; only the queue is Levee's.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter as _};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::time::Duration;
use tokio::sync::mpsc;

/// Finished spans waiting for export, at most.
pub const QUEUE_SPANS: usize = 4096;
/// Spans sent in one export request, at most.
pub const BATCH_SPANS: usize = 512;
/// How long a finished span may wait for a fuller batch.
pub const BATCH_DELAY: Duration = Duration::from_millis(200);
/// How long one export request may take.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhyLabel {
    pub why: String,
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
#[error("telemetry.otlp_endpoint `{endpoint}`: cannot build the OTLP exporter: {message}")]
pub struct TelemetryError {
    endpoint: String,
    message: String,
}

/// The gateway's tracer (present when `telemetry.otlp_endpoint` is set).
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// Hands finished spans to the export task; drops (and counts) when full.
#[derive(Debug)]
struct QueueProcessor {
    tx: mpsc::Sender<SpanData>,
    queue_full: Counter,
}

impl opentelemetry_sdk::trace::SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.tx.try_send(span).is_err() {
            self.queue_full.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The exporter's HTTP client: HTTP/1.1, plain or TLS (web-PKI roots), the
/// same hyper and rustls stack the gateway uses for providers.
#[derive(Clone, Debug)]
struct Http1Client(
    hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        http_body_util::Full<bytes::Bytes>,
    >,
);

/// Largest collector answer read (it is a small protobuf status).
const MAX_COLLECTOR_ANSWER: usize = 1 << 20;

impl Http1Client {
    fn new() -> Self {
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(EXPORT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Http1Client(
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(https),
        )
    }
}

impl opentelemetry_http::HttpClient for Http1Client {
    fn send_bytes<'a, 'f>(
        &'a self,
        request: http::Request<bytes::Bytes>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError>,
                > + Send
                + 'f,
        >,
    >
    where
        'a: 'f,
        Self: 'f,
    {
        Box::pin(async move {
            use http_body_util::BodyExt;
            let (parts, body) = request.into_parts();
            let req = http::Request::from_parts(parts, http_body_util::Full::new(body));
            let resp = tokio::time::timeout(EXPORT_TIMEOUT, self.0.request(req)).await??;
            let (parts, body) = resp.into_parts();
            let body = tokio::time::timeout(
                EXPORT_TIMEOUT,
                http_body_util::Limited::new(body, MAX_COLLECTOR_ANSWER).collect(),
            )
            .await??
            .to_bytes();
            Ok(http::Response::from_parts(parts, body))
        })
    }
}

impl Telemetry {
    /// Starts the exporter task (needs a tokio runtime); registers
    /// `levee_trace_spans_dropped_total` in `registry`.
    pub fn start(endpoint: &str, registry: &mut Registry) -> Result<Self, TelemetryError> {
        let dropped = Family::<WhyLabel, Counter>::default();
        registry.register(
            "levee_trace_spans_dropped",
            "Finished spans not exported: the export queue was full (collector slow or gone) or the collector refused the batch",
            dropped.clone(),
        );
        let client = Http1Client::new();
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError {
                endpoint: endpoint.to_string(),
                message: e.to_string(),
            })?;
        let resource = opentelemetry_sdk::Resource::builder_empty()
            .with_service_name("levee")
            .build();
        exporter.set_resource(&resource);
        let (tx, mut rx) = mpsc::channel::<SpanData>(QUEUE_SPANS);
        let failed = dropped
            .get_or_create(&WhyLabel {
                why: "export_failed".into(),
            })
            .clone();
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(BATCH_SPANS);
            while let Some(first) = rx.recv().await {
                batch.push(first);
                let fuller = tokio::time::sleep(BATCH_DELAY);
                tokio::pin!(fuller);
                while batch.len() < BATCH_SPANS {
                    tokio::select! {
                        Some(s) = rx.recv() => batch.push(s),
                        _ = &mut fuller => break,
                    }
                }
                let n = batch.len() as u64;
                if let Err(e) = exporter.export(std::mem::take(&mut batch)).await {
                    failed.inc_by(n);
                    tracing::debug!(target: "levee::telemetry", error = %e, spans = n, "trace export failed");
                }
            }
        });
        let queue_full = dropped
            .get_or_create(&WhyLabel {
                why: "queue_full".into(),
            })
            .clone();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(QueueProcessor { tx, queue_full })
            .with_resource(resource)
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "levee");
        Ok(Telemetry { provider, tracer })
    }

    /// Starts a request's span, continuing the caller's `traceparent`.
    pub fn request(&self, headers: &http::HeaderMap, route: &str) -> RequestTrace {
        let parent =
            TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
        let span = self
            .tracer
            .span_builder("levee.request")
            .with_kind(SpanKind::Server)
            .with_attributes([KeyValue::new("levee.route", route.to_string())])
            .start_with_context(&self.tracer, &parent);
        RequestTrace {
            inner: Some((parent.with_span(span), self.tracer.clone())),
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// A request's span; a no-op without telemetry.
#[derive(Default)]
pub struct RequestTrace {
    inner: Option<(Context, SdkTracer)>,
}

impl RequestTrace {
    /// No tracing.
    pub fn off() -> Self {
        RequestTrace::default()
    }

    /// Whether this request is traced (what a span would record need not
    /// be looked up otherwise).
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// Starts the span of attempt `n` (1-based) to `target`.
    pub fn attempt(&self, route: &str, target: &str, n: u32) -> AttemptTrace {
        let Some((cx, tracer)) = &self.inner else {
            return AttemptTrace { span: None };
        };
        let span = tracer
            .span_builder("levee.attempt")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("levee.route", route.to_string()),
                KeyValue::new("levee.target", target.to_string()),
                KeyValue::new("levee.attempt", i64::from(n)),
            ])
            .start_with_context(tracer, cx);
        AttemptTrace {
            span: Some(Box::new(span)),
        }
    }

    /// A wait (backoff or Retry-After) before the next attempt.
    pub fn wait(&self, how_long: Duration) {
        if let Some((cx, _)) = &self.inner {
            cx.span().add_event(
                "levee.wait",
                vec![KeyValue::new(
                    "levee.wait_ms",
                    i64::try_from(how_long.as_millis()).unwrap_or(i64::MAX),
                )],
            );
        }
    }

    /// Ends the span with the answer given to the caller.
    pub fn finish(&self, status: u16, reason: Option<&str>, target: Option<&str>) {
        let Some((cx, _)) = &self.inner else { return };
        let span = cx.span();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if let Some(t) = target {
            span.set_attribute(KeyValue::new("levee.target", t.to_string()));
        }
        if let Some(r) = reason {
            span.set_attribute(KeyValue::new("levee.reason", r.to_string()));
            span.set_status(Status::error(r.to_string()));
        }
        span.end();
    }
}

/// One attempt's span; a no-op without telemetry.
pub struct AttemptTrace {
    /// Boxed: an SDK span is 280 bytes, carried (and copied) by every
    /// request's future whether or not it is traced.
    span: Option<Box<opentelemetry_sdk::trace::Span>>,
}

impl AttemptTrace {
    /// Sets the attempt's `traceparent` on the upstream request.
    pub fn inject(&self, fields: &mut crate::http::outbound::Fields) {
        if let Some(span) = &self.span {
            let cx = Context::new().with_remote_span_context(span.span_context().clone());
            TraceContextPropagator::new().inject_context(&cx, fields);
        }
    }

    /// Ends the span: `status` when a response came, `reason` (the attempt's
    /// result label) when it failed.
    pub fn finish(mut self, status: Option<u16>, reason: Option<&str>) {
        let Some(span) = &mut self.span else { return };
        if let Some(s) = status {
            span.set_attribute(KeyValue::new("http.response.status_code", i64::from(s)));
        }
        if let Some(r) = reason {
            span.set_attribute(KeyValue::new("levee.reason", r.to_string()));
            span.set_status(Status::error(r.to_string()));
        }
        span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let (tx, mut rx) = mpsc::channel(2);
        let queue_full = Counter::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(QueueProcessor {
                tx,
                queue_full: queue_full.clone(),
            })
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "t");
        // Nobody drains the queue (a collector that hangs): ending a span
        // must still return at once.
        for _ in 0..5 {
            tracer.start("s").end();
        }
        assert_eq!(queue_full.get(), 3);
        assert!(rx.try_recv().is_ok() && rx.try_recv().is_ok());
    }
}
