"""The InstructIR flow in-process, against the fake answering like a sensible model: the judges see the
right passages, the gold survives the shuffle, and the filters keep and drop what they should."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from ifsynth.flows.cli import app
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.exports import export
from ifsynth.flows.run.runner import execute
from ifsynth.flows.seeds import open_source
from ifsynth.warehouse import audit
from ifsynth.warehouse.export import release_for
from ifsynth.warehouse.store import ReleaseWriter, Warehouse
from tests.conftest import REPO, invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import query, sensible

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(mode="responder", responder=sensible) as fake:
        yield fake


def run(server: FakeOpenAI, warehouse: Path, *sets: str, prompts_dir: Path | None = None) -> str:
    config = resolve(
        "instructir",
        seeds="demo",
        limit=5,
        base_url=server.base_url,
        model="gen",
        judge_model="judge",
        sets=["instructions_per_query=4", "q1_min_score=4", *sets],
        prompts_dir=str(prompts_dir) if prompts_dir else None,
    )
    return execute(config, warehouse).run_id


def test_the_filters_keep_exactly_the_instances_a_sensible_judge_passes(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    run_id = run(server, warehouse, "min_group_size=3")
    with Warehouse(warehouse, read_only=True) as wh:
        report = audit.funnel(wh, run_id)
        stages = {s["stage"]: s for s in report["stages"]}
        assert stages["select"]["out"] == 5
        assert stages["instructions"]["out"] == 20 and stages["rewrite"]["out"] == 20
        assert (stages["judge_relevance"]["out"], stages["judge_relevance"]["rejected"]) == (15, 5)
        assert (stages["judge_specificity"]["out"], stages["judge_specificity"]["rejected"]) == (15, 0)
        assert stages["group_filter"]["out"] == 15 and report["accepted"] == 15
        judges = {r["model"] for r in query(wh, "SELECT DISTINCT model FROM llm_calls WHERE stage LIKE 'judge%'")}
        assert judges == {"judge"}
        out = tmp_path / "beir"
        export(wh, release_for(wh, run_id), "beir", out)
    queries = {q["_id"]: q for q in map(json.loads, (out / "queries.jsonl").read_text().splitlines())}
    corpus = {d["_id"]: d for d in map(json.loads, (out / "corpus.jsonl").read_text().splitlines())}
    qrels = [line.split("\t") for line in (out / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    assert len(queries) == 15 and len({q.split("_")[0] for q in queries}) == 5
    assert {q.rsplit("_", 1)[1] for q in queries} == {"1", "2", "3"}, "k is renumbered after filtering"
    for qid, did, _ in qrels:
        instruction = queries[qid]["metadata"]["instruction"]
        assert "reader 3 " not in instruction
        assert corpus[did]["text"] == f"For {instruction} here is the answer."
    noise = [d for d in corpus.values() if "_" not in d["_id"]]
    assert len(noise) == len(corpus) - 15 and noise, "untouched seed passages are the noise"
    replaced = {did.rsplit("_", 1)[0] for _, did, _ in qrels}
    assert not replaced & {d["_id"] for d in noise}, "a rewritten positive must not also stay as noise"


def test_the_release_is_written_a_page_at_a_time(
    server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of tens of thousands of seeds never holds its release rows all at once."""
    items, add = Warehouse.items, ReleaseWriter.add
    one_group_a_page = lambda self, *a, **kw: items(self, *a, **{"page": 1, **kw})  # noqa: E731
    monkeypatch.setattr(Warehouse, "items", one_group_a_page)
    written: list[int] = []

    def counted(self: ReleaseWriter, **rows: Any) -> None:
        written.append(len(rows.get("queries", ())))
        add(self, **rows)

    monkeypatch.setattr(ReleaseWriter, "add", counted)
    run_id = run(server, tmp_path / "w.duckdb", "min_group_size=3")
    assert [n for n in written if n] == [3] * 5, "each page's instances, as it is read"
    with Warehouse(tmp_path / "w.duckdb", read_only=True) as wh:
        counts = json.loads(wh.release_card(run_id) or "{}")["counts"]
        corpus = len(wh.release_docs(release_for(wh, run_id)))
    assert (counts["instances"], counts["queries"], counts["corpus"]) == (15, 5, corpus)
    assert counts["noise"] == corpus - 15 > 0


