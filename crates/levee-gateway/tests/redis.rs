//! Many replicas sharing one Redis: the allowance and idempotency keys are
//! shared; when Redis goes away both replicas keep serving, and sharing
//! resumes when it returns. Needs `redis-server` (scripts/test installs it).

mod support;
use std::time::Duration;
use support::*;

const WATCHDOG: Duration = Duration::from_secs(20);

async fn redis() -> Option<RedisServer> {
    let r = RedisServer::start_or_skip()?;
    r.ready(WATCHDOG).await;
    Some(r)
}

/// Two gateways (replicas) on one Redis in front of one mock.
async fn replicas(
    redis_port: u16,
    faults: &str,
    provider_extra: &str,
) -> (Env, levee_gateway::Running) {
    let config = format!(
        "state: {{ backend: redis, url: \"redis://127.0.0.1:{redis_port}\", key_prefix: \"t{redis_port}\", replicas: 2, timeout: 500ms }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\"{provider_extra} }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n"
    );
    let a = start(&[faults], &config).await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\n{}",
        config.replace("{mock0}", &a.mocks[0].url())
    );
    let b = spawn_text(&text, 7).await;
    // A replica whose first Redis call outlasts its 500 ms budget serves
    // that call on local state: sharing is asserted once each replica has
    // renewed its lease through Redis (the first to start counts itself,
    // the second both).
    replicas_at_least(&a, a.gw.admin_addr, 1.0).await;
    replicas_at_least(&a, b.admin_addr, 2.0).await;
    (a, b)
}

/// Two replicas whose provider allows 60 per minute with a burst of 6.
async fn replicas_sharing_6(redis_port: u16) -> (Env, levee_gateway::Running) {
    let allowance = ", rate_limit: { requests_per_minute: 60, burst: 6 }";
    replicas(redis_port, "faults: []", allowance).await
}

async fn post_to(
    env: &Env,
    addr: std::net::SocketAddr,
    body: &str,
    headers: &[(&str, &str)],
) -> Resp {
    let req = post_request(&format!("http://{addr}/v1/chat/completions"), body, headers);
    Resp::read(env.client.request(req).await.unwrap()).await
}

#[tokio::test]
async fn a_token_allowance_split_across_replicas_stays_within_the_shared_rate() {
    let Some(r) = redis().await else { return };
    // Six requests' worth of tokens a minute (a request costs a token per
    // 4 bytes of body): both replicas together get about six in a burst,
    // where each alone would allow six (twelve in all).
    let per_request = CHAT.len() as u64 / 4;
    let allowance = format!(", rate_limit: {{ tokens_per_minute: {} }}", 6 * per_request);
    let (a, b) = replicas(r.port, "faults: []", &allowance).await;
    let mut ok = 0;
    for i in 0..24 {
        let addr = if i % 2 == 0 { a.gw.addr } else { b.addr };
        let resp = watchdog(
            WATCHDOG,
            post_to(&a, addr, CHAT, &[("x-timeout-ms", "2000")]),
        )
        .await;
        match resp.status {
            200 => ok += 1,
            429 => assert_eq!(resp.header("x-levee-reason"), "rate_limited"),
            s => panic!("unexpected {s}: {}", resp.text()),
        }
    }
    assert_eq!(a.stats(0).requests_total, ok);
    assert!(
        (6..=7).contains(&ok),
        "{ok} reached the provider: the shared allowance is 6"
    );
    b.shutdown().await;
    a.stop().await;
}

