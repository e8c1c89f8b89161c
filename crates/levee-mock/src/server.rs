//! The HTTP server (HTTP/1.1, and HTTP/2 with prior knowledge on the same
//! port, told apart by the client's first bytes): accept loop, per-connection hyper service, and the
//! request path (stats, capacity, tape, faults, answer).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::answer::{self, EmbeddingsAsk, Reply};
use crate::body::MockBody;
use crate::faults::{Decision, ErrorSpec, FaultSet, Outcome};
use crate::request::{self, Body, Endpoint};
use crate::stats::{Collector, FaultKind, RequestGuard};
use crate::stored::Stored;
use crate::tape::{self, Player, Tape};
use crate::{admin, clock, platform, ratelimit, MockApi};
use levee_wire::conn::{Watch, Watched};
use levee_wire::models::Page;
use levee_wire::{paths, Dialect};

/// Request bodies larger than this get a 413.
const MAX_BODY: usize = 32 * 1024 * 1024;

/// State shared by every connection of one mock server.
pub(crate) struct Shared {
    pub stats: Arc<Collector>,
    faults: RwLock<Arc<Active>>,
    rng: Mutex<SmallRng>,
    tape: Option<Player>,
    ids: AtomicU64,
    api: MockApi,
    /// The Responses answers kept for `GET /v1/responses/{id}` and the like.
    responses: Mutex<Stored>,
    /// What the clouds' faces keep (Vertex AI's issued tokens).
    pub(crate) clouds: platform::Clouds,
}

/// The fault set in force and when its clock started.
struct Active {
    set: FaultSet,
    epoch: Instant,
    /// The set's `rate_limit` buckets, full when it was installed.
    limiter: ratelimit::Limiter,
}

impl Shared {
    pub(crate) fn new(faults: FaultSet, seed: u64, tape: Option<Tape>, api: MockApi) -> Shared {
        let stats = Arc::new(Collector::default());
        Shared {
            clouds: platform::Clouds::new(Arc::clone(&stats)),
            stats,
            faults: RwLock::new(Arc::new(Active {
                limiter: ratelimit::Limiter::new(faults.rate_limit()),
                set: faults,
                epoch: clock::now(),
            })),
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
            tape: tape.map(Player::new),
            ids: AtomicU64::new(1),
            api,
            responses: Mutex::new(Stored::default()),
        }
    }

    /// Replaces the fault set and restarts its clock.
    pub(crate) fn set_faults(&self, set: FaultSet) {
        let active = Arc::new(Active {
            limiter: ratelimit::Limiter::new(set.rate_limit()),
            set,
            epoch: clock::now(),
        });
        *self.faults.write().unwrap_or_else(PoisonError::into_inner) = active;
    }

    fn responses(&self) -> std::sync::MutexGuard<'_, Stored> {
        self.responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn active(&self) -> Arc<Active> {
        Arc::clone(&self.faults.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Active {
    /// What the fault set does to one request, on the set's clock (nothing
    /// without faults).
    fn decide(&self, model: Option<&str>, streaming: bool, rng: &Mutex<SmallRng>) -> Decision {
        if !self.set.has_faults() {
            return Decision::default();
        }
        let elapsed = clock::now().saturating_duration_since(self.epoch);
        self.set.decide(elapsed, model, streaming, rng)
    }
}

/// Accepts connections until `stop` fires (or its sender is dropped), then
/// aborts every connection and waits for them to be gone.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(serve_connection(stream, Arc::clone(&shared)));
                }
                // Out of file descriptors and the like: back off, keep serving.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    serve_io(stream, shared).await
}

/// A connection the mock can serve: a TCP socket, or an in-memory pipe.
pub(crate) trait Socket: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Makes the coming close abortive (a reset, where the transport has one).
    fn reset_on_close(&self);
}

impl Socket for TcpStream {
    fn reset_on_close(&self) {
        let _ = socket2::SockRef::from(self).set_linger(Some(Duration::ZERO));
    }
}

/// An in-memory pipe has no reset: the close itself is what the client sees.
impl Socket for tokio::io::DuplexStream {
    fn reset_on_close(&self) {}
}

