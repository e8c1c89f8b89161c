//! Test kit, two ways to run the gateway against `levee mock`:
//!
//! - [`local`]: in-process. The gateway is called as a service value
//!   ([`levee_gateway::App`]) and reaches in-process mocks over in-memory
//!   pipes: no sockets, so tests run under `#[tokio::test(start_paused =
//!   true)]`, where time moves only when every task waits on a timer. Timing
//!   tests belong here: a long deadline, exact bounds on the paused clock, and
//!   a watchdog that trips at once (in real time) when the gateway waits on
//!   a timer it should not.
//! - [`start`] / [`one`]: a real gateway and real mocks on 127.0.0.1
//!   ephemeral ports, for what needs sockets (framing, limits, the listener).
//!
//! Both answer with a [`Resp`], and the mock's stats are the oracle.
#![allow(dead_code)]

mod fake_hosts;
mod http_head;
mod redis_server;
#[allow(unused_imports)]
pub use fake_hosts::{fake_hosts, head_field, read_request, Answer, Handler};
#[allow(unused_imports)] // each test file uses a part of the kit
pub use http_head::header;
#[allow(unused_imports)]
pub use redis_server::{free_port, sentinel_pair, RedisServer};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use levee_config::Config;
use levee_mock::{MockApi, MockHandle, MockOptions};
use std::time::Duration;

pub struct Env {
    pub mocks: Vec<MockHandle>,
    pub gw: levee_gateway::Running,
    pub client: Client<HttpConnector, Full<Bytes>>,
}

pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// Reads a whole response.
    pub async fn read<B: http_body::Body<Data = Bytes>>(resp: http::Response<B>) -> Resp {
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        }
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub async fn mock(faults: &str) -> MockHandle {
    mock_api(faults, MockApi::Both).await
}

/// A mock serving `api` (one dialect strictly, as the real provider).
pub async fn mock_api(faults: &str, api: MockApi) -> MockHandle {
    levee_mock::spawn("127.0.0.1:0".parse().unwrap(), mock_options(faults, api))
        .await
        .expect("mock starts")
}

/// The `api:` of the provider whose `base_url` is `{mockN}`: each mock
/// serves exactly that provider's dialect, strictly, so a request sent to a
/// provider in the wrong dialect fails here as it would in production.
fn api_of(config: &str, i: usize) -> MockApi {
    let needle = format!("{{mock{i}}}");
    let line = config.lines().find(|l| l.contains(&needle)).unwrap_or("");
    match line.split("api:").nth(1).map(|r| r.trim_start()) {
        Some(r) if r.starts_with("anthropic") => MockApi::Anthropic,
        Some(r) if r.starts_with("openai") => MockApi::OpenAi,
        Some(r) if r.starts_with("azure") => MockApi::Azure,
        Some(r) if r.starts_with("bedrock") => MockApi::Bedrock,
        Some(r) if r.starts_with("vertex") => MockApi::Vertex,
        _ => MockApi::Both,
    }
}

