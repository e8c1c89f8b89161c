//! The mock over real sockets on 127.0.0.1 (ephemeral ports): both dialects,
//! JSON and SSE, 400 shapes, every fault kind, capacity, stats, live fault
//! replacement and replay tapes.

mod support;

use std::time::Duration;

use levee_mock::{load_faults, parse_faults, run_cli, MockArgs, Tape, TapeEntry};
use serde_json::{json, Value};
use support::*;
use tokio::net::TcpStream;

// ---------------------------------------------------------------------------
// Wire formats
// ---------------------------------------------------------------------------

#[tokio::test]
async fn openai_chat_completion_json() {
    let mock = start("").await;
    let r = post_chat(mock.local_addr(), &chat("gpt-4o-mini")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty());
    let usage = &v["usage"];
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );
    mock.shutdown().await;
}

#[tokio::test]
async fn a_mock_that_serves_named_models_answers_others_404_as_the_apis_do() {
    let mock = start("models: [gpt-4.1, claude-sonnet-4-5]\n").await;
    let addr = mock.local_addr();
    assert_eq!(post_chat(addr, &chat("gpt-4.1")).await.status, 200);
    let r = post_chat(addr, &chat("gpt-4o-mini")).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    assert!(r.text().contains("gpt-4o-mini"), "{}", r.text());
    let listed: Vec<String> = get(addr, "/v1/models").await.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ["gpt-4.1", "claude-sonnet-4-5"]);
    assert_eq!(get(addr, "/v1/models/gpt-4o").await.status, 404);
    mock.shutdown().await;
}

#[tokio::test]
async fn openai_chat_completion_stream_with_and_without_usage() {
    let mock = start("").await;
    let r = post_chat(mock.local_addr(), &chat_stream("gpt-4.1")).await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.sse();
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(name, data)| {
            assert!(name.is_none(), "OpenAI streams have no event names");
            serde_json::from_str(data).unwrap()
        })
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "gpt-4.1"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "This is a mock response from Levee.");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");

    let body =
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"max_tokens":2}"#;
    let r = post_chat(mock.local_addr(), body).await;
    let events = r.sse();
    assert!(
        events.iter().all(|(_, d)| !d.contains("\"usage\"")),
        "no usage unless asked"
    );
    let finish: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "length");
    mock.shutdown().await;
}

#[tokio::test]
async fn anthropic_messages_json_and_stream() {
    let mock = start("").await;
    let addr = mock.local_addr();
    let r = post(addr, "/v1/messages", &message("claude-sonnet-4-5", false)).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(
        (v["type"].as_str(), v["role"].as_str()),
        (Some("message"), Some("assistant"))
    );
    assert_eq!(v["model"], "claude-sonnet-4-5");
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0);

    let r = post(addr, "/v1/messages", &message("claude-haiku-4-5", true)).await;
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = r.sse();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    let deltas = names
        .iter()
        .filter(|n| **n == "content_block_delta")
        .count();
    assert!(deltas >= 1);
    let mut want = vec!["message_start", "content_block_start", "ping"];
    want.extend(std::iter::repeat_n("content_block_delta", deltas));
    want.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, want);
    for (name, data) in &events {
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"].as_str(), name.as_deref());
    }
    let start: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(start["message"]["model"], "claude-haiku-4-5");
    let delta: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
    mock.shutdown().await;
}

