"""The OpenAI fake, exercised through the real SDK: the rest of the suite trusts what it serves."""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx2
import jsonschema
import openai
import pytest
from pydantic import BaseModel, ConfigDict, Field

from tests.fake_openai import OUTCOMES, FakeOpenAI, _Sampler

MODEL = "gpt-4o-mini"
REPO = Path(__file__).resolve().parents[1]
LAST_FENCE = re.compile(r"```json\n(.*?)```", re.DOTALL)


class Level(StrEnum):
    LOW = "low"
    MID = "mid"
    HIGH = "high"


class Address(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str
    postcode: int = Field(ge=10_000, le=99_999)


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Level
    score: int = Field(ge=1, le=5)
    tags: list[str] = Field(min_length=3, max_length=3)
    address: Address
    note: str | None


RECORD_SCHEMA = Record.model_json_schema()
JSON_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "Record", "schema": RECORD_SCHEMA, "strict": True}}


@pytest.fixture
def client(fake: FakeOpenAI) -> Iterator[openai.OpenAI]:
    with make_client(fake) as sdk:
        yield sdk


def make_client(fake: FakeOpenAI, timeout: float = 5.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.base_url, api_key="test-key", max_retries=0, timeout=timeout)


def ask(client: openai.OpenAI, prompt: str, **kw: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], **kw)


def check_record(content: str) -> Record:
    """Validate like a strict client would, plus what pydantic alone cannot see."""
    record = Record.model_validate_json(content)
    raw = json.loads(content)
    assert raw.keys() == Record.model_fields.keys()  # exactly the declared properties
    assert raw["address"].keys() == Address.model_fields.keys()
    assert all(tag.strip() for tag in record.tags) and record.address.city.strip()
    assert record.note is None or record.note.strip()
    return record


def test_json_schema_answers_validate_against_the_sent_model(client: openai.OpenAI) -> None:
    assert {"Level", "Address"} <= RECORD_SCHEMA["$defs"].keys()  # so enum and nesting go through $ref
    records = [
        check_record(ask(client, f"record {i}", response_format=JSON_SCHEMA_FORMAT).choices[0].message.content)
        for i in range(25)
    ]
    # Bounds are only meaningful if the values actually vary within them.
    assert len({r.level for r in records}) > 1 and len({r.score for r in records}) > 1
    parsed = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "via parse"}], response_format=Record
    )
    assert isinstance(parsed.choices[0].message.parsed, Record)


def test_same_request_same_content_and_the_seed_matters(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    first = ask(client, "same", response_format=JSON_SCHEMA_FORMAT).choices[0].message.content
    assert ask(client, "same", response_format=JSON_SCHEMA_FORMAT).choices[0].message.content == first
    assert ask(client, "other", response_format=JSON_SCHEMA_FORMAT).choices[0].message.content != first
    with FakeOpenAI(seed=1) as reseeded, make_client(reseeded) as other:
        assert ask(other, "same", response_format=JSON_SCHEMA_FORMAT).choices[0].message.content != first


def test_json_object_with_schema(client: openai.OpenAI) -> None:
    for i in range(5):
        answer = ask(client, f"obj {i}", response_format={"type": "json_object", "schema": RECORD_SCHEMA})
        check_record(answer.choices[0].message.content)


def test_schema_in_prompt_is_answered_as_fenced_json_in_prose(client: openai.OpenAI) -> None:
    decoy = {"type": "object", "properties": {"wrong": {"type": "integer"}}, "required": ["wrong"]}
    example = {"level": "low", "score": 3}  # an instance, not a schema: must be skipped
    prompt = (
        f"Old format:\n```json\n{json.dumps(decoy)}\n```\n"
        f"Answer with JSON matching:\n```json\n{json.dumps(RECORD_SCHEMA, indent=2)}\n```\n"
        f"For example:\n```json\n{json.dumps(example)}\n```"
    )
    content = ask(client, prompt).choices[0].message.content
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)  # prose around the block, so the client has to extract it
    check_record(LAST_FENCE.findall(content)[-1])


