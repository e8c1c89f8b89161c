//! The fields of a provider's answer reach the caller whole on every path
//! an answer takes: a plain answer, a stream, an error passed on, and a
//! stored answer replayed. Levee keeps the fields it does not read out of
//! its header maps and writes them as the bytes they came in; the fields
//! it reads or writes itself (its own `x-levee-*`, `x-should-retry`, the
//! framing and hop-by-hop fields, the request id) are still handled as
//! they were.

mod support;
use std::net::SocketAddr;
use std::time::Duration;
use support::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const WATCHDOG: Duration = Duration::from_secs(20);
const DATE: &str = "Sun, 06 Dec 2026 20:00:00 GMT";

/// The provider's fields, mixed-case and in the order a CDN-fronted
/// provider writes them, with fields Levee reads in between.
fn fields() -> String {
    [
        &format!("Date: {DATE}"),
        "Server: upstream/1.0",
        "openai-organization: org-1",
        "x-ratelimit-remaining-requests: 99",
        "Set-Cookie: a=1",
        "x-request-id: up-1",
        "Set-Cookie: b=2",
        "x-levee-replayed: true",
        "x-should-retry: true",
        "Keep-Alive: timeout=5",
        "Connection: keep-alive, x-hop",
        "x-hop: 1",
        "cf-ray:   8f-LAX  ",
    ]
    .iter()
    .map(|l| format!("{l}\r\n"))
    .collect()
}

/// Answers a request for model `bad` with a 400, a streamed request with
/// an SSE stream, and any other with a plain completion, every answer with
/// [`fields`].
async fn provider() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind provider");
    let addr = l.local_addr().expect("provider addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let Some((_, text)) = read_request(&mut s).await else {
                    return;
                };
                let (status, ctype, body) = if text.contains(r#""model":"bad""#) {
                    (400, "application/json", r#"{"error":{"message":"no such model","type":"invalid_request_error","code":"model_not_found"}}"#.to_string())
                } else if text.contains(r#""stream":true"#) {
                    (200, "text/event-stream", "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":null}]}\n\ndata: [DONE]\n\n".to_string())
                } else {
                    (200, "application/json", r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#.to_string())
                };
                let resp = format!(
                    "HTTP/1.1 {status} X\r\n{}content-type: {ctype}\r\ncontent-length: {}\r\n\r\n{body}",
                    fields(),
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    addr
}

async fn gateway() -> Env {
    gateway_with("", levee_gateway::Options::default()).await
}

/// The gateway in front of [`provider`], with `state` (a config line or
/// nothing) and started with `opts`.
async fn gateway_with(state: &str, opts: levee_gateway::Options) -> Env {
    let addr = provider().await;
    std::env::set_var("LEVEE_RELAYED_FIELDS_KEY", "sk-relayed-fields-key");
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nshutdown_grace: 5s\n{state}providers:\n  p: {{ api: openai, base_url: \"http://{addr}\", api_key_env: LEVEE_RELAYED_FIELDS_KEY }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n"
    );
    start_text_with(&text, opts).await
}

/// The provider's fields Levee passes on are there, once each, in order;
/// the ones it drops or rewrites are not.
fn assert_relayed(what: &str, r: &Resp) {
    let h = &r.headers;
    let all = |n: &str| -> Vec<&str> {
        h.get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect()
    };
    assert_eq!(all("date"), [DATE], "{what}: {h:?}");
    assert_eq!(all("server"), ["upstream/1.0"], "{what}: {h:?}");
    assert_eq!(all("openai-organization"), ["org-1"], "{what}: {h:?}");
    assert_eq!(all("set-cookie"), ["a=1", "b=2"], "{what}: {h:?}");
    assert_eq!(all("cf-ray"), ["8f-LAX"], "{what}: {h:?}");
    assert_eq!(
        all("x-ratelimit-remaining-requests"),
        ["99"],
        "{what}: {h:?}"
    );
    for gone in ["keep-alive", "x-hop", "x-should-retry"] {
        assert!(h.get(gone).is_none(), "{what}: {gone} was relayed: {h:?}");
    }
    assert_ne!(
        h["x-request-id"], "up-1",
        "{what}: Levee's id is the caller's"
    );
    assert_eq!(h["x-levee-upstream-request-id"], "up-1", "{what}: {h:?}");
    assert_eq!(all("x-levee-attempts").len(), 1, "{what}: {h:?}");
}

#[tokio::test]
async fn a_plain_answer_carries_every_field_the_provider_sent() {
    let env = gateway().await;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_relayed("plain", &r);
    assert!(
        r.headers.get("x-levee-replayed").is_none(),
        "{:?}",
        r.headers
    );
    env.stop().await;
}

#[tokio::test]
async fn a_stream_carries_every_field_the_provider_sent() {
    let env = gateway().await;
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("[DONE]"), "{}", r.text());
    assert_relayed("stream", &r);
    env.stop().await;
}

#[tokio::test]
async fn an_error_passed_on_carries_every_field_the_provider_sent() {
    let env = gateway().await;
    let body = r#"{"model":"bad","messages":[{"role":"user","content":"hi"}]}"#;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", body, &[])).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.header("x-should-retry"), "false", "Levee's own advice");
    let h = &r.headers;
    assert_eq!(h["openai-organization"], "org-1", "{h:?}");
    assert_eq!(h["server"], "upstream/1.0", "{h:?}");
    assert_eq!(h.get_all("set-cookie").iter().count(), 2, "{h:?}");
    assert_eq!(h.get_all("date").iter().count(), 1, "{h:?}");
    env.stop().await;
}

/// Sends one keyed request twice: the second answer is the stored one,
/// with every field the first had, a repeated name as many times as it
/// came, in order. Returns the first answer.
async fn assert_replayed_whole(env: &Env, key: &str) -> Resp {
    let key = [("idempotency-key", key)];
    let first = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &key)).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_relayed("first", &first);
    let again = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &key)).await;
    assert_eq!(again.status, 200, "{}", again.text());
    let h = &again.headers;
    assert_eq!(again.header("x-levee-replayed"), "true", "{h:?}");
    let cookies: Vec<_> = h.get_all("set-cookie").iter().collect();
    assert_eq!(cookies, ["a=1", "b=2"], "{h:?}");
    assert_eq!(h["openai-organization"], "org-1", "{h:?}");
    assert_eq!(h["server"], "upstream/1.0", "{h:?}");
    first
}