/// Serves one connection until the client closes it.
pub(crate) async fn serve_io<S: Socket>(stream: S, shared: Arc<Shared>) {
    let reset = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(Watched::new(stream, ResetOnClose(Arc::clone(&reset))));
    shared.stats.connection();
    let service = service_fn(move |req| handle(Arc::clone(&shared), Arc::clone(&reset), req));
    // Errors here are the client going away or a deliberate reset/cut.
    // No header-read timeout: idle keep-alive connections stay open until the
    // client closes them, so a gateway's pool never races an idle close.
    // Over HTTP/2 a reset or a cut ends the one stream (`RST_STREAM`), as a
    // provider's HTTP/2 server does; the connection's other streams go on.
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    let _ = builder.serve_connection(io, service).await;
}

/// Asked of hyper to close a connection without answering (`reset`).
#[derive(Debug, thiserror::Error)]
#[error("levee mock reset the connection on purpose")]
struct ResetConnection;

type Answer = Result<Response<MockBody>, ResetConnection>;

async fn handle(shared: Arc<Shared>, reset: Arc<AtomicBool>, req: Request<Incoming>) -> Answer {
    let path = req.uri().path();
    if path.starts_with("/_mock/") || path == "/_mock" {
        return Ok(admin::handle(&shared, req).await);
    }
    if !shared.api.is_cloud() {
        return handle_native(shared, reset, req, None).await;
    }
    // A cloud's face: checked and rewritten into the dialect's own request,
    // answered like any other, and the answer put back into its shape.
    let (mut parts, body) = req.into_parts();
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => {
            let refused = platform::Refused::json(
                StatusCode::PAYLOAD_TOO_LARGE,
                false,
                serde_json::json!({ "message": too_large() }),
            );
            shared.stats.status(refused.status.as_u16());
            return Ok(refused.into_response());
        }
        Err(Unread::Gone) => return Err(ResetConnection),
    };
    let accepted = match platform::accept(
        shared.api,
        &mut parts,
        bytes,
        clock::unix_secs(),
        &shared.clouds,
    ) {
        Ok(a) => a,
        Err(refused) => {
            match refused.auth {
                true => shared.stats.unauthorized(refused.status.as_u16()),
                false => shared.stats.status(refused.status.as_u16()),
            }
            return Ok(refused.into_response());
        }
    };
    let req = Request::from_parts(parts, http_body_util::Full::new(accepted.body));
    let answer = handle_native(shared, reset, req, Some(accepted.native)).await?;
    Ok(platform::encode(&accepted.ctx, answer))
}

/// Why a request's body was not read.
enum Unread {
    /// Longer than [`MAX_BODY`]: answered with a 413.
    TooLarge,
    /// The client went away mid-body.
    Gone,
}

/// The request's body, up to [`MAX_BODY`] bytes.
async fn read_body<B>(body: B) -> Result<Bytes, Unread>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Unread::TooLarge),
        Err(_) => Err(Unread::Gone),
    }
}

/// The 413's message.
fn too_large() -> String {
    format!("Request body is larger than {MAX_BODY} bytes.")
}

