"""The clouds' own clients, pointed at Levee with only a new base URL and a
Levee key: openai's `AzureOpenAI` (a deployment in the path, `api-version`,
the key as `api-key`), anthropic's `AnthropicVertex` (the model in a
`rawPredict` / `streamRawPredict` path, `anthropic_version` in the body, the
key as its bearer), and anthropic's `AnthropicBedrock` and boto3 (invoke,
invoke-with-response-stream, converse, converse-stream; SigV4-signed with a
key pair Levee issues). Levee serves each as the endpoint it names, through the
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


# A key pair the gateway issues for SigV4-signing clients (made up here;
# any 16+ letters and digits, and any secret).
PAIR_ID = "LEVEENATIVETEST0001"
PAIR_SECRET = "levee-native-test-secret-not-a-real-key"
CLAUDE_ON_BEDROCK = "anthropic.claude-3-5-sonnet-20241022-v2:0"


@pytest.fixture
def signing_gateway(workdir):
    """Levee with a SigV4 key pair, routing a Bedrock model id to a Bedrock
    target first and Anthropic's API second."""
    from test_bedrock import ACCESS_KEY, SECRET_KEY

    bedrock = Mock(workdir, api="bedrock", name="bedrock")
    an = Mock(workdir, api="anthropic", name="an", extra_args=("--models", "claude-sonnet-4-5"))
    creds = workdir / "aws-credentials"
    creds.write_text(f"[levee]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    config = (
        "keys: [{ name: signer, access_key_id: " + PAIR_ID + ", secret_access_key_env: LEVEE_PAIR_SECRET }]\n"
        "providers:\n"
        f'  bedrock: {{ api: bedrock, base_url: "{bedrock.url}", region: us-east-1, '
        f'credentials_file: "{creds}", profile: levee }}\n'
        f'  an: {{ api: anthropic, base_url: "{an.url}" }}\n'
        "routes:\n"
        f'  - match: {{ model: "{CLAUDE_ON_BEDROCK}" }}\n'
        "    targets:\n"
        "      - bedrock\n"
        "      - { provider: an, model: claude-sonnet-4-5 }\n"
    )
    gw = Gateway(workdir, bedrock, "", config=config, env={"LEVEE_PAIR_SECRET": PAIR_SECRET})
    try:
        yield gw, bedrock, an
    finally:
        gw.process.stop()
        bedrock.process.stop()
        an.process.stop()


def test_the_anthropic_bedrock_client_signs_with_a_levee_key_pair(signing_gateway):
    gw, bedrock, an = signing_gateway
    client = anthropic.AnthropicBedrock(
        base_url=gw.url, aws_access_key=PAIR_ID, aws_secret_key=PAIR_SECRET, aws_region="us-east-1"
    )
    r = client.messages.create(model=CLAUDE_ON_BEDROCK, max_tokens=64, messages=WEATHER_MESSAGES)
    assert r.type == "message" and r.content[0].text
    with client.messages.stream(model=CLAUDE_ON_BEDROCK, max_tokens=64, messages=WEATHER_MESSAGES) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text and final.stop_reason == "end_turn"
    assert bedrock.stats()["by_model"].get(CLAUDE_ON_BEDROCK) == 2

    # A wrong secret: the signature does not match, a 401 the SDK does not retry.
    forged = anthropic.AnthropicBedrock(
        base_url=gw.url, aws_access_key=PAIR_ID, aws_secret_key="wrong-secret", aws_region="us-east-1"
    )
    with pytest.raises(anthropic.AuthenticationError):
        forged.messages.create(model=CLAUDE_ON_BEDROCK, max_tokens=8, messages=WEATHER_MESSAGES)
    unknown = anthropic.AnthropicBedrock(
        base_url=gw.url, aws_access_key="NOTAKEYOFLEVEE0001", aws_secret_key=PAIR_SECRET, aws_region="us-east-1"
    )
    with pytest.raises(anthropic.AuthenticationError):
        unknown.messages.create(model=CLAUDE_ON_BEDROCK, max_tokens=8, messages=WEATHER_MESSAGES)
    assert bedrock.stats()["by_model"].get(CLAUDE_ON_BEDROCK) == 2

    # Bedrock down: the same Bedrock-shaped call is answered by Anthropic's API.
    bedrock.set_faults({"status": 503})
    raw = client.messages.with_raw_response.create(
        model=CLAUDE_ON_BEDROCK, max_tokens=64, messages=WEATHER_MESSAGES
    )
    assert raw.headers["x-levee-target"] == "an"
    assert raw.parse().content[0].text
    with client.messages.stream(model=CLAUDE_ON_BEDROCK, max_tokens=64, messages=WEATHER_MESSAGES) as s:
        assert "".join(s.text_stream)
    assert an.stats()["by_model"].get("claude-sonnet-4-5") == 2


