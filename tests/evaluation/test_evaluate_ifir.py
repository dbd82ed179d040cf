"""Evaluate a small IFIR release written straight into a warehouse: nDCG@20 and MRR@20 per level and per domain
from a fixed run, and INSTFOL@20 per level from a judge on the fake, checked against figures worked out here."""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest

from ifsynth.flows.evaluation.evaluate_release import EvaluateOptions, evaluate
from ifsynth.flows.evaluation.retrieval import Run, write_run
from ifsynth.flows.run.registry import metrics_of
from ifsynth.schemas.ifir import SCHEMES, level_mode, release_id
from ifsynth.warehouse.store import Warehouse
from tests.conftest import invoke
from tests.fake_openai import FakeOpenAI
from tests.helpers import field, query

RELEASE = "ifir-mini"
LONG = release_id("aila", "long")  # 600 words, the instruction's mark at word 550: past a 512-word window
PASSAGES = {
    release_id("fiqa", "d1"): "A pension plan lets savers defer tax on retirement money.",
    release_id("fiqa", "d2"): "A teacher with a pension can pay the mortgage early and still retire.",
    release_id("fiqa", "d3"): "An index fund is cheap for most savers.",
    release_id("fiqa", "d4"): "Credit cards charge high interest.",
    release_id("aila", "c1"): "The court held the eviction of the tenant without notice unlawful.",
    release_id("aila", "c2"): "An eviction for unpaid rent was upheld.",
    release_id("aila", "c3"): "A contract dispute over goods.",
    LONG: " ".join(["lorem"] * 550 + ["eviction"] + ["lorem"] * 49),
}
# subset, seed query id, query, the instruction of each level present (its last word is what the judge looks for)
QUERIES = [
    ("fiqa", "1", "how to save for retirement", ["Focus: pension", "Focus: teacher", "Focus: mortgage"]),
    ("fiqa", "2", "is an index fund safe", ["Focus: index", "Focus: cheap"]),  # no level 3
    ("aila", "A", "a tenant was evicted without notice", ["Focus: eviction", "Focus: tenant", "Focus: notice"]),
]
RELEVANT = {  # (query, level) -> relevant passages; relevant at level n+1 implies relevant at level n
    ("fiqa-1", 1): ["d1", "d2"],
    ("fiqa-1", 2): ["d2"],
    ("fiqa-1", 3): ["d2"],
    ("fiqa-2", 1): ["d3"],
    ("fiqa-2", 2): ["d3"],
    ("aila-A", 1): ["c1", "c2"],
    ("aila-A", 2): ["c1"],
    ("aila-A", 3): ["c1"],
}
INSTRUCTED = {  # (query, level) -> the run's ranking, best first
    ("fiqa-1", 1): ["d3", "d1", "d4", "d2"],
    ("fiqa-1", 2): ["d2", "d1"],
    ("fiqa-1", 3): ["d1", "d4", "d2"],
    ("fiqa-2", 1): ["d3"],
    ("fiqa-2", 2): ["d1", "d3"],
    ("aila-A", 1): ["c3", "c2", "c1", "long"],
    ("aila-A", 2): ["c1"],
    ("aila-A", 3): ["c2", "c3"],
}
BARE = {"fiqa-1": ["d4", "d3", "d1"], "fiqa-2": ["d4", "d1"], "aila-A": ["c3", "long", "c2"]}


