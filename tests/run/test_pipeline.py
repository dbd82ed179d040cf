"""LLM stages that run together (flows/run/pipeline.py): the same output as one stage after the other, with
the later stages asking while the earlier ones still do."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.run import signals
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.pipeline import together
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.runner import execute
from ifsynth.schemas.errors import BudgetExhausted, Interrupted
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI
from tests.helpers import query, sensible
from tests.recipes.test_infosearch import sensible as infosearch_answers

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

SETS = {"instructir": ["instructions_per_query=4", "q1_min_score=4", "min_group_size=3"], "infosearch": []}
LIMITS = {"instructir": 5, "infosearch": None}
ANSWERS = {"instructir": sensible, "infosearch": infosearch_answers}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeOpenAI]:
    name = getattr(request, "param", "instructir")
    with FakeOpenAI(mode="responder", responder=ANSWERS[name], latency=0.02) as fake:
        yield fake


def run(server: FakeOpenAI, warehouse: Path, name: str, *sets: str, **settings: Any) -> str:
    config = resolve(name, seeds="demo", limit=LIMITS[name], base_url=server.base_url, model="gen", concurrency=3,
                     sets=[*SETS[name], *sets], **settings)  # fmt: skip
    return execute(config, warehouse).run_id


def written(warehouse: Path, run_id: str) -> dict[str, Any]:
    """What a run wrote, without its ids and times: items, verdicts, the funnel."""
    with Warehouse(warehouse, read_only=True) as wh:
        items = query(wh, "SELECT item_id, stage, status, payload FROM items WHERE run_id = ? ORDER BY ALL", [run_id])
        verdicts = query(
            wh,
            "SELECT item_id, stage, decision, score, reason FROM verdicts WHERE run_id = ? ORDER BY ALL",
            [run_id],
        )
        counts = query(wh, "SELECT * EXCLUDE (run_id) FROM stage_counts WHERE run_id = ? ORDER BY ord", [run_id])
    return {"items": items, "verdicts": verdicts, "counts": counts}


def spans(warehouse: Path, run_id: str) -> dict[str, tuple[float, float]]:
    """Per LLM stage, when its first request left and its last answer came."""
    with Warehouse(warehouse, read_only=True) as wh:
        rows = query(
            wh,
            "SELECT stage, epoch(min(created_at - to_milliseconds(latency_ms))) AS first, "
            "epoch(max(created_at)) AS last FROM llm_calls WHERE run_id = ? GROUP BY stage",
            [run_id],
        )
    return {row["stage"]: (row["first"], row["last"]) for row in rows}


@pytest.mark.parametrize(("server", "name"), [(name, name) for name in sorted(SETS)], indirect=["server"])
def test_stages_run_together_write_what_they_write_one_after_the_other(
    server: FakeOpenAI, tmp_path: Path, name: str
) -> None:
    apart, joined = tmp_path / "apart.duckdb", tmp_path / "together.duckdb"
    apart_id = run(server, apart, name, "stage_by_stage=true")  # as a config file's key, or --set
    joined_id = run(server, joined, name)
    one_by_one, at_once = written(apart, apart_id), written(joined, joined_id)
    assert any(item["status"] == "rejected" for item in at_once["items"]), "the judges reject some: statuses matter"
    assert at_once == one_by_one

    # a stage of the set asked before the stage before it had its last answer; one after the other, never
    stages = recipe(name).stage_list(recipe(name).settings.model_validate({}), sharded=False)
    names = [stages[order - 1].name for order in next(orders for orders in together(stages) if len(orders) > 1)]
    run_together, run_apart = spans(joined, joined_id), spans(apart, apart_id)
    pairs = list(itertools.pairwise(names))
    assert any(run_together[later][0] < run_together[earlier][1] for earlier, later in pairs)
    assert all(run_apart[later][0] >= run_apart[earlier][1] for earlier, later in pairs)


def test_a_budget_spent_mid_set_stops_the_run_with_its_answers_kept(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    with pytest.raises(BudgetExhausted, match="stopped: budget of 30 calls"):
        run(server, warehouse, "instructir", max_calls=30)
    with Warehouse(warehouse, read_only=True) as wh:
        run_id, status = wh.run().run_id, wh.run().status
        calls = query(wh, "SELECT stage, count(*) AS n FROM llm_calls WHERE run_id = ? GROUP BY stage", [run_id])
    by_stage = {row["stage"]: row["n"] for row in calls}
    assert status == "stopped"
    assert sum(by_stage.values()) == 30, "what was in flight finished and was kept; nothing more was sent"
    assert by_stage.get("judge_relevance", 0) > 0, "the budget ran out while the stages ran together"


def test_a_stop_while_a_stage_closes_still_records_the_stage(
    server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first stage of the set has decided all its inputs and its rows are being written (in a worker
    thread) when Ctrl-C comes: the run stops, and the stage's counts and statuses are recorded all the same."""
    drain = Warehouse.drain

    def interrupted(self: Warehouse) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # reaches the run's handler in the main thread, which stops the loop
        time.sleep(0.5)
        drain(self)

    monkeypatch.setattr(Warehouse, "drain", interrupted)
    warehouse = tmp_path / "w.duckdb"
    try:
        with pytest.raises(Interrupted):
            run(server, warehouse, "instructir")
    finally:
        signals._received.clear()  # the stop is forgotten: a later test of this process reads none
    with Warehouse(warehouse, read_only=True) as wh:
        status = wh.run().status
        recorded = query(wh, "SELECT stage, n_in FROM stage_counts ORDER BY ord")
    assert status == "interrupted"
    assert [row["stage"] for row in recorded] == ["select", "instructions"], recorded
    assert recorded[1]["n_in"] > 0
