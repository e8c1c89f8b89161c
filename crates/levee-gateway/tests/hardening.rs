//! Hostile callers, providers and stores: what reaches the provider, what
//! comes back, what is stored and for how long, and how shutdown ends the
//! requests still running.

mod support;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const WATCHDOG: Duration = Duration::from_secs(20);

/// A fake provider that records each request head it receives and answers
/// `status` with `body` (where `{auth}` is replaced by the request's
/// `authorization` value, as a provider echoing a bad key would).
async fn spy(
    status: u16,
    body: &'static str,
) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind spy");
    let addr = l.local_addr().expect("spy addr");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_string();
                    let len: usize = header(&head, "content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    while got.len() < end + 4 + len {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&chunk[..n]),
                        }
                    }
                    got.drain(..end + 4 + len);
                    let auth = header(&head, "authorization")
                        .unwrap_or_default()
                        .to_string();
                    let _ = tx.send(head);
                    let body = body.replace("{auth}", &auth);
                    let resp = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

const OK_BODY: &str = r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;

async fn start_config(config: &str, opts: levee_gateway::Options) -> Env {
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nshutdown_grace: 5s\n{config}"
    );
    start_text_with(&text, opts).await
}

#[tokio::test]
async fn only_allow_listed_caller_headers_reach_the_provider() {
    let (addr, mut seen) = spy(200, OK_BODY).await;
    let env = start_config(
        &format!("providers:\n  p: {{ api: openai, base_url: \"http://{addr}\" }}\nroutes:\n  - targets: [p]\n"),
        levee_gateway::Options::default(),
    )
    .await;
    let hostile = [
        ("openai-organization", "org-victim"),
        ("openai-project", "proj-victim"),
        ("cookie", "session=victim"),
        ("api-key", "azure-victim"),
        ("x-goog-api-key", "goog-victim"),
        ("forwarded", "for=10.0.0.1"),
        ("x-forwarded-for", "10.0.0.1"),
        ("x-anything", "else"),
        ("anthropic-beta", "not-for-openai"),
    ];
    let allowed = [
        ("accept", "application/json"),
        ("user-agent", "OpenAI/Python 1.0"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("openai-beta", "assistants=v2"),
    ];
    let mut headers: Vec<(&str, &str)> = hostile.to_vec();
    headers.extend(allowed);
    headers.push(("idempotency-key", "k-forward"));
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &headers)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let head = seen
        .recv()
        .await
        .expect("the spy saw the request")
        .to_lowercase();
    for (name, value) in hostile {
        assert!(
            !head.contains(&format!("{name}:")) && !head.contains(value),
            "`{name}` reached the provider:\n{head}"
        );
    }
    for (name, value) in allowed {
        assert!(
            head.contains(&format!("{name}: {}", value.to_lowercase())),
            "`{name}` did not reach the provider:\n{head}"
        );
    }
    // The caller's key is sent as a value derived from it and the caller.
    let key = head
        .lines()
        .find_map(|l| l.strip_prefix("idempotency-key: "))
        .unwrap_or_default()
        .trim_end();
    assert!(
        key.len() == 64 && key.bytes().all(|c| c.is_ascii_hexdigit()),
        "{head}"
    );
    assert!(head.contains("x-timeout-ms:"), "{head}");
    env.stop().await;
}