/// Answers a request in a dialect's own wire format: `api` is the dialect
/// API a cloud's face put in front (the mock's own `--api` otherwise).
async fn handle_native<B>(
    shared: Arc<Shared>,
    reset: Arc<AtomicBool>,
    req: Request<B>,
    api: Option<MockApi>,
) -> Answer
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let api = api.unwrap_or(shared.api);
    let path = req.uri().path();
    let guard = shared.stats.begin(paths::counted_index(path));
    if req.version() == http::Version::HTTP_2 {
        shared.stats.http2_request();
    }
    let (endpoint, dialect) = api.route(req.method(), path, req.headers());
    let (parts, body) = req.into_parts();
    if let Some(ms) = header_u64(&parts.headers, "x-timeout-ms") {
        shared.stats.timeout_ms(ms);
    }
    let bytes = match read_body(body).await {
        Ok(bytes) => bytes,
        Err(Unread::TooLarge) => {
            let status = StatusCode::PAYLOAD_TOO_LARGE;
            return Ok(error_json(dialect, status, &too_large(), None, guard));
        }
        // The client went away mid-body; the guard counts it.
        Err(Unread::Gone) => return Err(ResetConnection),
    };
    let ask = Ask {
        endpoint,
        dialect,
        parts: &parts,
        bytes: &bytes,
    };
    let parsed = ask.parse(api);
    let model = model_of(&parsed);
    count_model_and_key(&shared, model, &parts.headers);

    let active = shared.active();
    let (metered, guard) = match admit(&shared, &active, &ask, parsed.as_ref().ok(), guard) {
        Admitted::Go { metered, guard } => (metered, guard),
        Admitted::Refused(answer) => return Ok(answer),
    };
    if let Some(entry) = shared.tape.as_ref().and_then(Player::next) {
        shared.stats.replayed();
        return replay(entry, guard, &reset)
            .await
            .map(|r| metered.stamped(r));
    }
    let streaming = parsed.as_ref().is_ok_and(Body::streaming);
    let decision = active.decide(model, streaming, &shared.rng);
    drop(active);
    let (guard, cut_after) =
        match misbehave(&shared, &decision, streaming, dialect, guard, &reset).await {
            Misbehaved::Answered(answer) => return answer.map(|r| metered.stamped(r)),
            Misbehaved::Go { guard, cut_after } => (guard, cut_after),
        };
    let body = match parsed {
        Ok(body) => body,
        Err((_, invalid)) => return Ok(invalid_answer(dialect, invalid, guard)),
    };
    let stream = Streamed {
        chunk_delay: decision.chunk_delay,
        cut_after,
    };
    Ok(metered.stamped(ask.answer(&shared, &body, stream, guard)))
}

/// The model a request names, whether or not its body is valid.
fn model_of<'p>(parsed: &'p Parsed<'_>) -> Option<&'p str> {
    match parsed {
        Ok(body) => body.model.as_deref(),
        Err((model, _)) => model.as_deref(),
    }
}

/// Counts the request's model and its `idempotency-key`.
fn count_model_and_key(shared: &Shared, model: Option<&str>, headers: &HeaderMap) {
    let idempotency_key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    shared.stats.model_and_key(model, idempotency_key);
}

/// What the fault set's capacity and rate limit made of a request.
enum Admitted {
    /// Over either: the answer.
    Refused(Response<MockBody>),
    /// Let through, metered.
    Go {
        metered: ratelimit::Metered,
        guard: RequestGuard,
    },
}

/// Checks the fault set's capacity, then its rate limit.
fn admit(
    shared: &Shared,
    active: &Active,
    ask: &Ask<'_>,
    body: Option<&Body<'_>>,
    guard: RequestGuard,
) -> Admitted {
    if let Some(capacity) = active.set.capacity() {
        if guard.in_flight_before >= capacity.max_in_flight {
            shared.stats.fault(FaultKind::Capacity);
            return Admitted::Refused(error_answer(ask.dialect, capacity.error, guard));
        }
    }
    match active.limiter.admit(
        shared.api,
        ask.dialect,
        &ask.endpoint,
        body,
        ask.bytes.len(),
    ) {
        Ok(metered) => Admitted::Go { metered, guard },
        Err(refused) => {
            shared.stats.rate_limited();
            let mut res = json_answer(StatusCode::TOO_MANY_REQUESTS, refused.body(), guard);
            refused.stamp(res.headers_mut());
            Admitted::Refused(res)
        }
    }
}

/// The 400 of a body that did not pass the dialect's checks.
fn invalid_answer(
    dialect: Dialect,
    invalid: request::Invalid,
    guard: RequestGuard,
) -> Response<MockBody> {
    let status = StatusCode::BAD_REQUEST;
    let body = levee_wire::error::body(
        dialect,
        status.as_u16(),
        &invalid.message,
        invalid.param,
        invalid.code,
    );
    json_answer(status, body, guard)
}

/// One provider request, read: what the answer is built from.
struct Ask<'a> {
    endpoint: Endpoint,
    dialect: Dialect,
    parts: &'a http::request::Parts,
    bytes: &'a Bytes,
}