#[tokio::test]
async fn embeddings_responses_and_models() {
    let mock = start("").await;
    let addr = mock.local_addr();
    let r = post(
        addr,
        "/v1/embeddings",
        r#"{"model":"text-embedding-3-small","input":["a","b"],"dimensions":8}"#,
    )
    .await;
    let v = r.json();
    assert_eq!(v["model"], "text-embedding-3-small");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 8);
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let r = post(
        addr,
        "/v1/embeddings",
        r#"{"model":"e","input":"a","encoding_format":"base64","dimensions":4}"#,
    )
    .await;
    assert_eq!(
        r.json()["data"][0]["embedding"].as_str().unwrap().len(),
        24,
        "16 bytes in base64"
    );

    let r = post(addr, "/v1/responses", r#"{"model":"gpt-4.1","input":"hi"}"#).await;
    let v = r.json();
    assert_eq!(
        (v["object"].as_str(), v["status"].as_str()),
        (Some("response"), Some("completed"))
    );
    assert_eq!(v["model"], "gpt-4.1");
    assert_eq!(v["output"][0]["content"][0]["type"], "output_text");
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let r = post(
        addr,
        "/v1/responses",
        r#"{"model":"gpt-4.1","input":"hi","stream":true}"#,
    )
    .await;
    let events = r.sse();
    assert_eq!(events[0].0.as_deref(), Some("response.created"));
    assert_eq!(
        events.last().unwrap().0.as_deref(),
        Some("response.completed")
    );

    let v = get(addr, "/v1/models").await.json();
    assert_eq!(v["object"], "list");
    assert!(v["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["object"] == "model"));
    let v = send(
        addr,
        "GET",
        "/v1/models",
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await
    .json();
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["data"][0]["lifecycle"], "active");
    assert_eq!(v["has_more"], false);
    assert_eq!(v["first_id"], v["data"][0]["id"]);
    assert_eq!(get(addr, "/v1/models/gpt-4o").await.json()["id"], "gpt-4o");
    // A model the provider does not list is 404, as the providers answer.
    let r = get(addr, "/v1/models/my-model").await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    mock.shutdown().await;
}

#[tokio::test]
async fn the_anthropic_model_list_pages_as_anthropic_does() {
    let mock = start_api(levee_mock::MockApi::Anthropic).await;
    let addr = mock.local_addr();
    let page = |q: &'static str| async move {
        send(addr, "GET", q, &[("anthropic-version", "2023-06-01")], "")
            .await
            .json()
    };
    let all = page("/v1/models").await;
    let ids: Vec<&str> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(ids.len() >= 3, "{all}");
    let first = page("/v1/models?limit=2").await;
    assert_eq!(first["data"].as_array().unwrap().len(), 2);
    assert_eq!(
        (first["has_more"].as_bool(), first["last_id"].as_str()),
        (Some(true), Some(ids[1]))
    );
    let next = send(
        addr,
        "GET",
        &format!("/v1/models?limit=2&after_id={}", ids[1]),
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await
    .json();
    assert_eq!(next["first_id"], ids[2]);
    let r = send(
        addr,
        "GET",
        "/v1/models?limit=0",
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let r = send(
        addr,
        "GET",
        "/v1/models/claude-nope",
        &[("anthropic-version", "2023-06-01")],
        "",
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "not_found_error");
    mock.shutdown().await;
}

#[tokio::test]
async fn anthropic_counts_tokens_of_a_messages_body_without_max_tokens() {
    let mock = start_api(levee_mock::MockApi::Anthropic).await;
    let addr = mock.local_addr();
    let body = r#"{"model":"claude-x","messages":[{"role":"user","content":"hi"}]}"#;
    let r = post(addr, "/v1/messages/count_tokens", body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["input_tokens"], body.len() as u64 / 4);
    let r = post(addr, "/v1/messages/count_tokens", MESSAGES).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "max_tokens: Extra inputs are not permitted"
    );
    let openai = start_api(levee_mock::MockApi::OpenAi).await;
    let r = post(openai.local_addr(), "/v1/messages/count_tokens", body).await;
    assert_eq!(r.status, 404);
    mock.shutdown().await;
    openai.shutdown().await;
}

#[tokio::test]
async fn openai_keeps_stored_responses_until_deleted() {
    let mock = start_api(levee_mock::MockApi::OpenAi).await;
    let addr = mock.local_addr();
    let created = post(addr, "/v1/responses", r#"{"model":"gpt-4.1","input":"hi"}"#)
        .await
        .json();
    assert_eq!(created["store"], true);
    let id = created["id"].as_str().unwrap().to_string();
    let got = get(addr, &format!("/v1/responses/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), created);
    let items = get(addr, &format!("/v1/responses/{id}/input_items"))
        .await
        .json();
    assert_eq!(items["object"], "list");
    assert_eq!(items["data"][0]["content"][0]["text"], "hi");
    assert_eq!(items["first_id"], items["data"][0]["id"]);
    let r = post(addr, &format!("/v1/responses/{id}/cancel"), "").await;
    assert_eq!(r.status, 400, "only a background response can be cancelled");
    let r = send(addr, "DELETE", &format!("/v1/responses/{id}"), &[], "").await;
    assert_eq!(r.json()["deleted"], true);
    let r = get(addr, &format!("/v1/responses/{id}")).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["error"]["message"],
        format!("Response with id '{id}' not found.")
    );
    // Not kept with `store: false`; cancelled when run in the background.
    let unkept = post(
        addr,
        "/v1/responses",
        r#"{"model":"g","input":"x","store":false}"#,
    )
    .await
    .json();
    let r = get(
        addr,
        &format!("/v1/responses/{}", unkept["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(r.status, 404);
    let bg = post(
        addr,
        "/v1/responses",
        r#"{"model":"g","input":"x","background":true}"#,
    )
    .await
    .json();
    let r = post(
        addr,
        &format!("/v1/responses/{}/cancel", bg["id"].as_str().unwrap()),
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send(addr, "PUT", &format!("/v1/responses/{id}"), &[], "").await;
    assert_eq!(r.status, 405);
    mock.shutdown().await;
}

#[tokio::test]
async fn invalid_requests_get_400_in_the_providers_shape() {
    let mock = start("").await;
    let addr = mock.local_addr();
    let openai_shape = |v: &Value| {
        let e = v["error"].as_object().unwrap();
        let keys: Vec<&str> = e.keys().map(String::as_str).collect();
        assert_eq!(keys, ["code", "message", "param", "type"]);
        assert_eq!(e["type"], "invalid_request_error");
    };
    let r = post_chat(addr, "{not json").await;
    assert_eq!(r.status, 400);
    openai_shape(&r.json());
    let r = post_chat(addr, r#"{"messages":[]}"#).await;
    assert_eq!(r.status, 400);
    openai_shape(&r.json());
    assert_eq!(r.json()["error"]["param"], "model");
    let r = post_chat(addr, r#"{"model":"gpt"}"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "messages");
    assert_eq!(r.json()["error"]["code"], "missing_required_parameter");

    for body in ["{not json", r#"{"messages":[]}"#, r#"{"model":"claude"}"#] {
        let r = post(addr, "/v1/messages", body).await;
        assert_eq!(r.status, 400, "{body}");
        let v = r.json();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["message"].as_str().unwrap().len() > 5);
    }

    let r = post(addr, "/v1/nope", "{}").await;
    assert_eq!(r.status, 404);
    openai_shape(&r.json());
    assert_eq!(get(addr, "/v1/chat/completions").await.status, 405);

    let s = mock.stats();
    assert_eq!(s.by_status.get("400"), Some(&6));
    assert_eq!(
        s.by_model.get("gpt"),
        Some(&1),
        "the model of an invalid request still counts"
    );
    mock.shutdown().await;
}

// ---------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------

#[tokio::test]
async fn status_faults_carry_retry_headers_and_provider_bodies() {
    let mock = start(
        "faults:\n\
         \x20 - { status: 503, retry_after: 2, model: m503 }\n\
         \x20 - { status: 429, retry_after_ms: 1500, model: m429 }\n\
         \x20 - { status: 529, model: claude-busy }\n\
         \x20 - { status: 429, model: claude-limited }\n",
    )
    .await;
    let addr = mock.local_addr();
    let r = post_chat(addr, &chat("m503")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("2"));
    assert_eq!(r.header("retry-after-ms"), None);
    assert_eq!(r.json()["error"]["type"], "server_error");
    let r = post_chat(addr, &chat("m429")).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after-ms"), Some("1500"));
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    let r = post(addr, "/v1/messages", &message("claude-busy", false)).await;
    assert_eq!(r.status, 529);
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert_eq!(r.json()["type"], "error");
    let r = post(addr, "/v1/messages", &message("claude-limited", true)).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    assert_eq!(post_chat(addr, &chat("fine")).await.status, 200);
    assert_eq!(mock.stats().faults.status, 4);
    mock.shutdown().await;
}

#[tokio::test]
async fn model_scoped_400_and_time_windows() {
    let mock = start(
        "faults:\n\
         \x20 - { status: 503, from: 1h, to: 2h }\n\
         \x20 - { status: 400, model: \"broken-*\" }\n\
         \x20 - { status: 502, from: 0s, to: 1h, model: windowed }\n",
    )
    .await;
    let addr = mock.local_addr();
    let r = post_chat(addr, &chat("broken-model")).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert_eq!(post_chat(addr, &chat("windowed")).await.status, 502);
    assert_eq!(
        post_chat(addr, &chat("other")).await.status,
        200,
        "the 1h window has not opened"
    );
    mock.shutdown().await;
}

#[tokio::test]
async fn reset_closes_the_connection_without_an_answer() {
    let mock = start("faults:\n  - { reset: true }\n").await;
    let (got, end) = raw_post(mock.local_addr(), "/v1/chat/completions", &chat("m")).await;
    assert_eq!(got, "", "no bytes before the reset");
    assert_eq!(end, End::Reset);
    assert!(try_send(
        mock.local_addr(),
        "POST",
        "/v1/chat/completions",
        &[],
        &chat("m")
    )
    .await
    .is_err());
    let s = eventually(&mock, "both resets", |s| {
        s.faults.reset == 2 && s.in_flight == 0
    })
    .await;
    assert_eq!(
        s.client_closed, 0,
        "a deliberate reset is not the client leaving"
    );
    assert!(s.by_status.is_empty());
    mock.shutdown().await;
}

#[tokio::test]
async fn stall_holds_the_request_until_the_client_leaves() {
    let mock = start("faults:\n  - { stall: true }\n").await;
    let client = TcpStream::connect(mock.local_addr()).await.unwrap();
    let body = chat("m");
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    client.writable().await.unwrap();
    let mut left = req.as_bytes();
    while !left.is_empty() {
        client.writable().await.unwrap();
        match client.try_write(left) {
            Ok(n) => left = &left[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    eventually(&mock, "the stalled request", |s| {
        s.in_flight == 1 && s.faults.stall == 1
    })
    .await;
    let mut buf = [0u8; 64];
    assert!(
        matches!(client.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no answer"
    );
    drop(client);
    let s = eventually(&mock, "the client to be seen leaving", |s| {
        s.client_closed == 1
    })
    .await;
    assert_eq!(s.in_flight, 0);
    assert!(s.by_status.is_empty());
    mock.shutdown().await;
}

#[tokio::test]
async fn latency_delays_the_first_byte_and_chunks() {
    let mock = start(
        "faults:\n\
         \x20 - { latency: 150ms, model: slow }\n\
         \x20 - { latency: { p50: 40ms, p99: 40ms }, chunk_delay: 15ms, model: dribble }\n",
    )
    .await;
    let addr = mock.local_addr();
    let t = stopwatch();
    assert_eq!(post_chat(addr, &chat("slow")).await.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );

    let t = stopwatch();
    let r = post_chat(addr, &chat_stream("dribble")).await;
    let events = r.sse().len();
    let floor = Duration::from_millis(40 + 15 * (events as u64 - 1));
    assert!(t.elapsed() >= floor, "{:?} < {floor:?}", t.elapsed());
    assert_eq!(mock.stats().faults.delayed, 2);
    mock.shutdown().await;
}

#[tokio::test]
async fn cut_stream_after_sends_n_chunks_then_drops_the_connection() {
    let mock = start("faults:\n  - { cut_stream_after: 3 }\n").await;
    let addr = mock.local_addr();
    let (got, end) = raw_post(addr, "/v1/chat/completions", &chat_stream("m")).await;
    assert_eq!(end, End::Eof);
    let (head, body) = got.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked"));
    assert!(
        !body.ends_with("0\r\n\r\n"),
        "the chunked encoding must not be finished: {body:?}"
    );
    assert_eq!(body.matches("data: ").count(), 3, "{body}");
    assert!(!body.contains("[DONE]"));

    let err = try_send(addr, "POST", "/v1/messages", &[], &message("c", true))
        .await
        .unwrap_err();
    assert!(!err.is_empty());
    // Non-streaming requests are not cut.
    assert_eq!(post_chat(addr, &chat("m")).await.status, 200);
    let s = eventually(&mock, "both cuts", |s| {
        s.faults.cut_stream == 2 && s.in_flight == 0
    })
    .await;
    assert_eq!(s.client_closed, 0);
    mock.shutdown().await;
}

#[tokio::test]
async fn capacity_refuses_at_once_beyond_max_in_flight() {
    let mock = start(
        "faults:\n  - { stall: true, model: hold }\ncapacity: { max_in_flight: 2, status: 529, retry_after: 1 }\n",
    )
    .await;
    let addr = mock.local_addr();
    let held: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(try_send(
                addr,
                "POST",
                "/v1/messages",
                &[],
                message("hold", false).leak(),
            ))
        })
        .collect();
    eventually(&mock, "two held requests", |s| s.in_flight == 2).await;
    let t = stopwatch();
    let r = post(addr, "/v1/messages", &message("claude", false)).await;
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(r.status, 529);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    for h in held {
        h.abort();
    }
    eventually(&mock, "the held requests to go", |s| s.in_flight == 0).await;
    assert_eq!(
        post(addr, "/v1/messages", &message("claude", false))
            .await
            .status,
        200
    );
    let s = mock.stats();
    assert_eq!(s.faults.capacity, 1);
    assert_eq!(s.max_in_flight, 3);
    assert_eq!(s.client_closed, 2);
    mock.shutdown().await;
}

#[tokio::test]
async fn seeded_probability_is_reproducible() {
    let faults = "faults:\n  - { status: 503, probability: 0.5 }\n";
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mock = start_with(faults, 42, None).await;
        let mut pattern = Vec::new();
        for _ in 0..24 {
            pattern.push(post_chat(mock.local_addr(), &chat("m")).await.status);
        }
        mock.shutdown().await;
        runs.push(pattern);
    }
    assert_eq!(runs[0], runs[1]);
    assert!(
        runs[0].contains(&503) && runs[0].contains(&200),
        "{:?}",
        runs[0]
    );
}

// ---------------------------------------------------------------------------
// Stats and the control plane
// ---------------------------------------------------------------------------

#[tokio::test]
async fn stats_count_keys_deadlines_models_and_statuses() {
    let mock = start("").await;
    let addr = mock.local_addr();
    let path = "/v1/chat/completions";
    send(
        addr,
        "POST",
        path,
        &[("idempotency-key", "k1"), ("x-timeout-ms", "900")],
        &chat("a"),
    )
    .await;
    send(
        addr,
        "POST",
        path,
        &[("idempotency-key", "k1"), ("x-timeout-ms", "350")],
        &chat("a"),
    )
    .await;
    send(
        addr,
        "POST",
        "/v1/messages",
        &[("idempotency-key", "k2")],
        &message("b", false),
    )
    .await;
    send(
        addr,
        "POST",
        path,
        &[("x-timeout-ms", "not a number")],
        "{}",
    )
    .await;
    get(addr, "/_mock/stats").await;

    let v = get(addr, "/_mock/stats").await.json();
    assert_eq!(v["requests_total"], 4, "/_mock requests are not counted");
    assert_eq!(v["by_status"], json!({"200": 3, "400": 1}));
    assert_eq!(v["by_model"], json!({"a": 2, "b": 1}));
    assert_eq!(v["idempotency_keys"], json!({"k1": 2, "k2": 1}));
    assert_eq!(v["timeout_ms_seen"]["count"], 2);
    assert_eq!(v["timeout_ms_seen"]["min"], 350);
    assert_eq!(v["in_flight"], 0);
    assert_eq!(v["max_in_flight"], 1);
    assert_eq!(v["client_closed"], 0);
    assert_eq!(v["by_path"]["/v1/chat/completions"], 3);
    let typed: levee_mock::Stats = serde_json::from_value(v).unwrap();
    assert_eq!(typed, mock.stats());

    let r = post(addr, "/_mock/reset", "").await;
    assert_eq!(r.status, 200);
    let v = get(addr, "/_mock/stats").await.json();
    assert_eq!(v["requests_total"], 0);
    assert_eq!(v["idempotency_keys"], json!({}));
    assert_eq!(
        v["timeout_ms_seen"],
        json!({"count": 0, "min": null, "max": null})
    );
    assert_eq!(get(addr, "/_mock/nope").await.status, 404);
    mock.shutdown().await;
}

#[tokio::test]
async fn a_client_leaving_mid_stream_counts_as_client_closed() {
    let mock = start("faults:\n  - { chunk_delay: 500ms }\n").await;
    let addr = mock.local_addr();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::post("/v1/chat/completions")
        .header("host", "x")
        .body(http_body_util::Full::new(bytes::Bytes::from(chat_stream(
            "m",
        ))))
        .unwrap();
    let res = tokio::time::timeout(WATCHDOG, sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(res.status(), 200);
    let mut body = res.into_body();
    use http_body_util::BodyExt;
    let first = tokio::time::timeout(WATCHDOG, body.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.into_data().unwrap().starts_with(b"data: "));
    drop(body);
    drop(sender);
    conn.abort();
    let s = eventually(&mock, "the abandoned stream", |s| s.client_closed == 1).await;
    assert_eq!(s.in_flight, 0);
    mock.shutdown().await;
}

#[tokio::test]
async fn post_mock_faults_replaces_the_active_set() {
    let mock = start("faults:\n  - { status: 503 }\n").await;
    let addr = mock.local_addr();
    assert_eq!(post_chat(addr, &chat("m")).await.status, 503);

    let r = post(addr, "/_mock/faults", "faults:\n  - { status: 429, retry_after: 1 }\ncapacity: { max_in_flight: 50, status: 529 }\n").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"ok": true, "faults": 1, "capacity": {"max_in_flight": 50, "status": 529}})
    );
    assert_eq!(post_chat(addr, &chat("m")).await.status, 429);

    let r = post(addr, "/_mock/faults", r#"{"faults":[]}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(post_chat(addr, &chat("m")).await.status, 200);

    let r = post(
        addr,
        "/_mock/faults",
        "faults:\n  - { status: 503 }\n  - { status: 503, from: soon }\n",
    )
    .await;
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.starts_with("faults line 3: `from` must be a duration like `20s`"),
        "{msg}"
    );
    assert_eq!(
        post_chat(addr, &chat("m")).await.status,
        200,
        "a bad document changes nothing"
    );

    mock.set_faults(parse_faults("faults:\n  - { status: 502 }\n").unwrap());
    assert_eq!(post_chat(addr, &chat("m")).await.status, 502);
    mock.shutdown().await;
}

// ---------------------------------------------------------------------------
// Replay
// ---------------------------------------------------------------------------

#[tokio::test]
async fn replay_answers_from_the_tape_in_order_then_normally() {
    let tape = Tape::parse(concat!(
        "# recorded 2025-01-01\n",
        r#"{"status":503,"headers":{"retry-after":"2"},"body":{"error":{"message":"down","type":"server_error","param":null,"code":null}},"delay_ms":30}"#,
        "\n",
        r#"{"status":200,"chunks":["data: {\"a\":1}\n\n","data: [DONE]\n\n"],"chunk_delay_ms":5}"#,
        "\n",
        r#"{"reset":true}"#,
        "\n",
        r#"{"status":200,"chunks":["data: {\"a\":1}\n\n","data: {\"a\":2}\n\n"],"cut":true}"#,
        "\n",
        r#"{"status":429,"headers":{"retry-after-ms":"1500","content-type":"text/plain"},"body":"slow down"}"#,
        "\n",
    ))
    .unwrap();
    let mock = start_with("faults:\n  - { status: 500 }\n", 0, Some(tape)).await;
    let addr = mock.local_addr();

    let t = stopwatch();
    let r = post_chat(addr, &chat("m")).await;
    assert!(t.elapsed() >= Duration::from_millis(30));
    assert_eq!((r.status, r.header("retry-after")), (503, Some("2")));
    assert_eq!(r.json()["error"]["message"], "down");

    let r = post_chat(addr, &chat_stream("m")).await;
    assert_eq!(r.text(), "data: {\"a\":1}\n\ndata: [DONE]\n\n");
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));

    assert!(
        try_send(addr, "POST", "/v1/chat/completions", &[], &chat("m"))
            .await
            .is_err()
    );

    let (got, end) = raw_post(addr, "/v1/chat/completions", &chat_stream("m")).await;
    assert_eq!(end, End::Eof);
    assert!(
        got.contains("{\"a\":2}") && !got.ends_with("0\r\n\r\n"),
        "{got:?}"
    );

    let r = post(addr, "/v1/messages", &message("c", false)).await;
    assert_eq!((r.status, r.text()), (429, "slow down"));
    assert_eq!(r.header("retry-after-ms"), Some("1500"));
    assert_eq!(r.header("content-type"), Some("text/plain"));

    // Tape exhausted: the faults apply again (here: every request is a 500).
    assert_eq!(post_chat(addr, &chat("m")).await.status, 500);
    let s = mock.stats();
    assert_eq!(s.replayed, 5);
    assert_eq!(s.by_status.get("503"), Some(&1));
    mock.shutdown().await;
}

#[tokio::test]
async fn replay_without_faults_answers_200_after_the_tape() {
    let tape = Tape::from_entries(vec![TapeEntry {
        status: 502,
        ..TapeEntry::default()
    }])
    .unwrap();
    let mock = start_with("", 0, Some(tape)).await;
    let addr = mock.local_addr();
    assert_eq!(
        post(addr, "/v1/messages", &message("c", false))
            .await
            .status,
        502
    );
    let r = post(addr, "/v1/messages", &message("c", false)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["type"], "message");
    mock.shutdown().await;
}

// ---------------------------------------------------------------------------
// Files and the CLI
// ---------------------------------------------------------------------------

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("levee-mock-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn bad_fault_files_name_the_file_key_and_line() {
    let path = temp_file(
        "bad.yaml",
        "# drill\nfaults:\n  - { status: 503, retry_after: 2, from: 20s, to: 50s }\n  - { status: 503, form: 2s }\n",
    );
    let err = load_faults(&path).unwrap_err().to_string();
    assert!(
        err.contains("bad.yaml: faults line 4: unknown field `form`"),
        "{err}"
    );
    let path = temp_file(
        "good.yaml",
        "faults:\n  - { latency: 150ms, chunk_delay: 20ms }\n",
    );
    assert_eq!(load_faults(&path).unwrap().len(), 1);
    let err = load_faults(&path.with_file_name("missing.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("cannot read "), "{err}");
}

#[test]
fn run_cli_exits_2_on_bad_files_and_addresses() {
    let bad = temp_file("cli.yaml", "faults:\n  - { status: 999 }\n");
    let args = |listen: &str,
                faults: Option<std::path::PathBuf>,
                replay: Option<std::path::PathBuf>| MockArgs {
        listen: listen.to_owned(),
        faults,
        seed: 0,
        replay,
        api: levee_mock::MockApi::Both,
        models: Vec::new(),
    };
    assert_eq!(run_cli(args("127.0.0.1:0", Some(bad), None)), 2);
    let tape = temp_file("cli.jsonl", "{\"status\":200}\n{\"stauts\":200}\n");
    assert_eq!(run_cli(args("127.0.0.1:0", None, Some(tape))), 2);
    assert_eq!(run_cli(args("not an address", None, None)), 2);
}

// ---------------------------------------------------------------------------
// One dialect, strictly (`--api`)
// ---------------------------------------------------------------------------

const MESSAGES: &str =
    r#"{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test]
async fn a_one_dialect_mock_answers_the_others_paths_404_in_its_own_shape() {
    let openai = start_api(levee_mock::MockApi::OpenAi).await;
    let r = post(openai.local_addr(), "/v1/messages", MESSAGES).await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert!(
        r.json().get("type").is_none(),
        "OpenAI's shape: {}",
        r.text()
    );
    let r = post_chat(openai.local_addr(), &chat("gpt")).await;
    assert_eq!(r.status, 200);

    let anthropic = start_api(levee_mock::MockApi::Anthropic).await;
    for path in ["/v1/chat/completions", "/v1/embeddings", "/v1/responses"] {
        let r = post(anthropic.local_addr(), path, &chat("gpt")).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text());
        assert_eq!(r.json()["type"], "error");
        assert_eq!(r.json()["error"]["type"], "not_found_error");
    }
    let r = post(anthropic.local_addr(), "/v1/messages", MESSAGES).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anthropic.stats().requests_total, 4);
    openai.shutdown().await;
    anthropic.shutdown().await;
}

#[tokio::test]
async fn a_one_dialect_mock_refuses_fields_its_provider_does_not_know() {
    let anthropic = start_api(levee_mock::MockApi::Anthropic).await;
    let body = r#"{"model":"c","max_tokens":5,"frequency_penalty":0.5,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = post(anthropic.local_addr(), "/v1/messages", body).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "frequency_penalty: Extra inputs are not permitted"
    );
    // Sampling the Messages API takes, within its range of 0 to 1.
    let body = r#"{"model":"c","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":40,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = post(anthropic.local_addr(), "/v1/messages", body).await;
    assert_eq!(r.status, 200);
    let body = r#"{"model":"c","max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}"#;
    let r = post(anthropic.local_addr(), "/v1/messages", body).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "temperature: Input should be a number from 0 to 1"
    );
    let body = r#"{"model":"c","messages":[{"role":"user","content":"hi"}]}"#;
    let r = post(anthropic.local_addr(), "/v1/messages", body).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["message"], "max_tokens: Field required");

    let openai = start_api(levee_mock::MockApi::OpenAi).await;
    let body = r#"{"model":"g","system":"x","messages":[{"role":"user","content":"hi"}]}"#;
    let r = post_chat(openai.local_addr(), body).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "Unrecognized request argument supplied: system"
    );
    // The lenient default still accepts both.
    let both = start("").await;
    let r = post_chat(both.local_addr(), body).await;
    assert_eq!(r.status, 200);
    anthropic.shutdown().await;
    openai.shutdown().await;
    both.shutdown().await;
}

#[tokio::test]
async fn a_forced_tool_is_answered_with_one_call_in_each_dialect_json_and_sse() {
    let mock = start("").await;
    let body = r#"{"model":"g","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"lookup"}}}"#;
    let r = post_chat(mock.local_addr(), body).await;
    let v = r.json();
    let call = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "lookup");
    assert_eq!(call["function"]["arguments"], "{}");
    assert_eq!(v["choices"][0]["message"]["content"], Value::Null);

    let stream = body.replace(
        r#""model":"g","#,
        r#""model":"g","stream":true,"stream_options":{"include_usage":true},"#,
    );
    let r = post_chat(mock.local_addr(), &stream).await;
    let events = r.sse();
    let args: String = events
        .iter()
        .filter(|(_, d)| d != "[DONE]")
        .filter_map(|(_, d)| {
            let v: Value = serde_json::from_str(d).unwrap();
            v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(args, "{}");
    assert!(events[1].1.contains(r#""name":"lookup""#), "{events:?}");
    assert_eq!(events.last().unwrap().1, "[DONE]");

    let body = r#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"lookup","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"lookup"}}"#;
    let r = post(mock.local_addr(), "/v1/messages", body).await;
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(
        v["content"],
        json!([{"type":"tool_use","id": v["content"][0]["id"], "name":"lookup","input":{}}])
    );
    let stream = body.replace(r#""model":"c","#, r#""model":"c","stream":true,"#);
    let r = post(mock.local_addr(), "/v1/messages", &stream).await;
    let names: Vec<String> = r.sse().into_iter().filter_map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(r.text().contains(r#""stop_reason":"tool_use""#));
    mock.shutdown().await;
}

/// An HTTP/2 (prior knowledge) connection to the mock.
async fn h2_connect(
    addr: std::net::SocketAddr,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    sender
}

async fn h2_post(
    sender: &mut hyper::client::conn::http2::SendRequest<http_body_util::Full<bytes::Bytes>>,
    addr: std::net::SocketAddr,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    use http_body_util::BodyExt;
    let req = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        )))
        .unwrap();
    let exchange = async {
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?;
        Ok((
            status,
            String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        ))
    };
    tokio::time::timeout(WATCHDOG, exchange)
        .await
        .expect("watchdog")
}

#[tokio::test]
async fn http2_with_prior_knowledge_is_served_as_strictly_on_one_connection() {
    let mock = start_api(levee_mock::MockApi::OpenAi).await;
    let addr = mock.local_addr();
    let mut h2 = h2_connect(addr).await;
    let (status, body) = h2_post(&mut h2, addr, "/v1/chat/completions", &chat("m"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("chat.completion"), "{body}");
    let (status, body) = h2_post(&mut h2, addr, "/v1/chat/completions", &chat_stream("m"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    // The other dialect's path is unknown here, over HTTP/2 as over HTTP/1.1.
    let (status, body) = h2_post(&mut h2, addr, "/v1/messages", &message("m", false))
        .await
        .unwrap();
    assert_eq!(status, 404, "{body}");
    // HTTP/1.1 on the same port.
    assert_eq!(post_chat(addr, &chat("m")).await.status, 200);
    let s = mock.stats();
    assert_eq!(
        (s.connections_total, s.http2_requests, s.requests_total),
        (2, 3, 4),
        "{s:?}"
    );
}

#[tokio::test]
async fn over_http2_a_reset_ends_its_stream_and_the_connection_goes_on() {
    let mock = start("faults:\n  - { reset: true, model: bad }\n").await;
    let addr = mock.local_addr();
    let mut h2 = h2_connect(addr).await;
    let e = h2_post(&mut h2, addr, "/v1/chat/completions", &chat("bad")).await;
    assert!(e.is_err(), "{e:?}");
    let (status, body) = h2_post(&mut h2, addr, "/v1/chat/completions", &chat("good"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let s = mock.stats();
    assert_eq!((s.connections_total, s.faults.reset), (1, 1), "{s:?}");
}

/// `blackhole`: the host is off the network. A connection made during the
/// window is never served (its request is never read, so the mock counts
/// nothing, and it is dropped when the window ends), and new ones after
/// the window are served again.
#[tokio::test]
async fn a_blackhole_serves_no_connection_until_its_window_ends() {
    let mock = start("faults:\n  - { blackhole: true, to: 1500ms }\n").await;
    let addr = mock.local_addr();
    // Inside the window: connected (the kernel's queue), never answered.
    let held = tokio::time::timeout(Duration::from_millis(500), post_chat(addr, &chat("m"))).await;
    assert!(held.is_err(), "answered inside the blackhole");
    assert_eq!(mock.stats().requests_total, 0, "the request was never read");
    // After it: new connections are served; the held one never was.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        mock.stats().requests_total,
        0,
        "the held request was never read"
    );
    let r = tokio::time::timeout(Duration::from_secs(10), post_chat(addr, &chat("m")))
        .await
        .expect("served after the window");
    assert_eq!(r.status, 200);
    mock.shutdown().await;
}

/// `syn_blackhole`: the host is off the network at the handshake. A
/// connect made during the window neither completes nor is refused (the
/// kernel drops the SYN: the client waits in SYN-SENT), and after the
/// window the port serves again.
#[tokio::test]
async fn a_syn_blackhole_completes_no_handshake_until_its_window_ends() {
    let mock = start("faults:\n  - { syn_blackhole: true, to: 1500ms }\n").await;
    let addr = mock.local_addr();
    // Give the accept loop its first look at the window.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let connect = tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(addr)).await;
    assert!(
        connect.is_err(),
        "the handshake completed, or was refused: {connect:?}"
    );
    assert_eq!(mock.stats().connections_total, 0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = tokio::time::timeout(Duration::from_secs(10), post_chat(addr, &chat("m")))
        .await
        .expect("served after the window");
    assert_eq!(r.status, 200);
    mock.shutdown().await;
}

#[test]
fn a_blackhole_goes_with_a_window_only() {
    let e = levee_mock::parse_faults("faults:\n  - { blackhole: true, probability: 0.5 }\n")
        .expect_err("refused");
    assert!(e.to_string().contains("blackhole"), "{e}");
    let e = levee_mock::parse_faults("faults:\n  - { syn_blackhole: true, model: m }\n")
        .expect_err("refused");
    assert!(e.to_string().contains("syn_blackhole"), "{e}");
}
