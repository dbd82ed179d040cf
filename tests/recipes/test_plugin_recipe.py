"""A recipe of another package: examples/recipe-plugin (instruction negatives in the manner of Promptriever),
installed beside ifsynth by `make test`. It is found through the entry point and runs, caches, audits, reports
and exports as ifsynth's own recipes do; its stages' halves are plain functions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ifsynth_promptriever.stages import JudgeNegatives, WriteNegatives, triplet_rows

from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.runner import execute
from ifsynth.flows.run.stage import Outcome
from ifsynth.flows.stages.assemble import Rows
from ifsynth.schemas.answers import RelevanceLabel, query_negatives
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import at, env, field, item, ok, query, unusable

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server


def follows(body: dict[str, Any]) -> dict[str, Any]:
    """A model that does as the plugin's templates ask: of each query's three negatives the second meets the
    instruction after all, so its judge finds it relevant under the instruction too."""
    name = body["response_format"]["json_schema"]["name"]
    prompt = body["messages"][-1]["content"]
    if name.startswith("Instructions"):
        return {"instructions": [f"I want answers about {field(prompt, 'Query')} from a home cook."]}
    if name.startswith("QueryNegatives"):
        query_text = field(prompt, "Query")
        return {
            "passages": [f"{query_text}: fails it, {n}" if n != 2 else f"{query_text}: meets it" for n in (1, 2, 3)]
        }
    if name == "RelevanceLabel":
        under_instruction = "Instruction:" in prompt
        relevant = not under_instruction or "meets it" in field(prompt, "Passage")
        return {"explanation": "read it", "relevant": relevant}
    raise AssertionError(f"unexpected request {name}")


FAKE = {"mode": "responder", "responder": follows}  # the module's `server`


@pytest.fixture(scope="module")
def made(server: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("plugin")
    warehouse = root / "w.duckdb"
    config = resolve("promptriever", seeds="demo", base_url=server.base_url, model="m")
    run_id = execute(config, warehouse).run_id
    return {"root": root, "warehouse": warehouse, "run_id": run_id, "sent": server.stats()["requests"]}


def test_the_plugin_is_found_through_its_entry_point_and_named_by_no_file_of_ifsynth() -> None:
    listed = json.loads(invoke("recipes", "--json").stdout)
    assert {row["recipe"] for row in listed} >= {"promptriever", "instructir"}
    assert recipe("promptriever").templates == ("instructions", "negatives", "judge")
    ours = [p for top in ("flows", "prompts", "schemas", "warehouse") for p in (REPO / top).rglob("*") if p.is_file()]
    assert not [p for p in ours if "promptriever" in p.read_bytes().decode("utf-8", "replace").lower()]


def test_a_run_keeps_the_negatives_its_judge_finds_relevant_to_the_query_alone(made: dict[str, Any]) -> None:
    with Warehouse(made["warehouse"], read_only=True) as wh:
        assert wh.run(made["run_id"]).status == "completed"
        judged = query(wh, "SELECT decision, COUNT(*) AS n FROM verdicts WHERE stage = 'judge' GROUP BY decision")
        kept = query(wh, "SELECT COUNT(*) AS n FROM release_qrels WHERE score = 0")
    # six demo queries, three negatives each; the second of each meets the instruction
    assert {row["decision"]: row["n"] for row in judged} == {"pass": 12, "reject": 6}
    assert kept == [{"n": 12}]
    assert made["sent"] == 6 + 6 + 18 * 2  # instructions, negatives, two labels per negative


def test_its_own_export_and_audit_and_report_work_as_ifsynths_own(made: dict[str, Any], server: FakeOpenAI) -> None:
    out, warehouse = made["root"] / "triplets", str(made["warehouse"])
    exported = invoke("--warehouse", warehouse, "export", "--format", "triplets", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all("fails it" in row["negative"] for row in rows)
    assert {row["positive"] for row in rows} and all(row["instruction"].startswith("I want") for row in rows)
    assert "configs:" in (out / "README.md").read_text()
    audit = invoke("--warehouse", warehouse, "audit", "--stage", "judge", "--json")
    assert audit.returncode == 0, audit.stderr
    removed = json.loads(audit.stdout)  # what the judge removed, each with why
    assert len(removed) == 6 and all(row["status"] == "rejected" for row in removed)
    assert all("under the instruction: relevant" in row["reason"] for row in removed)
    report = invoke("--warehouse", warehouse, "report", "--out", str(made["root"] / "report.html"))
    assert report.returncode == 0, report.stderr
    wrong = invoke("--warehouse", warehouse, "export", "--format", "followir", "--out", str(made["root"] / "x"))
    assert wrong.returncode != 0 and "followir" in wrong.stderr


def test_a_rerun_is_served_from_the_cache(made: dict[str, Any], server: FakeOpenAI) -> None:
    before = server.stats()["requests"]
    again = execute(resolve("promptriever", seeds="demo", base_url=server.base_url, model="m"), made["warehouse"])
    assert server.stats()["requests"] == before  # every answer from the cache
    with Warehouse(made["warehouse"], read_only=True) as wh:
        releases = [query(wh, "SELECT query, instruction FROM release_queries WHERE release = ? ORDER BY query_id",
                          [wh.run(run).name]) for run in (made["run_id"], again.run_id)]  # fmt: skip
    assert releases[0] == releases[1] and len(releases[0]) == 6


SEED = item(
    "instructions", "instruction", query_id="pq1", doc_id="pd1", query="keep basil fresh",
    passage="Stand it in water.", instruction="I cook at home.",
)  # fmt: skip


def test_negatives_are_asked_in_one_call_and_each_becomes_an_item() -> None:
    stage = WriteNegatives(per_instruction=2, max_tokens=64)
    (ask,) = stage.build(env("promptriever", "negatives"), SEED)
    assert ask.schema is query_negatives(2) and "I cook at home." in ask.prompt.messages[-1]["content"]
    outcome = stage.handle(env("promptriever", "negatives"), SEED, [ok(query_negatives(2)(passages=["a", "b"]))])
    assert [made.payload["negative"] for made in outcome.items] == ["a", "b"]
    assert all(made.parent_ids == (SEED.item_id,) for made in outcome.items)
    unanswered = stage.settle(env("promptriever"), SEED, [unusable()])
    assert isinstance(unanswered, Outcome) and unanswered.decision == "parse_error"


def test_the_judge_keeps_what_answers_the_query_but_not_the_instruction() -> None:
    negative = SEED.model_copy(update={"payload": {**SEED.payload, "negative": "Freeze it."}})
    stage, ctx = JudgeNegatives(max_tokens=64), at(env("promptriever"), "judge")
    alone, instructed = stage.build(ctx, negative)
    assert "Instruction:" not in alone.prompt.messages[-1]["content"]
    assert "Instruction: I cook at home." in instructed.prompt.messages[-1]["content"]

    def decided(first: bool, second: bool) -> str:
        labels = [
            ok(RelevanceLabel(explanation="x", relevant=first)),
            ok(RelevanceLabel(explanation="y", relevant=second)),
        ]
        return stage.handle(ctx, negative, labels).decision

    assert (decided(True, False), decided(True, True), decided(False, False)) == ("pass", "reject", "reject")


def test_the_plugin_is_four_files_beside_its_templates_and_seeds() -> None:
    package = REPO / "examples" / "recipe-plugin"
    built = ("__pycache__", ".egg-info", "build")  # what installing it leaves beside its files
    files = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*")
        if p.is_file() and not any(part.endswith(built) for part in p.relative_to(package).parts)
    ]
    code = [
        f for f in files if not f.startswith(("ifsynth_promptriever/promptriever/", "ifsynth_promptriever/demo_seeds/"))
    ]
    assert sorted(code) == ["ifsynth_promptriever/__init__.py", "ifsynth_promptriever/export.py",
                            "ifsynth_promptriever/stages.py", "pyproject.toml"]  # fmt: skip


def test_a_positive_of_two_queries_is_one_document_of_the_release() -> None:
    """The plugin keeps each query's positive as it is, under its own id: two queries of one positive gave two
    rows of one document, and the release failed at the end of the run."""
    used: set[str] = set()
    pages = [Rows(used=used), Rows(used=used)]  # one query a page: the release's pages share what they used
    for query_id, rows in zip(("q1", "q2"), pages, strict=True):
        negative = item("judge", "negative", query_id, query_id=query_id, doc_id="d7", query=f"{query_id}?",
                        passage="p", instruction="i", negative="n")  # fmt: skip
        triplet_rows(rows, negative, 1)
    assert [d["doc_id"] for rows in pages for d in rows.docs] == ["d7", "q1-negative-1", "q2-negative-1"]
    assert [(r["query_id"], r["doc_id"], r["score"]) for rows in pages for r in rows.qrels] == [
        ("q1", "d7", 1), ("q1", "q1-negative-1", 0), ("q2", "d7", 1), ("q2", "q2-negative-1", 0)
    ]  # fmt: skip
