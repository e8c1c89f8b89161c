//! The connection served end to end over an in-memory pipe: requests in
//! order, bodies arriving later or chunked, heads refused, answers framed
//! by length, chunked or the close, and the connection's life.

use super::*;
use crate::http::respond::full;
use http::header::{self, HeaderValue};
use http::StatusCode;
use http_body::Frame;
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const WATCHDOG: Duration = Duration::from_secs(20);

const SETTINGS: Settings = Settings {
    header_read_timeout: Duration::from_secs(10),
    max_header_bytes: 8192,
};

/// A connection served by `svc` over an in-memory pipe of `pipe` bytes.
fn start<S, F>(pipe: usize, svc: S) -> (DuplexStream, JoinHandle<()>, watch::Sender<bool>)
where
    S: FnMut(Request<FrontBody>) -> F + Send + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let (client, server) = tokio::io::duplex(pipe);
    let (closing, watching) = watch::channel(false);
    let task = tokio::spawn(serve(server, SETTINGS, svc, watching, None));
    (client, task, closing)
}

/// Echoes the request body, with how many bytes it was in a header.
fn echo() -> impl FnMut(Request<FrontBody>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>
{
    |req: Request<FrontBody>| {
        Box::pin(async move {
            let body = req.into_body().collect().await.map(|c| c.to_bytes());
            match body {
                Ok(b) => {
                    let mut r = Response::new(full(b.clone()));
                    r.headers_mut()
                        .insert("x-len", HeaderValue::from(b.len() as u64));
                    r
                }
                Err(e) => {
                    let mut r = Response::new(full(e.to_string()));
                    *r.status_mut() = StatusCode::BAD_REQUEST;
                    r
                }
            }
        })
    }
}

#[tokio::test]
async fn an_answer_with_its_own_date_gets_no_second_one() {
    let dated = answering_with("x", header::DATE, "Tue, 01 Dec 2026 00:00:00 GMT");
    let got = exchange(
        64 * 1024,
        dated,
        b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&got);
    assert_eq!(text.matches("\r\ndate: ").count(), 1, "{text}");
    assert!(
        text.contains("\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\n"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_head_of_a_hundred_fields_reaches_the_gateway_whole() {
    let fields = |req: Request<FrontBody>| {
        let names: Vec<String> = req
            .headers()
            .iter()
            .map(|(n, v)| format!("{n}={}", v.to_str().unwrap_or("?")))
            .collect();
        async move { Response::new(full(names.join(","))) }
    };
    // `host`, ninety-eight and `connection`: the most a head may have
    // (named as fields the gateway reads: the others, `host` among them,
    // are left out of the map).
    let head: String = (0..98).map(|i| format!("x-levee-f{i}: v{i}\r\n")).collect();
    let request = format!("GET / HTTP/1.1\r\nhost: x\r\n{head}connection: close\r\n\r\n");
    let got = exchange(64 * 1024, fields, request.as_bytes()).await;
    let text = String::from_utf8_lossy(&got);
    let want: Vec<String> = (0..98).map(|i| format!("x-levee-f{i}=v{i}")).collect();
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.ends_with(&want.join(",")), "{text}");
}

async fn watchdog<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(WATCHDOG, f)
        .await
        .expect("watchdog: the connection stalled")
}

/// A service answering `body` with the field `name: value` set.
fn answering_with(
    body: &'static str,
    name: header::HeaderName,
    value: &'static str,
) -> impl FnMut(Request<FrontBody>) -> std::future::Ready<Response<Body>> + Send + 'static {
    move |_req| {
        let mut r = Response::new(full(body));
        r.headers_mut()
            .insert(name.clone(), HeaderValue::from_static(value));
        std::future::ready(r)
    }
}

/// Writes `request` on a fresh connection to `svc`, reads until the
/// connection closes and waits for its task: all the caller received.
async fn exchange<S, F>(pipe: usize, svc: S, request: &[u8]) -> Vec<u8>
where
    S: FnMut(Request<FrontBody>) -> F + Send + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let (mut c, task, _closing) = start(pipe, svc);
    c.write_all(request).await.unwrap();
    let mut got = Vec::new();
    watchdog(c.read_to_end(&mut got)).await.unwrap();
    drop(c);
    watchdog(task).await.unwrap();
    got
}