/// A JSON POST to `uri` (a URL, or a path for the in-process gateway).
pub fn post_request(uri: &str, body: &str, headers: &[(&str, &str)]) -> http::Request<Full<Bytes>> {
    let mut b = http::Request::post(uri).header("content-type", "application/json");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// A mock's options: `faults`, strict in `api`, seeded.
fn mock_options(faults: &str, api: MockApi) -> MockOptions {
    let faults = levee_mock::parse_faults(faults).expect("test faults parse");
    MockOptions {
        faults,
        seed: 7,
        api,
        ..Default::default()
    }
}

/// The gateway and its mocks in this process, joined by in-memory pipes.
pub struct Local {
    pub mocks: Vec<levee_mock::InProcess>,
    pub app: levee_gateway::App,
}

/// Starts in-process mocks (one per fault document, each strict in its
/// provider's dialect) and an in-process gateway whose config is `config`
/// with `{mock0}`, `{mock1}`… replaced by the mocks' addresses.
pub fn local(faults: &[&str], config: &str) -> Local {
    let mocks: Vec<_> = faults
        .iter()
        .enumerate()
        .map(|(i, f)| levee_mock::InProcess::new(mock_options(f, api_of(config, i))))
        .collect();
    local_with(mocks, config)
}

/// [`local`] with mocks made by the caller.
pub fn local_with(mocks: Vec<levee_mock::InProcess>, config: &str) -> Local {
    local_dial(mocks, config, std::sync::Arc::new(|_: &http::Uri| None))
}

/// [`local_with`] where hosts other than the mocks' are reached through
/// `other` (a hand-written provider, say).
pub fn local_dial(
    mocks: Vec<levee_mock::InProcess>,
    config: &str,
    other: levee_gateway::transport::Dial,
) -> Local {
    let mut text = format!("shutdown_grace: 5s\n{config}");
    for i in 0..mocks.len() {
        text = text.replace(
            &format!("{{mock{i}}}"),
            &format!("http://mock{i}.localhost"),
        );
    }
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
    let dialed = mocks.clone();
    let mock_at = move |uri: &http::Uri| {
        let host = uri
            .host()?
            .strip_prefix("mock")?
            .strip_suffix(".localhost")?;
        dialed.get(host.parse::<usize>().ok()?).map(|m| m.connect())
    };
    let dial: levee_gateway::transport::Dial =
        std::sync::Arc::new(move |uri: &http::Uri| mock_at(uri).or_else(|| other(uri)));
    let app = levee_gateway::App::in_process(config, 42, dial).expect("gateway starts");
    Local { mocks, app }
}

/// [`local`] with one provider (a mock) and one route with `route_extra`.
pub fn local_one(faults: &str, route_extra: &str) -> Local {
    local(&[faults], &one_route(route_extra))
}

/// [`local_one`] and one chat request with its deadline: the gateway (for its
/// mock's stats and its metrics), the answer, and how long it took on the
/// paused clock.
pub async fn one_chat(
    faults: &str,
    route_extra: &str,
    body: &str,
    timeout_ms: u64,
) -> (Local, Resp, Duration) {
    let env = local_one(faults, route_extra);
    let (r, took) = env.timed_chat(body, timeout_ms).await;
    (env, r, took)
}

impl Local {
    /// The plain chat request ([`CHAT`], no extra headers).
    pub async fn chat(&self) -> Resp {
        self.post("/v1/chat/completions", CHAT, &[]).await
    }

    pub async fn post(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> Resp {
        Resp::read(self.app.call(post_request(path, body, headers)).await).await
    }

    pub fn stats(&self, i: usize) -> levee_mock::Stats {
        self.mocks[i].stats()
    }

    /// A chat request with `body` and a deadline of `timeout_ms`, under a
    /// watchdog longer than any deadline the tests use; returns the answer
    /// and the time it took on the paused clock.
    pub async fn timed_chat(&self, body: &str, timeout_ms: u64) -> (Resp, Duration) {
        let t = paused_now();
        let timeout = timeout_ms.to_string();
        let headers = [("x-timeout-ms", timeout.as_str())];
        let r = watchdog(
            Duration::from_secs(120),
            self.post("/v1/chat/completions", body, &headers),
        )
        .await;
        (r, t.elapsed())
    }

    /// The `/metrics` exposition.
    pub fn metrics(&self) -> String {
        let shared = self.app.shared();
        shared.refresh_gauges();
        shared.metrics().encode()
    }
}

/// The config of one OpenAI provider (`{mock0}`) and one route with `route_extra`.
pub fn one_route(route_extra: &str) -> String {
    format!(
        "providers:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n{route_extra}"
    )
}

/// Starts mocks (one per fault document, each strict in its provider's
/// dialect) and a gateway whose config is `config` with `{mock0}`,
/// `{mock1}`… replaced by the mocks' URLs.
pub async fn start(faults: &[&str], config: &str) -> Env {
    let mut mocks = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        mocks.push(mock_api(f, api_of(config, i)).await);
    }
    let mut text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nshutdown_grace: 5s\n{config}"
    );
    for (i, m) in mocks.iter().enumerate() {
        text = text.replace(&format!("{{mock{i}}}"), &m.url());
    }
    let gw = spawn_text(&text, 42).await;
    Env {
        mocks,
        gw,
        client: http_client(),
    }
}

/// A gateway on real sockets from a whole config text, its RNG seeded.
pub async fn spawn_text(text: &str, seed: u64) -> levee_gateway::Running {
    let config = Config::parse(text).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
    levee_gateway::spawn(config, seed, std::future::pending())
        .await
        .expect("gateway starts")
}

/// A gateway on real sockets from a whole config text, started with
/// `opts`, and no mock of its own.
pub async fn start_text_with(text: &str, opts: levee_gateway::Options) -> Env {
    let config = Config::parse(text).unwrap_or_else(|e| panic!("test config: {e}\n{text}"));
    let gw = levee_gateway::spawn_with(config, opts, std::future::pending())
        .await
        .expect("gateway starts");
    Env {
        mocks: vec![],
        gw,
        client: http_client(),
    }
}