def test_a_strict_group_filter_rejects_small_groups_with_reasons(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    run_id = run(server, warehouse, "min_group_size=4")
    with Warehouse(warehouse, read_only=True) as wh:
        assert audit.funnel(wh, run_id)["accepted"] == 0
        rows = audit.audit(wh, run_id, stage="group_filter", status="rejected", limit=None)
    assert len(rows) == 15
    assert all(r["judge"] == "rule" and "kept 3 instances; at least 4 needed" in r["reason"] for r in rows)


def test_the_demo_exports_its_release_or_says_none_was_kept_and_leaves_no_earlier_export(
    server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small model's judges may keep nothing: the demo then says so and exits 0 where an export of the empty
    release would stop it as an error, and removes an earlier demo's export from its folder, which would
    otherwise pass for this run's. A folder holding files no export wrote is refused and kept."""
    made = {"kept": run(server, tmp_path / "kept.duckdb", "min_group_size=3")}
    made["empty"] = run(server, tmp_path / "empty.duckdb", "min_group_size=4")  # a filter that keeps none
    ran: list[str] = []

    def run_and_report(ctx: typer.Context, *_: object, **__: object) -> str:
        ran.append(made[Path(ctx.obj.path).stem])
        return ran[-1]

    monkeypatch.setattr(app, "_run_and_report", run_and_report)
    out = tmp_path / "demo"
    kept = invoke("--warehouse", str(tmp_path / "kept.duckdb"), "demo", "--out", str(out))
    assert kept.returncode == 0, kept.stderr
    assert f"writtento{out.resolve()}" in "".join(kept.stdout.split()), "the folder named, however rich wraps it"
    with Warehouse(tmp_path / "kept.duckdb", read_only=True) as wh:
        queries = len(wh.ordered_queries(release_for(wh, made["kept"])))
    assert len((out / "queries.jsonl").read_text().splitlines()) == queries > 0

    empty = invoke("--warehouse", str(tmp_path / "empty.duckdb"), "demo", "--out", str(out))
    assert empty.returncode == 0, empty.stderr
    assert "export: none, as no query was kept" in " ".join(empty.stdout.split())
    assert not out.exists() and not any(tmp_path.glob(".demo*")), "the earlier demo's export is gone"

    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = len(ran)
    refused = invoke("--warehouse", str(tmp_path / "empty.duckdb"), "demo", "--out", str(out))
    assert refused.returncode == 1 and "`notes.txt`, which no export wrote" in refused.stderr
    assert (out / "notes.txt").read_text() == "mine"
    assert len(ran) == before, "refused before the run, not after it"


def test_changing_one_template_resends_only_its_stage(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    run(server, warehouse, "min_group_size=3")
    sent = server.stats()["requests"]
    overlay = tmp_path / "prompts" / "instructir"
    overlay.mkdir(parents=True)
    builtin = REPO / "prompts" / "instructir" / "judge_specificity.j2"
    (overlay / "judge_specificity.j2").write_text(builtin.read_text().replace("pick", "choose"))
    run(server, warehouse, "min_group_size=3", prompts_dir=tmp_path / "prompts")
    resent = server.requests[sent:]
    assert len(resent) == 15
    assert all(r["response_format"]["json_schema"]["name"].startswith("Pick") for r in resent)


def test_no_instruction_request_shows_the_gold_passage(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    run_id = run(server, warehouse, "min_group_size=3")
    with Warehouse(warehouse, read_only=True) as wh:
        passages = [i.payload["passage"] for page in wh.items(run_id, "select") for i in page]
    asked = [
        json.dumps(r["messages"])
        for r in server.requests
        if r["response_format"]["json_schema"]["name"].startswith("Instructions")
    ]
    assert len(passages) == len(asked) == 5
    shown = [p for p in passages for prompt in asked if p[:60] in prompt or p[-60:] in prompt]
    assert not shown, "the instruction prompt must hold the query only"


def test_defaults_are_the_releases_and_the_card_says_where_the_paper_differs(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    warehouse = tmp_path / "w.duckdb"
    run_id = run(server, warehouse, "instructions_per_query=7")  # reader 3 fails: groups of 6 survive
    judged = [r for r in server.requests if r["response_format"]["json_schema"]["name"] == "RelevanceJudgement"]
    assert judged and {r["temperature"] for r in judged} == {0.7}
    with Warehouse(warehouse, read_only=True) as wh:
        assert audit.funnel(wh, run_id)["accepted"] == 30, "groups of exactly 6 are kept"
        release = release_for(wh, run_id)
        card = json.loads(query(wh, "SELECT card FROM releases WHERE name = ?", [release])[0]["card"])
        docs = query(wh, "SELECT doc_id, meta FROM release_docs WHERE release = ?", [release])
        export(wh, release, "beir", tmp_path / "beir")
    params, fidelity = card["params"], card["fidelity"]
    assert (params["min_group_size"], params["noise_pool"], params["passage_band"]) == (6, "positives", "outside")
    differs = {d["what"]: d for d in fidelity["differs"]}
    assert {what: (d["paper"], d["release"]) for what, d in differs.items()} == {
        "passage length band": ("`passage_band=inside`", "`passage_band=outside`"),
        "group filter": ("`min_group_size=7`", "`min_group_size=6`"),
        "multi-line rewrites": ("the release's parser kept a rewrite's first line", "the whole rewrite"),
        "`instructions_per_query`": ("`instructions_per_query=10`", "`instructions_per_query=7`"),
    }
    assert differs["`instructions_per_query`"]["why"] == "set for this run"
    assert "239 of its 1,267" in differs["group filter"]["why"]
    assert set(fidelity["templates"]) == {f"instructir/{t}" for t in ("instructions", "rewrite", "judge_relevance",
                                                                          "judge_specificity")}  # fmt: skip
    seed_positives = {p.positives[0].doc_id for p in open_source("demo").pairs()}
    noise = {d["doc_id"] for d in docs if json.loads(d["meta"]).get("noise")}
    assert noise and noise <= seed_positives, "the noise is the other seed queries' positives"
    assert len(noise) == len(seed_positives) - 5
    readme = (tmp_path / "beir" / "README.md").read_text()
    assert "## Fidelity" in readme and "| group filter | `min_group_size=7` | `min_group_size=6` |" in readme


def test_the_whole_corpus_is_one_setting_away_as_noise(server: FakeOpenAI, tmp_path: Path) -> None:
    warehouse = tmp_path / "w.duckdb"
    run_id = run(server, warehouse, "min_group_size=3", "noise_pool=corpus", "max_noise_passages=100")
    with Warehouse(warehouse, read_only=True) as wh:
        docs = query(wh, "SELECT doc_id, meta FROM release_docs WHERE release = ?", [release_for(wh, run_id)])
    seed_positives = {p.positives[0].doc_id for p in open_source("demo").pairs()}
    noise = {d["doc_id"] for d in docs if json.loads(d["meta"]).get("noise")}
    assert len(noise) == 100 and noise - seed_positives
