//! The status page (admin `GET /`) as a person sees it: loaded in headless
//! Chromium during an incident (one provider's model failing, its breaker
//! open, traffic falling back; another route failing outright), its DOM and
//! the colours and positions Chromium rendered read back, and a screenshot
//! kept as a test artifact.

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

const LIMIT: Duration = Duration::from_secs(90);

/// Provider `openai` answers 503 for model `gpt-4.1` (its breaker opens
/// after 4 failures and stays open) and answers `gpt-4.1-mini` (route
/// `mini/`). The backup `azure` answers. A retry on `gpt/` needs ~45 s of
/// deadline, the fallback ~15 s. Provider `flaky` (no in-flight cap) always
/// answers 503: route `solo/`, with no fallback, fails every request — two
/// with two attempts each, then refused by the open breaker with none.
const INCIDENT: &str = "providers:\n  openai: { api: openai, base_url: \"{mock0}\", max_in_flight: 50, circuit_breaker: { min_requests: 4, error_ratio: 0.5, window: 10s, open_for: 10m } }\n  azure: { api: openai, base_url: \"{mock1}\", max_in_flight: 40 }\n  flaky: { api: openai, base_url: \"{mock2}\", circuit_breaker: { min_requests: 4, error_ratio: 0.5, window: 10s, open_for: 10m } }\nroutes:\n  - match: { model_prefix: \"gpt/\" }\n    targets:\n      - { provider: openai, expected_attempt_ms: 30000 }\n      - { provider: azure, model: gpt-4.1, expected_attempt_ms: 15000 }\n    deadline: { default: 60s, max: 120s }\n    retry: { max_attempts: 3, backoff: { base_ms: 1, max_ms: 2 } }\n  - match: { model_prefix: \"mini/\" }\n    targets: [{ provider: openai }]\n  - match: { model_prefix: \"solo/\" }\n    targets: [{ provider: flaky }]\n    retry: { max_attempts: 2, backoff: { base_ms: 1, max_ms: 2 } }\nprices:\n  - { provider: azure, model: gpt-4.1, input_per_mtok: 2.00, output_per_mtok: 8.00 }\n";

const OPENAI_FAULTS: &str = "faults:\n  - { status: 503, model: gpt-4.1 }\n";
const FLAKY_FAULTS: &str = "faults:\n  - { status: 503 }\n";

const X_CHAT: &str = r#"{"model":"gpt/gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#;
const MINI_CHAT: &str =
    r#"{"model":"mini/gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}"#;
const SOLO_CHAT: &str = r#"{"model":"solo/x","messages":[{"role":"user","content":"hi"}]}"#;

/// Appended to a saved copy of the page (never to the page served): writes
/// into `#probe`, as JSON, the background and text colours and the top edge
/// Chromium rendered for the success tiles, each route row's first cell and
/// its attempts-per-request figure, and the providers table.
const PROBE: &str = r#"<pre id="probe"></pre><script>
const seen = [];
const note = (what, e) => {
  if (!e) return;
  const s = getComputedStyle(e);
  seen.push({ what, bg: s.backgroundColor, color: s.color, top: Math.round(e.getBoundingClientRect().top) });
};
for (const t of document.querySelectorAll('#success .tile')) note('tile ' + t.dataset.route, t);
for (const r of document.querySelectorAll('#routes tr[data-route]')) {
  note('row ' + r.dataset.route, r.cells[0]);
  note('attempts ' + r.dataset.route, r.cells[3].querySelector('span'));
}
note('providers', document.getElementById('providers'));
document.getElementById('probe').textContent = JSON.stringify(seen);
</script>"#;

/// What the probe saw of one element.
struct Seen {
    bg: (u8, u8, u8),
    color: (u8, u8, u8),
    top: i64,
}

/// `rgb(r, g, b)` or `rgba(r, g, b, a)` as Chromium reports a computed colour.
fn rgb(css: &str) -> (u8, u8, u8) {
    let inner = css
        .trim_start_matches("rgba(")
        .trim_start_matches("rgb(")
        .trim_end_matches(')');
    let v: Vec<u8> = inner
        .split(',')
        .take(3)
        .map(|p| p.trim().parse().unwrap_or(0))
        .collect();
    (v[0], v[1], v[2])
}

/// Unmistakably red: a strong red channel well above green and blue.
fn red(c: (u8, u8, u8)) -> bool {
    c.0 >= 150 && u16::from(c.1) + 60 < u16::from(c.0) && u16::from(c.2) + 60 < u16::from(c.0)
}

