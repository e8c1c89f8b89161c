"""Azure OpenAI with the official `openai` SDK at its default settings.

First the SDK's own `AzureOpenAI` client straight at `levee mock --api
azure` (so the mock speaks the wire format the SDK really sends: the
deployments URL shape with `api-version`, the `api-key` field), then the
plain `OpenAI` client through Levee, served by an Azure target in each URL
shape, JSON and stream, tools included.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from conftest import Gateway, Mock

KEY = "azure-test-key-not-a-secret"
VERSION = "2024-10-21"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture
def azure_mock(workdir):
    m = Mock(workdir, api="azure", name="mock-azure")
    try:
        yield m
    finally:
        m.process.stop()


def test_the_sdks_azure_client_is_served_by_the_azure_mock(azure_mock):
    client = openai.AzureOpenAI(api_key=KEY, api_version=VERSION, azure_endpoint=azure_mock.url)
    r = client.chat.completions.create(model="my-gpt-4o", messages=MESSAGES)
    assert r.choices[0].message.content
    r = client.chat.completions.create(model="my-gpt-4o", messages=MESSAGES, tools=TOOLS)
    assert r.choices[0].finish_reason in ("stop", "tool_calls")
    chunks = list(client.chat.completions.create(model="my-gpt-4o", messages=MESSAGES, stream=True))
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    # Azure's v1 API is called with the plain client at `{endpoint}/openai/v1`.
    v1 = openai.OpenAI(api_key=KEY, base_url=f"{azure_mock.url}/openai/v1")
    assert v1.chat.completions.create(model="my-gpt-4o", messages=MESSAGES).choices
    stats = azure_mock.stats()
    assert stats["unauthorized"] == 0
    assert stats["by_model"].get("my-gpt-4o") == 4

    # Without a key Azure refuses with a 401, counted by the mock.
    req = urllib.request.Request(
        f"{azure_mock.url}/openai/deployments/my-gpt-4o/chat/completions?api-version={VERSION}",
        data=json.dumps({"messages": MESSAGES}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=5)
    assert refused.value.code == 401
    assert azure_mock.stats()["unauthorized"] == 1


@pytest.mark.parametrize("shape", ["deployments", "v1"])
def test_the_plain_openai_client_through_levee_is_served_by_an_azure_target(workdir, azure_mock, shape):
    version = f', api_version: "{VERSION}"' if shape == "deployments" else ""
    gw = Gateway(
        workdir,
        azure_mock,
        "",
        name=f"gateway-{shape}",
        config=(
            "providers:\n"
            f'  az: {{ api: azure, base_url: "{azure_mock.url}", api_key_env: LEVEE_AZURE_KEY{version} }}\n'
            "routes:\n"
            "  - targets: [az]\n"
        ),
        env={"LEVEE_AZURE_KEY": KEY},
    )
    try:
        client = openai.OpenAI(api_key="caller-key", base_url=gw.url + "/v1")
        r = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        assert r.headers["x-levee-target"] == "az"
        assert r.parse().choices[0].message.content
        r = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=TOOLS)
        assert r.choices[0].finish_reason in ("stop", "tool_calls")
        stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text
        stats = azure_mock.stats()
        assert stats["unauthorized"] == 0
        assert stats["by_model"].get("gpt-4o") == 3
        # The caller's own key never reaches Azure; Levee's does.
        assert "caller-key" not in gw.process.log()
    finally:
        gw.process.stop()
