"""Anthropic models on Amazon Bedrock with the official `anthropic` SDK at
its default settings.

First the SDK's own `AnthropicBedrock` client straight at `levee mock --api
bedrock`, which verifies every SigV4 signature botocore makes (so the mock
speaks the wire format the SDK really sends: the model id in the path, the
body's `anthropic_version`, the event-stream framing it decodes), then the
plain `Anthropic` client through Levee, served by a Bedrock target that
signs with a shared credentials file: JSON, stream and tool use, a stream
failing mid-way, and an Anthropic 529 storm failed over to Bedrock.
"""

from __future__ import annotations

import anthropic
import pytest

from conftest import WEATHER_MESSAGES, Gateway, Mock, check_messages, running_mock

# The mock's test key pairs (AWS's documentation example, not a secret).
ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SESSION_ACCESS_KEY = "ASIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "levee-mock-session-token"
REGION = "us-east-1"
MODEL = "anthropic.claude-3-5-sonnet-20241022-v2:0"


@pytest.fixture
def bedrock_mock(workdir):
    yield from running_mock(workdir, "bedrock")


def bedrock_client(mock: Mock, **kw) -> anthropic.AnthropicBedrock:
    args = {"aws_access_key": ACCESS_KEY, "aws_secret_key": SECRET_KEY, "aws_region": REGION}
    args.update(kw)
    return anthropic.AnthropicBedrock(base_url=mock.url, **args)


def test_the_sdks_bedrock_client_is_served_by_the_bedrock_mock(bedrock_mock):
    check_messages(bedrock_client(bedrock_mock), MODEL)
    # Temporary credentials: the session token travels signed.
    temporary = bedrock_client(
        bedrock_mock, aws_access_key=SESSION_ACCESS_KEY, aws_session_token=SESSION_TOKEN
    )
    assert temporary.messages.create(model=MODEL, max_tokens=8, messages=WEATHER_MESSAGES).content
    stats = bedrock_mock.stats()
    assert stats["unauthorized"] == 0
    assert stats["by_model"].get(MODEL) == 5

    # A wrong secret key: Bedrock's 403, which the SDK does not retry.
    wrong = bedrock_client(bedrock_mock, aws_secret_key="not-the-secret-key")
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        wrong.messages.create(model=MODEL, max_tokens=8, messages=WEATHER_MESSAGES)
    assert "signature" in str(refused.value).lower()
    assert bedrock_mock.stats()["unauthorized"] == 1


def test_a_mid_stream_exception_reaches_the_sdk_as_an_error(bedrock_mock):
    bedrock_mock.set_faults({"cut_stream_after": 2})
    client = bedrock_client(bedrock_mock, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as failed:
        with client.messages.stream(model=MODEL, max_tokens=64, messages=WEATHER_MESSAGES) as s:
            for _ in s:
                pass
    assert "modelStreamErrorException" in str(failed.value)


def bedrock_gateway(workdir, bedrock_mock, anthropic_mock=None, model: str = MODEL) -> Gateway:
    """Levee with a Bedrock provider signing from a shared credentials file
    (its target naming `model`), behind an Anthropic provider when
    `anthropic_mock` is given."""
    creds = workdir / "aws-credentials"
    creds.write_text(
        f"[levee]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
    )
    providers = (
        f'  bedrock: {{ api: bedrock, base_url: "{bedrock_mock.url}", region: {REGION}, '
        f'credentials_file: "{creds}", profile: levee }}\n'
    )
    targets = f'      - {{ provider: bedrock, model: "{model}" }}\n'
    if anthropic_mock is not None:
        providers = (
            f'  anthropic: {{ api: anthropic, base_url: "{anthropic_mock.url}", '
            "api_key_env: LEVEE_TEST_ANTHROPIC_KEY }\n" + providers
        )
        targets = "      - { provider: anthropic }\n" + targets
    config = (
        "providers:\n" + providers + "routes:\n"
        "  - targets:\n" + targets + "    deadline: { default: 30s, max: 120s }\n"
    )
    return Gateway(
        workdir,
        bedrock_mock,
        "",
        config=config,
        env={"LEVEE_TEST_ANTHROPIC_KEY": "sk-ant-test-not-a-secret"},
    )


def test_the_plain_anthropic_client_through_levee_is_served_by_a_bedrock_target(
    workdir, bedrock_mock
):
    gw = bedrock_gateway(workdir, bedrock_mock)
    try:
        served_by_bedrock(gw, bedrock_mock)
    finally:
        gw.process.stop()


def served_by_bedrock(gw, bedrock_mock):
    client = anthropic.Anthropic(base_url=gw.url, api_key="test")
    check_messages(client, "claude-sonnet")
    raw = client.messages.with_raw_response.create(
        model="claude-sonnet", max_tokens=8, messages=WEATHER_MESSAGES
    )
    assert raw.headers["x-levee-target"] == "bedrock"
    stats = bedrock_mock.stats()
    assert stats["unauthorized"] == 0
    assert stats["by_model"].get(MODEL) == 5
    assert gw.metric("levee_upstream_attempts_total", provider="bedrock", result="success") == 5

    # A stream Bedrock breaks off mid-way ends with Anthropic's error event.
    bedrock_mock.set_faults({"cut_stream_after": 2})
    with pytest.raises(anthropic.APIStatusError) as failed:
        with client.messages.stream(model="claude-sonnet", max_tokens=64, messages=WEATHER_MESSAGES) as s:
            for _ in s:
                pass
    assert "modelStreamErrorException" in str(failed.value)


def test_an_overloaded_anthropic_api_fails_over_to_claude_on_bedrock(workdir, bedrock_mock):
    primary = Mock(workdir, api="anthropic", name="mock-anthropic")
    gw = None
    try:
        primary.set_faults({"status": 529})
        gw = bedrock_gateway(workdir, bedrock_mock, anthropic_mock=primary)
        client = anthropic.Anthropic(base_url=gw.url, api_key="test")
        raw = client.messages.with_raw_response.create(
            model="claude-sonnet", max_tokens=8, messages=WEATHER_MESSAGES
        )
        assert raw.headers["x-levee-target"] == "bedrock"
        assert raw.parse().content[0].text
        with client.messages.stream(model="claude-sonnet", max_tokens=64, messages=WEATHER_MESSAGES) as s:
            assert "".join(s.text_stream)
        assert primary.stats()["by_status"].get("529", 0) >= 2
        assert bedrock_mock.stats()["by_model"].get(MODEL) == 2
        assert gw.metric("levee_upstream_attempts_total", provider="anthropic", result="http_5xx") >= 2
        assert gw.metric("levee_upstream_attempts_total", provider="bedrock", result="success") == 2
    finally:
        if gw is not None:
            gw.process.stop()
        primary.process.stop()