/// Greenish: green the strongest channel.
fn green(c: (u8, u8, u8)) -> bool {
    c.1 > c.0 && c.1 > c.2
}

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
    let env = start(&[OPENAI_FAULTS, "", FLAKY_FAULTS], INCIDENT).await;
    watchdog(LIMIT, async {
        drive_the_incident(&env).await;
        let html = served_page(&env).await;
        let admin = format!("http://{}/", env.gw.admin_addr);
        screenshot(bin, &admin).await;
        let (probe, json) = render_with_probe(bin, &html).await;

        // A caller name is whatever a client sends: it must not become markup.
        env.post(
            "/v1/chat/completions",
            X_CHAT,
            &[("x-levee-caller", "<b>evil</b>")],
        )
        .await;
        let dom = dump_dom(bin, &admin).await;
        assert!(dom.contains("<title>Levee status</title>"), "{dom}");

        // Every check is made, and every one that fails is reported.
        let mut wrong = dom_misses(&dom);
        wrong.extend(colour_misses(&probe, &json));
        assert!(wrong.is_empty(), "{}\n\nDOM:\n{dom}", wrong.join("\n"));
        assert!(dom.contains("&lt;b&gt;evil&lt;/b&gt;"), "{dom}");
        assert!(!dom.contains("<b>evil"), "{dom}");
    })
    .await;
    env.stop().await;
}

