//! The mock's own rate limits (`rate_limit:` in the fault document), in
//! process under tokio's paused clock: requests and tokens metered as the
//! providers meter them, 429s with `retry-after` when over, the dialect's
//! rate-limit fields on every answer, and levee-wire's reader agreeing with
//! what the mock writes.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use levee_mock::{parse_faults, InProcess, MockApi, MockOptions};
use levee_wire::ratelimit::{self, Meter, RateHeaders};
use serde_json::Value;

fn mock(doc: &str, api: MockApi) -> InProcess {
    InProcess::new(MockOptions {
        faults: parse_faults(doc).unwrap(),
        api,
        ..Default::default()
    })
}

struct Resp {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    fn num(&self, name: &str) -> u64 {
        let v = self.header(name).unwrap_or_else(|| panic!("no {name}"));
        v.parse().unwrap_or_else(|_| panic!("{name}: {v}"))
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// One request on a fresh in-memory connection.
async fn send(mock: &InProcess, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let io = TokioIo::new(mock.connect());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method("POST")
        .uri(path)
        .header("host", "mock")
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    let res = sender.send_request(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    }
}

async fn chat(mock: &InProcess, body: &str) -> Resp {
    send(mock, "/v1/chat/completions", &[], body).await
}

async fn message(mock: &InProcess, body: &str) -> Resp {
    send(
        mock,
        "/v1/messages",
        &[("anthropic-version", "2023-06-01")],
        body,
    )
    .await
}

const CHAT: &str = r#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hello"}]}"#;

fn chat_with_max_tokens(max: u64) -> String {
    format!(
        r#"{{"model":"gpt-4.1","max_tokens":{max},"messages":[{{"role":"user","content":"hello there, how are you"}}]}}"#
    )
}

fn anthropic_message(max: u64, stream: bool) -> String {
    format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":{max},"stream":{stream},"messages":[{{"role":"user","content":"hello"}}]}}"#
    )
}

/// The mock's input estimate: a token per four bytes of body, at least one.
fn input_of(body: &str) -> u64 {
    (body.len() as u64 / 4).max(1)
}

async fn advance(d: Duration) {
    tokio::time::advance(d).await;
}

/// Wall-clock unix ms, as a gateway would read it on an answer's arrival.
#[allow(clippy::disallowed_methods)] // Anthropic's reset is a wall-clock time
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ---------------------------------------------------------------------------
// Requests per minute
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn requests_are_admitted_at_the_limit_rate_and_refused_beyond_it() {
    let mock = mock("rate_limit: { requests_per_minute: 60 }\n", MockApi::OpenAi);
    // A full bucket: a minute's 60 at once, each answer counting down.
    for i in 1..=60u64 {
        let r = chat(&mock, CHAT).await;
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.num("x-ratelimit-limit-requests"), 60);
        assert_eq!(r.num("x-ratelimit-remaining-requests"), 60 - i);
        // One request back per second: full again in i seconds.
        let reset = ratelimit::parse_duration_ms(
            r.header("x-ratelimit-reset-requests").unwrap().as_bytes(),
        );
        assert_eq!(reset, Some(i * 1000), "request {i}");
        assert_eq!(r.header("retry-after"), None);
    }
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 0);
    assert_eq!(r.header("x-ratelimit-reset-requests"), Some("1m0s"));
    let e = r.json();
    assert_eq!(e["error"]["type"], "requests");
    assert_eq!(e["error"]["code"], "rate_limit_exceeded");
    // Then one a second: a request every 250 ms for 20 s gets 20 through.
    let mut admitted = 0;
    for _ in 0..80 {
        advance(Duration::from_millis(250)).await;
        match chat(&mock, CHAT).await.status {
            200 => admitted += 1,
            429 => {}
            s => panic!("status {s}"),
        }
    }
    assert_eq!(admitted, 20);
    let stats = mock.stats();
    assert_eq!(stats.rate_limited, 61);
    assert_eq!(stats.by_status.get("429"), Some(&61));
    assert_eq!(stats.by_status.get("200"), Some(&80));
    assert_eq!(stats.faults.status, 0, "the limiter's 429s are not faults");
}

#[tokio::test(start_paused = true)]
async fn a_bucket_refills_over_the_minute() {
    let mock = mock(
        "rate_limit: { requests_per_minute: 600 }\n",
        MockApi::OpenAi,
    );
    for _ in 0..600 {
        assert_eq!(chat(&mock, CHAT).await.status, 200);
    }
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.status, 429);
    // One back every 100 ms: 250 ms gives 2.5, the request takes one.
    advance(Duration::from_millis(250)).await;
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 1);
    assert_eq!(r.header("x-ratelimit-reset-requests"), Some("59.85s"));
    advance(Duration::from_secs(30)).await;
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 300);
    // Never more than the minute's allowance, however long it rests.
    advance(Duration::from_secs(600)).await;
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 599);
    assert_eq!(r.header("x-ratelimit-reset-requests"), Some("100ms"));
}