/// How a streamed answer is paced and whether it is cut.
struct Streamed {
    chunk_delay: Option<Duration>,
    cut_after: Option<usize>,
}

type Parsed<'a> = Result<Body<'a>, (Option<std::borrow::Cow<'a, str>>, request::Invalid)>;

impl<'a> Ask<'a> {
    /// The body's fields; a mock serving one dialect also refuses fields that
    /// provider does not know.
    fn parse(&self, api: MockApi) -> Parsed<'a> {
        let parsed = request::parse(&self.endpoint, self.dialect, self.bytes);
        if api == MockApi::Both {
            return parsed;
        }
        match parsed {
            Ok(body) => match request::strict_check(&self.endpoint, self.dialect, self.bytes) {
                Ok(()) => Ok(body),
                Err(invalid) => Err((body.model, invalid)),
            },
            Err(e) => Err(e),
        }
    }

    /// The normal answer to a valid request.
    fn answer(
        self,
        shared: &Shared,
        body: &Body<'_>,
        stream: Streamed,
        guard: RequestGuard,
    ) -> Response<MockBody> {
        let reply = Reply {
            model: body.model.as_deref().unwrap_or("mock-model"),
            id: shared.ids.fetch_add(1, Ordering::Relaxed),
            created: clock::unix_secs(),
            prompt_tokens: request::prompt_tokens(self.bytes.len()),
            pieces: Reply::pieces_for(body.max_tokens()),
            tool: body.forced_tool(self.dialect),
            stored: self.endpoint == Endpoint::Responses && body.stored(),
        };
        if reply.stored {
            let completed = answer::response(&reply);
            shared
                .responses()
                .keep(answer::response_id(reply.id), completed, self.bytes);
        }
        let streamed = match self.endpoint {
            _ if !body.streaming() => None,
            Endpoint::Chat => Some(answer::chat_completion_stream(&reply, body.include_usage())),
            Endpoint::Messages => Some(answer::anthropic_message_stream(&reply)),
            Endpoint::Responses => Some(answer::response_stream(&reply)),
            _ => None,
        };
        if let Some(chunks) = streamed {
            return stream_answer(chunks, stream.chunk_delay, stream.cut_after, guard);
        }
        let query = self.parts.uri.query();
        let kept = |(status, body): crate::stored::Answered| {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            (status, body)
        };
        let (status, bytes) = match self.endpoint {
            Endpoint::Chat => (StatusCode::OK, answer::chat_completion(&reply)),
            Endpoint::Messages => (StatusCode::OK, answer::anthropic_message(&reply)),
            Endpoint::CountTokens => (StatusCode::OK, answer::token_count(reply.prompt_tokens)),
            Endpoint::Responses => (StatusCode::OK, answer::response(&reply)),
            Endpoint::ResponseGet(ref id) => kept(shared.responses().get(id)),
            Endpoint::ResponseInputItems(ref id) => kept(shared.responses().input_items(id, query)),
            Endpoint::ResponseCancel(ref id) => kept(shared.responses().cancel(id)),
            Endpoint::ResponseDelete(ref id) => kept(shared.responses().delete(id)),
            Endpoint::Embeddings => {
                let ask = EmbeddingsAsk {
                    inputs: body.embedding_inputs(),
                    dimensions: body.dimensions(),
                    base64: body.base64(),
                };
                let bytes = answer::embeddings(reply.model, reply.prompt_tokens, &ask);
                (StatusCode::OK, bytes)
            }
            Endpoint::Models => match Page::of_query(query) {
                Ok(page) => (StatusCode::OK, answer::models(self.dialect, &page)),
                Err(message) => {
                    let status = StatusCode::BAD_REQUEST;
                    return error_json(self.dialect, status, &message, None, guard);
                }
            },
            Endpoint::Model(ref id) => match answer::model(self.dialect, id) {
                Some(bytes) => (StatusCode::OK, bytes),
                None => {
                    let message = answer::no_such_model(self.dialect, id);
                    let status = StatusCode::NOT_FOUND;
                    return error_json(self.dialect, status, &message, None, guard);
                }
            },
            Endpoint::NotFound | Endpoint::MethodNotAllowed => {
                let status = if self.endpoint == Endpoint::NotFound {
                    StatusCode::NOT_FOUND
                } else {
                    StatusCode::METHOD_NOT_ALLOWED
                };
                let message = format!(
                    "Invalid URL ({} {}): levee mock answers {} and GET /v1/models",
                    self.parts.method,
                    self.parts.uri.path(),
                    shared.api.serves()
                );
                return error_json(self.dialect, status, &message, None, guard);
            }
        };
        json_answer(status, bytes, guard)
    }
}