/// The incident: three callers with their own deadlines on `gpt/`, each
/// answered by the fallback `azure`; `mini/` answered; `solo/` failing
/// every request, most of them refused by its open breaker.
async fn drive_the_incident(env: &Env) {
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
    for _ in 0..2 {
        let r = env.post("/v1/chat/completions", MINI_CHAT, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let mut refused = 0;
    for _ in 0..10 {
        let r = env.post("/v1/chat/completions", SOLO_CHAT, &[]).await;
        assert_eq!(r.status, 503, "{}", r.text());
        refused += usize::from(r.header("x-levee-reason") == "circuit_open");
    }
    // Most of the failing route's requests made no attempt: its
    // attempts per request is well under 1 (0.4).
    assert_eq!(refused, 8);
}

/// The raw page as the admin listener serves it, checked to be
/// self-contained and self-refreshing.
async fn served_page(env: &Env) -> String {
    let req = http::Request::get(format!("http://{}/", env.gw.admin_addr))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = env.client.request(req).await.expect("admin answers");
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html =
        String::from_utf8_lossy(&resp.into_body().collect().await.unwrap().to_bytes()).into_owned();
    assert!(html.contains("http-equiv=\"refresh\""), "{html}");
    for external in ["src=", "<link", "http://", "https://", "@import"] {
        assert!(
            !html.contains(external),
            "page loads something ({external}): {html}"
        );
    }
    html
}

/// A screenshot of the page at `admin`, kept as a test artifact.
async fn screenshot(bin: &str, admin: &str) {
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
    std::fs::create_dir_all(&shots).expect("artifact dir");
    let png = shots.join("status-page.png");
    let _ = std::fs::remove_file(&png);
    let profile = fresh_dir("chromium-profile");
    let args = vec![
        format!("--screenshot={}", png.display()),
        "--window-size=1100,1300".into(),
        "--hide-scrollbars".into(),
        admin.to_string(),
    ];
    let shot_bin = bin.to_string();
    tokio::task::spawn_blocking(move || run_chromium(&shot_bin, &profile, &args, LIMIT / 4))
        .await
        .expect("chromium thread");
    let bytes = std::fs::read(&png).expect("a screenshot was written");
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
    eprintln!("status page screenshot: {}", png.display());
}

/// What Chromium rendered: the page as served, with the probe added. The
/// probe's entries, and the JSON it wrote.
async fn render_with_probe(bin: &str, html: &str) -> (Vec<serde_json::Value>, String) {
    let probe_dir = fresh_dir("status-probe");
    let probed = probe_dir.join("status.html");
    std::fs::write(&probed, html.replace("</body>", &format!("{PROBE}</body>")))
        .expect("probe page");
    let profile = fresh_dir("chromium-profile");
    let rendered = {
        let (bin, profile) = (bin.to_string(), profile.clone());
        let url = format!("file://{}", probed.display());
        tokio::task::spawn_blocking(move || {
            run_chromium(
                &bin,
                &profile,
                &["--window-size=1100,1300".into(), "--dump-dom".into(), url],
                LIMIT / 4,
            )
        })
        .await
        .expect("chromium thread")
    };
    let _ = std::fs::remove_dir_all(&probe_dir);
    let json = rendered
        .split_once("<pre id=\"probe\">")
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .map(|(j, _)| j.replace("&amp;", "&"))
        .unwrap_or_else(|| panic!("the probe wrote nothing:\n{rendered}"));
    let probe: Vec<serde_json::Value> = serde_json::from_str(&json).expect("probe JSON");
    (probe, json)
}

/// The page at `admin` as Chromium's DOM after its scripts ran.
async fn dump_dom(bin: &str, admin: &str) -> String {
    let profile = fresh_dir("chromium-profile");
    let (bin, admin) = (bin.to_string(), admin.to_string());
    tokio::task::spawn_blocking(move || {
        run_chromium(&bin, &profile, &["--dump-dom".into(), admin], LIMIT / 4)
    })
    .await
    .expect("chromium thread")
}

/// What the probe saw of the element it noted as `what`.
fn seen(probe: &[serde_json::Value], what: &str) -> Option<Seen> {
    let v = probe.iter().find(|v| v["what"] == what)?;
    Some(Seen {
        bg: rgb(v["bg"].as_str()?),
        color: rgb(v["color"].as_str()?),
        top: v["top"].as_i64()?,
    })
}

/// What the DOM should say of the incident and does not, each in words:
/// breakers, the callers' retries, success per route, why traffic fell
/// back, and the in-flight caps.
fn dom_misses(dom: &str) -> Vec<String> {
    let mut wrong: Vec<String> = Vec::new();
    for needle in [
        // Spend today, by caller: the fallback's answers are priced.
        r#"<table id="spend">"#,
        r#"<tr data-caller="queue-worker"><td>queue-worker</td><td class="num">$0.0"#,
        r#"data-provider="openai" data-breaker="open""#,
        r#"data-provider="azure" data-breaker="closed""#,
        r#"data-caller="queue-worker" data-route="gpt/" data-retry="false""#,
        // A caller whose retry cannot start is told what to change.
        "<td>raise its timeout to 46 s, or lower the primary's expected_attempt_ms</td>",
        r#"data-caller="interactive" data-route="gpt/" data-retry="true""#,
        r#"data-caller="batch-job" data-route="gpt/" data-retry="false""#,
        "azure (gpt-4.1)",
        // Success as callers see it, per route.
        r#"data-route="solo/" data-success="bad""#,
        "0 of 10 succeeded · 10 failed",
        r#"data-route="gpt/" data-success="ok""#,
        r#"data-route="mini/" data-success="ok""#,
        r#"<tr data-route="solo/" class="failing">"#,
        // Each of openai's models' breakers: one open, one closed.
        r#"data-model="gpt-4.1" data-model-breaker="open""#,
        r#"data-model="gpt-4.1-mini" data-model-breaker="closed""#,
        // Why traffic fell back, in words.
        r#"data-reason="primary_circuit_open""#,
        "primary's circuit open",
        "previous target answered 5xx",
    ] {
        if !dom.contains(needle) {
            wrong.push(format!("not in the DOM: {needle}"));
        }
    }
    // A provider without a cap says so, not 0 / 4294967295.
    if dom.contains("4294967295") {
        wrong.push("u32::MAX shown as an in-flight cap".into());
    }
    let flaky_row = dom
        .split_once(r#"data-provider="flaky""#)
        .and_then(|(_, rest)| rest.split_once("</tr>"))
        .map_or("", |(row, _)| row);
    if !flaky_row.contains("uncapped") {
        wrong.push(format!(
            "flaky's in-flight cap is not 'uncapped': {flaky_row}"
        ));
    }
    wrong
}

/// What a person sees first, and in which colour, where the rendered page
/// differs: the success tiles above the providers, red for the failing
/// route and green for a healthy one, and the failing route's row.
fn colour_misses(probe: &[serde_json::Value], json: &str) -> Vec<String> {
    let mut wrong: Vec<String> = Vec::new();
    match (
        seen(probe, "tile solo/"),
        seen(probe, "tile gpt/"),
        seen(probe, "providers"),
    ) {
        (Some(solo), Some(gpt), Some(providers)) => {
            if !red(solo.bg) {
                wrong.push(format!(
                    "the failing route's tile is not red: {:?}",
                    solo.bg
                ));
            }
            if solo.color != (255, 255, 255) {
                wrong.push(format!(
                    "the failing tile's text is not white: {:?}",
                    solo.color
                ));
            }
            if !green(gpt.bg) {
                wrong.push(format!(
                    "the healthy route's tile is not green: {:?}",
                    gpt.bg
                ));
            }
            if solo.top >= providers.top || gpt.top >= providers.top {
                wrong.push("the success tiles are not above the providers".into());
            }
        }
        _ => wrong.push(format!("no success tiles rendered: {json}")),
    }
    match (seen(probe, "attempts solo/"), seen(probe, "row solo/")) {
        (Some(attempts), Some(row)) => {
            if !red(attempts.color) {
                wrong.push(format!(
                    "a failing route's attempts per request (0.40) is not red: {:?}",
                    attempts.color
                ));
            }
            if !(row.bg.0 > row.bg.1 && row.bg.0 > row.bg.2) {
                wrong.push(format!(
                    "the failing route's row is not tinted red: {:?}",
                    row.bg
                ));
            }
        }
        _ => wrong.push(format!("no routes rendered: {json}")),
    }
    wrong
}
