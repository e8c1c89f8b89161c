"""`levee_client`, the caller's last resort, with the official OpenAI and
Anthropic SDKs against two real `levee serve` replicas, each in front of its
own `levee mock`.

The oracles: each replica's `levee_requests_total` and each mock's
`requests_total`. "Not retried on the second replica" means replica B and its
mock counted nothing.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import anthropic
import levee_client
import openai
import pytest
from conftest import DEFAULT_ROUTE, Gateway, Mock

MESSAGES = [{"role": "user", "content": "Say hello."}]
ANSWER_WITHIN = 0.5  # seconds: one refused connect plus one normal call
CALLS = 5


class Replica:
    def __init__(self, workdir, name: str):
        self.mock = Mock(workdir, name=f"mock-{name}")
        try:
            self.gw = Gateway(workdir, self.mock, DEFAULT_ROUTE, name=f"gateway-{name}")
        except BaseException:
            self.mock.process.stop()
            raise
        self.url = self.gw.url

    def requests(self) -> tuple[float, int]:
        """(logical requests the gateway answered, requests its mock received)."""
        return self.gw.requests(), self.mock.stats()["requests_total"]

    def stop(self) -> None:
        self.gw.process.stop()
        self.mock.process.stop()


@pytest.fixture
def replicas(workdir):
    started: list[Replica] = []
    try:
        started.append(Replica(workdir, "a"))
        started.append(Replica(workdir, "b"))
        yield started
    finally:
        for r in started:
            r.stop()


def closed_port_url() -> str:
    """A 127.0.0.1 URL nothing listens on (connect is refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def openai_call(replica_urls, **client_kw):
    c = openai.OpenAI(
        base_url=f"{replica_urls[0]}/v1",
        api_key="test",
        http_client=levee_client.failover_client(replica_urls),
        **client_kw,
    )
    r = c.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert r.object == "chat.completion" and r.choices[0].message.content


def anthropic_call(replica_urls, **client_kw):
    c = anthropic.Anthropic(
        base_url=replica_urls[0],
        api_key="test",
        http_client=levee_client.failover_client(replica_urls),
        **client_kw,
    )
    r = c.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    assert r.type == "message" and r.content[0].text


SDK_CALLS = pytest.mark.parametrize("call", [openai_call, anthropic_call], ids=["openai", "anthropic"])


def timed_calls(call, urls) -> list[float]:
    """CALLS calls, each through a fresh client (so each one meets the dead
    first replica); returns each call's seconds."""
    took = []
    for _ in range(CALLS):
        t = time.monotonic()
        call(urls)
        took.append(time.monotonic() - t)
    return took


@SDK_CALLS
def test_first_replica_stopped_every_call_is_answered_by_the_second(call, replicas):
    a, b = replicas
    a.gw.process.stop()  # its port now refuses connections
    took = timed_calls(call, [a.url, b.url])
    assert max(took) < ANSWER_WITHIN, f"per-call seconds {took}"
    assert b.requests() == (CALLS, CALLS)


@SDK_CALLS
def test_first_replica_a_closed_port_every_call_is_answered_by_the_second(call, replicas):
    _, b = replicas
    took = timed_calls(call, [closed_port_url(), b.url])
    assert max(took) < ANSWER_WITHIN, f"per-call seconds {took}"
    assert b.requests() == (CALLS, CALLS)


@SDK_CALLS
def test_a_503_from_the_first_replica_is_returned_and_not_sent_to_the_second(call, replicas):
    a, b = replicas
    a.mock.set_faults({"status": 503})
    with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as ei:
        call([a.url, b.url], max_retries=0)
    assert ei.value.status_code == 503
    assert a.gw.requests() == 1, "replica A answered it"
    assert b.requests() == (0, 0), "replica B and its provider saw nothing"


def test_a_shed_503_from_the_first_replica_is_not_sent_to_the_second(workdir, replicas):
    """Levee's own 503 (shed at the route's max_in_flight) is its decision."""
    a, b = replicas
    a.gw.process.stop()
    shed_route = DEFAULT_ROUTE + "    max_in_flight: 1\n"
    a.mock.set_faults({"latency": {"p50": "2s", "p99": "2s"}})
    shedding = Gateway(workdir, a.mock, shed_route, name="gateway-a-shedding")
    try:
        urls = [shedding.url, b.url]
        hold = threading.Thread(target=openai_call, args=(urls,), kwargs={"max_retries": 0})
        hold.start()
        deadline = time.monotonic() + 10
        while a.mock.stats()["in_flight"] < 1:
            assert time.monotonic() < deadline, "the first call never reached the mock"
            time.sleep(0.01)
        with pytest.raises(openai.APIStatusError) as ei:
            openai_call(urls, max_retries=0)
        hold.join(timeout=10)
        assert ei.value.status_code == 503
        assert ei.value.response.headers["x-levee-reason"] == "shed"
        assert b.requests() == (0, 0)
    finally:
        shedding.process.stop()


def test_a_shared_client_keeps_using_the_replica_that_answered(replicas):
    a, b = replicas
    urls = [a.url, b.url]
    c = openai.OpenAI(
        base_url=f"{a.url}/v1", api_key="test", http_client=levee_client.failover_client(urls)
    )
    c.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert (a.gw.requests(), b.gw.requests()) == (1, 0)
    a.gw.process.stop()
    for _ in range(CALLS):
        c.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert b.requests() == (CALLS, CALLS)


async def _async_calls(urls, calls: int) -> list[float]:
    took = []
    for i in range(calls):
        t = time.monotonic()
        if i % 2 == 0:
            c = openai.AsyncOpenAI(
                base_url=f"{urls[0]}/v1",
                api_key="test",
                http_client=levee_client.async_failover_client(urls),
            )
            r = await c.chat.completions.create(model="gpt-test", messages=MESSAGES)
            assert r.choices[0].message.content
        else:
            c = anthropic.AsyncAnthropic(
                base_url=urls[0],
                api_key="test",
                http_client=levee_client.async_failover_client(urls),
            )
            r = await c.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
            assert r.content[0].text
        await c.close()
        took.append(time.monotonic() - t)
    return took


def test_async_first_replica_stopped_every_call_is_answered_by_the_second(replicas):
    a, b = replicas
    a.gw.process.stop()
    took = asyncio.run(_async_calls([a.url, b.url], 2 * CALLS))
    assert max(took) < ANSWER_WITHIN, f"per-call seconds {took}"
    assert b.requests() == (2 * CALLS, 2 * CALLS)


def test_async_a_503_from_the_first_replica_is_not_sent_to_the_second(replicas):
    a, b = replicas
    a.mock.set_faults({"status": 503})

    async def call():
        c = openai.AsyncOpenAI(
            base_url=f"{a.url}/v1",
            api_key="test",
            max_retries=0,
            http_client=levee_client.async_failover_client([a.url, b.url]),
        )
        try:
            await c.chat.completions.create(model="gpt-test", messages=MESSAGES)
        finally:
            await c.close()

    with pytest.raises(openai.APIStatusError) as ei:
        asyncio.run(call())
    assert ei.value.status_code == 503
    assert b.requests() == (0, 0)


class HangUpServer:
    """Accepts connections, reads one request, closes without a byte back:
    a replica that died while the request was on its way."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                while len(body) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    body += chunk

    def close(self):
        self.sock.close()


def test_a_replica_that_hangs_up_before_answering_is_failed_over(replicas):
    _, b = replicas
    dead = HangUpServer()
    try:
        took = timed_calls(openai_call, [dead.url, b.url])
    finally:
        dead.close()
    assert dead.accepted == CALLS, "each call reached the hanging-up replica first"
    assert max(took) < ANSWER_WITHIN, f"per-call seconds {took}"
    assert b.requests() == (CALLS, CALLS)
