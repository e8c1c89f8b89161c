//! The end of the shutdown grace period. Requests still running when it is
//! over are not simply cut: a request still waiting for its answer gets a 503
//! in its dialect (`x-levee-reason: shutting_down`, `x-should-retry: false`),
//! and a stream still relaying gets an error event in its dialect and its
//! terminating chunk, so every caller can tell what happened.

use crate::respond::{Body, LeveeError, Why};
use bytes::Bytes;
use http::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use levee_wire::Dialect;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::watch;

/// The grace-over signal: set once, when the shutdown grace period ends.
#[derive(Debug)]
pub struct GraceOver(watch::Sender<bool>);

impl Default for GraceOver {
    fn default() -> Self {
        GraceOver(watch::channel(false).0)
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

impl GraceOver {
    /// Ends the grace period for every request.
    pub fn fire(&self) {
        self.0.send_replace(true);
    }

    /// Resolves when the grace period ends.
    fn wait(&self) -> Wait {
        let mut rx = self.0.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|over| *over).await;
        })
    }

    /// Runs `answer` until it yields a response, or answers 503 in `dialect`
    /// when the grace period ends first; a streaming response keeps watching.
    pub async fn guard(
        &self,
        dialect: Dialect,
        metrics: &crate::metrics::Metrics,
        answer: impl Future<Output = Response<Body>>,
    ) -> Response<Body> {
        // Waited on in place (not `self.wait()`): no allocation per request.
        let mut rx = self.0.subscribe();
        let resp = tokio::select! {
            r = answer => r,
            _ = rx.wait_for(|over| *over) => {
                metrics.reject("shutting_down");
                let msg = "levee: the gateway is shutting down and its grace period is over; this request was not answered in time";
                return LeveeError::new(Why::ShuttingDown, 503, msg).into_response(dialect);
            }
        };
        let is_stream = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_stream {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let body = GraceBody {
            inner: body,
            over: Some(self.wait()),
            dialect,
            done: false,
        };
        Response::from_parts(parts, body.boxed_unsync())
    }
}

/// A stream body that ends with an error event when the grace period ends.
/// The inner body yields whole SSE events per frame, so the event never
/// lands inside another.
struct GraceBody {
    inner: Body,
    over: Option<Wait>,
    dialect: Dialect,
    done: bool,
}

impl HttpBody for GraceBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(over) = self.over.as_mut() {
            if over.as_mut().poll(cx).is_ready() {
                self.done = true;
                let msg = "levee: shutting_down: the gateway is shutting down and its grace period is over; the stream ends here (the partial answer above is all there is)";
                return Poll::Ready(Some(Ok(Frame::data(self.dialect.stream_error_event(msg)))));
            }
        }
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.done = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