/// A plain HTTP/1.1 client for the gateway's real sockets.
pub fn http_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One provider (the mock) and one route with the given extra route YAML.
pub async fn one(faults: &str, route_extra: &str) -> Env {
    start(&[faults], &one_route(route_extra)).await
}

pub const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
pub const CHAT_STREAM: &str =
    r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
pub const MESSAGES: &str =
    r#"{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

impl Env {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.gw.addr, path)
    }

    /// The plain chat request ([`CHAT`], no extra headers).
    pub async fn chat(&self) -> Resp {
        self.post("/v1/chat/completions", CHAT, &[]).await
    }

    pub async fn post(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> Resp {
        let req = post_request(&self.url(path), body, headers);
        let resp = self.client.request(req).await.expect("gateway answers");
        Resp::read(resp).await
    }

    /// A chat completion from the caller `who` (`x-levee-caller`) with its
    /// deadline (`x-timeout-ms`).
    pub async fn chat_as(&self, body: &str, who: &str, timeout_ms: &str) -> Resp {
        let headers = [("x-levee-caller", who), ("x-timeout-ms", timeout_ms)];
        self.post("/v1/chat/completions", body, &headers).await
    }

    pub fn stats(&self, i: usize) -> levee_mock::Stats {
        self.mocks[i].stats()
    }

    /// `GET path` from `addr`: this gateway's listeners or another
    /// replica's.
    pub async fn get_from(&self, addr: std::net::SocketAddr, path: &str) -> Resp {
        let req = http::Request::get(format!("http://{addr}{path}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = self.client.request(req).await.expect("listener answers");
        Resp::read(resp).await
    }

    /// `GET path` from this gateway's admin listener.
    pub async fn admin(&self, path: &str) -> Resp {
        self.get_from(self.gw.admin_addr, path).await
    }

    /// The `/metrics` exposition of this gateway's admin listener.
    pub async fn metrics(&self) -> String {
        self.admin("/metrics").await.text()
    }

    /// Waits (polling every 100 ms, for ever: callers bound it with a
    /// watchdog) until the admin listener at `admin`, this gateway's or
    /// another replica's, reports a `levee_state_replicas` gauge that
    /// `ok` accepts.
    pub async fn replicas_until(&self, admin: std::net::SocketAddr, ok: impl Fn(f64) -> bool) {
        loop {
            let m = self.get_from(admin, "/metrics").await.text();
            if ok(metric(&m, "levee_state_replicas", &[])) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    pub async fn stop(self) {
        self.gw.shutdown().await;
        for m in self.mocks {
            m.shutdown().await;
        }
    }
}

/// Fails the test fast if `fut` takes longer than `limit` (a watchdog, not a deadline).
pub async fn watchdog<T>(limit: Duration, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .expect("watchdog: took too long")
}

/// Waits until `cond` holds, looking again after each 1 ms tick (of the
/// paused clock in-process, of the real one over sockets); fails the test
/// when `limit` passes first.
pub async fn until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let polled = async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    if tokio::time::timeout(limit, polled).await.is_err() {
        panic!("watchdog: {what} did not happen within {limit:?}");
    }
}

/// `levee_upstream_attempts_total{result}`, summed over providers.
pub fn attempts_labelled(text: &str, result: &str) -> f64 {
    let label = format!("result=\"{result}\"");
    metric(text, "levee_upstream_attempts_total", &[&label])
}

/// `levee_upstream_attempts_total` of `provider` with `result`.
pub fn attempts_of(text: &str, provider: &str, result: &str) -> f64 {
    let provider = format!("provider=\"{provider}\"");
    let result = format!("result=\"{result}\"");
    metric(text, "levee_upstream_attempts_total", &[&provider, &result])
}

/// The log lines written on this thread while its guard lives, at `level`
/// and above, without colours ([`Logs::text`] reads them).
pub fn capture_logs(level: tracing::Level) -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

/// Log lines captured by [`capture_logs`].
#[derive(Clone, Default)]
pub struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Sum of a metric's samples whose line contains all `parts`.
pub fn metric(text: &str, name: &str, parts: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with(name)
                && (l[name.len()..].starts_with('{') || l[name.len()..].starts_with(' '))
        })
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Now on tokio's clock: in-process tests under paused time measure exact
/// elapsed times with it (time moves only when every task waits on a timer).
#[allow(clippy::disallowed_methods)]
pub fn paused_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// The wall clock, for black-box timing of real servers over real sockets
/// (the one place tests read it).
#[allow(clippy::disallowed_methods)]
pub fn stopwatch() -> std::time::Instant {
    std::time::Instant::now()
}
