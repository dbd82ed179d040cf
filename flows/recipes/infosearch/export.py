"""The public InfoSearch layout: per dimension a folder with corpus.jsonl, queries.jsonl carrying the
three instructions of each query, and qrels_og, qrels_changed and qrels_reversed (``test.tsv`` each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.modes import INFOSEARCH_MODES
from ifsynth.warehouse.cards import CardFacts
from ifsynth.warehouse.export import Release, Written, write_jsonl, write_tsv


def card(stored: dict[str, Any]) -> CardFacts:
    """English, and Chinese where the release has the language dimension (Chinese documents)."""
    dimensions = (stored.get("params") or {}).get("dimensions") or []
    return CardFacts(
        languages=("en", "zh") if "language" in dimensions else ("en",),
        license_name="infosearch",
        license_link="https://github.com/EIT-NLP/InfoSearch",
    )


def write(release: Release, out: Path) -> Written:
    """A folder per dimension of the run that kept a core query; one that kept none is left out (an empty
    folder breaks the loaders that read it), and said so."""
    docs, queries, qrels, card = release.docs, release.queries, release.qrels, release.card
    if set(release.modes) - set(INFOSEARCH_MODES):
        raise WarehouseError(
            "--format infosearch needs a release with og, changed and reversed queries; "
            "use --format beir, mteb, jsonl or parquet for this one"
        )
    dimension_of = {q["query_id"]: json.loads(q["meta"])["dimension"] for q in queries}
    dimensions = set(card.get("params", {}).get("dimensions", [])) | set(dimension_of.values())
    written: list[Path] = []
    empty = sorted(dimensions - set(dimension_of.values()))
    left_out = [f"dimension {dimension}: no core query of it survived the run's filters" for dimension in empty]
    for dimension in sorted(set(dimension_of.values())):
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
        written.append(write_jsonl(folder / "corpus.jsonl", corpus))
        written.append(
            write_jsonl(
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
            written.append(
                write_tsv(
                    folder / f"qrels_{mode}" / "test.tsv",
                    (
                        (r["query_id"], r["doc_id"], r["score"])
                        for r in qrels
                        if r["mode"] == mode and dimension_of.get(r["query_id"]) == dimension
                    ),
                )
            )
    return Written(written, left_out=left_out)