/// What the fault decision left to do.
enum Misbehaved {
    /// The fault is the answer (an error status, a reset, a stall).
    Answered(Answer),
    /// Answer normally (after the delay), the stream cut after `cut_after` chunks.
    Go {
        guard: RequestGuard,
        cut_after: Option<usize>,
    },
}

/// Applies the fault decision: waits out its delay, then answers with the
/// fault or lets the request through.
async fn misbehave(
    shared: &Shared,
    decision: &Decision,
    streaming: bool,
    dialect: Dialect,
    guard: RequestGuard,
    reset: &AtomicBool,
) -> Misbehaved {
    if !decision.delay.is_zero() || (streaming && decision.chunk_delay.is_some()) {
        shared.stats.fault(FaultKind::Delayed);
    }
    if !decision.delay.is_zero() {
        tokio::time::sleep(decision.delay).await;
    }
    let answered = match decision.outcome {
        Outcome::Normal => {
            return Misbehaved::Go {
                guard,
                cut_after: None,
            }
        }
        Outcome::CutStreamAfter(n) => {
            shared.stats.fault(FaultKind::CutStream);
            return Misbehaved::Go {
                guard,
                cut_after: Some(n as usize),
            };
        }
        Outcome::Status(spec) => {
            shared.stats.fault(FaultKind::Status);
            Ok(error_answer(dialect, spec, guard))
        }
        Outcome::Reset => {
            shared.stats.fault(FaultKind::Reset);
            reset_connection(guard, reset)
        }
        Outcome::Stall => {
            shared.stats.fault(FaultKind::Stall);
            stall(guard).await
        }
    };
    Misbehaved::Answered(answered)
}

impl MockApi {
    /// The endpoint asked for and the dialect to answer in: both dialects
    /// read the dialect from the request; one dialect answers every path in
    /// its own, and knows nothing of the other's paths.
    fn route(self, method: &http::Method, path: &str, headers: &HeaderMap) -> (Endpoint, Dialect) {
        let endpoint = Endpoint::route(method, path);
        match self {
            // A cloud's request reaches here rewritten, in its native API.
            MockApi::Both | MockApi::Vertex => (endpoint, Dialect::of_request(path, headers)),
            MockApi::OpenAi | MockApi::Azure => {
                (served(endpoint, Dialect::OpenAi), Dialect::OpenAi)
            }
            MockApi::Bedrock => (served(endpoint, Dialect::Anthropic), Dialect::Anthropic),
            MockApi::Anthropic => (served(endpoint, Dialect::Anthropic), Dialect::Anthropic),
        }
    }

    /// The endpoints this mock answers, for a 404's message.
    fn serves(self) -> &'static str {
        match self {
            MockApi::Both => {
                "POST /v1/chat/completions, /v1/messages, /v1/messages/count_tokens, /v1/embeddings, /v1/responses, /v1/responses/{id}/cancel, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items"
            }
            MockApi::OpenAi => {
                "POST /v1/chat/completions, /v1/embeddings, /v1/responses, /v1/responses/{id}/cancel, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items"
            }
            MockApi::Anthropic => "POST /v1/messages, /v1/messages/count_tokens",
            MockApi::Azure => {
                "POST /openai/v1/chat/completions (and the v1 API's other paths), /openai/deployments/{deployment}/chat/completions|completions|embeddings?api-version="
            }
            MockApi::Bedrock => {
                "POST /model/{modelId}/invoke, /model/{modelId}/invoke-with-response-stream"
            }
            MockApi::Vertex => {
                "POST /v1/projects/{p}/locations/{r}/publishers/anthropic/models/{m}:rawPredict|:streamRawPredict, /v1/projects/{p}/locations/{r}/endpoints/openapi/chat/completions, /token"
            }
        }
    }
}

