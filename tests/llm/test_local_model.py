"""The embedded model: llama.cpp's server on loopback, reached through the same Route as any endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict

from ifsynth.flows.cli.demo import demo_config
from ifsynth.flows.llm.local_model import LOCAL_BASE_URL, LOCAL_MODEL, bundled_weights, model_name, serve, weights
from ifsynth.flows.llm.route import Route, is_loopback
from ifsynth.flows.run.runner import execute
from ifsynth.schemas.config import Endpoint
from ifsynth.schemas.errors import LocalModelUnavailable
from ifsynth.warehouse import audit
from ifsynth.warehouse.store import Warehouse
from tests.conftest import cli, invoke
from tests.helpers import query


class Judgement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    explanation: str
    score: Literal[1, 2, 3, 4, 5]


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        # a length bound, as the gateway sends to any endpoint but OpenAI's: a 135M model rambles without one
        "explanation": {"type": "string", "maxLength": 120},
        "score": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
    },
    "required": ["explanation", "score"],
    "additionalProperties": False,
}
MESSAGES = [
    {"role": "system", "content": "You judge how well a document answers a query. Reply in JSON."},
    {"role": "user", "content": "Query: are cats mammals?\nDocument: Cats are small carnivorous mammals.\n"},
]
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "judgement", "schema": SCHEMA, "strict": True}}


def _chat(**body: Any) -> tuple[dict[str, Any], str]:
    """One completion through a fresh Route (its SDK client is bound to the loop asyncio.run makes)."""

    async def call() -> tuple[dict[str, Any], str]:
        route = Route(Endpoint(base_url=LOCAL_BASE_URL))
        try:
            await route.ready()
            request = {"model": LOCAL_MODEL, "messages": MESSAGES, "temperature": 0.0, "seed": 7, **body}
            reply = await route.chat(json.dumps(request).encode(), route.endpoint.timeout)
            return json.loads(reply.content), route.address
        finally:
            await route.close()

    return asyncio.run(call())


def test_the_server_starts_on_loopback_once_per_process_and_answers_schema_constrained_json() -> None:
    start = time.perf_counter()
    reply, address = _chat(response_format=JSON_SCHEMA, max_tokens=96)
    elapsed = time.perf_counter() - start
    usage = reply["usage"]
    print(f"\nload (first test) + {usage['completion_tokens']} tokens in {elapsed:.2f}s")
    assert is_loopback(address) and address.endswith("/v1") and address != LOCAL_BASE_URL
    assert serve(Endpoint(base_url=LOCAL_BASE_URL)) == address, "one server per model and setting"
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop"
    Judgement.model_validate_json(choice["message"]["content"])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def test_same_seed_same_text() -> None:
    request = {"response_format": JSON_SCHEMA, "max_tokens": 64, "temperature": 1.0, "top_p": 0.95, "seed": 1234}
    first, _ = _chat(**request)
    second, _ = _chat(**request)
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]


def test_json_object_with_schema_validates() -> None:
    reply, _ = _chat(response_format={"type": "json_object", "schema": SCHEMA}, max_tokens=96)
    assert reply["choices"][0]["finish_reason"] == "stop"
    Judgement.model_validate_json(reply["choices"][0]["message"]["content"])


def test_truncated_json_says_length() -> None:
    reply, _ = _chat(response_format=JSON_SCHEMA, max_tokens=4)
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 4


def test_token_log_probabilities_come_back() -> None:
    reply, _ = _chat(response_format=JSON_SCHEMA, max_tokens=24, logprobs=True, top_logprobs=3)
    tokens = reply["choices"][0]["logprobs"]["content"]
    assert tokens and all(len(token["top_logprobs"]) == 3 for token in tokens)
    assert all(token["logprob"] <= 0 for token in tokens)


def test_a_user_gguf_is_named_for_its_file_and_checked_before_loading(tmp_path: Path) -> None:
    assert model_name(None) == LOCAL_MODEL
    assert model_name("/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf") == "qwen2.5-7b-instruct-q4_k_m"
    assert weights(str(bundled_weights())) == bundled_weights()
    with pytest.raises(LocalModelUnavailable, match="no such file"):
        weights(str(tmp_path / "missing.gguf"))
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip, say")
    with pytest.raises(LocalModelUnavailable, match="not a GGUF file"):
        weights(str(not_gguf))


@pytest.mark.usefixtures("prefect")  # runs a flow: on the session's Prefect server
def test_a_run_with_local_model_goes_through_the_http_path_and_a_rerun_is_served_from_the_cache(
    tmp_path: Path,
) -> None:
    warehouse = str(tmp_path / "w.duckdb")
    gguf = str(bundled_weights())
    command = ["--warehouse", warehouse, "run", "instructir", "--seeds", "demo", "--limit", "1", "--json"]
    command += ["--local-model", gguf, "--local-parallel", "2", "--local-threads", "2"]
    command += ["--set", "instructions_per_query=1", "--set", "max_tokens_instructions=48"]
    command += ["--set", "max_tokens_rewrite=48", "--set", "max_tokens_judge=48"]
    # a 135M model cut at 48 tokens may leave an answer unusable, which now counts as a failed ask
    command += ["--set", "max_failure_share=1"]
    # in the test's process: the rerun finds the model's server the run started, as a second run in one
    # process does, rather than loading the weights again in a process of its own
    first = invoke(*command, env={"OPENAI_API_KEY": ""})
    assert first.returncode == 0, first.stderr
    again = invoke(*command, env={"OPENAI_API_KEY": ""})
    assert again.returncode == 0, again.stderr
    with Warehouse(warehouse, read_only=True) as wh:
        calls = query(wh, "SELECT base_url, model, http_status FROM llm_calls")
    sent = json.loads(first.stdout)["llm_calls"]["sent"]
    assert sent == len(calls) > 0
    assert {c["model"] for c in calls} == {model_name(gguf)} and {c["http_status"] for c in calls} == {200}
    assert all(is_loopback(c["base_url"]) and c["base_url"] != LOCAL_BASE_URL for c in calls)
    assert json.loads(again.stdout)["llm_calls"]["sent"] == 0, "keyed on the model, not on the server's port"


@pytest.mark.usefixtures("prefect")  # runs a flow: on the session's Prefect server
def test_every_ask_of_the_demo_is_answered_or_rejected_for_a_reason(tmp_path: Path) -> None:
    """The demo's prompts, budgets and bounded JSON schemas, on two seeds: no ask ends unparsed or failed, and
    every answer the budget cut unfinished rejected its input with the reason on record."""
    run_id = execute(demo_config().model_copy(update={"limit": 2}), tmp_path / "w.duckdb").run_id
    with Warehouse(tmp_path / "w.duckdb", read_only=True) as wh:
        report = audit.funnel(wh, run_id)
        cut = {c["key"] for c in query(wh, "SELECT key FROM llm_calls WHERE finish_reason = 'length'")}
        # what a cut answer became: an item (its JSON was whole before the budget ran out) or a verdict
        kept = query(wh, "SELECT unnest(call_keys) AS key FROM items UNION SELECT call_key FROM verdicts")
        rule = "the answer fits max_tokens"
        rejected = query(wh, "SELECT call_key, reason FROM verdicts WHERE decision = 'reject' AND rule = ?", [rule])
    assert report["status"] == "completed"
    stages = {stage["stage"]: stage for stage in report["stages"]}
    assert stages["judge_relevance"]["in"] > 0, "the asks reached the judges"
    assert all(stage["parse_error"] == stage["failed"] == 0 for stage in stages.values()), stages
    assert cut <= {k["key"] for k in kept}, "no cut answer is left without an outcome"
    assert {r["call_key"] for r in rejected} <= cut
    assert all("cut off at max_tokens" in r["reason"] for r in rejected)


def test_a_bad_local_model_is_one_line(tmp_path: Path) -> None:
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_text("not a model")
    warehouse = str(tmp_path / "w.duckdb")
    for path, message in ((tmp_path / "none.gguf", "no such file"), (not_gguf, "not a GGUF file")):
        done = cli("--warehouse", warehouse, "run", "instructir", "--seeds", "demo", "--local-model", str(path))
        assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    both = ["--seeds", "demo", "--local-model", str(bundled_weights()), "--base-url", "http://127.0.0.1:9/v1"]
    done = cli("--warehouse", warehouse, "run", "instructir", *both)
    assert done.returncode == 2 and "drop --base-url" in done.stderr
