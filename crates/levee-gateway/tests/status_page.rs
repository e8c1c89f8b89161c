//! The status page (admin `GET /`) as a person sees it: loaded in headless
//! Chromium during an incident (one provider failing, its breaker open,
//! traffic falling back), its DOM read back, and a screenshot kept as a test
//! artifact.

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

const LIMIT: Duration = Duration::from_secs(90);

/// Provider `openai` always answers 503; its breaker opens after 4 failures
/// and stays open. The backup `azure` answers. A retry on `a` needs ~45 s of
/// deadline, the fallback ~15 s.
const INCIDENT: &str = "providers:\n  openai: { api: openai, base_url: \"{mock0}\", max_in_flight: 50, circuit_breaker: { min_requests: 4, error_ratio: 0.5, window: 10s, open_for: 10m } }\n  azure: { api: openai, base_url: \"{mock1}\", max_in_flight: 40 }\nroutes:\n  - match: { model_prefix: \"gpt/\" }\n    targets:\n      - { provider: openai, expected_attempt_ms: 30000 }\n      - { provider: azure, model: gpt-4.1, expected_attempt_ms: 15000 }\n    deadline: { default: 60s, max: 120s }\n    retry: { max_attempts: 3, backoff: { base_ms: 1, max_ms: 2 } }\n";

const X_CHAT: &str = r#"{"model":"gpt/gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#;

fn chromium() -> Option<&'static str> {
    for c in ["chromium", "chromium-browser"] {
        let found = Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if found {
            return Some(c);
        }
    }
    assert!(
        std::env::var_os("LEVEE_REQUIRE_CHROMIUM").is_none(),
        "chromium is required (scripts/test installs it) but was not found"
    );
    eprintln!("chromium not installed: skipping (scripts/test installs it)");
    None
}

/// Runs headless Chromium with a fresh profile; kills it after `limit`.
fn run_chromium(bin: &str, profile: &Path, args: &[String], limit: Duration) -> String {
    let child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let done = rx.recv_timeout(limit);
    // A Chromium profile is tens of megabytes: never leave one behind.
    let _ = std::fs::remove_dir_all(profile);
    match done {
        Ok(Ok(out)) => {
            assert!(
                out.status.success(),
                "chromium failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
        Ok(Err(e)) => panic!("chromium: {e}"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("watchdog: chromium took longer than {limit:?}");
        }
    }
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{name}-{}-{}",
        std::process::id(),
        line!()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_chromium_shows_the_incident_and_the_census() {
    let Some(bin) = chromium() else { return };
    let env = start(&["faults:\n  - { status: 503 }\n", ""], INCIDENT).await;
    watchdog(LIMIT, async {
        for i in 0..9 {
            let (who, timeout) = match i % 3 {
                0 => ("queue-worker", "40000"),
                1 => ("interactive", "100000"),
                _ => ("batch-job", "22000"),
            };
            let r = env.chat_as(X_CHAT, who, timeout).await;
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.header("x-levee-target"), "azure");
        }

        // The raw page: self-contained and self-refreshing.
        let req = http::Request::get(format!("http://{}/", env.gw.admin_addr))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = env.client.request(req).await.expect("admin answers");
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
        let html = String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes())
            .into_owned();
        assert!(html.contains("http-equiv=\"refresh\""), "{html}");
        for external in ["src=", "<link", "http://", "https://", "@import"] {
            assert!(
                !html.contains(external),
                "page loads something ({external}): {html}"
            );
        }

        let admin = format!("http://{}/", env.gw.admin_addr);
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
        std::fs::create_dir_all(&shots).expect("artifact dir");
        let png = shots.join("status-page.png");
        let _ = std::fs::remove_file(&png);
        let profile = fresh_dir("chromium-profile");
        let args = vec![
            format!("--screenshot={}", png.display()),
            "--window-size=1100,1000".into(),
            "--hide-scrollbars".into(),
            admin.clone(),
        ];
        let shot_bin = bin.to_string();
        tokio::task::spawn_blocking(move || run_chromium(&shot_bin, &profile, &args, LIMIT / 3))
            .await
            .expect("chromium thread");
        let bytes = std::fs::read(&png).expect("a screenshot was written");
        assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
        eprintln!("status page screenshot: {}", png.display());

        // A caller name is whatever a client sends: it must not become markup.
        env.post(
            "/v1/chat/completions",
            X_CHAT,
            &[("x-levee-caller", "<b>evil</b>")],
        )
        .await;
        let profile = fresh_dir("chromium-profile");
        let dom = {
            let (bin, profile, admin) = (bin.to_string(), profile.clone(), admin.clone());
            tokio::task::spawn_blocking(move || {
                run_chromium(&bin, &profile, &["--dump-dom".into(), admin], LIMIT / 3)
            })
            .await
            .expect("chromium thread")
        };
        assert!(dom.contains("<title>Levee status</title>"), "{dom}");
        for needle in [
            r#"data-provider="openai" data-breaker="open""#,
            r#"data-provider="azure" data-breaker="closed""#,
            r#"data-caller="queue-worker" data-route="gpt/" data-retry="false""#,
            r#"data-caller="interactive" data-route="gpt/" data-retry="true""#,
            r#"data-caller="batch-job" data-route="gpt/" data-retry="false""#,
            "primary_refused",
            "azure (gpt-4.1)",
        ] {
            assert!(dom.contains(needle), "{needle} not in the DOM:\n{dom}");
        }
        assert!(dom.contains("&lt;b&gt;evil&lt;/b&gt;"), "{dom}");
        assert!(!dom.contains("<b>evil"), "{dom}");
    })
    .await;
    env.stop().await;
}
