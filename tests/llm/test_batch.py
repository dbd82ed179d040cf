"""Batch API mode against the fake's files and batches endpoints: submit, poll, ingest under the usual cache
keys, stages from the cache with no chat request, and a run stopped while waiting polls the same batch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.requests import Reply
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.errors import EndpointDown
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI
from tests.helpers import GOOD, ask, config, query
from tests.servers import fixed_reply


def batch_config(fake: FakeOpenAI) -> RunConfig:
    return config(fake).model_copy(update={"batch": True, "batch_poll_seconds": 0.01})


def answer_in_batch(fake: FakeOpenAI, warehouse_path: Path, n: int, *, timeout: float | None = None) -> list[Reply]:
    async def go() -> list[Reply]:
        with Warehouse(warehouse_path) as warehouse:
            async with Gateway(batch_config(fake), warehouse, "run-1") as gateway:
                return await asyncio.wait_for(gateway.ask_many("judge", [ask(f"q{i}") for i in range(n)]), timeout)

    return asyncio.run(go())


def test_batch_answers_land_under_the_live_keys_and_no_chat_request_is_sent(
    fake: FakeOpenAI, warehouse_path: Path
) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD)
    fake.batch_polls = 3
    replies = answer_in_batch(fake, warehouse_path, 4)
    assert [r.status for r in replies] == ["ok"] * 4 and all(r.cached == 1 and r.sent == 0 for r in replies)
    assert fake.stats()["requests"] == 0
    assert (fake.batch_stats["creates"], fake.batch_stats["retrieves"], fake.batch_stats["lines"]) == (1, 3, 4)
    with Warehouse(warehouse_path) as warehouse:
        rows = query(warehouse, "SELECT key, stage, http_status, error FROM llm_calls")
        (job,) = query(warehouse, "SELECT status, n_requests FROM llm_batches")
    assert sorted(r["key"] for r in rows) == sorted(k for r in replies for k in r.keys)
    assert all(r["http_status"] == 200 and r["error"] is None and r["stage"] == "judge" for r in rows)
    assert job == {"status": "ingested", "n_requests": 4}

    # Live mode now finds every answer in the cache: the batch wrote the very keys live requests use.
    async def live() -> list[Reply]:
        with Warehouse(warehouse_path) as warehouse:
            async with Gateway(config(fake), warehouse, "run-1") as gateway:
                return await gateway.ask_many("judge", [ask(f"q{i}") for i in range(4)])

    assert all(r.cached == 1 for r in asyncio.run(live())) and fake.stats()["requests"] == 0


def test_a_server_without_a_batch_api_is_one_line(make_fake: Callable[..., FakeOpenAI], warehouse_path: Path) -> None:
    with pytest.raises(EndpointDown, match=r"has no Batch API \(POST /files answered 404\): drop --batch"):
        answer_in_batch(make_fake(batch_api=False), warehouse_path, 2)


def test_a_batch_call_answered_with_what_is_not_http_is_one_line(warehouse_path: Path) -> None:
    """Bytes that are not an HTTP reply to a Batch API call stop the run in one line, as a live request's do,
    not as aiohttp's own error, which neither the SDK nor its transport maps."""
    with fixed_reply(200, not_http=b"THIS IS NOT HTTP\r\n\r\n") as server:
        endpoint = Endpoint(base_url=server.base_url, timeout=10)
        run = RunConfig(recipe="instructir", seeds="demo", model="m", endpoint=endpoint, batch=True)

        async def go() -> list[Reply]:
            with Warehouse(warehouse_path) as warehouse:
                async with Gateway(run, warehouse, "run-1") as gateway:
                    return await gateway.ask_many("judge", [ask("q")])

        with pytest.raises(EndpointDown) as stopped:
            asyncio.run(go())
    said = str(stopped.value)
    assert said.startswith(f"endpoint {server.base_url} failed POST /files (Reply refused: not an HTTP reply ("), said
    assert "THIS IS NOT HTTP" in said and said.endswith("the run stopped, and continues when rerun"), said


def test_a_run_stopped_while_waiting_polls_the_same_batch(fake: FakeOpenAI, warehouse_path: Path) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD)
    fake.batch_polls = 10_000
    with pytest.raises(TimeoutError):
        answer_in_batch(fake, warehouse_path, 3, timeout=3)  # past the upload and the create, however slow
    assert fake.batch_stats["creates"] == 1 and fake.batch_stats["lines"] == 0
    fake.batch_polls = fake.batch_stats["retrieves"] + 2
    replies = answer_in_batch(fake, warehouse_path, 3)
    assert [r.status for r in replies] == ["ok"] * 3
    assert fake.batch_stats["creates"] == 1, "resumed by polling, not by submitting again"
    assert fake.stats()["requests"] == 0


@pytest.mark.usefixtures("prefect")  # runs a flow: on the session's Prefect server
def test_the_recipe_runs_stage_by_stage_through_batches(tmp_path: Path, make_fake: Callable[..., FakeOpenAI]) -> None:
    from ifsynth.flows.run.config import resolve
    from ifsynth.flows.run.runner import execute
    from ifsynth.warehouse import audit
    from tests.helpers import sensible

    server = make_fake(mode="responder", responder=sensible)
    settings = resolve(
        "instructir", seeds="demo", limit=3, base_url=server.base_url, model="m", batch=True,
        sets=["instructions_per_query=3", "min_group_size=1", "batch_poll_seconds=0.01"],
    )  # fmt: skip
    run_id = execute(settings, tmp_path / "w.duckdb").run_id
    with Warehouse(tmp_path / "w.duckdb", read_only=True) as wh:
        report = audit.funnel(wh, run_id)
        stages = [r["stage"] for r in query(wh, "SELECT stage FROM llm_batches ORDER BY created_at")]
    assert server.stats()["requests"] == 0, "every answer came through a batch"
    assert stages == ["instructions", "rewrite", "judge_relevance", "judge_specificity"]
    assert report["status"] == "completed" and report["accepted"] > 0