def ranked(qid: str, seeds: list[str]) -> dict[str, float]:
    """Run scores that rank the query's passages (given by seed id) in the order given."""
    subset = qid.split("-")[0]
    return {release_id(subset, seed): float(len(seeds) - rank) for rank, seed in enumerate(seeds)}


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ifir")
    docs = [
        {
            "doc_id": doc,
            "title": "",
            "text": text,
            "meta": json.dumps(
                {
                    "domain": SCHEMES[doc.split("-")[0]].domain,
                    "subset": doc.split("-")[0],
                    "seed_doc_id": doc.split("-", 1)[1],
                }
            ),
        }
        for doc, text in PASSAGES.items()
    ]
    queries, qrels = [], []
    for subset, seed, text, instructions in QUERIES:
        qid = release_id(subset, seed)
        for level, instruction in enumerate(instructions, start=1):
            relevant = [release_id(subset, d) for d in RELEVANT[(qid, level)]]
            meta = {
                "domain": SCHEMES[subset].domain,
                "subset": subset,
                "level": level,
                "seed_query_id": seed,
                "relevant": relevant,
                "item": f"item-{qid}-{level}",
            }
            mode = level_mode(level)
            queries.append(
                {
                    "mode": mode,
                    "query_id": qid,
                    "group_id": qid,
                    "query": text,
                    "instruction": instruction,
                    "meta": json.dumps(meta),
                }
            )
            qrels += [{"mode": mode, "query_id": qid, "doc_id": doc, "score": 1} for doc in relevant]
    path = root / "w.duckdb"
    with Warehouse(path) as wh:
        wh.write_release(
            name=RELEASE, run_id=None, recipe="ifir", source="test", card={}, docs=docs, queries=queries, qrels=qrels
        )
    instructed: Run = {f"{q}-{level_mode(n)}": ranked(q, seeds) for (q, n), seeds in INSTRUCTED.items()}
    bare: Run = {f"{q}-{level_mode(n)}": ranked(q, BARE[q]) for q, n in INSTRUCTED}
    return {
        "warehouse": path,
        "run": write_run(root / "run.trec", instructed, tag="fixed"),
        "bare": write_run(root / "bare.trec", bare, tag="fixed"),
    }


def ndcg(ranks: list[int], relevant: int) -> float:
    """Binary gains at the given 1-based ranks, over the ideal of ``relevant`` documents at the top."""
    ideal = sum(1 / math.log2(r + 1) for r in range(1, relevant + 1))
    return sum(1 / math.log2(r + 1) for r in ranks) / ideal


def test_ndcg_and_mrr_per_level_and_per_domain(release: dict[str, Path]) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        report = evaluate(wh, RELEASE, EvaluateOptions(run_file=release["run"]), metrics_of)
    # (nDCG@20, MRR@20) of each query at each level, from the rankings above
    by_hand = {
        "level1": {"fiqa-1": (ndcg([2, 4], 2), 1 / 2), "fiqa-2": (1.0, 1.0), "aila-A": (ndcg([2, 3], 2), 1 / 2)},
        "level2": {"fiqa-1": (1.0, 1.0), "fiqa-2": (ndcg([2], 1), 1 / 2), "aila-A": (1.0, 1.0)},
        "level3": {"fiqa-1": (ndcg([3], 1), 1 / 3), "aila-A": (0.0, 0.0)},
    }
    assert report["modes"].keys() == by_hand.keys()
    for mode, queries in by_hand.items():
        figures = report["modes"][mode]
        assert figures.keys() == {"queries", "ndcg@20", "mrr@20"}  # IFIR reports no MAP
        assert figures["queries"] == len(queries)
        assert figures["ndcg@20"] == pytest.approx(fmean(v[0] for v in queries.values()))
        assert figures["mrr@20"] == pytest.approx(fmean(v[1] for v in queries.values()))
        finance = [v for q, v in queries.items() if q.startswith("fiqa-")]
        assert report["by_domain"][mode] == {
            "finance": {
                "queries": len(finance),
                "ndcg@20": pytest.approx(fmean(v[0] for v in finance)),
                "mrr@20": pytest.approx(fmean(v[1] for v in finance)),
            },
            "law": {
                "queries": 1,
                "ndcg@20": pytest.approx(queries["aila-A"][0]),
                "mrr@20": pytest.approx(queries["aila-A"][1]),
            },
        }
    assert report["queries_without_results"] == 0 and report["unknown_queries_in_run"] == 0


def test_cli_table_shows_each_level_and_domain(release: dict[str, Path]) -> None:
    with Warehouse(release["warehouse"], read_only=True) as wh:
        report = evaluate(wh, RELEASE, EvaluateOptions(run_file=release["run"]), metrics_of)
    table = invoke("--warehouse", str(release["warehouse"]), "evaluate", RELEASE, "--run", str(release["run"]))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    for mode, domains in report["by_domain"].items():
        for domain, figures in domains.items():
            for name in ("ndcg@20", "mrr@20"):
                row = next(line for line in lines if f"{name} ({mode}, {domain})" in line)
                assert f"{figures[name]:.4f}" in row
        assert any(f"ndcg@20 ({mode})" in line for line in lines)


def grader(body: dict[str, Any]) -> dict[str, Any]:
    """A judge that gives the top of the scale when the passage holds the instruction's last word, else 0."""
    maximum = int(body["response_format"]["json_schema"]["name"].removeprefix("InstructionFit"))
    prompt = body["messages"][-1]["content"]
    fits = field(prompt, "Instruction").split()[-1] in field(prompt, "Passage").split()
    return {"score": maximum if fits else 0}