#[tokio::test]
async fn a_replayed_answer_carries_every_field_the_first_one_did() {
    let env = gateway().await;
    assert_replayed_whole(&env, "relayed-fields-1").await;
    env.stop().await;
}

#[tokio::test]
async fn the_tape_records_the_fields_the_provider_sent() {
    let dir = std::env::temp_dir().join(format!("levee-relayed-tape-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tape dir");
    let tape = dir.join("tape.jsonl");
    let env = gateway_with(
        "",
        levee_gateway::Options {
            record: Some(tape.clone()),
            ..Default::default()
        },
    )
    .await;
    let r = watchdog(WATCHDOG, env.post("/v1/chat/completions", CHAT, &[])).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_relayed("recorded", &r);
    let text = || std::fs::read_to_string(&tape).unwrap_or_default();
    until(WATCHDOG, "the answer's tape line", || {
        text().contains("org-1")
    })
    .await;
    let line = text();
    for field in [
        "openai-organization",
        "upstream/1.0",
        "x-ratelimit-remaining-requests",
    ] {
        assert!(line.contains(field), "{field} is not on the tape: {line}");
    }
    env.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Through Redis, a replay carries every field too, a repeated name as
/// many times as it came.
#[tokio::test]
async fn a_replay_stored_in_redis_carries_every_field_the_first_one_did() {
    let Some(redis) = RedisServer::start_or_skip() else {
        return;
    };
    redis.ready(WATCHDOG).await;
    let port = redis.port;
    // A long budget per Redis call: at the default 5 ms, a busy machine
    // fell back to the local store mid-test and nothing was replayed.
    let state = format!(
        "state: {{ backend: redis, url: \"redis://127.0.0.1:{port}\", key_prefix: \"relayed{port}\", timeout: 2s }}\n"
    );
    let env = gateway_with(&state, levee_gateway::Options::default()).await;
    let first = assert_replayed_whole(&env, "relayed-fields-redis").await;
    let local = first.headers.get("x-levee-idempotency");
    assert!(local.is_none(), "stored locally: {:?}", first.headers);
    env.stop().await;
}