#[tokio::test]
async fn a_provider_echoing_the_key_is_redacted_in_answers_and_tapes() {
    const KEY: &str = "sk-hardening-9c1e77f0d2-SECRET";
    std::env::set_var("LEVEE_HARDENING_KEY", KEY);
    let (addr, mut seen) = spy(
        401,
        r#"{"error":{"message":"Incorrect API key provided: {auth}.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
    )
    .await;
    let dir = std::env::temp_dir().join(format!("levee-hardening-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tape = dir.join("redact.jsonl");
    let env = start_config(
        &format!("providers:\n  p: {{ api: openai, base_url: \"http://{addr}\", api_key_env: LEVEE_HARDENING_KEY }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n"),
        levee_gateway::Options {
            record: Some(tape.clone()),
            ..Default::default()
        },
    )
    .await;
    let r = watchdog(
        WATCHDOG,
        env.post(
            "/v1/chat/completions?api_key=query-secret-value&x=1",
            CHAT,
            &[],
        ),
    )
    .await;
    assert_eq!(r.status, 401);
    let head = seen.recv().await.expect("the spy saw the request");
    assert!(head.contains(KEY), "the key was not sent at all: {head}");
    assert!(
        !r.text().contains(KEY),
        "the key is in the answer: {}",
        r.text()
    );
    assert!(
        r.text()
            .contains("Incorrect API key provided: Bearer [redacted]"),
        "{}",
        r.text()
    );
    // The tape is written by its own thread.
    let read = || std::fs::read_to_string(&tape).unwrap_or_default();
    until(WATCHDOG, "a tape line", || !read().is_empty()).await;
    let text = read();
    assert!(!text.contains(KEY), "the key is in the tape: {text}");
    assert!(
        !text.contains("query-secret-value"),
        "a query value is in the tape: {text}"
    );
    assert!(
        text.contains(r#""path":"/v1/chat/completions?api_key&x""#),
        "{text}"
    );
    env.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_tape_stops_at_its_size_bound() {
    let dir = std::env::temp_dir().join(format!("levee-hardening-tape-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tape = dir.join("bounded.jsonl");
    let m = mock("faults: []").await;
    let mut env = start_config(
        &format!(
            "providers:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n",
            m.url()
        ),
        levee_gateway::Options {
            record: Some(tape.clone()),
            record_max_bytes: Some(3000),
            ..Default::default()
        },
    )
    .await;
    env.mocks.push(m);
    for _ in 0..20 {
        let r = watchdog(WATCHDOG, env.chat()).await;
        assert_eq!(r.status, 200);
    }
    let recorder = env.gw.shared.recorder().expect("recording");
    until(WATCHDOG, "the tape is full", || recorder.is_full()).await;
    let len = std::fs::metadata(&tape).map(|m| m.len()).unwrap_or(0);
    assert!(len > 0 && len <= 3000, "tape is {len} bytes");
    env.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn keyed_config(extra: &str) -> String {
    format!(
        "keys:\n  - {{ name: a, sha256: \"{}\" }}\n  - {{ name: b, sha256: \"{}\" }}\n{extra}providers:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n",
        sha256_hex("key-a"),
        sha256_hex("key-b")
    )
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_and_models_needs_a_key() {
    let env = start(&["faults: []"], &keyed_config("")).await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let auth = format!("{scheme} key-a");
        let r = watchdog(
            WATCHDOG,
            env.post("/v1/chat/completions", CHAT, &[("authorization", &auth)]),
        )
        .await;
        assert_eq!(r.status, 200, "{scheme}: {}", r.text());
    }
    let get = |auth: Option<&str>| {
        let mut b = http::Request::get(env.url("/v1/models"));
        if let Some(a) = auth {
            b = b.header("authorization", a);
        }
        env.client.request(b.body(Full::new(Bytes::new())).unwrap())
    };
    let anon = watchdog(WATCHDOG, get(None)).await.unwrap();
    assert_eq!(
        anon.status(),
        401,
        "the route list is answered without a key"
    );
    let body = anon.into_body().collect().await.unwrap().to_bytes();
    assert!(!String::from_utf8_lossy(&body).contains("\"data\""));
    let keyed = watchdog(WATCHDOG, get(Some("bearer key-b"))).await.unwrap();
    assert_eq!(keyed.status(), 200);
    env.stop().await;
}

#[tokio::test]
async fn the_admin_listener_closes_a_connection_that_never_finishes_its_headers() {
    let env = start(
        &["faults: []"],
        "limits: { header_read_timeout: 300ms }\nproviders:\n  p: { api: openai, base_url: \"{mock0}\" }\nroutes:\n  - targets: [p]\n",
    )
    .await;
    for addr in [env.gw.addr, env.gw.admin_addr] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        // Closed (EOF, perhaps after a 408) by the gateway, not by the watchdog.
        let closed = watchdog(Duration::from_secs(5), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return true,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(closed, "{addr}");
    }
    env.stop().await;
}

/// One raw request to `addr`; the status code and the whole answer.
async fn raw_get(addr: SocketAddr, request_line: &str, host: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let host = host.map_or(String::new(), |h| format!("host: {h}\r\n"));
    let req = format!("{request_line}\r\n{host}connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    watchdog(WATCHDOG, s.read_to_end(&mut out)).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, text)
}

#[tokio::test]
async fn the_admin_listener_answers_only_to_its_own_address() {
    let env = one("faults: []", "").await;
    let admin = env.gw.admin_addr;
    let port = admin.port();
    let own = [
        admin.to_string(),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("[::1]:{port}"),
    ];
    for host in &own {
        for path in ["/", "/metrics", "/census", "/healthz", "/readyz"] {
            let (status, text) = raw_get(admin, &format!("GET {path} HTTP/1.1"), Some(host)).await;
            assert_eq!(status, 200, "{host} {path}: {text}");
        }
    }
    // The status page may load nothing and run nothing: its one inline
    // style is all it needs.
    let (_, page) = raw_get(admin, "GET / HTTP/1.1", Some(&own[0])).await;
    let csp = header(&page, "content-security-policy").unwrap_or_default();
    for rule in [
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'none'",
    ] {
        assert!(csp.contains(rule), "{page}");
    }
    assert!(!csp.contains("script-src"), "{csp}");
    assert!(page.contains("<style>"), "{page}");
    assert!(!page.contains("<script"), "{page}");
    assert!(
        !page.contains("style=\""),
        "no inline style attributes: {page}"
    );
    // A name pointed at the admin address (DNS rebinding), another port,
    // a name without the port, or an absolute URI naming another host.
    let other_port = port.wrapping_add(1);
    let foreign = [
        format!("rebind.example:{port}"),
        format!("localhost.rebind.example:{port}"),
        format!("127.0.0.1:{other_port}"),
        "localhost".to_string(),
        format!("10.1.2.3:{port}"),
        "".to_string(),
        format!("user@127.0.0.1:{port}"),
    ];
    for host in &foreign {
        for path in ["/", "/metrics", "/census", "/healthz"] {
            let (status, text) = raw_get(admin, &format!("GET {path} HTTP/1.1"), Some(host)).await;
            assert_eq!(status, 421, "{host:?} {path}: {text}");
            assert!(!text.contains("levee_"), "{text}");
            assert!(!text.contains("<html"), "{text}");
        }
    }
    let line = format!("GET http://rebind.example:{port}/metrics HTTP/1.1");
    let (status, text) = raw_get(admin, &line, Some(&admin.to_string())).await;
    assert_eq!(status, 421, "{text}");
    // A request with no Host at all is not a browser's.
    let (status, text) = raw_get(admin, "GET /healthz HTTP/1.0", None).await;
    assert_eq!(status, 200, "{text}");
    env.stop().await;
}

#[tokio::test]
async fn bodies_that_cannot_be_parsed_in_full_are_refused_on_every_route() {
    // No model rewrite on this route: the body would otherwise go out raw.
    let env = one("faults: []", "").await;
    let deep = format!(
        "{{\"model\":\"m\",\"x\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let bodies: Vec<Vec<u8>> = vec![
        br#"{"model":"m","x":1e400}"#.to_vec(),
        br#"{"model":"m","x":"\ud800"}"#.to_vec(),
        b"{\"model\":\"m\",\"x\":\"\xa0\"}".to_vec(),
        deep.into_bytes(),
    ];
    for body in bodies {
        let req = http::Request::post(env.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let resp = watchdog(WATCHDOG, env.client.request(req)).await.unwrap();
        assert_eq!(
            resp.status(),
            400,
            "{:?}",
            String::from_utf8_lossy(&body[..40.min(body.len())])
        );
        assert_eq!(resp.headers()["x-levee-reason"], "bad_request");
    }
    assert_eq!(env.stats(0).requests_total, 0, "nothing was forwarded");
    env.stop().await;
}

#[tokio::test(start_paused = true)]
async fn one_callers_keys_cannot_evict_another_callers_stored_answer() {
    let env = local(
        &["faults: []"],
        &keyed_config("idempotency: { max_entries: 10 }\n"),
    );
    let b = [
        ("authorization", "Bearer key-b"),
        ("idempotency-key", "b-1"),
    ];
    assert_eq!(
        watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &b))
            .await
            .status,
        200
    );
    for i in 0..25 {
        let key = format!("a-{i}");
        let a = [
            ("authorization", "Bearer key-a"),
            ("idempotency-key", key.as_str()),
        ];
        assert_eq!(
            watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &a))
                .await
                .status,
            200
        );
    }
    let again = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &b)).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.header("x-levee-replayed"),
        "true",
        "B's answer was evicted by A's keys"
    );
    assert_eq!(env.stats(0).requests_total, 26, "B's request ran twice");
}

#[tokio::test(start_paused = true)]
async fn stored_answers_are_bounded_in_bytes() {
    let env = local(
        &["faults: []"],
        &keyed_config("idempotency: { max_entries: 1000, max_bytes: 16384 }\n"),
    );
    let post = |i: usize| {
        let key = format!("k-{i}");
        let env = &env;
        async move {
            let h = [
                ("authorization", "Bearer key-a"),
                ("idempotency-key", key.as_str()),
            ];
            env.post("/v1/chat/completions", CHAT, &h).await
        }
    };
    for i in 0..60 {
        assert_eq!(watchdog(WATCHDOG, post(i)).await.status, 200);
    }
    let newest = watchdog(WATCHDOG, post(59)).await;
    assert_eq!(newest.header("x-levee-replayed"), "true");
    let oldest = watchdog(WATCHDOG, post(0)).await;
    assert_eq!(
        oldest.header("x-levee-replayed"),
        "",
        "60 answers fit in 16 KiB?"
    );
}

#[tokio::test(start_paused = true)]
async fn a_keyed_stream_twice_waits_then_runs_and_says_so() {
    let env = local_one("faults:\n  - { chunk_delay: 100ms }\n", "");
    let h = [("idempotency-key", "stream-1")];
    let first = env.post("/v1/chat/completions", CHAT_STREAM, &h);
    let second = async {
        until(WATCHDOG, "the first stream reaches the provider", || {
            env.stats(0).in_flight == 1
        })
        .await;
        env.post("/v1/chat/completions", CHAT_STREAM, &h).await
    };
    let (x, y) = watchdog(WATCHDOG, async { tokio::join!(first, second) }).await;
    assert_eq!((x.status, y.status), (200, 200));
    assert_eq!(x.header("x-levee-idempotency"), "");
    assert_eq!(
        y.header("x-levee-idempotency"),
        "rerun",
        "the second ran again silently"
    );
    assert_eq!(env.stats(0).requests_total, 2);
}

#[tokio::test]
async fn at_the_end_of_the_grace_period_waiting_requests_get_a_503_and_streams_an_error_event() {
    let m = mock(
        "faults:\n  - { latency: 30s, model: slow }\n  - { latency: 1ms, chunk_delay: 500ms }\n",
    )
    .await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nshutdown_grace: 300ms\nproviders:\n  p: {{ api: openai, base_url: \"{u}\" }}\n  q: {{ api: anthropic, base_url: \"{u}\" }}\nroutes:\n  - match: {{ path: /v1/messages }}\n    targets: [q]\n    deadline: {{ default: 60s, max: 60s }}\n  - targets: [p]\n    deadline: {{ default: 60s, max: 60s }}\n",
        u = m.url()
    );
    let gw = spawn_text(&text, 1).await;
    let metrics = std::sync::Arc::clone(gw.shared.metrics());
    let client = http_client();
    let send = |path: &str, body: &'static str| {
        let req = http::Request::post(format!("http://{}{path}", gw.addr))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        tokio::spawn(client.request(req))
    };
    let slow = r#"{"model":"slow","messages":[{"role":"user","content":"hi"}]}"#;
    let msgs_stream = r#"{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let waiting = send("/v1/chat/completions", slow);
    let anthropic_stream = send("/v1/messages", msgs_stream);
    let openai_stream = send("/v1/chat/completions", CHAT_STREAM);
    until(WATCHDOG, "three requests reach the provider", || {
        m.stats().in_flight == 3
    })
    .await;
    let shutdown = tokio::spawn(gw.shutdown());
    // Answered when the 300 ms grace period ends, not at the request's next
    // wake-up of its own (its attempt's timers: seconds later): the
    // connection's task must be woken by the period's end.
    let a = watchdog(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .expect("the waiting request gets a response");
    assert_eq!(a.status(), 503);
    assert_eq!(a.headers()["x-levee-reason"], "shutting_down");
    assert_eq!(a.headers()["x-should-retry"], "false");
    let body = watchdog(WATCHDOG, a.into_body().collect())
        .await
        .unwrap()
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("shutting down"),
        "{v}"
    );
    for (resp, marker) in [
        (anthropic_stream, "event: error"),
        (openai_stream, "\"error\""),
    ] {
        let resp = watchdog(WATCHDOG, resp)
            .await
            .unwrap()
            .expect("the stream started");
        assert_eq!(resp.status(), 200);
        let body = watchdog(WATCHDOG, resp.into_body().collect())
            .await
            .expect("the stream ends with its terminating chunk, not a cut")
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.contains(marker) && text.contains("shutting_down"),
            "{text}"
        );
    }
    watchdog(WATCHDOG, shutdown).await.unwrap();
    // The two streams the grace period cut and the request it answered
    // with a 503 are counted as such, not as callers that went away (nor,
    // for the 503, left out).
    let exposition = metrics.encode();
    let counts = ["shutting_down", "client_closed"].map(|o| requests_ended(&exposition, o));
    assert_eq!(counts, [3.0, 0.0], "{exposition}");
    m.shutdown().await;
}

/// `levee_requests_total` with `outcome` in an exposition.
fn requests_ended(exposition: &str, outcome: &str) -> f64 {
    let label = format!("outcome=\"{outcome}\"");
    metric(exposition, "levee_requests_total", &[&label])
}

/// A provider that answers with Levee's own fields set: they never reach
/// the caller; Levee's own say what happened.
#[tokio::test(start_paused = true)]
async fn a_provider_cannot_set_levees_own_answer_fields() {
    let chat = r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;
    let forged = "x-levee-replayed: true\r\nx-levee-target: evil\r\nx-levee-attempts: 9\r\nx-should-retry: true\r\nx-levee-reason: forged\r\n";
    let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(200));
    let answer = std::sync::Arc::clone(&status);
    let dial = fake_hosts(
        &["forger.localhost"],
        std::sync::Arc::new(move |_: &str, _: &str, _: &str| {
            let s = answer.load(std::sync::atomic::Ordering::SeqCst);
            let body = match s {
                200 => chat.to_string(),
                _ => r#"{"error":{"message":"no","type":"invalid_request_error","code":null}}"#
                    .to_string(),
            };
            (s, forged.to_string(), body)
        }),
    );
    let env = local_dial(
        vec![],
        "providers:\n  p: { api: openai, base_url: \"http://forger.localhost\" }\nroutes:\n  - targets: [p]\n",
        dial,
    );
    for s in [200, 400] {
        status.store(s, std::sync::atomic::Ordering::SeqCst);
        let r = env.post("/v1/chat/completions", CHAT, &[]).await;
        assert_eq!(r.status, s, "{}", r.text());
        assert_eq!(r.header("x-levee-replayed"), "", "{:?}", r.headers);
        assert_eq!(r.header("x-levee-attempts"), "1", "{:?}", r.headers);
        assert_ne!(r.header("x-levee-reason"), "forged", "{:?}", r.headers);
        assert_ne!(r.header("x-should-retry"), "true", "{:?}", r.headers);
        if s == 200 {
            assert_eq!(r.header("x-levee-target"), "p");
        }
    }
}

/// An attempt's wait for its answer is timed on a timer its caller's
/// connection keeps armed across requests: each of several requests in a
/// row on one connection, to a provider that never answers, still ends at
/// the route's `first_byte_timeout` (1 s), not at the caller's deadline
/// (60 s), whichever deadline the connection's timer was last armed for.
#[tokio::test]
async fn a_provider_that_never_answers_is_given_up_on_in_time_request_after_request() {
    let env = one(
        "faults:\n  - { stall: true }\n",
        "    retry: { max_attempts: 1 }\n    first_byte_timeout: 1s\n",
    )
    .await;
    for n in 0..3 {
        let t = stopwatch();
        let r = watchdog(
            Duration::from_secs(10),
            env.post("/v1/chat/completions", CHAT, &[("x-timeout-ms", "60000")]),
        )
        .await;
        let took = t.elapsed();
        assert_eq!(r.status, 504, "request {n}: {}", r.text());
        assert!(took >= Duration::from_secs(1), "request {n} took {took:?}");
    }
    assert_eq!(env.stats(0).requests_total, 3, "one attempt each");
}
