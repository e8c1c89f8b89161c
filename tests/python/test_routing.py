"""Routing through Levee with the official SDKs at their defaults, in front
of mocks as strict as the real APIs (each serves only its own model names
and answers any other 404 `model_not_found`): an exact name balanced over
two deployments, a prefix removed at its separator, every id `/v1/models`
lists answered by the model it names, a stored response read from the
account that holds it, and `on_untranslatable: fail`.
"""

from __future__ import annotations

import json

import openai
import pytest

from conftest import Gateway, Mock

MESSAGES = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def deployments(workdir):
    """Two OpenAI deployments serving gpt-4o and gpt-4.1 only."""
    ms = [
        Mock(workdir, api="openai", name=name, extra_args=("--models", "gpt-4o,gpt-4.1"))
        for name in ("east", "west")
    ]
    try:
        yield ms
    finally:
        for m in ms:
            m.process.stop()


def routed(workdir, east: Mock, west: Mock) -> Gateway:
    config = (
        "providers:\n"
        f'  east: {{ api: openai, base_url: "{east.url}" }}\n'
        f'  west: {{ api: openai, base_url: "{west.url}" }}\n'
        "routes:\n"
        "  - match: { model_prefix: \"openai/\" }\n"
        "    targets: [east]\n"
        "  - match: { models: [gpt-4o] }\n"
        "    targets:\n"
        "      - balance: [east, west]\n"
    )
    return Gateway(workdir, east, "", config=config)


def test_an_exact_name_is_balanced_and_every_listed_id_reaches_its_model(workdir, deployments):
    east, west = deployments
    gw = routed(workdir, east, west)
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
        for _ in range(40):
            r = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            assert r.model == "gpt-4o"
        sent = [m.stats()["by_model"].get("gpt-4o", 0) for m in deployments]
        assert sum(sent) == 40 and min(sent) >= 8, sent
        # The prefix ends at a separator: removed on the way up.
        r = client.chat.completions.create(model="openai/gpt-4.1", messages=MESSAGES)
        assert r.model == "gpt-4.1"
        ids = [m.id for m in client.models.list()]
        assert "gpt-4o" in ids and "openai/gpt-4.1" in ids, ids
        for i in ids:
            r = client.chat.completions.create(model=i, messages=MESSAGES)
            assert r.model == i.removeprefix("openai/"), (i, r.model)
        for m in deployments:
            assert "404" not in m.stats()["by_status"], m.stats()
    finally:
        gw.process.stop()


def test_a_stored_response_is_read_from_the_account_that_holds_it(workdir, deployments):
    east, west = deployments
    gw = routed(workdir, east, west)
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
        made = [client.responses.create(model="gpt-4o", input="hi") for _ in range(6)]
        held = [m.stats()["by_path"].get("/v1/responses", 0) for m in deployments]
        assert min(held) >= 1, held  # both accounts hold some
        for r in made:
            got = client.responses.retrieve(r.id)
            assert got.id == r.id
            assert list(client.responses.input_items.list(r.id))
        for m in deployments:
            assert "404" not in m.stats()["by_status"], m.stats()
        with pytest.raises(openai.NotFoundError) as e:
            client.responses.retrieve("resp_made_elsewhere")
        assert "no record" in str(e.value)
    finally:
        gw.process.stop()


def test_on_untranslatable_fail_refuses_what_the_primary_cannot_carry(workdir, mock):
    config = (
        "providers:\n"
        f'  anthropic: {{ api: anthropic, base_url: "{mock.url}" }}\n'
        f'  openai: {{ api: openai, base_url: "{mock.url}" }}\n'
        "routes:\n"
        "  - match: { model_prefix: \"anthropic/\" }\n"
        "    targets: [anthropic, { provider: openai, model: gpt-4.1 }]\n"
        "    on_untranslatable: fail\n"
    )
    gw = Gateway(workdir, mock, "", config=config)
    try:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model="anthropic/claude-sonnet-4-5", messages=MESSAGES, temperature=1.5
            )
        assert "temperature" in str(e.value) and "anthropic" in str(e.value)
        assert mock.stats()["requests_total"] == 0
        ok = client.chat.completions.create(
            model="anthropic/claude-sonnet-4-5", messages=MESSAGES, temperature=0.5
        )
        assert ok.choices[0].message.content
        assert json.loads(json.dumps(mock.stats()["by_path"])).get("/v1/messages") == 1
    finally:
        gw.process.stop()