/// Reads until `n` answers' heads and bodies (content-length framed)
/// or the close; returns the text.
async fn read_answers(c: &mut DuplexStream, n: usize) -> String {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if complete_answers(&text) >= n {
            return text;
        }
        let k = watchdog(c.read(&mut chunk)).await.expect("read");
        if k == 0 {
            return text;
        }
        got.extend_from_slice(&chunk[..k]);
    }
}

fn complete_answers(mut text: &str) -> usize {
    let mut n = 0;
    while let Some(end) = text.find("\r\n\r\n") {
        let head = &text[..end];
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if text.len() < end + 4 + len {
            break;
        }
        text = &text[end + 4 + len..];
        n += 1;
    }
    n
}

#[tokio::test]
async fn requests_on_one_connection_are_answered_in_order_with_their_bodies() {
    let (mut c, task, _closing) = start(64 * 1024, echo());
    c.write_all(b"POST /a HTTP/1.1\r\nhost: l\r\ncontent-length: 5\r\n\r\nhello")
        .await
        .unwrap();
    let first = read_answers(&mut c, 1).await;
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(first.contains("\r\ndate: "), "{first}");
    assert!(first.ends_with("content-length: 5\r\n\r\nhello"), "{first}");
    // Two pipelined requests in one write: two answers, in order.
    c.write_all(b"POST /b HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nonePOST /c HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\ntwo")
        .await
        .unwrap();
    let two = read_answers(&mut c, 2).await;
    let one_at = two.find("\r\n\r\none").expect("first answer");
    let two_at = two.find("\r\n\r\ntwo").expect("second answer");
    assert!(one_at < two_at, "{two}");
    assert!(!two.contains("connection: close"), "{two}");
    drop(c);
    watchdog(task).await.unwrap();
}

#[tokio::test]
async fn a_body_that_arrives_later_and_chunked_is_read_whole() {
    let (mut c, task, _closing) = start(64 * 1024, echo());
    c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        .await
        .unwrap();
    tokio::task::yield_now().await;
    c.write_all(b"4;ext=1\r\ndefg\r\n0\r\ntrailer: x\r\n\r\n")
        .await
        .unwrap();
    let got = read_answers(&mut c, 1).await;
    assert!(got.contains("x-len: 7\r\n"), "{got}");
    assert!(got.ends_with("\r\n\r\nabcdefg"), "{got}");
    // A length whose bytes come in pieces.
    c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 6\r\n\r\nab")
        .await
        .unwrap();
    tokio::task::yield_now().await;
    c.write_all(b"cdef").await.unwrap();
    let got = read_answers(&mut c, 1).await;
    assert!(got.ends_with("\r\n\r\nabcdef"), "{got}");
    drop(c);
    watchdog(task).await.unwrap();
}

#[tokio::test]
async fn a_trailer_section_ended_by_a_blank_looking_line_smuggles_no_second_request() {
    // A line of one space after the last chunk is not the empty line
    // that ends the trailers: taken as one, the GET after it was served
    // as a second request on the connection (nginx gives one answer).
    let got = exchange(
        64 * 1024,
        echo(),
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"model\":\"demo\"}\r\n0\r\n \r\nGET /v1/models HTTP/1.1\r\nhost: x\r\nHost: x\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&got);
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
}

#[tokio::test]
async fn transfer_encoding_is_one_field_saying_exactly_chunked() {
    let body = "\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /x HTTP/1.1\r\nhost: x\r\n\r\n";
    for (te, status) in [
        (
            "transfer-encoding: chunked\r\ntransfer-encoding: chunked",
            "400",
        ),
        (
            "transfer-encoding: chunked\r\ntransfer-encoding: gzip",
            "400",
        ),
        ("transfer-encoding: identity, chunked", "501"),
        ("transfer-encoding: gzip, chunked", "501"),
        ("transfer-encoding: chunked, gzip", "400"),
    ] {
        let request = format!("POST /a HTTP/1.1\r\nhost: x\r\n{te}{body}");
        let got = exchange(64 * 1024, echo(), request.as_bytes()).await;
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status}")),
            "{te}: {text}"
        );
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{te}: {text}");
    }
    // One field, any case, surrounding whitespace: read.
    let request = format!(
        "POST /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\ntransfer-encoding:  Chunked {body}"
    );
    let got = exchange(64 * 1024, echo(), request.as_bytes()).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

