"""The caller's last resort in front of Levee: when one gateway replica cannot
be reached at all, make a single immediate attempt on the next one.

`failover_client(replicas)` and `async_failover_client(replicas)` return an
HTTP client for the official OpenAI and Anthropic SDKs' `http_client=`
argument. Failover happens only when no response came back from a replica
(connection refused or reset while connecting, connect timeout, or the server
closing the connection before sending a single response byte). An HTTP
response, a 503 included, is the gateway's decision and is returned unchanged:
the gateway already retried, shed or gave up on purpose, and a second replica
asking the same provider again would only add load to an incident. There is no
sleep and never more than one extra attempt per request.
"""

from __future__ import annotations

from ._transport import (
    AsyncFailoverTransport,
    FailoverTransport,
    async_failover_client,
    failover_client,
)

__all__ = [
    "AsyncFailoverTransport",
    "FailoverTransport",
    "async_failover_client",
    "failover_client",
]
