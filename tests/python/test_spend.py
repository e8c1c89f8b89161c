"""Spend and callers' rules with the official SDKs at their defaults: a
budget stops its caller with a 429 `spend_limit` that the SDK does not
retry (it reads `x-should-retry: false`), spend is the answers' tokens
times the price to the cent, an OpenAI stream that did not ask for usage
is counted and reaches the SDK unchanged, a `models` list refuses another
model with a 403, and `GET /admin/spend` answers the same numbers as JSON.
"""

from __future__ import annotations

import contextlib
import json

import anthropic
import openai
import pytest

from conftest import Gateway, http

MESSAGES = [{"role": "user", "content": "Say hello."}]
# $1,000 per million tokens: a call of a few dozen tokens costs cents.
PRICE = 1000.0


@contextlib.contextmanager
def serving(workdir, mock, callers: str):
    """A gateway with prices for both dialects and `callers`, stopped after."""
    gw = Gateway(workdir, mock, "", config=priced(mock.url, callers))
    try:
        yield gw
    finally:
        gw.process.stop()


def priced(mock_url: str, callers: str) -> str:
    return (
        "providers:\n"
        f'  openai: {{ api: openai, base_url: "{mock_url}" }}\n'
        f'  anthropic: {{ api: anthropic, base_url: "{mock_url}" }}\n'
        "routes:\n"
        "  - match: { path: /v1/messages }\n    targets: [anthropic]\n"
        "  - targets: [openai]\n"
        "prices:\n"
        f"  - {{ provider: openai, model: gpt-4o-mini, input_per_mtok: {PRICE}, output_per_mtok: {PRICE} }}\n"
        f"  - {{ provider: anthropic, model: claude-3-5-haiku-latest, input_per_mtok: {PRICE}, output_per_mtok: {PRICE} }}\n"
        f"callers:\n{callers}"
    )


def test_a_budget_stops_the_sdk_at_the_right_call_and_it_does_not_retry(workdir, mock):
    budget = 0.1
    with serving(workdir, mock, f"  - {{ name: team-a, budget: {{ usd: {budget}, per: day }} }}\n") as gw:
        client = openai.OpenAI(
            base_url=f"{gw.url}/v1", api_key="test", default_headers={"x-levee-caller": "team-a"}
        )
        spent = []
        with pytest.raises(openai.RateLimitError) as refused:
            for _ in range(100):
                r = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
                spent.append((r.usage.prompt_tokens + r.usage.completion_tokens) * PRICE / 1e6)
        e = refused.value
        assert e.response.headers["x-levee-reason"] == "spend_limit"
        assert e.response.headers["x-should-retry"] == "false"
        assert "resets at" in e.message and "team-a" in e.message
        # The right call: every answered call began under the budget, the
        # last one took it over.
        assert sum(spent[:-1]) < budget <= sum(spent), spent
        # The SDK sent the refused call once (no retry of the 429), and the
        # provider saw only the answered ones.
        assert gw.metric("levee_rejected_total", reason="spend_limit") == 1
        assert mock.stats()["requests_total"] == len(spent)
        # Spend is tokens times the price, to the cent.
        metric = gw.metric("levee_spend_usd_total", caller="team-a", outcome="delivered")
        assert abs(metric - sum(spent)) < 0.01, (metric, sum(spent))
        # Another caller is not stopped.
        other = openai.OpenAI(
            base_url=f"{gw.url}/v1", api_key="test", default_headers={"x-levee-caller": "team-b"}
        )
        other.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)

def test_a_stream_without_usage_is_counted_and_reaches_the_sdk_unchanged(workdir, mock):
    with serving(workdir, mock, "  - { name: web }\n") as gw:
        client = openai.OpenAI(
            base_url=f"{gw.url}/v1", api_key="test", default_headers={"x-levee-caller": "web"}
        )
        chunks = list(
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
        )
        assert chunks and all(c.usage is None for c in chunks)
        assert all(c.choices for c in chunks), "no usage-only chunk reached the SDK"
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text
        assert gw.metric("levee_tokens_total", caller="web", kind="output") > 0
        assert gw.metric("levee_spend_usd_total", caller="web") > 0

def test_a_models_list_refuses_another_model_with_a_403(workdir, mock):
    with serving(workdir, mock, '  - { name: batch, models: ["claude-3-5-haiku*"] }\n') as gw:
        client = anthropic.Anthropic(
            base_url=gw.url, api_key="test", default_headers={"x-levee-caller": "batch"}
        )
        ok = client.messages.create(
            model="claude-3-5-haiku-latest", max_tokens=32, messages=MESSAGES
        )
        assert ok.content
        with pytest.raises(anthropic.PermissionDeniedError) as refused:
            client.messages.create(model="claude-opus-4-1", max_tokens=32, messages=MESSAGES)
        assert refused.value.response.headers["x-levee-reason"] == "model_not_allowed"
        assert "batch" in refused.value.message and "claude-opus-4-1" in refused.value.message
        assert mock.stats()["requests_total"] == 1

def test_admin_spend_answers_what_the_metrics_say(workdir, mock):
    with serving(workdir, mock, "  - { name: a }\n  - { name: b }\n") as gw:
        for who, n in (("a", 3), ("b", 1)):
            client = openai.OpenAI(
                base_url=f"{gw.url}/v1", api_key="test", default_headers={"x-levee-caller": who}
            )
            for _ in range(n):
                client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
        report = json.loads(http("GET", f"http://{gw.admin}/admin/spend?by=caller&since=24h"))
        rows = {r["caller"]: r for r in report["rows"]}
        for who in ("a", "b"):
            metric = gw.metric("levee_spend_usd_total", caller=who)
            assert abs(rows[who]["usd"] - metric) < 1e-4, (rows, metric)
        assert rows["a"]["usd"] > rows["b"]["usd"]
        assert report["currency"] == "USD" and report["by"] == "caller"