/// `request_burst`: the requests bucket holds that many, not a minute's
/// worth: 2,000 a minute with a burst of 33 takes 33 at once, then one
/// every 30 ms, as a provider enforcing its minute over a second does.
#[tokio::test(start_paused = true)]
async fn a_request_burst_bounds_the_bucket_below_a_minute() {
    let mock = mock(
        "rate_limit: { requests_per_minute: 2000, request_burst: 33 }\n",
        MockApi::OpenAi,
    );
    for i in 1..=33u64 {
        let r = chat(&mock, CHAT).await;
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.num("x-ratelimit-remaining-requests"), 33 - i);
    }
    assert_eq!(chat(&mock, CHAT).await.status, 429);
    advance(Duration::from_millis(31)).await;
    assert_eq!(chat(&mock, CHAT).await.status, 200);
    assert_eq!(chat(&mock, CHAT).await.status, 429);
    // Never more than the burst, however long it rests.
    advance(Duration::from_secs(60)).await;
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 32);
    assert!(
        levee_mock::parse_faults("rate_limit: { request_burst: 5 }\n")
            .is_err_and(|e| e.to_string().contains("requests_per_minute")),
        "a burst alone is refused"
    );
}

// ---------------------------------------------------------------------------
// Tokens per minute (OpenAI: input estimate + max_tokens at admission)
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn tokens_are_charged_input_and_max_tokens_at_admission() {
    let mock = mock(
        "rate_limit: { requests_per_minute: 1000, tokens_per_minute: 6000 }\n",
        MockApi::OpenAi,
    );
    let body = chat_with_max_tokens(500);
    let cost = input_of(&body) + 500;
    let mut left = 6000;
    while left >= cost {
        let r = chat(&mock, &body).await;
        assert_eq!(r.status, 200);
        left -= cost;
        assert_eq!(r.num("x-ratelimit-limit-tokens"), 6000);
        assert_eq!(r.num("x-ratelimit-remaining-tokens"), left);
        // The answer used fewer tokens than max_tokens: nothing comes back.
        let usage = &r.json()["usage"];
        assert!(usage["total_tokens"].as_u64().unwrap() < cost);
    }
    let r = chat(&mock, &body).await;
    assert_eq!(r.status, 429);
    let e = r.json();
    assert_eq!(e["error"]["type"], "tokens");
    assert_eq!(e["error"]["code"], "rate_limit_exceeded");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("tokens per min (TPM)"), "{message}");
    // 100 tokens a second come back: the wait for the shortfall, rounded up.
    let wait_secs = (cost - left).div_ceil(100);
    assert_eq!(r.num("retry-after"), wait_secs);
    assert_eq!(r.num("x-ratelimit-remaining-tokens"), left);
    // The refused request cost nothing: after the wait it goes through.
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 1000 - 6000 / cost);
    advance(Duration::from_secs(wait_secs)).await;
    assert_eq!(chat(&mock, &body).await.status, 200);
    // No max_tokens: the input alone.
    advance(Duration::from_secs(60)).await;
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.num("x-ratelimit-remaining-tokens"), 6000 - input_of(CHAT));
}

#[tokio::test(start_paused = true)]
async fn a_request_over_a_whole_minute_is_refused_without_retry_after() {
    let mock = mock("rate_limit: { tokens_per_minute: 1000 }\n", MockApi::OpenAi);
    let r = chat(&mock, &chat_with_max_tokens(5000)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), None);
    let message = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.starts_with("Request too large"), "{message}");
    assert_eq!(r.num("x-ratelimit-remaining-tokens"), 1000);
    assert_eq!(mock.stats().rate_limited, 1);
}

