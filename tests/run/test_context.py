"""A run is resumable from any process: the recipe's flow, given the warehouse and a run id, rebuilds the
run's context from what the warehouse recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ifsynth.warehouse.store import Warehouse
from tests.conftest import cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import sensible

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server


def test_a_stopped_run_is_finished_by_its_flow_called_in_a_fresh_process(
    tmp_path: Path, make_fake: Callable[..., FakeOpenAI]
) -> None:
    """What a Prefect worker does: given only the warehouse and the run id, the recipe's flow rebuilds the
    run's context from what the warehouse recorded and finishes it; the key comes from the environment."""
    stopped, whole = tmp_path / "stopped.duckdb", tmp_path / "whole.duckdb"
    args = (
        "run",
        "instructir",
        "--seeds",
        "demo",
        "--limit",
        "3",
        "--model",
        "m",
        "--set",
        "instructions_per_query=3",
        "--set",
        "min_group_size=1",
    )
    server = make_fake(mode="responder", responder=sensible)
    first = cli("--warehouse", str(stopped), *args, "--base-url", server.base_url, "--max-calls", "5", "--json")
    assert first.returncode == 3, first.stderr[-2000:]
    with Warehouse(stopped, read_only=True) as wh:
        run = wh.run()
    assert run.status == "stopped"
    flow = "from ifsynth.flows.run.flows import instructir"
    call = f"{flow}; instructir({str(stopped)!r}, {run.run_id!r})"
    fresh = subprocess.run(
        [sys.executable, "-c", call], capture_output=True, text=True, timeout=300,
        env={**os.environ, "OPENAI_API_KEY": "sk-from-the-environment"},
    )  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert all(h["authorization"] == "Bearer sk-from-the-environment" for h in server.headers[5:])
    assert cli("--warehouse", str(whole), *args, "--base-url", server.base_url).returncode == 0
    with Warehouse(stopped, read_only=True) as wh:
        assert wh.run(run.run_id).status == "completed"
    exports = {}
    for name, path in (("stopped", stopped), ("whole", whole)):
        out = tmp_path / f"export-{name}"
        assert invoke("--warehouse", str(path), "export", "--format", "beir", "--out", str(out)).returncode == 0
        files = (p for p in out.rglob("*") if p.is_file() and p.suffix != ".md")
        exports[name] = {p.relative_to(out): p.read_bytes() for p in files}
    assert exports["stopped"] == exports["whole"] and exports["whole"]