#[tokio::test]
async fn fields_the_callers_connection_field_names_never_reach_the_gateway() {
    let svc = |req: Request<FrontBody>| {
        let saw = |name: &str| {
            if req.headers().contains_key(name) {
                "yes"
            } else {
                "no"
            }
        };
        let mut r = Response::new(full(""));
        for (name, out) in [("user-agent", "x-saw-ua"), ("accept", "x-saw-accept")] {
            r.headers_mut()
                .insert(out, HeaderValue::from_static(saw(name)));
        }
        std::future::ready(r)
    };
    let got = exchange(
        64 * 1024,
        svc,
        b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close, User-Agent\r\nuser-agent: x\r\naccept: y\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("x-saw-ua: no\r\n"), "{text}");
    assert!(text.contains("x-saw-accept: yes\r\n"), "{text}");
}

#[tokio::test]
async fn continue_is_sent_when_the_body_is_read_and_not_when_it_is_refused_unread() {
    // The body is read: `100 Continue`, then the answer.
    let (mut c, _task, _closing) = start(64 * 1024, echo());
    c.write_all(
        b"POST /a HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = [0u8; 25];
    watchdog(c.read_exact(&mut head)).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 100 Continue\r\n\r\n");
    c.write_all(b"ok").await.unwrap();
    let got = read_answers(&mut c, 1).await;
    assert!(got.ends_with("\r\n\r\nok"), "{got}");

    // Refused before its body is read: no `100`, and the connection
    // closes after the answer (the body's bytes would be read as the
    // next request).
    let refuse = |_req: Request<FrontBody>| async {
        let mut r = Response::new(full("no"));
        *r.status_mut() = StatusCode::UNAUTHORIZED;
        r
    };
    let (mut c, task, _closing) = start(64 * 1024, refuse);
    c.write_all(
        b"POST /a HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n",
    )
    .await
    .unwrap();
    let got = read_answers(&mut c, 1).await;
    assert!(got.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{got}");
    assert!(got.contains("connection: close\r\n"), "{got}");
    drop(c);
    watchdog(task).await.unwrap();
}

#[tokio::test]
async fn a_caller_still_sending_a_body_refused_unread_can_finish_and_read_the_answer() {
    let refuse = |_req: Request<FrontBody>| async {
        let mut r = Response::new(full("too large"));
        *r.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
        r
    };
    // A pipe far smaller than the body: without the linger the server
    // closes while the body is still being written, and the write fails.
    let (c, task, _closing) = start(16 * 1024, refuse);
    let (mut rd, mut wr) = tokio::io::split(c);
    let body = vec![b' '; 512 * 1024];
    let writer = tokio::spawn(async move {
        wr.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 524288\r\n\r\n")
            .await?;
        wr.write_all(&body).await?;
        wr.shutdown().await
    });
    let mut got = Vec::new();
    watchdog(rd.read_to_end(&mut got)).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
        "{text}"
    );
    assert!(text.ends_with("too large"), "{text}");
    watchdog(writer)
        .await
        .unwrap()
        .expect("the whole body was taken");
    watchdog(task).await.unwrap();
}

#[tokio::test]
async fn after_a_body_framed_wrong_what_follows_is_not_served_as_a_request() {
    // Three bytes of chunk data, then no CRLF but a request: the body is
    // broken, and the bytes after it must not be read as a request
    // (that is how a request is smuggled past the gateway).
    let (mut c, task, _closing) = start(64 * 1024, echo());
    c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc")
        .await
        .unwrap();
    tokio::task::yield_now().await;
    c.write_all(b"GET /smuggled HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    let got = read_answers(&mut c, 2).await;
    assert_eq!(got.matches("HTTP/1.1 ").count(), 1, "{got}");
    assert!(got.starts_with("HTTP/1.1 400 "), "{got}");
    assert!(got.contains("connection: close\r\n"), "{got}");
    drop(c);
    watchdog(task).await.unwrap();
}

/// A body fed through a channel: an answer of unknown length.
struct Feeder(mpsc::Receiver<Bytes>);

impl http_body::Body for Feeder {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|d| d.map(|d| Ok(Frame::data(d))))
    }
}

fn streaming(
    rx: Arc<Mutex<Option<mpsc::Receiver<Bytes>>>>,
) -> impl FnMut(Request<FrontBody>) -> std::future::Ready<Response<Body>> {
    move |_req| {
        let rx = rx.lock().unwrap().take().expect("one request");
        std::future::ready(Response::new(Body::new(Feeder(rx))))
    }
}

