"""A committed stream still running at the caller's deadline: Levee ends it
there with an error event, and each official SDK raises its own error from
that event (OpenAI: `APIError` from a `data:` event whose JSON has `error`;
Anthropic: a status error from `event: error`)."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Say hello."}]
DEADLINE = {"x-timeout-ms": "3000"}


def openai_stream(gw) -> None:
    c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
    for _ in c.chat.completions.create(
        model="gpt-test", messages=MESSAGES, stream=True, extra_headers=DEADLINE
    ):
        pass


def anthropic_stream(gw) -> None:
    c = anthropic.Anthropic(base_url=gw.url, api_key="test")
    for _ in c.messages.create(
        model="claude-test",
        max_tokens=64,
        messages=MESSAGES,
        stream=True,
        extra_headers=DEADLINE,
    ):
        pass


CASES = [
    pytest.param(openai_stream, openai.APIError, "deadline_exceeded", id="openai"),
    pytest.param(anthropic_stream, anthropic.APIStatusError, "timeout_error", id="anthropic"),
]


@pytest.mark.parametrize("stream, error, kind", CASES)
def test_a_stream_still_running_at_the_deadline_ends_with_the_sdks_own_error(
    stream, error, kind, gateway, mock
):
    # Events a second apart: about ten seconds of stream against 3 s of patience.
    mock.set_faults({"chunk_delay": "1s"})
    t = time.monotonic()
    with pytest.raises(error) as ei:
        stream(gateway)
    elapsed = time.monotonic() - t
    assert 2.5 < elapsed < 8.0, f"ended at the deadline, not after the stream ({elapsed:.2f}s)"
    e = ei.value
    assert "deadline_exceeded" in str(e)
    body = e.body.get("error", e.body) if isinstance(e.body, dict) else {}
    assert kind in (body.get("code"), body.get("type")), e.body
    assert mock.stats()["requests_total"] == 1, "never restarted"
