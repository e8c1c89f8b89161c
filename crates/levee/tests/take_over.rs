//! The real binary, twice on one address: a second `levee serve` is refused
//! (it used to share the port through SO_REUSEPORT and take half the
//! connections without a word) unless `--take-over` asks for a hand-over.
#![allow(clippy::disallowed_methods)] // black-box timing of real processes

mod kit;
use kit::{free_port, http, wait_for, Proc, BIN};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const WATCHDOG: Duration = Duration::from_secs(20);

const CHAT: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;

/// `levee serve` (the built-in mock provider, no config) with `extra` flags.
fn serve(listen: &str, admin: &str, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["serve", "--workers", "1", "--log-format", "json"])
        .args(["--listen", listen, "--admin", admin])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start levee serve")
}

/// Reads `child`'s stderr until its "listening" line, on a thread (a
/// watchdog bounds the wait); then drains the rest so the child never
/// blocks on a full pipe.
fn wait_listening(child: &mut Child) -> String {
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines();
        for line in lines.by_ref().map_while(Result::ok) {
            if line.contains("levee gateway listening") {
                let _ = tx.send(line);
                break;
            }
        }
        for _ in lines {}
    });
    rx.recv_timeout(WATCHDOG)
        .expect("watchdog: the gateway did not print its listening line")
}

/// Waits (bounded) for `child` to exit; returns its exit code and stderr.
fn exit_of(child: Proc) -> (Option<i32>, String) {
    let mut child = child;
    let mut code = None;
    wait_for(WATCHDOG, "the second gateway exiting", || {
        code = child.0.try_wait().ok().flatten();
        code.is_some()
    });
    let mut err = String::new();
    if let Some(mut s) = child.0.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    (code.and_then(|c| c.code()), err)
}

#[test]
fn a_second_serve_on_a_held_address_is_refused_unless_it_takes_over() {
    let (port, admin1, admin2) = (free_port(), free_port(), free_port());
    let listen = format!("127.0.0.1:{port}");
    let admin1 = format!("127.0.0.1:{admin1}");
    let admin2 = format!("127.0.0.1:{admin2}");
    let mut first = Proc(serve(&listen, &admin1, &[]));
    wait_listening(&mut first.0);
    let first_pid = first.0.id();

    // The same listen address: refused, naming the holder and both ways on.
    let (code, err) = exit_of(Proc(serve(&listen, &admin2, &[])));
    assert_eq!(code, Some(1), "the second gateway did not exit 1: {err}");
    assert!(
        err.contains(&format!(
            "{listen} is served by another levee (pid {first_pid}); to hand over to this one, start it with --take-over; to run both, give this one another port"
        )),
        "{err}"
    );
    // Another listen address but the first one's admin address: refused too.
    let (code, err) = exit_of(Proc(serve("127.0.0.1:0", &admin1, &[])));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "admin address {admin1} is served by another levee (pid {first_pid})"
        )) && err.contains("--admin"),
        "{err}"
    );
    // The first kept serving, alone.
    for _ in 0..5 {
        let (status, body) = http(&listen, "POST", "/v1/chat/completions", CHAT).unwrap();
        assert_eq!(status, 200, "{body}");
    }
    assert!(
        first.0.try_wait().unwrap().is_none(),
        "the first gateway exited"
    );

    // --take-over: the second starts on the same address; with the first
    // gone, it answers there.
    let mut second = Proc(serve(&listen, &admin2, &["--take-over"]));
    let line = wait_listening(&mut second.0);
    assert!(line.contains(&format!("\"listen\":\"{listen}\"")), "{line}");
    assert!(
        first.0.try_wait().unwrap().is_none(),
        "the first gateway exited"
    );
    drop(first);
    let (status, body) = http(&listen, "POST", "/v1/chat/completions", CHAT).unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, _) = http(&admin2, "GET", "/healthz", "").unwrap();
    assert_eq!(status, 200);
}