#[tokio::test]
async fn an_answer_of_unknown_length_is_chunked_and_each_piece_sent_as_it_comes() {
    let (tx, rx) = mpsc::channel(4);
    let (mut c, task, _closing) = start(64 * 1024, streaming(Arc::new(Mutex::new(Some(rx)))));
    c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    tx.send(Bytes::from_static(b"data: one\n\n")).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("data: one") {
        let n = watchdog(c.read(&mut chunk)).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nb\r\ndata: one\n\n\r\n"), "{text}");
    drop(tx);
    let mut rest = [0u8; 5];
    watchdog(c.read_exact(&mut rest)).await.unwrap();
    assert_eq!(&rest, b"0\r\n\r\n");
    drop(c);
    watchdog(task).await.unwrap();
}

#[tokio::test]
async fn an_http_1_0_caller_gets_the_answer_framed_by_the_close() {
    let (tx, rx) = mpsc::channel(4);
    let (mut c, task, _closing) = start(64 * 1024, streaming(Arc::new(Mutex::new(Some(rx)))));
    c.write_all(b"POST /a HTTP/1.0\r\n\r\n").await.unwrap();
    tx.send(Bytes::from_static(b"abc")).await.unwrap();
    drop(tx);
    let mut got = Vec::new();
    watchdog(c.read_to_end(&mut got)).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("connection: close\r\n"), "{text}");
    assert!(!text.contains("chunked"), "{text}");
    assert!(text.ends_with("\r\n\r\nabc"), "{text}");
    watchdog(task).await.unwrap();
}

/// Drops to `true` when the request's future is dropped.
struct Dropped(Arc<AtomicBool>);
impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_caller_that_leaves_cancels_its_request_in_flight() {
    let dropped = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&dropped);
    let svc = move |_req: Request<FrontBody>| {
        let guard = Dropped(Arc::clone(&seen));
        async move {
            std::future::pending::<()>().await;
            drop(guard);
            Response::new(full(""))
        }
    };
    let (mut c, task, _closing) = start(64 * 1024, svc);
    c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi")
        .await
        .unwrap();
    tokio::task::yield_now().await;
    assert!(!dropped.load(Ordering::SeqCst));
    drop(c);
    watchdog(task).await.unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the request kept running");
}

