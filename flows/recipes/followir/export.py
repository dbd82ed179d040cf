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
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.modes import CHANGED, FOLLOWIR_MODES, OG, TRAIN
from ifsynth.warehouse.cards import CardFacts
from ifsynth.warehouse.export import Release, Written, qrels_files, sub_card, write_jsonl


def card(_: dict[str, Any]) -> CardFacts:
    return CardFacts(license_name="trec-collections", license_link="https://trec.nist.gov/data.html")


def write_triplets(release: Release, out: Path) -> Written:
    """sentence-transformers triplets of a training release."""
    if set(release.modes) != {TRAIN}:
        raise WarehouseError("--format triplets is for training releases (infir, or followir with mode = train)")
    rows = triplets(release.docs, release.queries, release.qrels)
    return Written([write_jsonl(out / "triplets.jsonl", rows)], training=True)


def write(release: Release, out: Path) -> Written:
    """The public FollowIR layout of an evaluation release, or FollowIR-train's rows of a training one."""
    docs, queries, qrels = release.docs, release.queries, release.qrels
    modes = set(release.modes)
    if modes == {TRAIN}:
        rows = training_rows(docs, queries, qrels)
        path = out / "train.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
        return Written([write_jsonl(out / "train.jsonl", rows), path], training=True)
    if not modes <= set(FOLLOWIR_MODES):
        raise WarehouseError("--format followir needs a release with og and changed queries (or training rows)")
    by_query: dict[str, dict[str, Any]] = {}
    for q in sorted(queries, key=lambda q: FOLLOWIR_MODES.index(q["mode"])):  # og's key first, whatever the row order
        meta = json.loads(q["meta"])
        row = by_query.setdefault(q["query_id"], {"_id": q["query_id"], "text": q["query"]})
        row[f"instruction_{q['mode']}"] = q["instruction"]
        row.update({key: meta[key] for key in ("short_query", "keywords") if key in meta})
    written = [
        write_jsonl(out / "corpus.jsonl", ({"_id": d["doc_id"], "title": d["title"], "text": d["text"]} for d in docs)),
        write_jsonl(out / "queries.jsonl", by_query.values()),
    ]
    for mode in FOLLOWIR_MODES:
        written += qrels_files(out, mode, [r for r in qrels if r["mode"] == mode])
    pool = sorted({(r["query_id"], r["doc_id"]) for r in release.top_ranked})
    written.append(write_jsonl(out / "top_ranked.jsonl", ({"qid": qid, "pid": pid} for qid, pid in pool)))
    return Written(written + _mteb2(out / "mteb", release, pool))


def _mteb2(out: Path, release: Release, pool: list[tuple[str, str]]) -> list[Path]:
    """mteb 2's FollowIR layout. ``qrel_diff`` lists, per topic, the judged documents whose score differs between
    the two instructions (FollowIR's ``create_qrel_diff``); they are the documents p-MRR is computed over."""
    docs, queries, qrels = release.docs, release.queries, release.qrels
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
        write_jsonl(
            out / "default.jsonl",
            (
                {"query-id": f"{r['query_id']}-{r['mode']}", "corpus-id": r["doc_id"], "score": r["score"]}
                for r in qrels
            ),
        ),
        write_jsonl(out / "corpus.jsonl", ({"_id": d["doc_id"], "title": d["title"], "text": d["text"]} for d in docs)),
        write_jsonl(
            out / "queries.jsonl", ({"_id": f"{q['query_id']}-{q['mode']}", "text": q["query"]} for q in queries)
        ),
        write_jsonl(
            out / "instruction.jsonl",
            ({"query-id": f"{q['query_id']}-{q['mode']}", "instruction": q["instruction"]} for q in queries),
        ),
        write_jsonl(
            out / "top_ranked.jsonl",
            (
                {"query-id": f"{qid}-{mode}", "corpus-ids": pooled[qid]}
                for qid in topics
                if qid in pooled
                for mode in FOLLOWIR_MODES
            ),
        ),
        write_jsonl(
            out / "qrel_diff.jsonl", ({"query-id": qid, "corpus-ids": diff[qid]} for qid in topics if qid in diff)
        ),
    ]
    note = "The release of ../README.md in mteb 2's FollowIR layout, for its instruction-reranking tasks (p-MRR)."
    counts = {
        "topics": len(topics),
        "queries": len(queries),
        "qrels": len(qrels),
        "changed documents": sum(map(len, diff.values())),
    }
    stored = {"recipe": release.recipe, "counts": counts, "notes": [note]}
    # mteb 2 loads the changed documents as `load_dataset(path, "qrel_diff", split="qrel_diff")`
    readme = sub_card(
        out, stored, files, facts=card(stored), queries=len(topics),
        splits={"qrel_diff": "qrel_diff"},
    )  # fmt: skip
    return [*files, readme]


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
    """One row per pair with both documents: anchor ``query narrative``, its relevant and its non-relevant one."""
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
        if len(labelled.get(q["query_id"], {})) == 2
    ]
