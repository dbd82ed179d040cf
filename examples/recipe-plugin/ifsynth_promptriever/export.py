"""The triplets export: one row per (query under its instruction, positive, instruction negative), the
layout sentence-transformers' triplet losses and most contrastive trainers read."""

from __future__ import annotations

from pathlib import Path

from ifsynth.warehouse.export import Release, Written, write_jsonl


def write_triplets(release: Release, out: Path) -> Written:
    """``train.jsonl`` in ``out``: for each query, every judged positive paired with every kept negative."""
    text = {doc["doc_id"]: doc["text"] for doc in release.docs}
    graded: dict[str, tuple[list[str], list[str]]] = {}
    for row in release.qrels:
        positives, negatives = graded.setdefault(row["query_id"], ([], []))
        (positives if row["score"] > 0 else negatives).append(row["doc_id"])
    rows = [
        {
            "query_id": query["query_id"],
            "query": query["query"],
            "instruction": query["instruction"],
            "positive": text[positive],
            "negative": text[negative],
        }
        for query in release.queries
        for positive in graded.get(query["query_id"], ([], []))[0]
        for negative in graded.get(query["query_id"], ([], []))[1]
    ]
    return Written([write_jsonl(out / "train.jsonl", rows)], training=True)