#[tokio::test]
async fn a_burst_split_across_replicas_stays_within_the_shared_rate() {
    let Some(r) = redis().await else { return };
    // 60 per minute with a burst of 6: at most ~6 in a quick burst, in total.
    let (a, b) = replicas_sharing_6(r.port).await;
    let mut ok = 0;
    let mut limited = 0;
    let started = stopwatch();
    for i in 0..24 {
        let addr = if i % 2 == 0 { a.gw.addr } else { b.addr };
        let resp = watchdog(WATCHDOG, post_to(&a, addr, CHAT, &[])).await;
        match resp.status {
            200 => ok += 1,
            429 => {
                assert_eq!(resp.header("x-levee-reason"), "rate_limited");
                assert_eq!(resp.header("x-should-retry"), "false");
                limited += 1;
            }
            s => panic!("unexpected {s}: {}", resp.text()),
        }
    }
    let seen = a.stats(0).requests_total;
    assert_eq!(seen, ok);
    // A request refused by the allowance paces the model, and later ones
    // wait for a slot their deadline holds instead of being refused: the
    // run takes seconds, and the allowance refills one a second meanwhile.
    let refilled = started.elapsed().as_secs();
    assert!(
        ok >= 6 && ok <= 7 + refilled,
        "{ok} reached the provider in {refilled} s: the shared allowance is 6 now, then 1/s"
    );
    assert_eq!(ok + limited, 24);
    b.shutdown().await;
    a.stop().await;
}

