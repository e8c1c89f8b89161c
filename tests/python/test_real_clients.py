"""The official OpenAI and Anthropic SDKs, with their default settings
(max_retries=2), pointed at Levee in front of `levee mock`.

Every count comes from an oracle, never a guess: Levee's metrics
(`levee_requests_total`: logical requests Levee answered;
`levee_caller_retries_total`: requests that were a caller layer retrying) and
the mock's stats (`requests_total`: what the provider received).
"""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Say hello."}]
LEVEE_REASONS = {
    "deadline_exceeded",
    "shed",
    "circuit_open",
    "circuit_recovering",
    "budget_exhausted",
    "rate_limited",
    "upstream_error",
    "bad_request",
}
MAX_ATTEMPTS = 3  # the route's retry.max_attempts (conftest.DEFAULT_ROUTE)


class OpenAIDialect:
    name = "openai"
    BadRequestError = openai.BadRequestError
    APIStatusError = openai.APIStatusError
    RateLimitError = openai.RateLimitError

    @staticmethod
    def client(gw, **kw):
        return openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test", **kw)

    def create_raw(self, gw, client_kw=None, **kw):
        c = self.client(gw, **(client_kw or {}))
        return c.chat.completions.with_raw_response.create(
            model="gpt-test", messages=MESSAGES, **kw
        )

    def create(self, gw, client_kw=None, **kw):
        return self.create_raw(gw, client_kw, **kw).parse()

    @staticmethod
    def check_plain(resp):
        assert resp.object == "chat.completion"
        assert isinstance(resp.choices[0].message.content, str)
        assert resp.choices[0].message.content
        assert resp.choices[0].finish_reason == "stop"
        u = resp.usage
        assert u is not None and u.prompt_tokens > 0 and u.completion_tokens > 0
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens

    def stream(self, gw):
        """Streams one answer; returns (text, usage)."""
        c = self.client(gw)
        chunks = list(
            c.chat.completions.create(
                model="gpt-test",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        usage = chunks[-1].usage
        assert usage is not None, "the last chunk carries usage"
        return text, (usage.prompt_tokens, usage.completion_tokens)


class AnthropicDialect:
    name = "anthropic"
    BadRequestError = anthropic.BadRequestError
    APIStatusError = anthropic.APIStatusError
    RateLimitError = anthropic.RateLimitError

    @staticmethod
    def client(gw, **kw):
        return anthropic.Anthropic(base_url=gw.url, api_key="test", **kw)

    def create_raw(self, gw, client_kw=None, **kw):
        c = self.client(gw, **(client_kw or {}))
        return c.messages.with_raw_response.create(
            model="claude-test", max_tokens=64, messages=MESSAGES, **kw
        )

    def create(self, gw, client_kw=None, **kw):
        return self.create_raw(gw, client_kw, **kw).parse()

    @staticmethod
    def check_plain(resp):
        assert resp.type == "message" and resp.role == "assistant"
        assert resp.content[0].type == "text" and resp.content[0].text
        assert resp.stop_reason in ("end_turn", "max_tokens")
        assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0

    def stream(self, gw):
        c = self.client(gw)
        with c.messages.stream(model="claude-test", max_tokens=64, messages=MESSAGES) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        assert final.stop_reason in ("end_turn", "max_tokens")
        assert final.content[0].text == text
        return text, (final.usage.input_tokens, final.usage.output_tokens)


DIALECTS = [OpenAIDialect(), AnthropicDialect()]
both = pytest.mark.parametrize("d", DIALECTS, ids=lambda d: d.name)


def caller_retries(gw) -> float:
    return gw.metric("levee_caller_retries_total")


def test_the_sdks_defaults_are_what_the_suite_claims(gateway):
    assert OpenAIDialect.client(gateway).max_retries == 2
    assert AnthropicDialect.client(gateway).max_retries == 2


def test_the_caller_retry_oracle_is_live(gateway, mock):
    """A request marked as an SDK retry is counted, so the zeros below mean something."""
    import urllib.request

    req = urllib.request.Request(
        f"{gateway.url}/v1/chat/completions",
        data=b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
        headers={"content-type": "application/json", "x-stainless-retry-count": "1"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    assert caller_retries(gateway) == 1
    assert gateway.requests() == 1
    assert mock.stats()["requests_total"] == 1


@both
def test_plain_call_parses_with_usage(d, gateway, mock):
    raw = d.create_raw(gateway)
    d.check_plain(raw.parse())
    assert raw.headers["x-levee-attempts"] == "1"
    assert raw.headers["x-levee-target"] == d.name
    assert gateway.requests() == 1
    assert mock.stats()["requests_total"] == 1
    assert caller_retries(gateway) == 0


@both
def test_streaming_call_parses_with_usage(d, gateway, mock):
    text, (prompt, completion) = d.stream(gateway)
    assert text.strip(), "streamed text"
    assert prompt > 0 and completion > 0
    assert gateway.requests() == 1
    assert mock.stats()["requests_total"] == 1


@both
def test_provider_400_raises_bad_request_after_one_request_each_way(d, gateway, mock):
    mock.set_faults({"status": 400})
    with pytest.raises(d.BadRequestError) as ei:
        d.create(gateway)
    e = ei.value
    assert e.status_code == 400
    assert e.response.headers["x-should-retry"] == "false"
    assert e.response.headers["x-levee-attempts"] == "1"
    assert gateway.requests() == 1, "exactly one request reached Levee"
    assert mock.stats()["requests_total"] == 1, "exactly one reached the provider"
    assert caller_retries(gateway) == 0


@both
def test_503_window_each_call_reaches_levee_once_and_carries_levees_reason(d, gateway, mock):
    mock.set_faults({"status": 503, "from": "0s", "to": "60s"})
    calls = 3
    reasons = []
    for _ in range(calls):
        with pytest.raises(d.APIStatusError) as ei:
            d.create(gateway)
        e = ei.value
        assert e.status_code == 503
        assert e.response.headers["x-should-retry"] == "false"
        reason = e.response.headers["x-levee-reason"]
        assert reason in LEVEE_REASONS
        assert reason in str(e), f"the SDK's error message names Levee's reason: {e}"
        assert 1 <= int(e.response.headers["x-levee-attempts"]) <= MAX_ATTEMPTS
        reasons.append(reason)
    # The SDK obeyed `x-should-retry: false`: no retries of its own.
    assert gateway.requests() == calls
    assert caller_retries(gateway) == 0
    stats = mock.stats()
    assert calls <= stats["requests_total"] <= MAX_ATTEMPTS * calls
    # Levee sends one idempotency key per logical request on every attempt:
    # per call, the provider saw at most max_attempts.
    keys = stats["idempotency_keys"]
    assert len(keys) == calls, keys
    assert all(1 <= n <= MAX_ATTEMPTS for n in keys.values()), keys
    assert stats["by_status"].get("503") == stats["requests_total"]


@both
def test_429_retry_after_is_waited_out_when_the_deadline_allows(d, gateway, mock):
    mock.set_faults({"status": 429, "retry_after": 1, "to": "500ms"})
    t = time.monotonic()
    raw = d.create_raw(gateway)
    elapsed = time.monotonic() - t
    d.check_plain(raw.parse())
    assert raw.headers["x-levee-attempts"] == "2"
    assert elapsed >= 1.0, f"Levee waited the Retry-After ({elapsed:.2f}s)"
    assert gateway.requests() == 1
    assert caller_retries(gateway) == 0
    stats = mock.stats()
    assert stats["requests_total"] == 2
    assert stats["by_status"] == {"429": 1, "200": 1}


# Which header carries an SDK's `timeout=` differs: the Anthropic SDK sends
# `x-stainless-timeout` (seconds) for a per-call `timeout=` and `NOT_GIVEN` for
# a client-level one; the OpenAI SDK (3.57.0) only sends
# `x-stainless-read-timeout`. Levee reads the first of the two that is a number.
@both
def test_429_with_a_short_sdk_timeout_fails_fast(d, gateway, mock):
    mock.set_faults({"status": 429, "retry_after": 5})
    t = time.monotonic()
    with pytest.raises(d.APIStatusError) as ei:
        d.create(gateway, timeout=2.0)
    elapsed = time.monotonic() - t
    e = ei.value
    assert elapsed < 1.0, f"gave up at once, not after the 5 s Retry-After ({elapsed:.2f}s)"
    assert e.response.headers["x-should-retry"] == "false"
    assert e.response.headers["x-levee-reason"] == "deadline_exceeded"
    assert "deadline_exceeded" in str(e)
    assert gateway.requests() == 1
    assert caller_retries(gateway) == 0
    assert mock.stats()["requests_total"] == 1


@both
def test_the_deadline_an_sdk_timeout_implies_reaches_the_provider(d, gateway, mock):
    d.check_plain(d.create(gateway, timeout=5.0))
    seen = mock.stats()["timeout_ms_seen"]
    assert seen["count"] == 1
    assert 4000 < seen["min"] <= 5000, seen