// ---------------------------------------------------------------------------
// Anthropic: ITPM at admission, OTPM when produced
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn anthropic_meters_input_at_admission_and_output_when_produced() {
    let mock = mock(
        "rate_limit: { requests_per_minute: 50, input_tokens_per_minute: 3000, \
         output_tokens_per_minute: 60 }\n",
        MockApi::Anthropic,
    );
    let body = anthropic_message(64, false);
    let input = input_of(&body);
    let r = message(&mock, &body).await;
    assert_eq!(r.status, 200);
    let usage = &r.json()["usage"];
    assert_eq!(usage["input_tokens"].as_u64(), Some(input));
    let output = usage["output_tokens"].as_u64().unwrap();
    assert_eq!(output, 8, "the mock answers eight pieces");
    assert_eq!(r.num("anthropic-ratelimit-requests-remaining"), 49);
    assert_eq!(r.num("anthropic-ratelimit-input-tokens-limit"), 3000);
    assert_eq!(
        r.num("anthropic-ratelimit-input-tokens-remaining"),
        3000 - input
    );
    // Output is charged at what was produced, not at max_tokens (64).
    assert_eq!(r.num("anthropic-ratelimit-output-tokens-limit"), 60);
    assert_eq!(
        r.num("anthropic-ratelimit-output-tokens-remaining"),
        60 - output
    );
    // The tokens fields are the limit with the smallest share left.
    let input_share = (3000 - input) as f64 / 3000.0;
    let output_share = (60 - output) as f64 / 60.0;
    let tightest = if output_share < input_share { 60 } else { 3000 };
    assert_eq!(r.num("anthropic-ratelimit-tokens-limit"), tightest);
    assert_eq!(r.header("x-ratelimit-remaining-requests"), None);
    // Eight answers of 8 take the output bucket into debt (64 of 60)...
    for _ in 0..6 {
        assert_eq!(message(&mock, &body).await.status, 200);
    }
    let r = message(&mock, &body).await;
    assert_eq!(r.status, 200, "admitted while the output bucket had 4");
    assert_eq!(r.num("anthropic-ratelimit-output-tokens-remaining"), 0);
    assert_eq!(r.num("anthropic-ratelimit-tokens-limit"), 60);
    // ... so the next is refused although input and requests have room.
    let r = message(&mock, &body).await;
    assert_eq!(r.status, 429);
    let e = r.json();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "rate_limit_error");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("60 output tokens per minute"));
    // 4 in debt, one token a second: 5 s until it holds one.
    assert_eq!(r.header("retry-after"), Some("5"));
    // 2.5 s later, 2.5 s are left: rounded up to 3.
    advance(Duration::from_millis(2500)).await;
    let r = message(&mock, &body).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    advance(Duration::from_millis(2499)).await;
    assert_eq!(message(&mock, &body).await.status, 429);
    advance(Duration::from_millis(1)).await;
    assert_eq!(message(&mock, &body).await.status, 200);
    assert_eq!(mock.stats().rate_limited, 3);
}

#[tokio::test(start_paused = true)]
async fn a_stream_carries_the_fields_on_its_head_and_is_charged_its_output() {
    let mock = mock(
        "rate_limit: { output_tokens_per_minute: 1000 }\n",
        MockApi::Anthropic,
    );
    let r = message(&mock, &anthropic_message(3, true)).await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    assert_eq!(r.num("anthropic-ratelimit-output-tokens-remaining"), 997);
    assert_eq!(r.num("anthropic-ratelimit-tokens-remaining"), 997);
    let mock = mock_openai_stream();
    let body = r#"{"model":"gpt-4.1","stream":true,"max_completion_tokens":2,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = chat(&mock, body).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.num("x-ratelimit-remaining-tokens"),
        100_000 - input_of(body) - 2
    );
}

fn mock_openai_stream() -> InProcess {
    mock("rate_limit: { tokens_per_minute: 100000 }\n", MockApi::Both)
}

// ---------------------------------------------------------------------------
// Every answer, both dialects
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_fault_answer_carries_the_fields_and_its_request_was_charged() {
    let mock = mock(
        "rate_limit: { requests_per_minute: 10, output_tokens_per_minute: 100 }\n\
         faults:\n  - { status: 503 }\n",
        MockApi::Both,
    );
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 9);
    let r = message(&mock, &anthropic_message(16, false)).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.num("anthropic-ratelimit-requests-remaining"), 8);
    // An error produced no output: none is charged.
    assert_eq!(r.num("anthropic-ratelimit-output-tokens-remaining"), 100);
    assert_eq!(r.header("x-ratelimit-remaining-requests"), None);
}

