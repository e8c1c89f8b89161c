"""The official SDKs' model list, model retrieval, Anthropic's token count
and OpenAI's stored responses through Levee in front of `levee mock`: each
answer parses into the SDK's own types, and a name Levee lists is one a
caller can send.
"""

from __future__ import annotations

import anthropic
import openai
import pytest

MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_both_sdks_list_and_retrieve_the_models_levee_carries(gateway, mock):
    o = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="test", max_retries=0)
    listed = list(o.models.list())
    ids = [m.id for m in listed]
    assert "gpt-4.1" in ids and "claude-sonnet-4-5" in ids, ids
    assert all(m.object == "model" and isinstance(m.created, int) for m in listed)
    assert o.models.retrieve("gpt-4.1").id == "gpt-4.1"
    with pytest.raises(openai.NotFoundError):
        o.models.retrieve("no-such-model")
    # Each name listed for chat completions is answered there.
    answered = o.chat.completions.create(model="gpt-4.1", messages=MESSAGES)
    assert answered.choices[0].message.content

    a = anthropic.Anthropic(base_url=gateway.url, api_key="test", max_retries=0)
    infos = list(a.models.list(limit=2))  # the SDK follows the pages
    assert [m.id for m in infos] == ids
    assert all(m.type == "model" and m.display_name and m.created_at for m in infos)
    assert a.models.retrieve("claude-sonnet-4-5").lifecycle == "active"
    with pytest.raises(anthropic.NotFoundError):
        a.models.retrieve("no-such-model")
    # The provider was asked for each dialect's list once: the rest is cached.
    assert mock.stats()["by_path"]["/v1/models"] == 2


def test_count_tokens_and_stored_responses_pass_through(gateway, mock):
    a = anthropic.Anthropic(base_url=gateway.url, api_key="test", max_retries=0)
    count = a.messages.count_tokens(model="claude-test", messages=MESSAGES)
    assert count.input_tokens > 0

    o = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="test", max_retries=0)
    created = o.responses.create(model="gpt-test", input="hi")
    assert o.responses.retrieve(created.id).id == created.id
    items = list(o.responses.input_items.list(created.id))
    assert items and items[0].type == "message"
    with pytest.raises(openai.BadRequestError):
        o.responses.cancel(created.id)  # not a background response
    o.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        o.responses.retrieve(created.id)