/// A provider serving one dialect knows nothing of the other's paths.
fn served(endpoint: Endpoint, dialect: Dialect) -> Endpoint {
    let foreign = match dialect {
        Dialect::OpenAi => matches!(endpoint, Endpoint::Messages | Endpoint::CountTokens),
        Dialect::Anthropic => matches!(
            endpoint,
            Endpoint::Chat
                | Endpoint::Embeddings
                | Endpoint::Responses
                | Endpoint::ResponseGet(_)
                | Endpoint::ResponseInputItems(_)
                | Endpoint::ResponseCancel(_)
                | Endpoint::ResponseDelete(_)
        ),
    };
    if foreign {
        Endpoint::NotFound
    } else {
        endpoint
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

fn reset_connection(mut guard: RequestGuard, reset: &AtomicBool) -> Answer {
    guard.intentional_close();
    reset.store(true, Ordering::Relaxed);
    Err(ResetConnection)
}

/// Holds the request until the client goes away (hyper then drops this
/// future, and the guard counts `client_closed`).
async fn stall(guard: RequestGuard) -> Answer {
    let never: Infallible = std::future::pending().await;
    drop(guard);
    match never {}
}

fn json_answer(status: StatusCode, body: Bytes, guard: RequestGuard) -> Response<MockBody> {
    guard.stats().status(status.as_u16());
    let mut res = Response::new(MockBody::full(body, guard));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

fn stream_answer(
    chunks: Vec<Bytes>,
    chunk_delay: Option<Duration>,
    cut_after: Option<usize>,
    guard: RequestGuard,
) -> Response<MockBody> {
    guard.stats().status(200);
    let mut res = Response::new(MockBody::stream(chunks, chunk_delay, cut_after, guard));
    let headers = res.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// An error in `dialect`'s shape with the status's own `type` and `code`.
fn error_json(
    dialect: Dialect,
    status: StatusCode,
    message: &str,
    param: Option<&str>,
    guard: RequestGuard,
) -> Response<MockBody> {
    let body = levee_wire::error::body(dialect, status.as_u16(), message, param, None);
    json_answer(status, body, guard)
}

fn error_answer(dialect: Dialect, spec: ErrorSpec, guard: RequestGuard) -> Response<MockBody> {
    let message = answer::injected_message(dialect, spec.status);
    let mut res = error_json(dialect, spec.status, &message, None, guard);
    let headers = res.headers_mut();
    if let Some(secs) = spec.retry_after {
        headers.insert("retry-after", HeaderValue::from(secs));
    }
    if let Some(ms) = spec.retry_after_ms {
        headers.insert("retry-after-ms", HeaderValue::from(ms));
    }
    res
}

async fn replay(entry: &tape::Compiled, guard: RequestGuard, reset: &AtomicBool) -> Answer {
    if !entry.delay.is_zero() {
        tokio::time::sleep(entry.delay).await;
    }
    let body = match &entry.body {
        tape::Body::Reset => return reset_connection(guard, reset),
        tape::Body::Stall => return stall(guard).await,
        tape::Body::Full(bytes) => {
            guard.stats().status(entry.status.as_u16());
            MockBody::full(bytes.clone(), guard)
        }
        tape::Body::Chunks { chunks, cut } => {
            guard.stats().status(entry.status.as_u16());
            let cut_after = cut.then_some(chunks.len());
            MockBody::stream(chunks.clone(), entry.chunk_delay, cut_after, guard)
        }
    };
    let mut res = Response::new(body);
    *res.status_mut() = entry.status;
    *res.headers_mut() = entry.headers.clone();
    Ok(res)
}

/// Watches an accepted connection: when the service asked for a reset, the
/// close sets `SO_LINGER` to zero first so it is a TCP RST, not a FIN.
struct ResetOnClose(Arc<AtomicBool>);

impl<S: Socket> Watch<S> for ResetOnClose {
    fn closing(&mut self, stream: &mut S) {
        if self.0.load(Ordering::Relaxed) {
            stream.reset_on_close();
        }
    }
}
