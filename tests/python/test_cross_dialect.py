"""Fallback across dialects with the official SDKs: an Anthropic caller
served by an `api: openai` backup, and an OpenAI caller served by an
`api: anthropic` backup. Each provider is a strict one-dialect `levee mock
--api …` (the other dialect's paths are 404, unknown fields 400), so each
provider only ever sees its own dialect's path and body; the primary always
answers 503, so every call is answered by the backup.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from conftest import Mock, Process, levee_bin, wait_ready

ROUTE = (
    "    retry: { max_attempts: 1 }\n"
    "    expected_attempt_ms: 2000\n"
    "    deadline: { default: 30s, max: 120s }\n"
)
MESSAGES = [{"role": "user", "content": "Say hello."}]
MOCK_TEXT = "This is a mock response from Levee."


class CrossGateway:
    """`levee serve` with a route whose primary and backup differ in dialect."""

    def __init__(self, workdir, primary: Mock, primary_api: str, backup: Mock, backup_api: str):
        config = workdir / "levee-cross.yaml"
        config.write_text(
            "listen: 127.0.0.1:0\n"
            "admin: { listen: 127.0.0.1:0 }\n"
            "providers:\n"
            f'  primary: {{ api: {primary_api}, base_url: "{primary.url}" }}\n'
            f'  backup: {{ api: {backup_api}, base_url: "{backup.url}" }}\n'
            "routes:\n"
            "  - targets:\n"
            "      - primary\n"
            f"      - {{ provider: backup, model: backup-model }}\n{ROUTE}"
        )
        self.process = Process(
            "gateway-cross",
            [levee_bin(), "serve", "--config", str(config), "--log-format", "json", "--seed", "42"],
            workdir,
        )
        m = self.process.wait_for_line(r'^\{.*"levee gateway listening".*\}\s*$')
        line = json.loads(m.group(0))
        self.url = f"http://{line['listen']}"
        wait_ready(f"http://{line['admin']}/healthz")


@pytest.fixture
def cross(workdir):
    """Starts (caller dialect) → gateway → failing primary in the caller's
    dialect, backup in the other; yields (gateway, primary mock, backup mock)."""
    started = []

    def start(caller: str):
        backup_api = "openai" if caller == "anthropic" else "anthropic"
        primary = Mock(workdir, api=caller, name=f"mock-{caller}")
        backup = Mock(workdir, api=backup_api, name=f"mock-{backup_api}")
        started.extend([primary.process, backup.process])
        primary.set_faults({"status": 503})
        gw = CrossGateway(workdir, primary, caller, backup, backup_api)
        started.append(gw.process)
        return gw, primary, backup

    try:
        yield start
    finally:
        for p in started:
            p.stop()


def only_paths(mock: Mock) -> dict:
    return {p: n for p, n in mock.stats()["by_path"].items() if n}


def test_anthropic_sdk_create_is_answered_by_an_openai_backup(cross):
    gw, primary, backup = cross("anthropic")
    c = anthropic.Anthropic(base_url=gw.url, api_key="test")
    raw = c.messages.with_raw_response.create(
        model="claude-test", max_tokens=64, system="Be brief.", messages=MESSAGES
    )
    msg = raw.parse()
    assert raw.headers["x-levee-target"] == "backup"
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.model == "backup-model"
    assert msg.content[0].type == "text" and msg.content[0].text == MOCK_TEXT
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0
    assert only_paths(primary) == {"/v1/messages": 1}
    assert only_paths(backup) == {"/v1/chat/completions": 1}
    assert backup.stats()["by_status"] == {"200": 1}


def test_anthropic_sdk_stream_is_answered_by_an_openai_backup(cross):
    gw, primary, backup = cross("anthropic")
    c = anthropic.Anthropic(base_url=gw.url, api_key="test")
    with c.messages.stream(model="claude-test", max_tokens=64, messages=MESSAGES) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == MOCK_TEXT
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    assert only_paths(backup) == {"/v1/chat/completions": 1}
    assert backup.stats()["by_status"] == {"200": 1}


def test_anthropic_sdk_forced_tool_is_answered_by_an_openai_backup(cross):
    gw, _, backup = cross("anthropic")
    c = anthropic.Anthropic(base_url=gw.url, api_key="test")
    tools = [{"name": "get_weather", "description": "Weather for a city.",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    msg = c.messages.create(
        model="claude-test", max_tokens=64, messages=MESSAGES, tools=tools,
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert msg.stop_reason == "tool_use"
    [block] = msg.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {}
    with c.messages.stream(
        model="claude-test", max_tokens=64, messages=MESSAGES, tools=tools,
        tool_choice={"type": "tool", "name": "get_weather"},
    ) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use" and final.content[0].input == {}
    assert backup.stats()["by_status"] == {"200": 2}


def test_openai_sdk_create_is_answered_by_an_anthropic_backup(cross):
    gw, primary, backup = cross("openai")
    c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
    raw = c.chat.completions.with_raw_response.create(
        model="gpt-test",
        messages=[{"role": "system", "content": "Be brief."}, *MESSAGES],
        max_completion_tokens=64,
    )
    resp = raw.parse()
    assert raw.headers["x-levee-target"] == "backup"
    assert resp.object == "chat.completion"
    assert resp.model == "backup-model"
    assert resp.choices[0].message.content == MOCK_TEXT
    assert resp.choices[0].finish_reason == "stop"
    u = resp.usage
    assert u.prompt_tokens > 0 and u.completion_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert only_paths(primary) == {"/v1/chat/completions": 1}
    assert only_paths(backup) == {"/v1/messages": 1}
    assert backup.stats()["by_status"] == {"200": 1}


def test_openai_sdk_stream_is_answered_by_an_anthropic_backup(cross):
    gw, _, backup = cross("openai")
    c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
    chunks = list(
        c.chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == MOCK_TEXT
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert only_paths(backup) == {"/v1/messages": 1}
    assert backup.stats()["by_status"] == {"200": 1}


def test_openai_sdk_forced_function_is_answered_by_an_anthropic_backup(cross):
    gw, _, backup = cross("openai")
    c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    resp = c.chat.completions.create(model="gpt-test", messages=MESSAGES, tools=tools, tool_choice=choice)
    [call] = resp.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {}
    assert resp.choices[0].finish_reason == "tool_calls"
    chunks = list(c.chat.completions.create(
        model="gpt-test", messages=MESSAGES, tools=tools, tool_choice=choice, stream=True))
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_weather"
    assert "".join(d.function.arguments or "" for d in deltas) == "{}"
    assert backup.stats()["by_status"] == {"200": 2}


def test_the_backups_error_is_raised_as_the_callers_sdk_error(cross):
    gw, _, backup = cross("anthropic")
    backup.set_faults({"status": 400})
    c = anthropic.Anthropic(base_url=gw.url, api_key="test")
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model="claude-test", max_tokens=64, messages=MESSAGES)
    assert e.value.body["type"] == "error"
    assert e.value.response.headers["x-should-retry"] == "false"


def test_a_request_the_backup_cannot_carry_skips_it(cross):
    gw, _, backup = cross("openai")
    c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test", max_retries=0)
    with pytest.raises(openai.APIStatusError) as e:
        c.chat.completions.create(model="gpt-test", messages=MESSAGES, n=2)
    assert e.value.status_code == 503, "the primary's failure, not a mangled backup call"
    assert backup.stats()["requests_total"] == 0


def test_openai_sdk_sampling_parameters_reach_an_anthropic_backup(cross):
    gw, _, backup = cross("openai")
    c = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="test")
    raw = c.chat.completions.with_raw_response.create(
        model="gpt-test", messages=MESSAGES, temperature=0.7, top_p=0.9, stop=["END"],
    )
    assert raw.headers["x-levee-target"] == "backup"
    assert "x-levee-skipped" not in raw.headers
    assert raw.parse().choices[0].message.content == MOCK_TEXT
    assert backup.stats()["by_status"] == {"200": 1}
    # A temperature above Anthropic's range of 0 to 1: the backup cannot
    # take it, so the caller gets the primary's failure, and the answer
    # names the backup that was passed over and why.
    with pytest.raises(openai.APIStatusError) as e:
        c.with_options(max_retries=0).chat.completions.create(
            model="gpt-test", messages=MESSAGES, temperature=1.5,
        )
    assert e.value.response.headers["x-levee-skipped"] == "backup=sampling"
    assert backup.stats()["by_status"] == {"200": 1}