#[tokio::test]
async fn misframed_and_oversized_heads_are_refused_and_closed() {
    let cases: [(&str, Vec<u8>, &str); 6] = [
        (
            "length and chunked",
            b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            "400",
        ),
        (
            "two lengths",
            b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd".to_vec(),
            "400",
        ),
        (
            "a coding that is not chunked last",
            b"POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked, gzip\r\n\r\n".to_vec(),
            "400",
        ),
        ("not HTTP", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(), "400"),
        (
            "101 fields",
            [
                &b"GET / HTTP/1.1\r\nhost: x\r\n"[..],
                &b"x: y\r\n".repeat(101),
                &b"\r\n"[..],
            ]
            .concat(),
            "431",
        ),
        (
            "a head over the limit",
            [&b"GET / HTTP/1.1\r\nhost: x\r\nx: "[..], &b"y".repeat(20_000)].concat(),
            "431",
        ),
    ];
    for (what, raw, status) in cases {
        let got = exchange(64 * 1024, echo(), &raw).await;
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.starts_with(&format!("HTTP/1.1 {status} ")),
            "{what}: {text}"
        );
        assert!(text.contains("connection: close"), "{what}: {text}");
        // The label of its status in Levee's table, in the header and body.
        let label = if status == "431" {
            "headers_too_large"
        } else {
            "bad_request"
        };
        assert!(
            text.contains(&format!("x-levee-reason: {label}\r\n")),
            "{what}: {text}"
        );
        assert!(text.contains(&format!("\"{label}\"")), "{what}: {text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_head_not_whole_in_time_closes_the_connection_and_so_does_idleness() {
    let (mut c, task, _closing) = start(64 * 1024, echo());
    c.write_all(b"POST /a HTTP/1.1\r\nhost: ").await.unwrap();
    let clock = crate::clock::Clock::new();
    let started = clock.now();
    let mut got = Vec::new();
    watchdog(c.read_to_end(&mut got)).await.unwrap();
    assert_eq!(clock.since(started), SETTINGS.header_read_timeout);
    assert!(got.is_empty());
    watchdog(task).await.unwrap();

    let (mut c, task, _closing) = start(64 * 1024, echo());
    c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    read_answers(&mut c, 1).await;
    let idle = clock.now();
    let mut rest = Vec::new();
    watchdog(c.read_to_end(&mut rest)).await.unwrap();
    assert_eq!(clock.since(idle), SETTINGS.header_read_timeout);
    watchdog(task).await.unwrap();
}

/// One request on `c` and its answer.
async fn one_exchange(c: &mut DuplexStream) {
    c.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    read_answers(c, 1).await;
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_counts_from_the_last_answer_not_the_first() {
    let (mut c, task, _closing) = start(64 * 1024, echo());
    let clock = crate::clock::Clock::new();
    one_exchange(&mut c).await;
    // The second request comes 7 s later: the connection's timer, armed
    // for 10 s after the first answer, fires 3 s into this idleness.
    tokio::time::sleep(Duration::from_secs(7)).await;
    one_exchange(&mut c).await;
    let idle = clock.now();
    let mut rest = Vec::new();
    watchdog(c.read_to_end(&mut rest)).await.unwrap();
    assert_eq!(clock.since(idle), SETTINGS.header_read_timeout);
    watchdog(task).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn closing_ends_a_connection_idle_after_several_requests_at_once() {
    let (mut c, task, closing) = start(64 * 1024, echo());
    let clock = crate::clock::Clock::new();
    // Waiting for its first head before it comes, then between requests.
    tokio::task::yield_now().await;
    for _ in 0..3 {
        one_exchange(&mut c).await;
        tokio::task::yield_now().await;
    }
    let asked = clock.now();
    closing.send(true).unwrap();
    let mut rest = Vec::new();
    watchdog(c.read_to_end(&mut rest)).await.unwrap();
    assert!(rest.is_empty());
    // At once, not at the header read timeout.
    assert_eq!(clock.since(asked), Duration::ZERO);
    watchdog(task).await.unwrap();
}

#[tokio::test]
async fn closing_ends_an_idle_connection_at_once_and_a_busy_one_after_its_answer() {
    let (mut idle, idle_task, closing) = start(64 * 1024, echo());
    idle.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    read_answers(&mut idle, 1).await;

    let release = Arc::new(tokio::sync::Notify::new());
    let wait = Arc::clone(&release);
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let svc = move |_req: Request<FrontBody>| {
        let wait = Arc::clone(&wait);
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            wait.notified().await;
            Response::new(full("done"))
        }
    };
    let (mut busy, busy_task, busy_closing) = start(64 * 1024, svc);
    busy.write_all(b"POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    closing.send(true).unwrap();
    busy_closing.send(true).unwrap();
    let mut rest = Vec::new();
    watchdog(idle.read_to_end(&mut rest)).await.unwrap();
    assert!(rest.is_empty());
    watchdog(idle_task).await.unwrap();
    assert!(!busy_task.is_finished());
    release.notify_one();
    let mut got = Vec::new();
    watchdog(busy.read_to_end(&mut got)).await.unwrap();
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("connection: close\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\ndone"), "{text}");
    watchdog(busy_task).await.unwrap();
}

#[tokio::test]
async fn a_large_answer_arrives_whole_through_a_small_pipe() {
    let big = Bytes::from(
        (0..200_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let sent = big.clone();
    let svc = move |_req: Request<FrontBody>| std::future::ready(Response::new(full(sent.clone())));
    let got = exchange(
        1024,
        svc,
        b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(String::from_utf8_lossy(&got[..end]).contains("content-length: 200000\r\n"));
    assert!(got[end..] == big[..], "the body differs");
}

#[tokio::test]
async fn an_answer_longer_than_it_declared_ends_the_connection() {
    let svc = answering_with("too long", header::CONTENT_LENGTH, "3");
    let got = exchange(
        64 * 1024,
        svc,
        b"GET / HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.matches("HTTP/1.1 200").count() <= 1, "{text}");
    assert!(!text.contains("too long"), "{text}");
}

#[tokio::test]
async fn a_head_request_gets_the_length_and_no_body_and_the_connection_goes_on() {
    let svc = |_req: Request<FrontBody>| std::future::ready(Response::new(full("twelve bytes")));
    let request =
        b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\nGET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    let got = exchange(64 * 1024, svc, request).await;
    let text = String::from_utf8_lossy(&got);
    let (head, get) = text.split_once("\r\n\r\n").expect("the HEAD answer");
    assert!(head.contains("content-length: 12"), "{text}");
    assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(get.ends_with("\r\n\r\ntwelve bytes"), "{text}");
}