def boto3_at(url: str, secret: str = PAIR_SECRET):
    """boto3's bedrock-runtime client at `url`, signing with the pair's key
    id and `secret`, with its own retries off (it ignores
    `x-should-retry: false`)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id=PAIR_ID,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def test_boto3_invoke_model_is_served_through_levee(signing_gateway):
    import json

    from botocore.exceptions import ClientError

    gw, bedrock, _ = signing_gateway
    client = boto3_at(gw.url)
    body = json.dumps(
        {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": WEATHER_MESSAGES}
    )
    r = client.invoke_model(modelId=CLAUDE_ON_BEDROCK, body=body)
    answer = json.loads(r["body"].read())
    assert answer["type"] == "message" and answer["content"][0]["text"]

    r = client.invoke_model_with_response_stream(modelId=CLAUDE_ON_BEDROCK, body=body)
    events = [json.loads(e["chunk"]["bytes"]) for e in r["body"] if "chunk" in e]
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    assert "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
    assert bedrock.stats()["by_model"].get(CLAUDE_ON_BEDROCK) == 2

    # Levee's refusals reach boto3 as the exception classes Bedrock's would.
    forged = boto3_at(gw.url, secret="wrong-secret")
    with pytest.raises(ClientError) as refused:
        forged.invoke_model(modelId=CLAUDE_ON_BEDROCK, body=body)
    assert refused.value.response["Error"]["Code"] == "UnrecognizedClientException"
    with pytest.raises(client.exceptions.ValidationException):
        client.invoke_model(modelId=CLAUDE_ON_BEDROCK, body=json.dumps({"max_tokens": 5}))


def test_boto3_converse_is_served_through_levee(signing_gateway):
    gw, bedrock, an = signing_gateway
    client = boto3_at(gw.url)
    messages = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]
    r = client.converse(modelId=CLAUDE_ON_BEDROCK, messages=messages, inferenceConfig={"maxTokens": 64})
    assert r["output"]["message"]["content"][0]["text"] and r["stopReason"] == "end_turn"
    assert r["usage"]["inputTokens"] > 0

    tools = {
        "tools": [
            {
                "toolSpec": {
                    "name": "get_weather",
                    "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
                }
            }
        ],
        "toolChoice": {"tool": {"name": "get_weather"}},
    }
    r = client.converse(modelId=CLAUDE_ON_BEDROCK, messages=messages, toolConfig=tools)
    assert r["stopReason"] == "tool_use"
    assert r["output"]["message"]["content"][0]["toolUse"]["name"] == "get_weather"

    events = list(client.converse_stream(modelId=CLAUDE_ON_BEDROCK, messages=messages)["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-1] == "metadata", kinds
    assert "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
    assert events[-1]["metadata"]["usage"]["inputTokens"] > 0
    assert bedrock.stats()["by_model"].get(CLAUDE_ON_BEDROCK) == 3

    # Bedrock down: Anthropic's API answers the Converse call.
    bedrock.set_faults({"status": 503})
    r = client.converse(modelId=CLAUDE_ON_BEDROCK, messages=messages)
    assert r["output"]["message"]["content"][0]["text"]
    assert r["ResponseMetadata"]["HTTPHeaders"]["x-levee-target"] == "an"
    assert an.stats()["by_model"].get("claude-sonnet-4-5") == 1
