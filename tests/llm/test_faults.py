"""The recipe under injected 429s, 500s, invalid JSON and cut-off answers: it completes, every fault is a row
in llm_calls, and every stage accounts for each of its inputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.runner import execute
from ifsynth.warehouse import audit
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI
from tests.helpers import query, sensible

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server


def reasked(body: dict[str, Any]) -> dict[str, Any]:
    """The sensible judge, also on a re-ask (which appends the bad answer and a correction to the prompt)."""
    messages = body["messages"]
    if len(messages) > 2 and messages[-2]["role"] == "assistant":
        body = {**body, "messages": messages[:-2]}
    return sensible(body)


def test_faults_are_recorded_and_no_item_is_lost(tmp_path: Path, make_fake: Callable[..., FakeOpenAI]) -> None:
    faults = {"rate_429": 0.1, "rate_500": 0.05, "rate_invalid_json": 0.05, "rate_length": 0.03}
    server = make_fake(mode="responder", responder=reasked, retry_after=0.01, **faults)
    settings = resolve(
        "instructir", seeds="demo", limit=4, base_url=server.base_url, model="m",
        sets=["instructions_per_query=4", "min_group_size=1", "max_attempts=8"],
    )  # fmt: skip
    run_id = execute(settings, tmp_path / "w.duckdb").run_id
    served = server.stats()
    with Warehouse(tmp_path / "w.duckdb", read_only=True) as wh:
        report = audit.funnel(wh, run_id)
        (rows,) = query(
            wh,
            "SELECT count(*) FILTER (WHERE http_status = 429) AS r429, count(*) FILTER (WHERE http_status = 500) "
            "AS r500, count(*) FILTER (WHERE finish_reason = 'length') AS length, count(*) AS total FROM llm_calls",
        )
    outcomes = served["by_outcome"]
    assert report["status"] == "completed"
    assert outcomes["429"] > 0 and outcomes["500"] > 0 and outcomes["invalid_json"] + outcomes["length"] > 0
    assert (rows["r429"], rows["r500"], rows["length"], rows["total"]) == (
        outcomes["429"], outcomes["500"], outcomes["length"], served["requests"],
    )  # fmt: skip
    stages = {s["stage"]: s for s in report["stages"]}
    for stage, source in (("instructions", "select"), ("rewrite", "instructions"), ("judge_relevance", "rewrite")):
        assert stages[stage]["in"] == stages[source]["out"], f"{stage} lost inputs of {source}"
    relevance = stages["judge_relevance"]
    passed = relevance["in"] - relevance["rejected"] - relevance["parse_error"] - relevance["failed"]
    assert stages["judge_specificity"]["in"] == passed
    for stage in stages.values():
        assert stage["rejected"] + stage["parse_error"] + stage["failed"] <= stage["in"]
