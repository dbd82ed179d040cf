"""The IFIR recipe in-process against the fake answering like a writer and an assessor that follow the rules below.

A level is written as the level below plus a marker ``[L<n>]``; the check fails a level whose marker carries a
``*`` (it "drops a condition"). fin-q1's level 2 fails once and is written again; law-q2's fails twice, so
law-q2 keeps level 1 only. The re-check judges by level: level 1 keeps every passage, level 2 all but the last
(by id; all of them in science, where the stance rule then drops the CONTRADICT ones), level 3 the first two,
and for fin-q3 also its last (relevant at 3 but not at 2: the nesting rule drops it); hc-q3 has none at level 3.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.evaluation.evaluate_release import EvaluateOptions, evaluate
from ifsynth.flows.recipes.ifir.select import seed_sources
from ifsynth.flows.recipes.ifir.settings import IFIRParams
from ifsynth.flows.run.config import resolve
from ifsynth.flows.run.exports import export, import_release
from ifsynth.flows.run.registry import metrics_of
from ifsynth.flows.run.runner import execute
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.ifir import DOMAINS, SCHEMES, level_mode, release_id
from ifsynth.warehouse import audit
from ifsynth.warehouse.export import release_for
from ifsynth.warehouse.store import Warehouse
from tests.conftest import REPO
from tests.fake_openai import FakeOpenAI
from tests.helpers import field, query

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

SEEDS = REPO / "flows" / "demo_seeds" / "ifir"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


PASSAGES: dict[str, str] = {}  # text -> release id
RELEVANT: dict[str, list[str]] = {}  # release query id -> its relevant release passage ids, sorted
LABELS: dict[str, str] = {}  # release passage id -> seed stance label
for _subset in SCHEMES:
    for _row in _jsonl(SEEDS / _subset / "corpus.jsonl"):
        PASSAGES[" ".join(_row["text"].split())] = release_id(_subset, _row["_id"])
    for _line in (SEEDS / _subset / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        _q, _d, _ = _line.split("\t")
        RELEVANT.setdefault(release_id(_subset, _q), []).append(release_id(_subset, _d))
    for _row in _jsonl(SEEDS / _subset / "queries.jsonl"):
        for _d, _label in (_row.get("metadata", {}).get("labels") or {}).items():
            LABELS[release_id(_subset, _d)] = _label
QUERY_TEXT = {release_id(s, row["_id"]): row["text"] for s in SCHEMES for row in _jsonl(SEEDS / s / "queries.jsonl")}
QUERY_OF = {doc: qid for qid, docs in RELEVANT.items() for doc in docs}
FAILS_ONCE, FAILS_TWICE, NESTING, EMPTY_AT_3 = "fiqa-fin-q1", "aila-law-q2", "fiqa-fin-q3", "pm-hc-q3"


def judged_relevant(qid: str, level: int) -> set[str]:
    docs = sorted(RELEVANT[qid])
    if level == 1 or (level == 2 and qid.startswith("scifact_open")):
        return set(docs)
    if level == 2:
        return set(docs[:-1])
    if qid == EMPTY_AT_3:
        return set()
    return set(docs[:2]) | ({docs[-1]} if qid == NESTING else set())


def expected(qid: str) -> dict[int, set[str]]:
    """The nested qrels the recipe must release for a query, level by level."""
    out: dict[int, set[str]] = {}
    below = set(RELEVANT[qid])
    for level in (1, 2, 3):
        if level == 2 and qid == FAILS_TWICE:
            break
        kept = judged_relevant(qid, level) & below
        if level >= 2 and qid.startswith("scifact_open"):
            kept = {doc for doc in kept if LABELS[doc] == "SUPPORT"}  # the tie 2-2 gives the first label
        if not kept:
            break
        out[level] = below = kept
    return out


def line_after(prompt: str, heading: str) -> str:
    lines = prompt.splitlines()
    return next(lines[n + 1] for n, line in enumerate(lines) if line.startswith(heading))


def first_prompt(body: dict[str, Any]) -> str:
    return str(next(m["content"] for m in body["messages"] if m["role"] == "user"))


def expert(body: dict[str, Any]) -> dict[str, Any]:
    name = body["response_format"]["json_schema"]["name"]
    prompt = first_prompt(body)
    if name == "LevelInstruction":
        below = line_after(prompt, "Their current instruction")
        asked = re.search(r"Write the level (\d) instruction", prompt)
        assert asked, "a level prompt names the level it asks for"
        level = int(asked.group(1))
        qid = next(q for q, text in QUERY_TEXT.items() if f"Query: {text}\n" in prompt)
        bad = (qid == FAILS_ONCE and "An earlier attempt" not in prompt) or (qid == FAILS_TWICE and level == 2)
        return {"added": [f"detail {level}"], "instruction": f"{below} [L{level}{'*' if bad else ''}]"}
    if name == "LevelCheck":
        above = line_after(prompt, "Higher-level instruction:")
        keeps = not above.endswith("*]")
        return {"explanation": "kept" if keeps else "the asker's age is gone", "keeps_all": keeps, "adds": True}
    if name == "RelevanceLabel":
        instruction, passage = field(prompt, "Instruction"), " ".join(field(prompt, "Passage").split())
        doc = PASSAGES[passage]
        level = 1 + instruction.count("[L")
        relevant = doc in judged_relevant(QUERY_OF[doc], level)
        return {"explanation": f"level {level} on {doc}", "relevant": relevant}
    raise AssertionError(f"unexpected request {name}")


FAKE = {"mode": "responder", "responder": expert}  # the module's `server`


def run(server: FakeOpenAI, root: Path, out: str = "beir") -> dict[str, Any]:
    config = resolve("ifir", seeds="demo", base_url=server.base_url, model="gen")
    warehouse = root / "w.duckdb"
    run_id = execute(config, warehouse).run_id
    with Warehouse(warehouse, read_only=True) as wh:
        name = release_for(wh, run_id)
        export(wh, name, "beir", root / out, overwrite=True)
        return {
            "root": root,
            "warehouse": warehouse,
            "run_id": run_id,
            "name": name,
            "funnel": audit.funnel(wh, run_id),
        }


@pytest.fixture(scope="module")
def release(server: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run(server, tmp_path_factory.mktemp("ifir"))


def released_qrels(made: dict[str, Any]) -> dict[str, dict[int, set[str]]]:
    got: dict[str, dict[int, set[str]]] = {}
    with Warehouse(made["warehouse"], read_only=True) as wh:
        for row in wh.release_qrels(made["name"]):
            level = int(row["mode"].removeprefix("level"))
            got.setdefault(row["query_id"], {}).setdefault(level, set()).add(row["doc_id"])
    return got


def test_every_query_keeps_nested_levels_as_its_judgments_allow(release: dict[str, Any]) -> None:
    got = released_qrels(release)
    assert set(got) == set(RELEVANT), "every demo query keeps at least level 1"
    for qid in RELEVANT:
        assert got[qid] == expected(qid), qid
        levels = sorted(got[qid])
        assert levels == list(range(1, len(levels) + 1))
        for level in levels[1:]:
            assert got[qid][level] <= got[qid][level - 1], "level n+1's relevant passages are relevant at level n"
    assert sorted(got[FAILS_TWICE]) == [1] and sorted(got[EMPTY_AT_3]) == [1, 2]
    assert sorted(got[FAILS_ONCE]) == [1, 2, 3], "written again after its check failed, then kept"


def test_every_passage_dropped_between_levels_has_a_recorded_verdict(release: dict[str, Any]) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        rows = query(
            wh,
            "SELECT i.group_id, json_extract_string(i.payload, '$.doc_id') AS doc, "
            "json_extract(i.payload, '$.level')::INT AS level, v.stage, v.judge, v.decision, v.reason "
            "FROM items i JOIN verdicts v USING (run_id, item_id) WHERE i.run_id = ? AND i.kind = 'label'",
            [release["run_id"]],
        )
    rejections: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["decision"] == "reject":
            rejections.setdefault((row["group_id"], row["level"], row["doc"]), []).append(row)
    got = released_qrels(release)
    for qid, levels in got.items():
        for level in sorted(levels)[1:]:
            for doc in levels[level - 1] - levels[level]:
                assert (qid, level, doc) in rejections, f"{doc} left {qid} at level {level} without a verdict"
    (nesting,) = [
        r for rs in rejections.values() for r in rs if r["judge"] == "rule:nesting" and r["group_id"] == NESTING
    ]
    assert "relevant at level 3 but not at level 2" in nesting["reason"]
    stance = [r for rs in rejections.values() for r in rs if r["judge"] == "rule:stance"]
    assert stance and all(LABELS[r["doc"]] == "CONTRADICT" and r["stage"] == "nest" for r in stance)


def test_levels_are_checked_and_a_failing_one_written_once_more(release: dict[str, Any]) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        rows = audit.audit(wh, release["run_id"], stage="level2")
    rejected = [row for row in rows if row.get("group_id") in (FAILS_ONCE, FAILS_TWICE)]
    assert sorted(row["group_id"] for row in rejected) == sorted([FAILS_ONCE, FAILS_TWICE, FAILS_TWICE])
    assert all("drops a condition of the level below" in row["reason"] for row in rejected)
    stages = {s["stage"]: s for s in release["funnel"]["stages"]}
    assert (stages["level2"]["in"], stages["level2"]["out"], stages["level2"]["rejected"]) == (12, 11, 1)
    assert stages["level3"]["in"] == 11


def test_science_level_2_asks_for_the_stance_its_labels_hold(server: FakeOpenAI, release: dict[str, Any]) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        prompts = [
            json.loads(r["request"])["messages"][-1]["content"]
            for r in query(wh, "SELECT request FROM llm_calls WHERE stage = 'level2'")
        ]
    science = [p for p in prompts if "scientific claim" in p and "Write the level 2 instruction" in p]
    assert science and all("the evidence must support the claim" in p for p in science)


def test_a_second_run_sends_nothing_and_writes_identical_files(release: dict[str, Any], server: FakeOpenAI) -> None:
    before = server.stats()["requests"]
    again = run(server, release["root"], out="again")
    assert server.stats()["requests"] == before
    first, second = release["root"] / "beir", again["root"] / "again"
    files = sorted(p for p in first.rglob("*") if p.is_file() and p.name != "README.md")
    assert {p.relative_to(first).parts[0] for p in files} == {level_mode(n) for n in (1, 2, 3)}
    for path in files:
        assert path.read_bytes() == (second / path.relative_to(first)).read_bytes(), path.name


def test_the_ifir_export_nests_and_imports_back_into_the_same_counts(release: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "ifir"
    with Warehouse(release["warehouse"], read_only=True) as wh:
        export(wh, release["name"], "ifir", out)
        card = json.loads(query(wh, "SELECT card FROM releases WHERE run_id = ?", [release["run_id"]])[0]["card"])
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(SCHEMES)
    for subset in SCHEMES:
        for row in json.loads((out / subset / "test_data.json").read_text()):
            qid = release_id(subset, row["_id"])
            corpus = [release_id(subset, doc["_id"]) for doc in row["corpus"]]
            assert sorted(corpus) == sorted(RELEVANT[qid]), "each query's corpus list is its originally relevant set"
            levels = {entry["level"]: {corpus[i] for i in entry["rel"]} for entry in row["instructions"]}
            assert levels == expected(qid)
    with Warehouse(tmp_path / "imported.duckdb") as wh:
        imported = import_release(wh, "ifir", out, name="back")
    for key in ("queries", "instances", "corpus", "qrels"):
        assert imported["counts"][key] == card["counts"][key], key
    assert card["counts"]["queries"] == len(RELEVANT)


def test_evaluate_scores_every_level_by_domain_with_its_instfol(release: dict[str, Any], tmp_path: Path) -> None:
    with FakeOpenAI() as judge, Warehouse(release["warehouse"]) as wh:
        options: dict[str, Any] = {
            "out_file": tmp_path / "bm25.trec",
            "base_url": judge.base_url,
            "judge_model": "judge",
        }
        report = evaluate(
            wh, release["name"], EvaluateOptions(retriever="bm25", instfol=True, **options), metrics_of, notify=print
        )
    assert set(report["modes"]) == {level_mode(n) for n in (1, 2, 3)}
    for block in report["modes"].values():
        assert 0 < block["ndcg@20"] <= 1 and 0 < block["mrr@20"] <= 1, "BM25 finds some relevant passages"
        assert -1 <= block["instfol@20"] <= 1
    assert set(report["by_domain"]["level1"]) == set(DOMAINS)
    assert report["by_domain"]["level3"]["law"]["queries"] == 2, "law-q2 has no level 3"


def test_audit_lists_what_nesting_dropped_with_its_reason(release: dict[str, Any]) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        rows = audit.audit(wh, release["run_id"], stage="nest")
    reasons = {row["item_id"]: row["reason"] for row in rows}
    assert any(r == "no passage is relevant at level 3" for r in reasons.values()), "hc-q3's level 3"
    assert sum("level 2 asks for SUPPORT evidence" in r for r in reasons.values()) == 6, "two CONTRADICT per claim"
    assert sum("relevant at level 3 but not at level 2" in r for r in reasons.values()) >= 1


def test_one_collection_is_not_read_as_the_seeds_of_several_subsets() -> None:
    with pytest.raises(ConfigError, match="would be the seeds of fiqa, scifact_open, aila, pm: pick its domain"):
        seed_sources("irds:beir/fiqa/test", IFIRParams())
    assert len(seed_sources("demo", IFIRParams())) == 4