def test_plain_prompt_gets_words_and_openai_shaped_response(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="my-model", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    )
    assert raw.headers["x-request-id"].startswith("req_")
    completion = raw.parse()
    content = completion.choices[0].message.content
    assert content is not None
    assert len(content.split()) >= 3 and re.fullmatch(r"[a-z ]+", content)
    assert completion.id.startswith("chatcmpl-") and completion.model == "my-model" and completion.created == 0
    assert completion.choices[0].finish_reason == "stop" and completion.choices[0].message.role == "assistant"
    usage = completion.usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, len(content.split()))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.parametrize(
    ("outcome", "error"),
    [
        ("429", openai.RateLimitError),
        ("500", openai.InternalServerError),
        ("400", openai.BadRequestError),
        ("422", openai.UnprocessableEntityError),
    ],
)
def test_scripted_errors_raise_the_sdk_exception(
    fake: FakeOpenAI, client: openai.OpenAI, outcome: str, error: type[openai.APIStatusError]
) -> None:
    fake.configure(script=[outcome])
    with pytest.raises(error) as caught:
        ask(client, "hi")
    body = caught.value.body
    assert caught.value.status_code == int(outcome) and isinstance(body, dict) and body["message"]
    if outcome == "429":
        assert caught.value.response.headers["retry-after"] == "0.05"
        assert caught.value.response.headers["retry-after-ms"] == "50"
    assert ask(client, "hi").choices[0].finish_reason == "stop"  # the script is used up
    assert fake.stats()["by_outcome"][outcome] == 1


def test_scripted_length_and_invalid_json_damage_the_answer(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.configure(script=["ok", "length", "invalid_json"])
    good, cut, broken = (ask(client, "x", response_format=JSON_SCHEMA_FORMAT).choices[0] for _ in range(3))
    check_record(good.message.content)
    assert cut.finish_reason == "length"
    assert good.message.content.startswith(cut.message.content) and cut.message.content != good.message.content
    assert broken.finish_reason == "stop"
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken.message.content)


def test_timeout_fault_trips_the_client_timeout_and_does_not_hold_up_shutdown() -> None:
    with FakeOpenAI(timeout_sleep=60.0, script=["timeout"]) as fake, make_client(fake, timeout=2.0) as client:
        with pytest.raises(openai.APITimeoutError):
            ask(client, "slow")
        assert ask(client, "slow").choices[0].finish_reason == "stop"
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 30  # the stalled request was woken, not waited for (60 s)


def outcome_of(client: openai.OpenAI, prompt: str) -> str:
    """Classify one request the way a client sees it."""
    try:
        choice = ask(client, prompt, response_format=JSON_SCHEMA_FORMAT).choices[0]
    except openai.RateLimitError:
        return "429"
    except openai.InternalServerError:
        return "500"
    if choice.finish_reason == "length":
        return "length"
    try:
        json.loads(choice.message.content)
    except json.JSONDecodeError:
        return "invalid_json"
    return "ok"


def run_outcomes(prompts: list[str], **settings: Any) -> list[str]:
    with FakeOpenAI(**settings) as fake, make_client(fake) as client:
        return [outcome_of(client, p) for p in prompts]


def test_fault_rate_is_honoured_and_replays_identically() -> None:
    prompts = [f"doc {i}" for i in range(200)]
    first = run_outcomes(prompts, rate_500=0.5, seed=7)
    assert set(first) == {"ok", "500"} and 0.35 <= first.count("500") / len(first) <= 0.65
    assert run_outcomes(prompts, rate_500=0.5, seed=7) == first
    assert run_outcomes(prompts[:50], rate_500=0.5, seed=8) != first[:50]


def test_faults_come_from_one_cumulative_draw_in_fixed_order() -> None:
    prompts = [f"doc {i}" for i in range(60)]
    only_429 = run_outcomes(prompts, rate_429=0.5)
    both = run_outcomes(prompts, rate_429=0.5, rate_500=0.5)
    # Same draw per request: adding a later fault only takes over the requests that used to succeed.
    assert both == ["429" if o == "429" else "500" for o in only_429]


def test_mixed_faults_and_stats_agree_with_what_the_client_saw() -> None:
    with (
        FakeOpenAI(rate_429=0.25, rate_500=0.25, rate_invalid_json=0.25, rate_length=0.25) as fake,
        make_client(fake) as client,
    ):
        seen = [outcome_of(client, f"doc {i}") for i in range(120)]
        stats = fake.stats()
    assert "ok" not in seen and all(12 <= seen.count(o) <= 48 for o in ("429", "500", "invalid_json", "length"))
    assert stats == {"requests": 120, "by_outcome": {o: seen.count(o) for o in OUTCOMES}, "peak_in_flight": 1}


