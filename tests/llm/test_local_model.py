"""The embedded local model, driven through the real OpenAI SDK exactly as the flows drive it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, Literal

import httpx2
import openai
import pytest
from pydantic import BaseModel, ConfigDict

from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, LOCAL_MODEL, LocalModelTransport

pytestmark = pytest.mark.slow


class Judgement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    explanation: str
    score: Literal[1, 2, 3, 4, 5]


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"explanation": {"type": "string"}, "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]}},
    "required": ["explanation", "score"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "You judge how well a document answers a query. Reply in JSON."},
    {"role": "user", "content": "Query: are cats mammals?\nDocument: Cats are small carnivorous mammals.\n"},
]


def _client() -> openai.AsyncOpenAI:
    # A fresh client per call: httpx2 clients are bound to the event loop that asyncio.run creates.
    transport = LocalModelTransport()
    return openai.AsyncOpenAI(
        base_url=LOCAL_BASE_URL, api_key="local", max_retries=0, http_client=httpx2.AsyncClient(transport=transport)
    )


def _chat(**kwargs: Any) -> openai.types.chat.ChatCompletion:
    async def call() -> openai.types.chat.ChatCompletion:
        async with _client() as client:
            return await client.chat.completions.create(model=LOCAL_MODEL, messages=MESSAGES, **kwargs)

    return asyncio.run(call())


@pytest.fixture(scope="module", autouse=True)
def loaded_model() -> Iterator[None]:
    """Pay the model load once per module, and report it next to the generation speed."""
    start = time.perf_counter()
    _chat(max_tokens=1)
    print(f"\nlocal model load + 1 token: {time.perf_counter() - start:.1f}s")
    yield


def test_json_schema_reply_validates() -> None:
    start = time.perf_counter()
    reply = _chat(
        response_format={"type": "json_schema", "json_schema": {"name": "judgement", "schema": SCHEMA}},
        max_tokens=96,
    )
    elapsed = time.perf_counter() - start
    assert reply.usage is not None
    print(
        f"\n{reply.usage.completion_tokens} tokens in {elapsed:.2f}s: "
        f"{reply.usage.completion_tokens / elapsed:.1f} tokens/s"
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    Judgement.model_validate_json(choice.message.content or "")
    assert reply.usage.prompt_tokens > 0
    assert reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_same_seed_same_text() -> None:
    request = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "judgement", "schema": SCHEMA}},
        "max_tokens": 64,
        "temperature": 1.0,
        "top_p": 0.95,
        "seed": 1234,
    }
    first, second = _chat(**request), _chat(**request)
    assert first.choices[0].message.content == second.choices[0].message.content


def test_json_object_with_schema_validates() -> None:
    reply = _chat(response_format={"type": "json_object", "schema": SCHEMA}, max_tokens=96)
    assert reply.choices[0].finish_reason == "stop"
    Judgement.model_validate_json(reply.choices[0].message.content or "")


def test_truncated_json_says_length() -> None:
    reply = _chat(
        response_format={"type": "json_schema", "json_schema": {"name": "judgement", "schema": SCHEMA}},
        max_tokens=4,
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 4


def test_unknown_path_is_404() -> None:
    async def call() -> None:
        async with _client() as client:
            await client.embeddings.create(model=LOCAL_MODEL, input="cats")

    with pytest.raises(openai.NotFoundError) as caught:
        asyncio.run(call())
    assert caught.value.status_code == 404
