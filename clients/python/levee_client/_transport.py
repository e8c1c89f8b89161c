"""The failover transports (sync and async) and the client factories."""

from __future__ import annotations

import threading
import time
from typing import Any, Optional, Sequence, Tuple

try:  # the HTTP client the current official SDKs are built on
    import httpx2 as httpx
except ImportError:  # older SDKs use the original package, same API
    import httpx  # type: ignore[no-redef]

# httpcore's HTTP/1.1 connection says exactly this when the peer closed the
# connection before sending one byte of a response (a gateway that exited, or
# a keep-alive connection the server had already closed). Every other
# RemoteProtocolError means bytes did come back, so the replica answered.
_NO_RESPONSE_MESSAGE = "without sending a response"

# The official SDKs' own client defaults (connection pool and redirects), so
# that swapping in this client changes nothing but the failover.
_DEFAULT_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
_TRANSPORT_ARGS = ("limits", "verify", "cert", "http1", "http2", "retries", "local_address")

_Origin = Tuple[str, str, int]


def _origin(url: httpx.URL) -> _Origin:
    port = url.port or (443 if url.scheme == "https" else 80)
    return (url.scheme, url.host, port)


class _Replicas:
    """The replica origins in order, and which one to try first.

    After a failover the replica that answered becomes the first choice, so a
    replica that is down costs one failed connect per failover, not one per
    request; the next failover moves on again (a rolling restart of two
    replicas therefore never waits on the one being restarted).
    """

    def __init__(self, replicas: Sequence[str]):
        if isinstance(replicas, str) or not replicas:
            raise ValueError(
                "levee_client needs a list of replica base URLs, e.g. "
                "['http://10.0.0.1:8080', 'http://10.0.0.2:8080']"
            )
        self.origins = []
        for raw in replicas:
            url = httpx.URL(raw)
            if url.scheme not in ("http", "https") or not url.host:
                raise ValueError(f"replica {raw!r} is not an http(s) URL with a host")
            if url.path not in ("", "/") or url.query:
                raise ValueError(
                    f"replica {raw!r} has a path or query; give scheme://host:port only "
                    "and keep the path (e.g. /v1) in the SDK's base_url"
                )
            self.origins.append(_origin(url))
        self._first = 0
        self._lock = threading.Lock()

    def plan(self, url: httpx.URL) -> Optional[Tuple[int, Optional[int]]]:
        """(first, second) replica indexes for a request to `url`, or None
        when `url` is not on any replica (the request then goes as is)."""
        if _origin(url) not in self.origins:
            return None
        with self._lock:
            first = self._first
        second = (first + 1) % len(self.origins)
        return first, (second if second != first else None)

    def answered(self, index: int) -> None:
        with self._lock:
            self._first = index

    def retarget(self, request: httpx.Request, index: int, spent_s: float = 0.0) -> httpx.Request:
        """The same request (method, path, query, headers, body, timeouts)
        aimed at replica `index`; an `x-timeout-ms` deadline (milliseconds
        remaining) loses the `spent_s` seconds the failed attempt took."""
        scheme, host, port = self.origins[index]
        url = request.url.copy_with(scheme=scheme, host=host, port=port)
        if _origin(url) == _origin(request.url):
            return request
        headers = request.headers.copy()
        headers["host"] = url.netloc.decode("ascii")
        remaining = headers.get("x-timeout-ms", "").strip()
        if remaining.isdigit():
            headers["x-timeout-ms"] = str(max(0, int(remaining) - int(spent_s * 1000)))
        return httpx.Request(
            request.method,
            url,
            headers=headers,
            stream=request.stream,
            extensions=request.extensions,
        )