#[tokio::test(start_paused = true)]
async fn unmetered_requests_have_no_fields() {
    // No rate_limit: nothing is sent.
    let plain = mock("", MockApi::Both);
    let r = chat(&plain, CHAT).await;
    assert_eq!(r.status, 200);
    assert_eq!(ratelimit::read(&r.headers, unix_now_ms()), None);
    // An invalid body (its 400) and a token count are not metered.
    let limited = mock(
        "rate_limit: { requests_per_minute: 1 }\n",
        MockApi::Anthropic,
    );
    let r = message(&limited, r#"{"model":"claude-sonnet-4-5","messages":[]}"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(ratelimit::read(&r.headers, unix_now_ms()), None);
    let r = send(
        &limited,
        "/v1/messages/count_tokens",
        &[("anthropic-version", "2023-06-01")],
        r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(ratelimit::read(&r.headers, unix_now_ms()), None);
    assert_eq!(
        message(&limited, &anthropic_message(8, false)).await.status,
        200
    );
    assert_eq!(
        message(&limited, &anthropic_message(8, false)).await.status,
        429
    );
}

#[tokio::test(start_paused = true)]
async fn new_faults_bring_full_buckets() {
    let mock = mock("rate_limit: { requests_per_minute: 2 }\n", MockApi::OpenAi);
    for want in [200, 200, 429] {
        assert_eq!(chat(&mock, CHAT).await.status, want);
    }
    mock.set_faults(parse_faults("rate_limit: { requests_per_minute: 3 }\n").unwrap());
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 2);
    // POST /_mock/faults too, which says what it installed.
    let r = send(
        &mock,
        "/_mock/faults",
        &[],
        "rate_limit: { requests_per_minute: 1 }\n",
    )
    .await;
    assert_eq!(r.json()["rate_limit"]["requests_per_minute"], 1);
    assert_eq!(r.json()["rate_limit"]["tokens_per_minute"], Value::Null);
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.num("x-ratelimit-remaining-requests"), 0);
    mock.set_faults(parse_faults("").unwrap());
    let r = chat(&mock, CHAT).await;
    assert_eq!(r.header("x-ratelimit-remaining-requests"), None);
}

// ---------------------------------------------------------------------------
// levee-wire reads what the mock writes
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn the_wire_reader_reads_the_openai_fields_the_mock_sends() {
    let mock = mock(
        "rate_limit: { requests_per_minute: 120, tokens_per_minute: 30000 }\n",
        MockApi::OpenAi,
    );
    let body = chat_with_max_tokens(100);
    let cost = input_of(&body) + 100;
    chat(&mock, &body).await;
    advance(Duration::from_millis(250)).await;
    let r = chat(&mock, &body).await;
    let got = ratelimit::read(&r.headers, 0).unwrap();
    // 120/min: one back every 500 ms; 30000/min: 500 tokens a second.
    let requests_owed_ms = 2 * 500 - 250;
    let tokens_owed = 2 * cost - 125;
    assert_eq!(
        got,
        RateHeaders {
            requests: Some(Meter {
                limit: Some(120),
                remaining: Some(118),
                reset_ms: Some(requests_owed_ms),
            }),
            tokens: Some(Meter {
                limit: Some(30_000),
                remaining: Some(30_000 - tokens_owed),
                reset_ms: Some(tokens_owed * 2),
            }),
            input_tokens: None,
            output_tokens: None,
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_wire_reader_reads_the_anthropic_fields_the_mock_sends() {
    let mock = mock(
        "rate_limit: { requests_per_minute: 60, input_tokens_per_minute: 6000, \
         output_tokens_per_minute: 600 }\n",
        MockApi::Anthropic,
    );
    let body = anthropic_message(64, false);
    let input = input_of(&body);
    let r = message(&mock, &body).await;
    let got = ratelimit::read(&r.headers, unix_now_ms()).unwrap();
    let meter = |m: Option<Meter>| m.unwrap();
    let (requests, input_m, output_m, tokens) = (
        meter(got.requests),
        meter(got.input_tokens),
        meter(got.output_tokens),
        meter(got.tokens),
    );
    assert_eq!((requests.limit, requests.remaining), (Some(60), Some(59)));
    assert_eq!(
        (input_m.limit, input_m.remaining),
        (Some(6000), Some(6000 - input))
    );
    assert_eq!((output_m.limit, output_m.remaining), (Some(600), Some(592)));
    // Output 8 of 600 is a smaller share gone than input's: input is tighter
    // only when input / 6000 > 8 / 600.
    let want_tokens = if input * 600 > 8 * 6000 {
        input_m
    } else {
        output_m
    };
    assert_eq!(tokens, want_tokens);
    // Resets are whole seconds on the wall clock, rounded up: within a
    // second (and the test's own run time) of the exact refill time.
    for (m, exact_ms) in [(requests, 1000), (input_m, input * 10), (output_m, 800)] {
        let reset = m.reset_ms.unwrap();
        assert!(
            (exact_ms.saturating_sub(50)..=exact_ms + 1000).contains(&reset),
            "reset {reset} ms for an exact {exact_ms} ms"
        );
    }
}
