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
from ifsynth.warehouse.cards import CardFacts
from ifsynth.warehouse.export import Release, Written, qrels_files, sub_card, write_jsonl


def card_facts(stored: dict[str, Any]) -> CardFacts:
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
        files = [write_jsonl(folder / "corpus.jsonl", corpus)]
        files.append(
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
            judged = [r for r in qrels if r["mode"] == mode and dimension_of.get(r["query_id"]) == dimension]
            files += qrels_files(folder, mode, judged)
        note = f"The {dimension} dimension of the release described in ../README.md, on its own."
        dimension_card = {**card, "notes": [*card.get("notes", []), note]}
        readme = sub_card(folder, dimension_card, files, facts=card_facts(card), queries=len(rows))
        written += [*files, readme]
    return Written(written, left_out=left_out)
