"""FollowIR releases to files.

An evaluation release in the public FollowIR layout (as ``jhu-clsp/<collection>-instructions``): corpus.jsonl,
queries.jsonl with ``instruction_og`` and ``instruction_changed`` (and ``short_query``, ``keywords`` when the
ablation stages ran), ``qrels_og/test.tsv``, ``qrels_changed/test.tsv`` and ``top_ranked.jsonl`` (``{qid, pid}``
rows, the MTEB 1.x shape). FollowIR's own loader (its mteb fork, as InfoSearch's) reads a dataset by config,
``load_dataset(folder, "qrels_og")``, and ``datasets`` reads every config of a folder with one builder, so each
qrels file also has a JSON twin, ``qrels_<mode>.jsonl``, whose name makes its config name. ``mteb/`` holds the
same release as mteb 2 reads FollowIR (``mteb/Core17InstructionRetrieval``): queries ``<topic>-og`` and
``<topic>-changed`` with ``instruction`` and ``default`` (qrels) configs, ``top_ranked`` lists and ``qrel_diff``,
under a card of its own. A training release as FollowIR-train's rows (``id, query, instruction, document,
label, score``) in JSONL and Parquet, or as sentence-transformers triplets.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.modes import CHANGED, FOLLOWIR_MODES, OG, TRAIN
from ifsynth.warehouse import cards

RECIPE = "followir"
FORMATS = ("followir",)
JsonlWriter = Callable[[Path, Iterable[dict[str, Any]]], Path]
TsvWriter = Callable[[Path, Iterable[tuple[Any, ...]]], Path]


def write(
    out: Path,
    fmt: str,
    docs: list[dict],
    queries: list[dict],
    qrels: list[dict],
    top_ranked: list[dict],
    jsonl: JsonlWriter,
    tsv: TsvWriter,
) -> list[Path]:
    modes = {q["mode"] for q in queries}
    if fmt == "triplets":
        return [jsonl(out / "triplets.jsonl", triplets(docs, queries, qrels))] if modes == {TRAIN} else _refuse(fmt)
    if modes == {TRAIN}:
        rows = training_rows(docs, queries, qrels)
        path = out / "train.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
        return [jsonl(out / "train.jsonl", rows), path]
    if not modes <= set(FOLLOWIR_MODES):
        raise WarehouseError("--format followir needs a release with og and changed queries (or training rows)")
    by_query: dict[str, dict[str, Any]] = {}
    for q in sorted(queries, key=lambda q: FOLLOWIR_MODES.index(q["mode"])):  # og's key first, whatever the row order
        meta = json.loads(q["meta"])
        row = by_query.setdefault(q["query_id"], {"_id": q["query_id"], "text": q["query"]})
        row[f"instruction_{q['mode']}"] = q["instruction"]
        row.update({key: meta[key] for key in ("short_query", "keywords") if key in meta})
    written = [
        jsonl(out / "corpus.jsonl", ({"_id": d["doc_id"], "title": d["title"], "text": d["text"]} for d in docs)),
        jsonl(out / "queries.jsonl", by_query.values()),
    ]
    for mode in FOLLOWIR_MODES:
        written += qrels_files(out, mode, [r for r in qrels if r["mode"] == mode], jsonl, tsv)
    pool = sorted({(r["query_id"], r["doc_id"]) for r in top_ranked})
    written.append(jsonl(out / "top_ranked.jsonl", ({"qid": qid, "pid": pid} for qid, pid in pool)))
    return written + _mteb2(out / "mteb", docs, queries, qrels, pool, jsonl)


def qrels_files(out: Path, mode: str, rows: list[dict], jsonl: JsonlWriter, tsv: TsvWriter) -> list[Path]:
    """One mode's qrels as the public layout has them (``qrels_<mode>/test.tsv``) and as the config
    ``qrels_<mode>`` that the authors' loaders ask ``datasets`` for (JSON, as the folder's other configs)."""
    return [
        tsv(out / f"qrels_{mode}" / "test.tsv", ((r["query_id"], r["doc_id"], r["score"]) for r in rows)),
        jsonl(
            out / f"qrels_{mode}.jsonl",
            ({"query-id": r["query_id"], "corpus-id": r["doc_id"], "score": r["score"]} for r in rows),
        ),
    ]


def sub_card(folder: Path, card: dict[str, Any], files: list[Path], queries: int) -> Path:
    """The README.md of a folder inside an export that a loader is pointed at on its own: ``datasets`` reads the
    configs of the folder it is given, not of the export around it."""
    configs, apart = cards.configs_for([path.relative_to(folder).as_posix() for path in files], training=False)
    for config in configs:  # mteb 2 loads the changed documents as `load_dataset(path, "qrel_diff", split="qrel_diff")`
        if config["config_name"] == "qrel_diff":
            config["data_files"][0]["split"] = "qrel_diff"
    path = folder / "README.md"
    path.write_text(cards.render(card, configs=configs, apart=apart, run_id=None, queries=queries), encoding="utf-8")
    return path


def _mteb2(
    out: Path, docs: list[dict], queries: list[dict], qrels: list[dict], pool: list[tuple[str, str]], jsonl: JsonlWriter
) -> list[Path]:
    """mteb 2's FollowIR layout. ``qrel_diff`` lists, per topic, the judged documents whose score differs between
    the two instructions (FollowIR's ``create_qrel_diff``); they are the documents p-MRR is computed over."""
    judged = {
        mode: {(r["query_id"], r["doc_id"]): r["score"] for r in qrels if r["mode"] == mode} for mode in (OG, CHANGED)
    }
    diff: dict[str, list[str]] = {}
    for (qid, doc), score in judged[OG].items():
        if judged[CHANGED].get((qid, doc), score) != score:
            diff.setdefault(qid, []).append(doc)
    pooled: dict[str, list[str]] = {}
    for qid, doc in pool:
        pooled.setdefault(qid, []).append(doc)
    topics = sorted({q["query_id"] for q in queries})
    files = [
        jsonl(
            out / "default.jsonl",
            (
                {"query-id": f"{r['query_id']}-{r['mode']}", "corpus-id": r["doc_id"], "score": r["score"]}
                for r in qrels
            ),
        ),
        jsonl(out / "corpus.jsonl", ({"_id": d["doc_id"], "title": d["title"], "text": d["text"]} for d in docs)),
        jsonl(out / "queries.jsonl", ({"_id": f"{q['query_id']}-{q['mode']}", "text": q["query"]} for q in queries)),
        jsonl(
            out / "instruction.jsonl",
            ({"query-id": f"{q['query_id']}-{q['mode']}", "instruction": q["instruction"]} for q in queries),
        ),
        jsonl(
            out / "top_ranked.jsonl",
            (
                {"query-id": f"{qid}-{mode}", "corpus-ids": pooled[qid]}
                for qid in topics
                if qid in pooled
                for mode in FOLLOWIR_MODES
            ),
        ),
        jsonl(out / "qrel_diff.jsonl", ({"query-id": qid, "corpus-ids": diff[qid]} for qid in topics if qid in diff)),
    ]
    note = "The release of ../README.md in mteb 2's FollowIR layout, for its instruction-reranking tasks (p-MRR)."
    counts = {
        "topics": len(topics),
        "queries": len(queries),
        "qrels": len(qrels),
        "changed documents": sum(map(len, diff.values())),
    }
    return [*files, sub_card(out, {"recipe": RECIPE, "counts": counts, "notes": [note]}, files, len(topics))]


def _refuse(fmt: str) -> list[Path]:
    raise WarehouseError(f"--format {fmt} is for training releases (infir, or followir with mode = train)")


def training_rows(docs: list[dict], queries: list[dict], qrels: list[dict]) -> list[dict[str, Any]]:
    """FollowIR-train's rows: one per (query, document); ``label`` is what the document was written to be and
    ``score`` the judge's label, equal by construction (only agreeing documents are kept)."""
    text = {d["doc_id"]: d["text"] for d in docs}
    by_id = {q["query_id"]: q for q in queries}
    return [
        {
            "id": f"{r['query_id']}---{r['doc_id']}",
            "query": by_id[r["query_id"]]["query"],
            "instruction": by_id[r["query_id"]]["instruction"],
            "document": text[r["doc_id"]],
            "label": r["score"],
            "score": r["score"],
        }
        for r in qrels
    ]


def triplets(docs: list[dict], queries: list[dict], qrels: list[dict]) -> list[dict[str, str]]:
    """One row per pair: anchor ``query narrative``, its relevant and its non-relevant document."""
    text = {d["doc_id"]: d["text"] for d in docs}
    labelled: dict[str, dict[int, str]] = {}
    for r in qrels:
        labelled.setdefault(r["query_id"], {})[int(r["score"] > 0)] = text[r["doc_id"]]
    return [
        {
            "anchor": f"{q['query']} {q['instruction']}",
            "positive": labelled[q["query_id"]][1],
            "negative": labelled[q["query_id"]][0],
        }
        for q in queries
    ]