def recorded_grade(call: dict[str, Any]) -> float:
    """A call's grade from what the warehouse recorded: the probability-weighted mean of the score tokens among
    the alternatives of the answer's score token."""
    maximum = int(json.loads(call["request"])["response_format"]["json_schema"]["name"][len("InstructionFit") :])
    chosen = str(json.loads(call["response"])["score"])
    token = next(t for t in json.loads(call["logprobs"]) if t["token"].strip() == chosen)
    weights = {}
    for alternative in token["top_logprobs"]:
        text = alternative["token"].strip()
        if text.isdigit() and int(text) <= maximum:
            weights[int(text)] = math.exp(alternative["logprob"])
    return sum(score * p for score, p in weights.items()) / sum(weights.values())


def test_instfol_per_level_on_each_subsets_scale(release: dict[str, Path]) -> None:
    options: dict[str, Any] = {"run_file": release["run"], "query_run": release["bare"], "instfol": True}
    with FakeOpenAI(mode="responder", responder=grader) as fake, Warehouse(release["warehouse"]) as wh:
        judged = EvaluateOptions(**options, base_url=fake.base_url, judge_model="judge")
        report = evaluate(wh, RELEASE, judged, metrics_of)
        calls = query(wh, "SELECT request, response, logprobs FROM llm_calls WHERE stage = 'instfol'")
    prompts = [json.loads(c["request"])["messages"][-1]["content"] for c in calls]
    # (instruction, passage id) -> the grades the judge gave it
    grades: dict[tuple[str, str], list[float]] = {}
    for call, prompt in zip(calls, prompts, strict=True):
        passage = field(prompt, "Passage")
        doc = next(doc for doc, text in PASSAGES.items() if passage in text)
        grades.setdefault((field(prompt, "Instruction"), doc), []).append(recorded_grade(call))

    # IFIR's judge code grades a passage whole (its 512-token windows are its embedders'): one grade, mark included
    long_prompt = next(p for p in prompts if field(p, "Instruction") == "Focus: eviction" and "lorem" in p)
    assert len(grades[("Focus: eviction", LONG)]) == 1 and field(long_prompt, "Passage") == PASSAGES[LONG]

    def instfol(qid: str, level: int) -> float:
        subset, _, _, instructions = next(q for q in QUERIES if release_id(q[0], q[1]) == qid)
        maximum = SCHEMES[subset].judge_maximum[level - 1]

        def grade(seed_doc: str) -> float:
            (only,) = grades[(instructions[level - 1], release_id(subset, seed_doc))]
            return only

        s_q = fmean(map(grade, BARE[qid]))
        s_inst = fmean(map(grade, INSTRUCTED[(qid, level)]))
        return (s_inst - s_q) / (maximum - s_q)

    per_query = report["instfol_detail"]["per_query"]
    assert per_query["level1"]["aila-A"] == pytest.approx(instfol("aila-A", 1))
    assert per_query["level1"]["fiqa-1"] == pytest.approx(instfol("fiqa-1", 1))
    assert per_query["level3"].keys() == {"fiqa-1", "aila-A"}
    for mode, values in per_query.items():
        assert report["modes"][mode]["instfol@20"] == pytest.approx(fmean(values.values()))
    assert report["instfol@20"] == pytest.approx(fmean(v for values in per_query.values() for v in values.values()))
    detail = report["instfol_detail"]
    assert detail["maximum"] == {
        "level1": {"finance": 1, "law": 3},
        "level2": {"finance": 2, "law": 3},
        "level3": {"finance": 3, "law": 3},
    }
    assert detail["without_logprobs"] == 0 and detail["queries"] == 8

    # one request per (level, query, passage): the same passage under another level is judged again
    d1 = [p for p in prompts if field(p, "Passage") == PASSAGES["fiqa-d1"] and field(p, "Query").startswith("how")]
    assert sorted(field(p, "Instruction") for p in d1) == ["Focus: mortgage", "Focus: pension", "Focus: teacher"]
    level1 = next(p for p in prompts if field(p, "Instruction") == "Focus: pension")
    law = next(p for p in prompts if field(p, "Instruction") == "Focus: eviction")
    assert "from 0 to 1:" in level1 and "level 1 of 3" in level1 and "finance" in level1
    assert "from 0 to 3:" in law and "level 1 of 3" in law and "law" in law
