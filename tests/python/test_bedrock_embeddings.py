"""Bedrock's embedding models through Levee: the official OpenAI SDK, at
its defaults, asks `/v1/embeddings` of a route whose targets are Amazon
Titan and Cohere Embed on Bedrock. Levee writes each request in the
model's own `InvokeModel` body and reads the answer back as OpenAI's list.
The mock checks each body as Bedrock does (one text for Titan, a required
`input_type` for Cohere, no extra keys)."""

from __future__ import annotations

import json

import boto3
import openai
import pytest
from botocore.config import Config

from conftest import Gateway, running_mock
from test_bedrock import ACCESS_KEY, REGION, SECRET_KEY

TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"


@pytest.fixture
def bedrock_mock(workdir):
    yield from running_mock(workdir, "bedrock")


def test_the_mock_takes_titan_and_cohere_bodies_as_bedrock_does(bedrock_mock):
    client = boto3.client(
        "bedrock-runtime",
        region_name=REGION,
        endpoint_url=bedrock_mock.url,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(retries={"max_attempts": 1}),
    )
    r = json.loads(client.invoke_model(modelId=TITAN, body=json.dumps({"inputText": "hi", "dimensions": 256}))["body"].read())
    assert len(r["embedding"]) == 256 and r["inputTextTokenCount"] > 0
    r = json.loads(
        client.invoke_model(modelId=COHERE, body=json.dumps({"texts": ["a", "b"], "input_type": "search_query"}))["body"].read()
    )
    assert len(r["embeddings"]) == 2
    with pytest.raises(client.exceptions.ValidationException):
        client.invoke_model(modelId=COHERE, body=json.dumps({"texts": ["a"]}))
    with pytest.raises(client.exceptions.ValidationException):
        client.invoke_model(modelId=TITAN, body=json.dumps({"inputText": "a", "input": "b"}))


def test_the_openai_sdk_embeds_through_titan_and_cohere_on_bedrock(workdir, bedrock_mock):
    creds = workdir / "aws-credentials"
    creds.write_text(f"[levee]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
    config = (
        "providers:\n"
        f'  bedrock: {{ api: bedrock, base_url: "{bedrock_mock.url}", region: {REGION}, '
        f'credentials_file: "{creds}", profile: levee }}\n'
        "routes:\n"
        "  - match: { model: titan }\n"
        f'    targets: [{{ provider: bedrock, model: "{TITAN}" }}]\n'
        "  - match: { model: cohere }\n"
        f'    targets: [{{ provider: bedrock, model: "{COHERE}" }}]\n'
    )
    gw = Gateway(workdir, bedrock_mock, "", config=config)
    try:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="test")
        r = client.embeddings.create(model="titan", input="What is the weather in Paris?")
        assert len(r.data) == 1 and len(r.data[0].embedding) == 1024
        assert r.usage.prompt_tokens > 0
        r = client.embeddings.create(model="titan", input="short", dimensions=256, encoding_format="float")
        assert len(r.data[0].embedding) == 256
        r = client.embeddings.create(model="cohere", input=["one", "two", "three"])
        assert [d.index for d in r.data] == [0, 1, 2] and len(r.data[2].embedding) == 1024
        # Titan embeds one text per request: Levee says so, and no request is sent.
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model="titan", input=["a", "b"])
        assert "one text" in str(refused.value)
        stats = bedrock_mock.stats()
        assert stats["by_model"] == {TITAN: 2, COHERE: 1}, stats
        assert gw.metric("levee_upstream_attempts_total", provider="bedrock", result="success") == 3
    finally:
        gw.process.stop()
