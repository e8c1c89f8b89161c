"""Google Vertex AI with the official `anthropic` and `openai` SDKs at their
default settings.

First the SDK's own `AnthropicVertex` client straight at `levee mock --api
vertex` (so the mock speaks the wire format the SDK really sends: the
model in a `rawPredict` / `streamRawPredict` path, `anthropic_version` in
the body, a bearer token), with an access token the mock's own token
endpoint issued to Google's `google-auth` library for the test service
account's key; then the plain `Anthropic` client through Levee, served by a
Vertex target that gets its tokens the same way (JSON, stream, tool use),
and the plain `OpenAI` client served by Gemini through Vertex's
OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import openai
import pytest
from google.auth.transport.requests import Request
from google.oauth2 import service_account

from conftest import WEATHER_MESSAGES, Gateway, Mock, check_messages, running_mock

REPO = Path(__file__).resolve().parents[2]
# A throwaway test key, committed on purpose: it grants nothing anywhere.
KEY = REPO / "crates" / "levee-mock" / "testdata" / "vertex-test-service-account.json"
PROJECT = "levee-test"
REGION = "us-east5"
MODEL = "claude-sonnet-4@20250514"


@pytest.fixture
def vertex_mock(workdir):
    yield from running_mock(workdir, "vertex")


def credentials(mock: Mock) -> service_account.Credentials:
    """google-auth's service-account credentials for the test key, their
    token endpoint the mock's."""
    info = json.loads(KEY.read_text())
    info["token_uri"] = f"{mock.url}/token"
    return service_account.Credentials.from_service_account_info(
        info, scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )


def test_the_sdks_vertex_client_is_served_by_the_vertex_mock(vertex_mock):
    creds = credentials(vertex_mock)
    creds.refresh(Request())
    assert creds.token and creds.token.startswith("ya29.")
    assert vertex_mock.stats()["tokens_issued"] == 1

    client = anthropic.AnthropicVertex(
        region=REGION,
        project_id=PROJECT,
        access_token=creds.token,
        base_url=f"{vertex_mock.url}/v1",
    )
    check_messages(client, MODEL, stream_tool=False)
    count = client.messages.count_tokens(model=MODEL, messages=WEATHER_MESSAGES)
    assert count.input_tokens > 0
    stats = vertex_mock.stats()
    assert stats["unauthorized"] == 0
    assert stats["by_model"].get(MODEL) == 4, stats
    assert stats["by_path"].get("/v1/messages") == 3, stats

    # The SDK refreshing google-auth credentials itself gets its token there too.
    fresh = anthropic.AnthropicVertex(
        region=REGION, project_id=PROJECT, credentials=credentials(vertex_mock), base_url=f"{vertex_mock.url}/v1"
    )
    assert fresh.messages.create(model=MODEL, max_tokens=8, messages=WEATHER_MESSAGES).content
    assert vertex_mock.stats()["tokens_issued"] == 2

    # A token the mock never issued is refused as Google refuses it.
    forged = anthropic.AnthropicVertex(
        region=REGION, project_id=PROJECT, access_token="ya29.forged", base_url=f"{vertex_mock.url}/v1", max_retries=0
    )
    with pytest.raises(anthropic.AuthenticationError) as refused:
        forged.messages.create(model=MODEL, max_tokens=8, messages=WEATHER_MESSAGES)
    assert refused.value.status_code == 401
    assert vertex_mock.stats()["unauthorized"] == 1


def vertex_gateway(workdir: Path, mock: Mock, api: str) -> Gateway:
    config = (
        "providers:\n"
        f'  vx: {{ api: {api}, region: {REGION}, project: {PROJECT}, base_url: "{mock.url}",'
        f' credentials_file: "{KEY}", token_url: "{mock.url}/token" }}\n'
        "routes:\n"
        "  - targets: [vx]\n"
    )
    return Gateway(workdir, mock, route="", name=f"gateway-{api}", config=config)


def test_the_plain_anthropic_client_through_levee_is_served_by_a_vertex_target(workdir, vertex_mock):
    gw = vertex_gateway(workdir, vertex_mock, "vertex")
    try:
        client = anthropic.Anthropic(api_key="unused-by-levee", base_url=gw.url)
        check_messages(client, MODEL, stream_tool=False)
        stats = vertex_mock.stats()
        # One token for every request: Levee caches it.
        assert stats["tokens_issued"] == 1, stats
        assert stats["unauthorized"] == 0, stats
        assert stats["by_model"].get(MODEL) == 3, stats
        assert gw.metric("levee_upstream_attempts_total", result="credentials") == 0
    finally:
        gw.process.stop()


def test_the_plain_openai_client_through_levee_is_served_by_gemini_on_vertex(workdir, vertex_mock):
    gw = vertex_gateway(workdir, vertex_mock, "vertex-openai")
    try:
        client = openai.OpenAI(api_key="unused-by-levee", base_url=f"{gw.url}/v1")
        gemini = "google/gemini-2.0-flash"
        r = client.chat.completions.create(model=gemini, messages=WEATHER_MESSAGES)
        assert r.choices[0].message.content
        chunks = list(client.chat.completions.create(model=gemini, messages=WEATHER_MESSAGES, stream=True))
        assert any(c.choices and c.choices[0].delta.content for c in chunks)
        stats = vertex_mock.stats()
        assert stats["by_model"].get(gemini) == 2, stats
        assert stats["tokens_issued"] == 1 and stats["unauthorized"] == 0, stats
    finally:
        gw.process.stop()
