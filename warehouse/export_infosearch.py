"""The public InfoSearch layout: per dimension a folder with corpus.jsonl, queries.jsonl carrying the
three instructions of each query, and qrels_og, qrels_changed and qrels_reversed (``test.tsv`` each).

InfoSearch's own 3-mode task loader (its mteb fork) is pointed at one dimension, as at ``jianqunZ/<Dim>-v1``,
and asks ``datasets`` for the configs ``corpus``, ``queries`` and ``qrels_<mode>``: so each dimension folder
has a card of its own naming them, and each qrels file a JSON twin (as FollowIR's, whose layout this is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.modes import INFOSEARCH_MODES
from ifsynth.warehouse.export_followir import qrels_files, sub_card


def write_infosearch(
    out: Path, docs: list[dict], queries: list[dict], qrels: list[dict], card: dict[str, Any]
) -> list[Path]:
    """Every dimension of the run gets its folder, an empty one when no core query of it survived."""
    from ifsynth.warehouse.export import _jsonl, _tsv

    if card.get("recipe") != "infosearch" or {q["mode"] for q in queries} - set(INFOSEARCH_MODES):
        raise WarehouseError(
            f"--format infosearch needs a release of an infosearch run, not of {card.get('recipe', 'unknown')}; "
            "use --format beir, mteb, jsonl or parquet for this one"
        )
    dimension_of = {q["query_id"]: json.loads(q["meta"])["dimension"] for q in queries}
    dimensions = set(card.get("params", {}).get("dimensions", [])) | set(dimension_of.values())
    written: list[Path] = []
    for dimension in sorted(dimensions):
        folder = out / dimension
        rows: dict[str, dict[str, str]] = {}
        for q in queries:
            if dimension_of[q["query_id"]] == dimension:
                row = rows.setdefault(q["query_id"], {"_id": q["query_id"], "text": q["query"]})
                row[f"instruction_{q['mode']}"] = q["instruction"]
        corpus = (
            {"_id": d["doc_id"], "title": d["title"], "text": d["text"]}
            for d in docs
            if json.loads(d["meta"]).get("dimension") == dimension
        )
        files = [_jsonl(folder / "corpus.jsonl", corpus)]
        files.append(
            _jsonl(
                folder / "queries.jsonl",
                (
                    {
                        "_id": r["_id"],
                        "text": r["text"],
                        **{f"instruction_{m}": r.get(f"instruction_{m}", "") for m in INFOSEARCH_MODES},
                    }
                    for r in rows.values()
                ),
            )
        )
        for mode in INFOSEARCH_MODES:
            judged = [r for r in qrels if r["mode"] == mode and dimension_of.get(r["query_id"]) == dimension]
            files += qrels_files(folder, mode, judged, _jsonl, _tsv)
        note = f"The {dimension} dimension of the release described in ../README.md, on its own."
        dimension_card = {**card, "notes": [*card.get("notes", []), note]}
        written += [*files, sub_card(folder, dimension_card, files, len(rows))]
    return written
