"""`ifsynth run infosearch --seeds demo` end to end in a child process, against the fake answering every
schema with a random valid instance: the run completes for all six dimensions and the export has the public
InfoSearch layout."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ifsynth.flows.recipes.infosearch.settings import DIMENSIONS
from ifsynth.warehouse.store import Warehouse
from tests.conftest import cli, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import query

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

# Random scores pass a judge 2 times in 5 and a core query needs every judge of its chain to pass, so with
# strict settings almost nothing survives random answers. Opening the judges (the rules still apply) lets
# enough through for the export's contents to be checked, not only its layout.
OPEN_JUDGES = (
    "--set", "min_rewrite_score=1", "--set", "min_reversal_score=1", "--set", "max_negative_score=5",
    "--set", "min_negative_overlap=0",
)  # fmt: skip


def test_random_answers_still_complete_all_six_dimensions(tmp_path: Path, make_fake: Callable[..., FakeOpenAI]) -> None:
    warehouse, out = tmp_path / "w.duckdb", tmp_path / "export"
    server = make_fake()
    run = cli(
        "--warehouse", str(warehouse), "run", "infosearch", "--seeds", "demo", "--base-url", server.base_url,
        "--model", "m", "--json", *OPEN_JUDGES,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    funnel = json.loads(run.stdout)
    assert funnel["status"] == "completed"
    stages = {s["stage"]: s for s in funnel["stages"]}
    assert stages["collect"]["in"] == 18 and stages["collect"]["rejected"] == 0, "3 demo queries x 6 dimensions"
    for name in ("rules", "judge_rewrite", "judge_reversal"):
        s = stages[name]
        assert s["in"] == s["out"] + s["rejected"] + s["parse_error"] + s["failed"], name
    with Warehouse(warehouse, read_only=True) as wh:
        made = {r["dimension"] for r in query(wh, "SELECT DISTINCT payload->>'dimension' AS dimension FROM items")}
    assert made == set(DIMENSIONS)
    export = invoke("--warehouse", str(warehouse), "export", "--format", "infosearch", "--out", str(out))
    assert export.returncode == 0, export.stderr
    # a dimension none of whose core queries survived the random answers is left out, and the export says so
    exported = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert exported and set(exported) <= set(DIMENSIONS)
    for dimension in set(DIMENSIONS) - set(exported):
        assert f"left out: dimension {dimension}: no core query of it survived" in export.stdout
    total = 0
    for dimension in exported:
        files = sorted(str(p.relative_to(out / dimension)) for p in (out / dimension).rglob("*") if p.is_file())
        assert files == [
            "README.md", "corpus.jsonl", "qrels_changed.jsonl", "qrels_changed/test.tsv", "qrels_og.jsonl",
            "qrels_og/test.tsv", "qrels_reversed.jsonl", "qrels_reversed/test.tsv", "queries.jsonl",
        ]  # fmt: skip
        corpus = {json.loads(line)["_id"] for line in (out / dimension / "corpus.jsonl").read_text().splitlines()}
        queries = [json.loads(line) for line in (out / dimension / "queries.jsonl").read_text().splitlines()]
        assert all(
            set(q) == {"_id", "text", "instruction_og", "instruction_changed", "instruction_reversed"} for q in queries
        )
        for mode in ("og", "changed", "reversed"):
            header, *rows = (out / dimension / f"qrels_{mode}" / "test.tsv").read_text().splitlines()
            assert header == "query-id\tcorpus-id\tscore"
            assert {row.split("\t")[0] for row in rows} == {q["_id"] for q in queries}
            assert {row.split("\t")[1] for row in rows} <= corpus
        total += len(queries)
    assert total == funnel["accepted"] > 0, "what survived the random answers is exported whole"
