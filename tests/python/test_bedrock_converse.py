"""Bedrock's Converse API: every model of the catalogue that is not
Anthropic's (Llama, Mistral, Nova, Cohere…).

First boto3's own `bedrock-runtime` client, at its defaults, straight at
`levee mock --api bedrock`: `converse` and `converse_stream` with a tool,
so the mock's Converse face is known to take what boto3 sends and to
answer what boto3 decodes. Then the official OpenAI and Anthropic SDKs
through Levee, served by a Bedrock target naming a Llama model: Levee
writes each request as a Converse request and reads the answer, whole or
event by event, back in the caller's dialect.
"""

from __future__ import annotations

import anthropic
import boto3
import openai
import pytest
from botocore.config import Config

from conftest import WEATHER_MESSAGES, check_messages, running_mock
from test_bedrock import ACCESS_KEY, REGION, SECRET_KEY, bedrock_gateway

LLAMA = "meta.llama3-1-70b-instruct-v1:0"
TOOL_CONFIG = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
            }
        }
    ],
    "toolChoice": {"tool": {"name": "get_weather"}},
}


@pytest.fixture
def bedrock_mock(workdir):
    yield from running_mock(workdir, "bedrock")


def boto3_client(url: str):
    return boto3.client(
        "bedrock-runtime",
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"max_attempts": 1}),
    )


def test_boto3_converse_and_converse_stream_are_served_by_the_mock(bedrock_mock):
    client = boto3_client(bedrock_mock.url)
    messages = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]
    r = client.converse(modelId=LLAMA, messages=messages, inferenceConfig={"maxTokens": 64})
    assert r["output"]["message"]["content"][0]["text"]
    assert r["stopReason"] == "end_turn"
    assert r["usage"]["inputTokens"] > 0

    r = client.converse(modelId=LLAMA, messages=messages, toolConfig=TOOL_CONFIG)
    assert r["stopReason"] == "tool_use"
    assert r["output"]["message"]["content"][0]["toolUse"]["name"] == "get_weather"

    events = list(client.converse_stream(modelId=LLAMA, messages=messages)["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-1] == "metadata", kinds
    text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
    assert text
    assert events[-1]["metadata"]["usage"]["outputTokens"] > 0

    # What Bedrock refuses, the mock refuses: a conversation must start with
    # the user, and tool blocks need a toolConfig.
    with pytest.raises(client.exceptions.ValidationException):
        client.converse(modelId=LLAMA, messages=[{"role": "assistant", "content": [{"text": "hi"}]}])
    with pytest.raises(client.exceptions.ValidationException):
        client.converse(
            modelId=LLAMA,
            messages=[
                {"role": "user", "content": [{"text": "hi"}]},
                {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t", "name": "f", "input": {}}}]},
            ],
        )
    assert bedrock_mock.stats()["unauthorized"] == 0


def test_the_openai_and_anthropic_sdks_through_levee_are_served_by_converse(workdir, bedrock_mock):
    gw = bedrock_gateway(workdir, bedrock_mock, model=LLAMA)
    try:
        # The Anthropic SDK: JSON, forced tool use, streams (text and tool).
        check_messages(anthropic.Anthropic(base_url=gw.url, api_key="test"), "claude-sonnet")

        # The OpenAI SDK, crossing into Messages and then into Converse.
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="test")
        r = client.chat.completions.create(
            model="llama", messages=[{"role": "user", "content": "What is the weather in Paris?"}]
        )
        assert r.choices[0].message.content and r.choices[0].finish_reason == "stop"
        assert r.usage.prompt_tokens > 0
        stream = client.chat.completions.create(
            model="llama",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        usage = [c.usage for c in chunks if c.usage]
        assert usage and usage[-1].prompt_tokens > 0 and usage[-1].completion_tokens > 0
        r = client.chat.completions.create(
            model="llama",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[
                {
                    "type": "function",
                    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
                }
            ],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
        assert r.choices[0].finish_reason == "tool_calls"
        assert r.choices[0].message.tool_calls[0].function.name == "get_weather"

        stats = bedrock_mock.stats()
        assert stats["by_model"].get(LLAMA) == 7, stats
        assert stats["unauthorized"] == 0
        assert gw.metric("levee_upstream_attempts_total", provider="bedrock", result="success") == 7
        assert gw.metric("levee_tokens_total", provider="bedrock", kind="input") > 0
    finally:
        gw.process.stop()