def _no_response(exc: Exception, request: httpx.Request) -> bool:
    """True when `exc` proves the replica sent nothing back, and the request
    can be sent again as it was."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return True  # never connected: not a byte of the body was read
    if isinstance(exc, httpx.RemoteProtocolError) and _NO_RESPONSE_MESSAGE in str(exc):
        # The body may have been sent; only a body held in memory can go again.
        return isinstance(request.stream, httpx.ByteStream)
    return False


class FailoverTransport(httpx.BaseTransport):
    """Sends each request to one replica; when that replica sent no response
    at all, sends it once, at once, to the next replica."""

    def __init__(
        self,
        replicas: Sequence[str],
        transport: Optional[httpx.BaseTransport] = None,
        **transport_kwargs: Any,
    ):
        self._replicas = _Replicas(replicas)
        self._clock = time.monotonic  # tests replace it
        transport_kwargs.setdefault("limits", _DEFAULT_LIMITS)
        self._inner = transport if transport is not None else httpx.HTTPTransport(**transport_kwargs)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        plan = self._replicas.plan(request.url)
        if plan is None:
            return self._inner.handle_request(request)
        first, second = plan
        started = self._clock()
        try:
            return self._inner.handle_request(self._replicas.retarget(request, first))
        except httpx.TransportError as exc:
            if second is None or not _no_response(exc, request):
                raise
            failed = exc
        try:
            retry = self._replicas.retarget(request, second, self._clock() - started)
            response = self._inner.handle_request(retry)
        except httpx.TransportError as exc:
            raise exc from failed
        self._replicas.answered(second)
        return response

    def close(self) -> None:
        self._inner.close()


class AsyncFailoverTransport(httpx.AsyncBaseTransport):
    """The asyncio twin of `FailoverTransport`, with the same rules."""

    def __init__(
        self,
        replicas: Sequence[str],
        transport: Optional[httpx.AsyncBaseTransport] = None,
        **transport_kwargs: Any,
    ):
        self._replicas = _Replicas(replicas)
        self._clock = time.monotonic  # tests replace it
        transport_kwargs.setdefault("limits", _DEFAULT_LIMITS)
        self._inner = (
            transport if transport is not None else httpx.AsyncHTTPTransport(**transport_kwargs)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        plan = self._replicas.plan(request.url)
        if plan is None:
            return await self._inner.handle_async_request(request)
        first, second = plan
        started = self._clock()
        try:
            return await self._inner.handle_async_request(self._replicas.retarget(request, first))
        except httpx.TransportError as exc:
            if second is None or not _no_response(exc, request):
                raise
            failed = exc
        try:
            retry = self._replicas.retarget(request, second, self._clock() - started)
            response = await self._inner.handle_async_request(retry)
        except httpx.TransportError as exc:
            raise exc from failed
        self._replicas.answered(second)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _split(kwargs: dict) -> Tuple[dict, dict]:
    transport_kwargs = {k: kwargs.pop(k) for k in _TRANSPORT_ARGS if k in kwargs}
    kwargs.setdefault("follow_redirects", True)
    return transport_kwargs, kwargs


def failover_client(replicas: Sequence[str], **client_kwargs: Any) -> httpx.Client:
    """An `httpx.Client` for the SDKs' `http_client=` that fails over across
    `replicas` (base URLs like 'http://10.0.0.1:8080', tried in order).

    Point the SDK's `base_url` at the first replica (with '/v1' for OpenAI).
    Keyword arguments go to `httpx.Client`; `limits`, `verify`, `cert`,
    `http1`, `http2`, `retries` and `local_address` go to the connection
    transport.
    """
    transport_kwargs, client_kwargs = _split(dict(client_kwargs))
    return httpx.Client(
        transport=FailoverTransport(replicas, **transport_kwargs), **client_kwargs
    )


def async_failover_client(replicas: Sequence[str], **client_kwargs: Any) -> httpx.AsyncClient:
    """The `httpx.AsyncClient` twin of `failover_client`, for AsyncOpenAI and
    AsyncAnthropic."""
    transport_kwargs, client_kwargs = _split(dict(client_kwargs))
    return httpx.AsyncClient(
        transport=AsyncFailoverTransport(replicas, **transport_kwargs), **client_kwargs
    )
