"""Importers: InstructIR's public files give the published figures; the other layouts, built by hand here,
land in the agreed release rows; stats and evaluate read them like generated releases."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ifsynth.flows.evaluation import scoring as evaluate
from ifsynth.flows.evaluation.retrieval import read_run
from ifsynth.flows.run.exports import import_release
from ifsynth.flows.run.registry import metrics_of
from ifsynth.schemas.errors import ConfigError, IfsynthError
from ifsynth.schemas.infir import FIELDS as INFIR_FIELDS
from ifsynth.warehouse import stats as release_stats
from ifsynth.warehouse.store import Warehouse
from tests.conftest import DATA, invoke
from tests.helpers import query

INSTRUCTIR = DATA / "instructir"


@pytest.fixture(scope="module")
def orig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Warehouse, dict[str, Any]]]:
    with Warehouse(tmp_path_factory.mktemp("orig") / "w.duckdb") as wh:
        report = import_release(wh, "instructir", INSTRUCTIR, name="orig")
        yield wh, report


def test_instructir_public_files_give_the_published_figures(orig: tuple[Warehouse, dict[str, Any]]) -> None:
    wh, report = orig
    assert report["missing"] == ["corpus.jsonl"] and report["source"] == "import:instructir"
    s = release_stats.stats(wh, "orig")
    assert (s["queries"], s["instances"], s["corpus"]) == (1267, 9906, 0)
    assert round(s["instructions_per_query"], 2) == 7.82
    assert round(s["words"]["instruction"]["mean"], 2) == 49.04
    assert round(s["words"]["query"]["mean"], 2) == 5.57
    assert s["rouge_l_within_group"] == pytest.approx(0.238, abs=0.002)
    assert s["positives_per_instance"] == 1.0 and s["missing"] == ["corpus.jsonl"]
    assert 0 < s["distinct_1"] < s["distinct_2"] < 1
    rows = query(wh, "SELECT * FROM release_queries WHERE release = 'orig' AND query_id = '1078446_1'")
    assert rows[0]["mode"] == "instructed" and rows[0]["group_id"] == "1078446"
    assert rows[0]["query"] == "wine cabinets definition" and rows[0]["instruction"].startswith("I am an interior")


def test_rouge_l_agrees_with_the_rouge_score_package(orig: tuple[Warehouse, dict[str, Any]]) -> None:
    scorer_module = pytest.importorskip("rouge_score.rouge_scorer")
    # rouge_score imports absl, whose log handler keeps the stderr of its import (pytest's capture file) and
    # closes it when logging is configured again, unless it is the stderr of that moment: a later test of
    # this process that runs a flow in it (Prefect configures logging) would close pytest's own stderr
    absl_logging = pytest.importorskip("absl.logging")
    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
    wh, _ = orig
    groups: dict[str, list[str]] = {}
    for r in query(wh, "SELECT group_id, instruction FROM release_queries WHERE release = 'orig' ORDER BY query_id"):
        groups.setdefault(r["group_id"], []).append(r["instruction"])
    sample = [groups[g][:5] for g in sorted(groups)[:12]]
    for stem in (False, True):
        scorer = scorer_module.RougeScorer(["rougeL"], use_stemmer=stem)
        for texts in sample:
            pairs = list(itertools.combinations(texts, 2))
            expected = sum(scorer.score(a, b)["rougeL"].fmeasure for a, b in pairs) / len(pairs)
            ours = release_stats.rouge_l_within_groups([texts], stem=stem)
            # identical tokens without stemming; Snowball's Porter and NLTK's differ on a few words
            assert ours == pytest.approx(expected, abs=1e-12 if not stem else 0.01)


def test_an_existing_name_and_a_missing_folder_are_one_line_errors(
    orig: tuple[Warehouse, dict[str, Any]], tmp_path: Path
) -> None:
    wh, _ = orig
    with pytest.raises(IfsynthError, match="already exists; pass --name"):
        import_release(wh, "instructir", INSTRUCTIR, name="orig")
    with pytest.raises(IfsynthError, match="no file or folder"):
        import_release(wh, "beir", tmp_path / "nope", name="x")
    with pytest.raises(IfsynthError, match="unknown import format"):
        import_release(wh, "msmarco", tmp_path, name="x")
    view = evaluate.load(wh, "orig")
    with pytest.raises(ConfigError, match=r"has no corpus .*corpus\.jsonl.*--run FILE"):
        evaluate.bm25_run(wh, view)


# -- hand-built layouts ------------------------------------------------------------------------------------


def jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def tsv(path: Path, rows: list[tuple[str, str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows))


def infosearch_dimension(root: Path, with_reversed: bool = True) -> None:
    """One core query `what is x` with two conditions (two instances), docs a (cond 1) and b (cond 2)."""
    jsonl(root / "corpus.jsonl", [{"_id": d, "title": "", "text": f"blog news {d}"} for d in ("a", "b", "n")])
    jsonl(
        root / "queries.jsonl",
        [
            {"_id": "0", "text": "what is x", "instruction_og": "", "instruction_changed": "as a blog",
             "instruction_reversed": "not as a blog"},
            {"_id": "1", "text": "what is x", "instruction_og": "", "instruction_changed": "as news",
             "instruction_reversed": "not as news"},
        ],
    )  # fmt: skip
    tsv(root / "qrels_og" / "test.tsv", [("0", "a", 1), ("0", "b", 1), ("1", "a", 1), ("1", "b", 1)])
    tsv(root / "qrels_changed" / "test.tsv", [("0", "a", 1), ("0", "b", 0), ("1", "a", 0), ("1", "b", 1)])
    if with_reversed:
        tsv(root / "qrels_reversed" / "test.tsv", [("0", "a", 0), ("0", "b", 1), ("1", "a", 1), ("1", "b", 0)])


def test_infosearch_folder_of_dimensions(tmp_path: Path) -> None:
    infosearch_dimension(tmp_path / "pub" / "Source")
    infosearch_dimension(tmp_path / "pub" / "Audience", with_reversed=False)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        report = import_release(wh, "infosearch", tmp_path / "pub", name="info")
        assert report["recipe"] == "infosearch" and report["missing"] == ["Audience/qrels_reversed/"]
        rows = query(wh, "SELECT mode, query_id, group_id, instruction, meta FROM release_queries ORDER BY ALL")
        modes = {(r["mode"], r["query_id"]) for r in rows}
        # ids clash across dimensions, so they are prefixed with the dimension
        assert ("reversed", "Source/0") in modes and ("reversed", "Audience/0") not in modes
        assert ("changed", "Audience/1") in modes
        source0 = next(r for r in rows if r["query_id"] == "Source/0" and r["mode"] == "changed")
        assert source0["instruction"] == "as a blog" and source0["group_id"] == "Source/0"
        assert json.loads(source0["meta"]) == {"dimension": "Source"}
        assert next(r["group_id"] for r in rows if r["query_id"] == "Source/1") == "Source/0"
        docs = query(wh, "SELECT doc_id, meta FROM release_docs WHERE doc_id = 'Source/a'")
        assert json.loads(docs[0]["meta"]) == {"dimension": "Source"}
        run = evaluate.bm25_run(wh, evaluate.load(wh, "info"))
    # each dimension is searched over its own passages
    assert set(run["Source/0-changed"]) == {"Source/a", "Source/b", "Source/n"}
    assert {doc.split("/")[0] for qid, found in run.items() if qid.startswith("Audience/") for doc in found} == {
        "Audience"
    }


def test_infosearch_single_dimension_is_scored_with_wise_sicr_and_pmrr(tmp_path: Path) -> None:
    infosearch_dimension(tmp_path / "Source")
    with Warehouse(tmp_path / "w.duckdb") as wh:
        import_release(wh, "infosearch", tmp_path / "Source", name="src")
        view = evaluate.load(wh, "src")
        assert view.modes == ["changed", "og", "reversed"]
        # query 0 (gold a): og a2 b1; changed a1 b2; reversed a3 (absent: 2 retrieved) -> R 2/1/3
        # query 1 (gold b): og a1 b2; changed b1 a2; reversed b1 a2              -> R 2/1/1
        run = {
            "0-og": {"a": 1.0, "b": 2.0}, "0-changed": {"a": 3.0, "b": 1.0}, "0-reversed": {"b": 2.0, "n": 1.0},
            "1-og": {"a": 2.0, "b": 1.0}, "1-changed": {"b": 3.0, "a": 1.0}, "1-reversed": {"b": 2.0, "a": 1.0},
        }  # fmt: skip
        report = evaluate.score(view, run, metrics_of(view.recipe))
    # query 0: reward, R_ori 2 <= N 2 and R_ins 1 -> 1. query 1: R_rev 1 < R_ori 2, R_ins 1 <= R_ori:
    # penalty (R_rev - R_ori) / R_ori = -0.5.
    assert report["wise"] == pytest.approx((1 - 0.5) / 2)
    # SICR: query 0 meets all four conditions (score 3 > 1 > absent); query 1 fails the reversed rank.
    assert report["sicr"] == pytest.approx(0.5)
    # p-MRR over docs whose relevance dropped: q0 doc b 1 -> 2 (+0.5); q1 doc a 1 -> 2 (+0.5)
    assert report["p-mrr"] == pytest.approx(0.5)
    assert report["modes"]["changed"]["ndcg@10"] == 1.0
    assert report["robustness@10"] == 1.0 and report["robustness_mode"] == "changed"
    assert report["by_dimension"] == {"Source": {"p-mrr": report["p-mrr"], "wise": 0.25, "sicr": 0.5}}


def test_followir_folder(tmp_path: Path) -> None:
    root = tmp_path / "core17"
    jsonl(root / "corpus.jsonl", [{"_id": d, "title": "T", "text": "x"} for d in ("d1", "d2")])
    jsonl(root / "queries.jsonl", [{"_id": "310", "text": "q", "instruction_og": "narr", "instruction_changed": "alt"}])
    tsv(root / "qrels_og" / "test.tsv", [("310", "d1", 2), ("310", "d2", 1)])
    tsv(root / "qrels_changed" / "test.tsv", [("310", "d1", 2), ("310", "d2", 0)])
    with Warehouse(tmp_path / "w.duckdb") as wh:
        import_release(wh, "followir", root, name="core17")
        view = evaluate.load(wh, "core17")
        assert view.recipe == "followir" and view.modes == ["changed", "og"]
        assert view.qrels["og"]["310"] == {"d1": 2, "d2": 1}
        report = evaluate.score(
            view, {"310-og": {"d1": 2.0, "d2": 1.0}, "310-changed": {"d1": 1.0, "d2": 2.0}}, metrics_of(view.recipe)
        )
    assert report["p-mrr"] == pytest.approx(-0.5)  # d2 became non-relevant yet moved up from 2 to 1
    assert set(report["modes"]["og"]) == {"queries", "ndcg@5", "map"} and "wise" not in report


def followir_with_pool(root: Path) -> None:
    """Two topics. 310: d2 drops from relevant to not, its pool (MTEB 1.x rows {qid, pid}) is d1-d3.
    320: d4 drops, its pool comes per mode in MTEB 2's shape ({query-id, corpus-ids}, Parquet). dx is in the
    corpus but in no pool."""
    texts = {"d1": "storm damage", "d2": "storm policy", "d3": "flood policy", "d4": "storm insurance", "dx": "x"}
    jsonl(root / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in texts.items()])
    jsonl(
        root / "queries.jsonl",
        [
            {"_id": "310", "text": "storm", "instruction_og": "any storm text", "instruction_changed": "no policy"},
            {"_id": "320", "text": "insurance", "instruction_og": "any", "instruction_changed": "only storms"},
        ],
    )
    tsv(root / "qrels_og" / "test.tsv", [("310", "d1", 2), ("310", "d2", 1), ("310", "d3", 0), ("320", "d4", 1)])
    tsv(root / "qrels_changed" / "test.tsv", [("310", "d1", 2), ("310", "d2", 0), ("310", "d3", 0), ("320", "d4", 0)])
    jsonl(root / "top_ranked.jsonl", [{"qid": "310", "pid": d} for d in ("d1", "d2", "d3")])
    (root / "top_ranked").mkdir()
    pool = [{"query-id": f"320-{mode}", "corpus-ids": ["d4", "d1"]} for mode in ("og", "changed")]
    pq.write_table(pa.Table.from_pylist(pool), root / "top_ranked" / "test-00000-of-00001.parquet")


def evaluated(db: Path, *args: str) -> dict[str, Any]:
    proc = invoke("--warehouse", str(db), "evaluate", "core17", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_followir_rerank_scores_each_query_within_its_pool(tmp_path: Path) -> None:
    root = tmp_path / "core17"
    followir_with_pool(root)
    (tmp_path / "run.trec").write_text(
        "".join(
            f"{q} Q0 {d} 0 {s} m\n"
            for q, ranked in {
                "310-og": ["dx", "d2", "d1", "d3"],
                "310-changed": ["dx", "d1", "d3", "d2"],
                "320-og": ["d4", "d1"],
                "320-changed": ["d1", "dx", "d3", "d4"],
            }.items()
            for d, s in zip(ranked, range(9, 0, -1), strict=False)
        )
    )
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        report = import_release(wh, "followir", root, name="core17")
        assert report["counts"]["top_ranked"] == 3 * 2 + 2 * 2  # 310's pool serves both modes
    scored = evaluated(db, "--run", str(tmp_path / "run.trec"))
    # Within the pools, 310's d2 goes from rank 1 to 3: 1 - 1/3; 320's d4 from 1 to 2: 1 - 1/2.
    assert scored["setting"] == "rerank top_ranked"
    assert scored["p-mrr"] == pytest.approx(((1 - 1 / 3) + (1 - 1 / 2)) / 2)
    full = evaluated(db, "--run", str(tmp_path / "run.trec"), "--no-rerank")
    # Over the full corpus dx and d3 count: 310's d2 goes from 2 to 4, 320's d4 from 1 to 4.
    assert full["setting"] == "full corpus"
    assert full["p-mrr"] == pytest.approx(((1 - 2 / 4) + (1 - 1 / 4)) / 2)
    assert scored["p-mrr"] != pytest.approx(full["p-mrr"])
    lines = (tmp_path / "run.trec").read_text().splitlines(keepends=True)
    (tmp_path / "pooled.trec").write_text("".join(line for line in lines if " dx " not in line))
    assert evaluated(db, "--run", str(tmp_path / "pooled.trec"))["p-mrr"] == scored["p-mrr"], "dx has no effect"


def test_bm25_reranks_the_whole_pool_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "core17"
    followir_with_pool(root)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        import_release(wh, "followir", root, name="core17")
        view = evaluate.load(wh, "core17")
        run = evaluate.bm25_run(wh, view, rerank=True)
    assert {q: set(docs) for q, docs in run.items()} == {
        "310-og": {"d1", "d2", "d3"}, "310-changed": {"d1", "d2", "d3"},
        "320-og": {"d4", "d1"}, "320-changed": {"d4", "d1"},
    }  # fmt: skip
    assert run["310-og"]["d3"] == 0.0 < run["310-og"]["d1"]  # a pooled document without a query word stays in


def test_rerank_without_a_pool_is_refused_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "core17"
    followir_with_pool(root)
    (root / "top_ranked.jsonl").unlink()
    for file in (root / "top_ranked").iterdir():
        file.unlink()
    db = tmp_path / "w.duckdb"
    with Warehouse(db) as wh:
        import_release(wh, "followir", root, name="core17")
    failed = invoke("--warehouse", str(db), "evaluate", "core17", "--retriever", "bm25", "--rerank")
    assert failed.returncode != 0 and failed.stderr.startswith("error: release `core17` has no top_ranked pool")
    assert len(failed.stderr.splitlines()) == 1
    scored = evaluated(db, "--retriever", "bm25", "--out", str(tmp_path / "bm25.trec"))
    assert scored["setting"] == "full corpus"


def infir_rows(n: int) -> list[dict[str, str]]:
    return [{name: f"{name} {i}" for name in INFIR_FIELDS} for i in range(n)]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_infir_rows_become_three_modes_per_tuple(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"train.{suffix}"
    if suffix == "jsonl":
        jsonl(path, infir_rows(2))
    else:
        pq.write_table(pa.Table.from_pylist(infir_rows(2)), path)
    with Warehouse(tmp_path / "w.duckdb") as wh:
        import_release(wh, "infir", path, name="inf")
        queries = query(wh, "SELECT mode, query_id, query, instruction FROM release_queries ORDER BY query_id, mode")
        qrels = query(wh, "SELECT mode, query_id, doc_id, score FROM release_qrels WHERE score > 0 ORDER BY ALL")
        docs = {d["doc_id"]: d for d in query(wh, "SELECT doc_id, text, meta FROM release_docs")}
        s = release_stats.stats(wh, "inf")
    assert len(queries) == 6 and len(docs) == 6 and len(qrels) == 6
    first = {q["mode"]: (q["query"], q["instruction"]) for q in queries if q["query_id"] == "t0000001"}
    assert first == {
        "positive": ("query_positive 0", "instruction_positive 0"),
        "negative_instruction": ("query_positive 0", "instruction_negative 0"),
        "negative_query": ("query_negative 0", "instruction_positive 0"),
    }
    intended = {q["mode"]: docs[q["doc_id"]]["text"] for q in qrels if q["query_id"] == "t0000001"}
    assert intended == {
        "positive": "document_positive 0",
        "negative_instruction": "hard_negative_document_1 0",
        "negative_query": "hard_negative_document_2 0",
    }
    assert json.loads(docs["t0000001-positive"]["meta"]) == {"role": "positive", "tuple": "t0000001"}
    assert s["measured_mode"] == "positive" and s["instances"] == 2


def test_infir_row_lacking_a_field_is_named(tmp_path: Path) -> None:
    rows = infir_rows(1)
    del rows[0]["query_negative"]
    jsonl(tmp_path / "bad.jsonl", rows)
    with Warehouse(tmp_path / "w.duckdb") as wh, pytest.raises(IfsynthError, match="row 1 lacks query_negative"):
        import_release(wh, "infir", tmp_path / "bad.jsonl", name="x")


def test_beir_folders_plain_and_instructed(tmp_path: Path) -> None:
    plain, sep = tmp_path / "plain", tmp_path / "sep"
    jsonl(plain / "corpus.jsonl", [{"_id": "d1", "title": "", "text": "alpha"}])
    jsonl(plain / "queries.jsonl", [{"_id": "q1", "text": "alpha?"}])
    tsv(plain / "qrels" / "test.tsv", [("q1", "d1", 1)])
    jsonl(sep / "queries.jsonl", [{"_id": f"7_{k}", "text": f"I want {k} [SEP] alpha?"} for k in (1, 2)])
    tsv(sep / "qrels" / "dev.tsv", [("7_1", "d1", 1)])
    with Warehouse(tmp_path / "w.duckdb") as wh:
        a = import_release(wh, "beir", plain, name="plain")
        b = import_release(wh, "beir", sep, name="sep")
        rows = query(
            wh, "SELECT release, mode, query_id, group_id, query, instruction FROM release_queries ORDER BY ALL"
        )
    assert a["recipe"] == "beir" and a["missing"] == []
    assert b["recipe"] == "instructir" and b["missing"] == ["corpus.jsonl"]
    assert rows[0] == {"release": "plain", "mode": "original", "query_id": "q1", "group_id": "q1",
                       "query": "alpha?", "instruction": ""}  # fmt: skip
    assert rows[1] == {"release": "sep", "mode": "instructed", "query_id": "7_1", "group_id": "7",
                       "query": "alpha?", "instruction": "I want 1"}  # fmt: skip


def test_a_malformed_run_file_is_named_by_line(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d1 1 2.5 tag\nq1 Q0 d2 2 tag\n")
    with pytest.raises(ConfigError, match="line 2 has 5 fields"):
        read_run(path)
    path.write_text("q1 Q0 d1 1 high tag\n")
    with pytest.raises(ConfigError, match="score `high` is not a number"):
        read_run(path)
    with pytest.raises(ConfigError, match="no run file"):
        read_run(tmp_path / "none.trec")


def test_cli_import_then_stats(tmp_path: Path) -> None:
    """Acceptance: `import instructir ... --name orig` then `stats orig --json` give the published figures."""
    warehouse = str(tmp_path / "w.duckdb")
    first = invoke("--warehouse", warehouse, "import", "instructir", str(INSTRUCTIR), "--name", "orig")
    assert first.returncode == 0, first.stderr
    assert "missing: corpus.jsonl" in first.stderr and "9906 instances" in first.stdout
    again = invoke("--warehouse", warehouse, "import", "instructir", str(INSTRUCTIR), "--name", "orig")
    assert again.returncode != 0 and again.stderr.startswith("error: a release named `orig` already exists")
    assert len(again.stderr.strip().splitlines()) == 1
    proc = invoke("--warehouse", warehouse, "stats", "orig", "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert (s["queries"], s["instances"]) == (1267, 9906)
    assert round(s["words"]["instruction"]["mean"], 2) == 49.04 and round(s["words"]["query"]["mean"], 2) == 5.57
    assert s["rouge_l_within_group"] == pytest.approx(0.238, abs=0.002)


def test_a_row_without_its_id_is_named(tmp_path: Path) -> None:
    jsonl(tmp_path / "b" / "queries.jsonl", [{"text": "no id"}])
    said = r"`queries\.jsonl` line 1: the query has no _id"
    with Warehouse(tmp_path / "w.duckdb") as wh, pytest.raises(IfsynthError, match=said):
        import_release(wh, "beir", tmp_path / "b", name="x")
