"""The clouds' own clients, pointed at Levee with only a new base URL and a
Levee key: openai's `AzureOpenAI` (a deployment in the path, `api-version`,
the key as `api-key`) and anthropic's `AnthropicVertex` (the model in a
`rawPredict` / `streamRawPredict` path, `anthropic_version` in the body, the
key as its bearer). Levee serves each as the endpoint it names, through the
ordinary routes, in front of strict one-dialect mocks; the answers parse
into the SDKs' own types.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

from conftest import WEATHER_MESSAGES, Gateway, Mock

KEY = "levee-native-client-key-0001"
MESSAGES = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def native_gateway(workdir):
    oa = Mock(workdir, api="openai", name="oa", extra_args=("--models", "gpt-4.1"))
    an = Mock(
        workdir,
        api="anthropic",
        name="an",
        extra_args=("--models", "claude-sonnet-4-5@20250929,claude-sonnet-4-5"),
    )
    config = (
        "keys: [{ name: team, env: LEVEE_NATIVE_KEY }]\n"
        "providers:\n"
        f'  oa: {{ api: openai, base_url: "{oa.url}" }}\n'
        f'  an: {{ api: anthropic, base_url: "{an.url}" }}\n'
        "routes:\n"
        "  - match: { model: my-gpt-deployment }\n"
        "    targets: [{ provider: oa, model: gpt-4.1 }]\n"
        "  - match: { model_prefix: \"claude-\" }\n"
        "    targets: [an]\n"
    )
    gw = Gateway(workdir, oa, "", config=config, env={"LEVEE_NATIVE_KEY": KEY})
    try:
        yield gw, oa, an
    finally:
        gw.process.stop()
        oa.process.stop()
        an.process.stop()


def test_the_azure_openai_client_is_served_by_deployment(native_gateway):
    gw, oa, _ = native_gateway
    client = openai.AzureOpenAI(azure_endpoint=gw.url, api_key=KEY, api_version="2024-10-21")
    r = client.chat.completions.create(model="my-gpt-deployment", messages=MESSAGES)
    assert r.choices[0].message.content and r.model == "gpt-4.1"
    chunks = list(
        client.chat.completions.create(model="my-gpt-deployment", messages=MESSAGES, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert oa.stats()["by_model"] == {"gpt-4.1": 2}
    bad = openai.AzureOpenAI(azure_endpoint=gw.url, api_key="wrong", api_version="2024-10-21")
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="my-gpt-deployment", messages=MESSAGES)


def test_the_anthropic_vertex_client_is_served_by_the_model_in_its_path(native_gateway):
    gw, _, an = native_gateway
    client = anthropic.AnthropicVertex(
        region="us-east5", project_id="p", access_token=KEY, base_url=f"{gw.url}/v1"
    )
    model = "claude-sonnet-4-5@20250929"
    r = client.messages.create(model=model, max_tokens=64, messages=WEATHER_MESSAGES)
    assert r.type == "message" and r.content[0].text
    with client.messages.stream(model=model, max_tokens=64, messages=WEATHER_MESSAGES) as s:
        text = "".join(s.text_stream)
    assert text
    count = client.messages.count_tokens(model="claude-sonnet-4-5", messages=WEATHER_MESSAGES)
    assert count.input_tokens > 0
    stats = an.stats()
    assert stats["by_model"].get(model) == 2, stats
    assert "400" not in stats["by_status"], stats
    forged = anthropic.AnthropicVertex(
        region="us-east5", project_id="p", access_token="wrong", base_url=f"{gw.url}/v1"
    )
    with pytest.raises(anthropic.AuthenticationError):
        forged.messages.create(model=model, max_tokens=8, messages=WEATHER_MESSAGES)
