//! Extra workers: public listeners on their own threads and single-threaded
//! runtimes, all on the listen port with `SO_REUSEPORT`, sharing the
//! gateway's state; and each one drained at shutdown.

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use support::{mock, watchdog, CHAT};

const WATCHDOG: Duration = Duration::from_secs(30);
const CONNECTIONS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_spread_over_worker_listeners_are_all_answered_and_drained() {
    let m = mock("").await;
    let text = format!(
        "listen: 127.0.0.1:0\nadmin: {{ listen: 127.0.0.1:0 }}\nshutdown_grace: 5s\nproviders:\n  p: {{ api: openai, base_url: \"{}\" }}\nroutes:\n  - targets: [p]\n",
        m.url()
    );
    let config = levee_config::Config::parse(&text).unwrap();
    let opts = levee_gateway::Options {
        seed: 3,
        extra_workers: 2,
        ..Default::default()
    };
    let gw = levee_gateway::spawn_with(config, opts, std::future::pending())
        .await
        .expect("gateway starts");
    let url = format!("http://{}/v1/chat/completions", gw.addr);
    // No pooling on the client: every request opens a connection of its
    // own, which the kernel hands to one of the three listeners.
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http();
    watchdog(WATCHDOG, async {
        for _ in 0..CONNECTIONS {
            let req = http::Request::post(&url)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(CHAT.as_bytes())))
                .unwrap();
            let resp = client.request(req).await.expect("gateway answers");
            assert_eq!(resp.status(), 200);
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            assert!(body.starts_with(b"{"), "{body:?}");
        }
    })
    .await;
    assert_eq!(m.stats().requests_total, CONNECTIONS);
    let metrics = gw.shared.metrics().encode();
    assert!(
        metrics.contains(&format!(
            "levee_requests_total{{route=\"default\",outcome=\"success\"}} {CONNECTIONS}"
        )),
        "{metrics}"
    );
    watchdog(WATCHDOG, gw.shutdown()).await;
}
