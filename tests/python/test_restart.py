"""Restart without loss: a second `levee serve --take-over` listens on the same
address while the first runs (SO_REUSEPORT), the first gets SIGTERM, takes what is
queued on its listener, drains and exits. Callers looping across the hand-over
see no refused or failed request; the one exception left is a reset of a TCP
handshake in progress at the instant the old listener closes, which Linux
avoids only with net.ipv4.tcp_migrate_req=1 (checked below).

Oracles: each caller's own count of failures; the mock's `requests_total`
(every successful call reached the provider exactly once); each gateway's
`levee_requests_total` (both served part of the loop).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import levee_client
from conftest import DEFAULT_ROUTE, Gateway

BODY = json.dumps(
    {"model": "gpt-test", "messages": [{"role": "user", "content": "Say hello."}]}
).encode()
CONNECTION_LOOPS = 4  # callers opening a new connection for every request
WATCHDOG = 60.0  # seconds; a hand-over takes well under one


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Loop(threading.Thread):
    """Calls the gateway until stopped; counts successes and keeps failures."""

    def __init__(self, name: str, call, handover):
        super().__init__(daemon=True)
        self.name = name
        self.call = call
        self.handover = handover  # which hand-over is under way
        self.ok = 0
        self.failures: list[str] = []
        self.failed_in: list[int] = []  # the hand-over each failure met
        self.slowest = 0.0
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set():
            t = time.monotonic()
            try:
                self.call()
                self.ok += 1
                self.slowest = max(self.slowest, time.monotonic() - t)
            except Exception as e:  # every kind of failure is the finding
                cause = f" (after {type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ else ""
                self.failures.append(f"{self.name}: {type(e).__name__}: {e}{cause}")
                self.failed_in.append(self.handover())


def new_connection_call(port: int):
    def call():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("POST", "/v1/chat/completions", BODY, {"content-type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"status {resp.status}")
        finally:
            conn.close()

    return call


def keep_alive_call(url: str):
    # One address, listed twice: a keep-alive connection the old process
    # closes just as a request goes out on it is retried once on a new
    # connection, which the kernel gives to a process still listening.
    client = levee_client.failover_client([url, url])

    def call():
        resp = client.post(url + "/v1/chat/completions", content=BODY,
                           headers={"content-type": "application/json"})
        if resp.status_code != 200:
            raise RuntimeError(f"status {resp.status_code}")

    return call


def kernel_migrates_handshakes() -> bool:
    try:
        with open("/proc/sys/net/ipv4/tcp_migrate_req") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def wait_until(what: str, cond, deadline: float):
    while not cond():
        assert time.monotonic() < deadline, f"watchdog: {what}"
        time.sleep(0.01)


HANDOVERS = 6  # old -> new, six times over
CALLS_BETWEEN = 100


def test_a_second_gateway_takes_over_the_address_and_no_caller_sees_a_failure(workdir, mock):
    deadline = time.monotonic() + WATCHDOG
    port = free_port()
    listen = f"127.0.0.1:{port}"
    running = [Gateway(workdir, mock, DEFAULT_ROUTE, name="gateway-0", listen=listen)]
    stopped: list[Gateway] = []
    handover = lambda: len(stopped)  # noqa: E731
    loops = [
        Loop(f"new-connection-{i}", new_connection_call(port), handover)
        for i in range(CONNECTION_LOOPS)
    ]
    loops.append(Loop("keep-alive", keep_alive_call(f"http://{listen}"), handover))
    calls = lambda: sum(loop.ok for loop in loops)  # noqa: E731
    try:
        for loop in loops:
            loop.start()
        wait_until("calls through the first gateway", lambda: calls() >= CALLS_BETWEEN, deadline)
        for gen in range(1, HANDOVERS + 1):
            old = running[-1]
            new = Gateway(
                workdir, mock, DEFAULT_ROUTE, name=f"gateway-{gen}", listen=listen, extra_args=("--take-over",)
            )
            running.append(new)
            assert new.addr == listen
            wait_until("the new gateway sharing the address", lambda: new.requests() >= 20, deadline)
            old.process.proc.terminate()  # SIGTERM
            old.process.proc.wait(timeout=WATCHDOG)
            assert old.process.proc.returncode == 0, old.process.log()
            stopped.append(running.pop(0))
            after_old = calls()
            wait_until(
                "calls after the old gateway exited",
                lambda: calls() >= after_old + CALLS_BETWEEN,
                deadline,
            )
    finally:
        for loop in loops:
            loop.stopping.set()
        for loop in loops:
            loop.join(timeout=15)
        for gw in running + stopped:
            gw.process.stop()

    failures = [f for loop in loops for f in loop.failures]
    # A handshake reset shows up two ways: a new connection's own request, or
    # the keep-alive caller's one retry, which goes out on a new connection
    # and so can meet the same instant (both its tries then read a reset).
    # Every caller connecting at that instant meets it: CI once saw a
    # new-connection caller and the keep-alive caller both reset in the same
    # hand-over. What is counted is the hand-overs that reset any.
    def is_reset(f: str) -> bool:
        return (f.startswith("new-connection") and "ConnectionResetError" in f) or (
            f.startswith("keep-alive") and f.count("Connection reset by peer") == 2
        )

    resets = [f for f in failures if is_reset(f)]
    resetting = {h for loop in loops for f, h in zip(loop.failures, loop.failed_in) if is_reset(f)}
    if kernel_migrates_handshakes():
        assert failures == [], f"{len(failures)} failed of {calls() + len(failures)}: {failures[:5]}"
    else:
        # Without net.ipv4.tcp_migrate_req, Linux resets a handshake still in
        # progress on the old listener at the instant it closes (measured: about
        # one in 100 hand-overs at ~1,200 new connections/s). Nothing else.
        others = [f for f in failures if f not in resets]
        assert others == [], f"{len(others)} failed of {calls() + len(failures)}: {others[:5]}"
        assert len(resetting) <= 1, f"resets in {len(resetting)} of {HANDOVERS} hand-overs: {resets}"
    assert mock.stats()["requests_total"] == calls(), "every answered call reached the provider once"
    taken = sum(
        json.loads(line).get("connections", 0)
        for gw in stopped
        for line in gw.process.log().splitlines()
        if "took the connections" in line
    )
    slowest = max(loop.slowest for loop in loops)
    print(
        f"hand-over x{HANDOVERS}: {calls()} calls, {len(failures)} failures, {taken} taken from the queue, "
        f"slowest call {slowest * 1000:.0f} ms"
    )