def test_a_retried_request_gets_fresh_fault_draws() -> None:
    assert set(run_outcomes(["same"] * 20, rate_500=0.5)) == {"ok", "500"}


def test_latency_is_applied_concurrently() -> None:
    async def burst(fake: FakeOpenAI) -> float:
        async with openai.AsyncOpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=10) as client:
            started = time.monotonic()
            await asyncio.gather(
                *(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"q{i}"}])
                  for i in range(20))
            )  # fmt: skip
            return time.monotonic() - started

    with FakeOpenAI(latency=1.0) as fake:  # long enough for all twenty to arrive before one is answered, if slow
        elapsed = asyncio.run(burst(fake))
        peak = fake.stats()["peak_in_flight"]
    assert elapsed >= 1.0, "the latency was applied"
    assert peak == 20, "all twenty were held at once"


def test_admin_endpoints_request_log_and_models(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    fake.configure(script=["ok", "500"])
    ask(client, "one")
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="custom-model", messages=[{"role": "user", "content": "two"}])
    ask(client, "three")
    admin = fake.base_url.removesuffix("/v1")
    expected = {"requests": 3, "by_outcome": {o: {"ok": 2, "500": 1}.get(o, 0) for o in OUTCOMES}, "peak_in_flight": 1}
    assert fake.stats() == expected and httpx2.get(f"{admin}/_stats").json() == expected
    assert [r["messages"][0]["content"] for r in fake.requests] == ["one", "two", "three"]
    assert all(h["authorization"] == "Bearer test-key" for h in fake.headers) and len(fake.headers) == 3
    assert {"custom-model", MODEL} <= {m.id for m in client.models.list()}

    fake.configure(rate_500=0.5)
    before = [outcome_of(client, "again") for _ in range(12)]
    assert httpx2.post(f"{admin}/_reset").json()["requests"] == 0
    assert fake.stats()["requests"] == 0 and fake.requests == [] and fake.headers == []
    assert [outcome_of(client, "again") for _ in range(12)] == before  # seen-counts were reset too


def test_responder_mode(fake: FakeOpenAI, client: openai.OpenAI) -> None:
    received: list[dict[str, Any]] = []

    def responder(body: dict[str, Any]) -> str | dict[str, Any]:
        received.append(body)
        text = body["messages"][-1]["content"]
        return {"echo": text} if text == "as dict" else f"you said {text}"

    fake.configure(mode="responder", responder=responder)
    assert json.loads(ask(client, "as dict").choices[0].message.content) == {"echo": "as dict"}
    assert ask(client, "hi").choices[0].message.content == "you said hi"
    assert [b["model"] for b in received] == [MODEL, MODEL]


def test_configure_rejects_bad_settings() -> None:
    fake = FakeOpenAI()  # settings need no running server
    with pytest.raises(ValueError):
        fake.configure(rate_429=0.7, rate_500=0.5)
    with pytest.raises(ValueError):
        fake.configure(script=["ok", "teapot"])
    with pytest.raises(ValueError):
        fake.configure(mode="responder")
    with pytest.raises(TypeError):
        fake.configure(latencyy=1.0)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"k": {"const": "fixed"}, "t": {"type": ["integer", "null"]}}},
        {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 5},
        {"type": "number", "exclusiveMinimum": 0, "maximum": 0.01},
        {"type": "string", "minLength": 30, "maxLength": 31},
        {"type": "string", "format": "date-time"},
        {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 3, "uniqueItems": True},
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "minItems": 2, "maxItems": 2},
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"oneOf": [{"type": "null"}, {"$ref": "#/definitions/B"}]}}, "required": ["b"]},
            ],
            "definitions": {"B": {"type": "object", "properties": {"c": {"type": "boolean"}}, "required": ["c"]}},
        },
        {  # recursive: must terminate
            "$ref": "#/$defs/Node",
            "$defs": {
                "Node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}
            },
        },
    ],
)
def test_sampler_covers_the_schema_keywords(schema: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for seed in range(30):
        validator.validate(_Sampler(schema, random.Random(seed)).sample(schema))


def test_standalone_server_serves_until_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_openai", "--port", "0", "--rate-500", "1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        base_url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", base_url)
        client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0, timeout=5)
        with client, pytest.raises(openai.InternalServerError):  # --rate-500 reached the server
            ask(client, "hi")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