#[tokio::test]
async fn one_idempotency_key_on_two_replicas_runs_once() {
    let Some(r) = redis().await else { return };
    let (a, b) = replicas(r.port, "faults:\n  - { latency: 400ms }\n", "").await;
    let h = [("idempotency-key", "shared-key")];
    let first = post_to(&a, a.gw.addr, CHAT, &h);
    let second = async {
        // Arrive while the first is in flight at the provider.
        watchdog(WATCHDOG, async {
            while a.stats(0).in_flight < 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        post_to(&a, b.addr, CHAT, &h).await
    };
    let (x, y) = watchdog(WATCHDOG, async { tokio::join!(first, second) }).await;
    assert_eq!(
        (x.status, y.status),
        (200, 200),
        "{} / {}",
        x.text(),
        y.text()
    );
    assert_eq!(x.body, y.body, "both callers get the same answer");
    assert_eq!(a.stats(0).requests_total, 1, "the provider saw one request");
    b.shutdown().await;
    a.stop().await;
}

#[tokio::test]
async fn replicas_keep_serving_without_redis_and_share_again_when_it_returns() {
    let Some(r) = redis().await else { return };
    let port = r.port;
    let (a, b) = replicas(port, "faults: []", "").await;
    assert_eq!(
        post_to(&a, a.gw.addr, CHAT, &[("idempotency-key", "k0")])
            .await
            .status,
        200
    );
    drop(r); // Redis stops.
    for i in 0..6 {
        let addr = if i % 2 == 0 { a.gw.addr } else { b.addr };
        let key = format!("down-{i}");
        let resp = watchdog(
            WATCHDOG,
            post_to(&a, addr, CHAT, &[("idempotency-key", &key)]),
        )
        .await;
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    let m = a.metrics().await;
    assert!(
        metric(&m, "levee_state_fallback_total", &[]) >= 1.0,
        "fallbacks are counted"
    );
    // Redis returns on the same port. Sharing resumes once each replica's
    // connection is back and its skip period (a second after three failures
    // in a row) is over: a key stored through A is then replayed by B. How
    // soon depends on the reconnection's backoff and the machine's load, so
    // the test asks again with a fresh key until it holds (within the
    // watchdog), and says how many keys it took.
    let r2 = RedisServer::start(port).expect("restart redis");
    r2.ready(WATCHDOG).await;
    let tries = watchdog(WATCHDOG, async {
        let mut n = 0;
        loop {
            n += 1;
            let key = format!("after-{n}");
            let h = [("idempotency-key", key.as_str())];
            let first = post_to(&a, a.gw.addr, CHAT, &h).await;
            assert_eq!(first.status, 200, "{}", first.text());
            let again = post_to(&a, b.addr, CHAT, &h).await;
            assert_eq!(again.status, 200, "{}", again.text());
            if again.header("x-levee-replayed") == "true" {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    eprintln!("sharing resumed after {tries} key(s)");
    b.shutdown().await;
    a.stop().await;
    drop(r2);
}

#[tokio::test]
async fn one_busy_replica_may_use_the_whole_shared_allowance_while_redis_is_up() {
    // The local fallback limiter would allow 1/N (3 of 6); Redis allows all 6.
    let Some(r) = redis().await else { return };
    let (a, b) = replicas_sharing_6(r.port).await;
    let mut ok = 0;
    for _ in 0..12 {
        if watchdog(WATCHDOG, post_to(&a, a.gw.addr, CHAT, &[]))
            .await
            .status
            == 200
        {
            ok += 1;
        }
    }
    assert!((6..=7).contains(&ok), "{ok}");
    let m = a.metrics().await;
    assert_eq!(metric(&m, "levee_state_fallback_total", &[]), 0.0);
    b.shutdown().await;
    a.stop().await;
}

/// 150 inputs × 4096 dimensions: an embeddings answer of about 6 MB.
fn big_embeddings() -> String {
    let inputs: Vec<String> = (0..150).map(|i| format!("\"text {i}\"")).collect();
    format!(
        r#"{{"model":"m","dimensions":4096,"input":[{}]}}"#,
        inputs.join(",")
    )
}

async fn post_path(
    env: &Env,
    addr: std::net::SocketAddr,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Resp {
    use http_body_util::BodyExt;
    let mut b = http::Request::post(format!("http://{addr}{path}"));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let resp = env.client.request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

#[tokio::test]
async fn a_large_answer_stored_by_one_replica_is_replayed_by_the_other() {
    let Some(r) = redis().await else { return };
    // The default 5 ms budget per Redis call, as in production.
    let config = format!(
        "state: {{ backend: redis, url: \"redis://127.0.0.1:{}\", key_prefix: \"big{}\", replicas: 2 }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n",
        r.port, r.port
    );
    let a = start(&["faults: []"], &config).await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\n{}",
        config.replace("{mock0}", &a.mocks[0].url())
    );
    let b = spawn_text(&text, 7).await;
    let body = big_embeddings();
    let h = [("idempotency-key", "big-1")];
    let first = watchdog(
        WATCHDOG,
        post_path(&a, a.gw.addr, "/v1/embeddings", &body, &h),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert!(first.body.len() > 4_000_000, "{} bytes", first.body.len());
    let again = watchdog(WATCHDOG, post_path(&a, b.addr, "/v1/embeddings", &body, &h)).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        again.header("x-levee-idempotency"),
        "",
        "fell back to the local store"
    );
    assert_eq!(again.header("x-levee-replayed"), "true");
    assert_eq!(again.body, first.body);
    assert_eq!(a.stats(0).requests_total, 1, "the answer ran twice");
    b.shutdown().await;
    a.stop().await;
}

#[tokio::test]
async fn without_redis_keyed_requests_say_so_or_are_refused_as_configured() {
    let Some(r) = redis().await else { return };
    let port = r.port;
    drop(r); // Redis is down from the start.
    let env = start(
        &["faults: []"],
        &format!("state: {{ backend: redis, url: \"redis://127.0.0.1:{port}\" }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n"),
    )
    .await;
    let keyed = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("idempotency-key", "k1")]),
    )
    .await;
    assert_eq!(keyed.status, 200);
    assert_eq!(keyed.header("x-levee-idempotency"), "local");
    let plain = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(plain.header("x-levee-idempotency"), "");
    let m = env.metrics().await;
    assert_eq!(metric(&m, "levee_idempotency_local_total", &[]), 1.0, "{m}");
    env.stop().await;

    let env = start(
        &["faults: []"],
        &format!("state: {{ backend: redis, url: \"redis://127.0.0.1:{port}\", on_unavailable: refuse }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n"),
    )
    .await;
    let refused = watchdog(
        WATCHDOG,
        env.post("/v1/chat/completions", CHAT, &[("idempotency-key", "k2")]),
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.header("x-levee-reason"), "state_unavailable");
    assert_eq!(refused.header("x-should-retry"), "false");
    assert!(
        refused.json()["error"]["message"].is_string(),
        "{}",
        refused.text()
    );
    let unkeyed = watchdog(WATCHDOG, env.chat()).await;
    assert_eq!(
        unkeyed.status, 200,
        "requests without a key are not affected"
    );
    assert_eq!(
        env.stats(0).requests_total,
        1,
        "the refused request was never sent"
    );
    env.stop().await;
}

#[tokio::test]
async fn shutdown_releases_the_leases_this_replica_holds_in_redis() {
    let Some(r) = redis().await else { return };
    let prefix = format!("lease{}", r.port);
    let mock = support::mock("faults:\n  - { stall: true }\n").await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nshutdown_grace: 200ms\nstate: {{ backend: redis, url: \"redis://127.0.0.1:{}\", key_prefix: \"{prefix}\", timeout: 500ms }}\nproviders:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n    deadline: {{ default: 60s, max: 60s }}\n",
        r.port,
        mock.url()
    );
    let gw = spawn_text(&text, 3).await;
    let client = http_client();
    let req = http::Request::post(format!("http://{}/v1/chat/completions", gw.addr))
        .header("idempotency-key", "held-1")
        .body(http_body_util::Full::new(bytes::Bytes::from(CHAT)))
        .unwrap();
    let pending = tokio::spawn(client.request(req));
    watchdog(WATCHDOG, async {
        while mock.stats().in_flight < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let redis_client = redis::Client::open(format!("redis://127.0.0.1:{}", r.port)).unwrap();
    let mut conn = redis_client
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let states = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        let pattern = format!("{{{prefix}}}:idem:*");
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut conn)
                .await
                .unwrap();
            let mut out = Vec::new();
            for k in keys {
                let st: Option<String> = redis::cmd("HGET")
                    .arg(&k)
                    .arg("state")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                out.push(st.unwrap_or_default());
            }
            out
        }
    };
    assert_eq!(states(&mut conn).await, ["inflight"]);
    watchdog(WATCHDOG, gw.shutdown()).await;
    assert_eq!(
        states(&mut conn).await,
        Vec::<String>::new(),
        "the key is still held: another replica would wait out the lease"
    );
    pending.abort();
    mock.shutdown().await;
}

/// Bytes of stored answers in Redis under `prefix`, counted as the store
/// counts them (body, headers and 128 bytes each).
async fn stored_bytes(port: u16, prefix: &str) -> u64 {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("redis url");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{prefix}}}:idem:*"))
        .query_async(&mut c)
        .await
        .expect("KEYS");
    let mut total = 0;
    for k in keys {
        let (body, headers): (u64, u64) = redis::pipe()
            .cmd("HSTRLEN")
            .arg(&k)
            .arg("body")
            .cmd("HSTRLEN")
            .arg(&k)
            .arg("headers")
            .query_async(&mut c)
            .await
            .expect("HSTRLEN");
        if body > 0 {
            total += body + headers + 128;
        }
    }
    total
}

async fn keyed_chats(env: &Env, addr: std::net::SocketAddr, credential: &str, keys: usize) {
    for i in 0..keys {
        let key = format!("k-{i}");
        let h = [
            ("authorization", credential),
            ("idempotency-key", key.as_str()),
        ];
        let r = watchdog(WATCHDOG, post_to(env, addr, CHAT, &h)).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
}

#[tokio::test]
async fn made_up_credentials_share_one_bucket_of_the_shared_store() {
    let Some(r) = redis().await else { return };
    let prefix = format!("mk{}", r.port);
    let config = format!(
        "state: {{ backend: redis, url: \"redis://127.0.0.1:{}\", key_prefix: \"{prefix}\", timeout: 500ms }}\nidempotency: {{ max_bytes: 16384 }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n",
        r.port
    );
    let env = start(&["faults: []"], &config).await;
    // A keyless gateway: a hundred made-up credentials, two keys each.
    for i in 0..100 {
        keyed_chats(&env, env.gw.addr, &format!("Bearer made-up-{i}"), 2).await;
    }
    let held = stored_bytes(r.port, &prefix).await;
    assert!(held > 4096, "answers were stored: {held}");
    assert!(
        held <= 16384,
        "{held} bytes stored against one bucket of 16384"
    );
    // Each still replays only its own answer (the first ones are stored;
    // the store refuses what is over the bucket's share).
    let h = [
        ("authorization", "Bearer made-up-0"),
        ("idempotency-key", "k-1"),
    ];
    let again = watchdog(WATCHDOG, post_to(&env, env.gw.addr, CHAT, &h)).await;
    assert_eq!(again.header("x-levee-replayed"), "true");
    let other = [
        ("authorization", "Bearer made-up-0-not"),
        ("idempotency-key", "k-1"),
    ];
    let fresh = watchdog(WATCHDOG, post_to(&env, env.gw.addr, CHAT, &other)).await;
    assert_eq!(
        fresh.header("x-levee-replayed"),
        "",
        "another caller's answer replayed"
    );
    env.stop().await;
}

#[tokio::test]
async fn the_shared_store_holds_at_most_state_max_bytes_over_every_caller() {
    let Some(r) = redis().await else { return };
    let prefix = format!("all{}", r.port);
    let sha = |s: &str| {
        use sha2::Digest;
        sha2::Sha256::digest(s.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let keys: String = (0..4)
        .map(|i| {
            format!(
                "  - {{ name: k{i}, sha256: \"{}\" }}\n",
                sha(&format!("key-{i}"))
            )
        })
        .collect();
    let config = format!(
        "keys:\n{keys}state: {{ backend: redis, url: \"redis://127.0.0.1:{}\", key_prefix: \"{prefix}\", timeout: 500ms, max_bytes: 20000 }}\nidempotency: {{ max_bytes: 16384 }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n",
        r.port
    );
    let env = start(&["faults: []"], &config).await;
    // Four named callers, each within its own share, together over the
    // store's bound.
    for i in 0..4 {
        keyed_chats(&env, env.gw.addr, &format!("Bearer key-{i}"), 12).await;
    }
    let held = stored_bytes(r.port, &prefix).await;
    assert!(held > 10_000, "answers were stored: {held}");
    assert!(
        held <= 20_000,
        "{held} bytes stored against state.max_bytes 20000"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_follower_looking_while_the_leader_writes_a_large_answer_replays_it() {
    let Some(r) = redis().await else { return };
    // The default 5 ms budget per Redis call, as in production, and no
    // local fallback: a look taken for Redis being down is a 503.
    let config = format!(
        "state: {{ backend: redis, url: \"redis://127.0.0.1:{}\", key_prefix: \"fol{}\", replicas: 2, on_unavailable: refuse }}\nproviders:\n  p: {{ api: openai, base_url: \"{{mock0}}\" }}\nroutes:\n  - targets: [p]\n    retry: {{ max_attempts: 1 }}\n",
        r.port, r.port
    );
    let a = start(&["faults:\n  - { latency: 300ms }\n"], &config).await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\n{}",
        config.replace("{mock0}", &a.mocks[0].url())
    );
    let b = spawn_text(&text, 7).await;
    let body = big_embeddings();
    let h = [("idempotency-key", "both-at-once")];
    let first = post_path(&a, a.gw.addr, "/v1/embeddings", &body, &h);
    let second = async {
        // Arrive while the first is at the provider: it follows, looking
        // every 20 ms, and one look lands while the leader writes ~5 MB.
        watchdog(WATCHDOG, async {
            while a.stats(0).in_flight < 1 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        post_path(&a, b.addr, "/v1/embeddings", &body, &h).await
    };
    let (x, y) = watchdog(WATCHDOG, async { tokio::join!(first, second) }).await;
    assert_eq!(x.status, 200, "{}", x.text());
    assert_eq!(y.status, 200, "{}", &y.text()[..y.text().len().min(300)]);
    assert_eq!(y.header("x-levee-replayed"), "true");
    assert_eq!(x.body, y.body);
    assert_eq!(a.stats(0).requests_total, 1, "the answer ran twice");
    b.shutdown().await;
    a.stop().await;
}

#[tokio::test]
async fn a_response_created_through_one_replica_is_read_through_the_other() {
    let Some(r) = redis().await else { return };
    // Two OpenAI accounts, the first down while the response is created:
    // the second holds it, and only the note in Redis says so to the
    // other replica.
    let config = format!(
        "state: {{ backend: redis, url: \"redis://127.0.0.1:{}\", key_prefix: \"resp{}\", replicas: 2, timeout: 500ms }}\nproviders:\n  first: {{ api: openai, base_url: \"{{mock0}}\" }}\n  second: {{ api: openai, base_url: \"{{mock1}}\" }}\nroutes:\n  - targets: [first, second]\n",
        r.port, r.port
    );
    let a = start(&["faults:\n  - { status: 503 }\n", "faults: []"], &config).await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\n{}",
        config
            .replace("{mock0}", &a.mocks[0].url())
            .replace("{mock1}", &a.mocks[1].url())
    );
    let b = spawn_text(&text, 7).await;
    let created = watchdog(
        WATCHDOG,
        post_path(
            &a,
            a.gw.addr,
            "/v1/responses",
            r#"{"model":"gpt-4.1","input":"hi"}"#,
            &[],
        ),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_string();
    let read = watchdog(WATCHDOG, a.get_from(b.addr, &format!("/v1/responses/{id}"))).await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(read.header("x-levee-target"), "second");
    let unknown = watchdog(WATCHDOG, a.get_from(b.addr, "/v1/responses/resp_nobody")).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    b.shutdown().await;
    a.stop().await;
}

/// Waits until replica `admin`'s gauge reads `n`.
async fn replicas_become(env: &Env, admin: std::net::SocketAddr, n: f64) {
    watchdog(WATCHDOG, env.replicas_until(admin, |v| v == n)).await;
}

/// Waits until replica `admin`'s gauge reads at least `n`.
async fn replicas_at_least(env: &Env, admin: std::net::SocketAddr, n: f64) {
    watchdog(WATCHDOG, env.replicas_until(admin, |v| v >= n)).await;
}

#[tokio::test]
async fn replicas_count_each_other_by_their_leases() {
    let Some(r) = redis().await else { return };
    // `replicas: 2` in the config; the leases say how many there really are.
    let (a, b) = replicas(r.port, "faults: []", "").await;
    replicas_become(&a, a.gw.admin_addr, 2.0).await;
    replicas_become(&a, b.admin_addr, 2.0).await;
    let page = a.admin("/").await.text();
    assert!(page.contains("2 live (leases in Redis)"), "{page}");
    // A third replica joins; then one leaves: counted within a renewal.
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nstate: {{ backend: redis, url: \"redis://127.0.0.1:{}\", key_prefix: \"t{}\", replicas: 2, timeout: 500ms }}\nproviders:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n",
        r.port,
        r.port,
        a.mocks[0].url()
    );
    let c = spawn_text(&text, 9).await;
    replicas_become(&a, a.gw.admin_addr, 3.0).await;
    c.shutdown().await;
    b.shutdown().await;
    replicas_become(&a, a.gw.admin_addr, 1.0).await;
    // One replica live, but the config's 2 is the floor of N.
    let page = a.admin("/").await.text();
    assert!(page.contains("1/2 of every allowance"), "{page}");
    a.stop().await;
}
