"""`levee_client`'s transports against a scripted inner transport: which
errors fail over, that the second attempt is the same request on the next
replica, and that there is never a third. No processes, no sockets."""

from __future__ import annotations

import asyncio

import pytest
from levee_client import AsyncFailoverTransport, FailoverTransport
from levee_client._transport import httpx

A, B = "http://10.0.0.1:8080", "http://10.0.0.2:9090"
NO_RESPONSE = "Server disconnected without sending a response."


class Scripted(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Answers by host: an exception to raise or a status to return; records
    every request it was handed (with its body)."""

    def __init__(self, **by_host):
        self.by_host = by_host
        self.seen: list[tuple[httpx.Request, bytes]] = []

    def _answer(self, request, body):
        self.seen.append((request, body))
        what = self.by_host[request.url.host.replace(".", "_")]
        if isinstance(what, Exception):
            raise what
        return httpx.Response(what, request=request)

    def handle_request(self, request):
        return self._answer(request, b"".join(request.stream))

    async def handle_async_request(self, request):
        body = b""
        async for chunk in request.stream:
            body += chunk
        return self._answer(request, body)


def send(transport, request):
    return transport.handle_request(request)


def asend(transport, request):
    return asyncio.run(transport.handle_async_request(request))


SYNC_ASYNC = pytest.mark.parametrize(
    "kind,run", [(FailoverTransport, send), (AsyncFailoverTransport, asend)], ids=["sync", "async"]
)


def post(url=A + "/v1/chat/completions?x=1"):
    return httpx.Request("POST", url, headers={"authorization": "Bearer k"}, content=b'{"m":1}')


@SYNC_ASYNC
@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"), httpx.RemoteProtocolError(NO_RESPONSE)],
    ids=["connect_error", "connect_timeout", "closed_before_any_byte"],
)
def test_no_response_fails_over_once_with_the_same_request(kind, run, error):
    inner = Scripted(**{"10_0_0_1": error, "10_0_0_2": 200})
    resp = run(kind([A, B], transport=inner), post())
    assert resp.status_code == 200
    assert len(inner.seen) == 2
    second, body = inner.seen[1]
    assert str(second.url) == B + "/v1/chat/completions?x=1"
    assert second.method == "POST" and body == b'{"m":1}'
    assert second.headers["authorization"] == "Bearer k"
    assert second.headers["host"] == "10.0.0.2:9090"


@SYNC_ASYNC
@pytest.mark.parametrize("status", [503, 500, 429])
def test_an_http_response_is_returned_as_is(kind, run, status):
    inner = Scripted(**{"10_0_0_1": status, "10_0_0_2": 200})
    assert run(kind([A, B], transport=inner), post()).status_code == status
    assert len(inner.seen) == 1


@SYNC_ASYNC
@pytest.mark.parametrize(
    "error",
    [
        httpx.ReadError("reset after the request was sent"),
        httpx.ReadTimeout("no answer in time"),
        httpx.RemoteProtocolError("illegal header line"),
    ],
    ids=["read_error", "read_timeout", "malformed_response"],
)
def test_errors_after_the_request_may_have_been_served_are_not_failed_over(kind, run, error):
    inner = Scripted(**{"10_0_0_1": error, "10_0_0_2": 200})
    with pytest.raises(type(error)):
        run(kind([A, B], transport=inner), post())
    assert len(inner.seen) == 1


@SYNC_ASYNC
def test_never_more_than_one_extra_attempt(kind, run):
    C = "http://10.0.0.3:8080"
    inner = Scripted(
        **{"10_0_0_1": httpx.ConnectError("a"), "10_0_0_2": httpx.ConnectError("b"), "10_0_0_3": 200}
    )
    with pytest.raises(httpx.ConnectError) as ei:
        run(kind([A, B, C], transport=inner), post())
    assert [r.url.host for r, _ in inner.seen] == ["10.0.0.1", "10.0.0.2"]
    assert str(ei.value.__cause__) == "a", "the first replica's error is kept as the cause"


@SYNC_ASYNC
def test_a_host_that_is_not_a_replica_is_left_alone(kind, run):
    inner = Scripted(**{"10_0_0_9": httpx.ConnectError("refused")})
    with pytest.raises(httpx.ConnectError):
        run(kind([A, B], transport=inner), post("http://10.0.0.9:8080/v1/x"))
    assert len(inner.seen) == 1


def test_a_streamed_body_is_not_sent_twice_after_a_hang_up():
    inner = Scripted(**{"10_0_0_1": httpx.RemoteProtocolError(NO_RESPONSE), "10_0_0_2": 200})
    request = httpx.Request("POST", A + "/v1/x", content=iter([b"part1", b"part2"]))
    with pytest.raises(httpx.RemoteProtocolError):
        FailoverTransport([A, B], transport=inner).handle_request(request)
    assert len(inner.seen) == 1


def test_the_replica_that_answered_is_tried_first_next_time():
    inner = Scripted(**{"10_0_0_1": httpx.ConnectError("down"), "10_0_0_2": 200})
    t = FailoverTransport([A, B], transport=inner)
    send(t, post())
    send(t, post())
    assert [r.url.host for r, _ in inner.seen] == ["10.0.0.1", "10.0.0.2", "10.0.0.2"]


@pytest.mark.parametrize(
    "bad", [[], "http://a:1", ["ftp://a:1"], ["http://a:1/v1"], ["http://a:1?x=1"]]
)
def test_replica_lists_that_cannot_work_are_refused(bad):
    with pytest.raises(ValueError):
        FailoverTransport(bad)


@SYNC_ASYNC
def test_the_deadline_sent_to_the_second_replica_loses_the_time_the_first_took(kind, run):
    inner = Scripted(**{"10_0_0_1": httpx.ConnectTimeout("slow"), "10_0_0_2": 200})
    t = kind([A, B], transport=inner)
    now = iter([100.0, 100.75])  # the connect timed out after 750 ms
    t._clock = lambda: next(now)
    request = post()
    request.headers["x-timeout-ms"] = "2000"
    run(t, request)
    assert inner.seen[0][0].headers["x-timeout-ms"] == "2000"
    assert inner.seen[1][0].headers["x-timeout-ms"] == "1250"
