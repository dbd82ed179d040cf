"""The triplets export: one row per (query under its instruction, positive, instruction negative), the
layout sentence-transformers' triplet losses and most contrastive trainers read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_triplets(
    out: Path, docs: list[dict[str, Any]], queries: list[dict[str, Any]], qrels: list[dict[str, Any]]
) -> list[Path]:
    """``train.jsonl`` in ``out``: for each query, every judged positive paired with every kept negative."""
    text = {doc["doc_id"]: doc["text"] for doc in docs}
    graded: dict[str, tuple[list[str], list[str]]] = {}
    for row in qrels:
        positives, negatives = graded.setdefault(row["query_id"], ([], []))
        (positives if row["score"] > 0 else negatives).append(row["doc_id"])
    out.mkdir(parents=True, exist_ok=True)
    path = out / "train.jsonl"
    with path.open("w", encoding="utf-8") as lines:
        for query in queries:
            positives, negatives = graded.get(query["query_id"], ([], []))
            for positive in positives:
                for negative in negatives:
                    row = {
                        "query_id": query["query_id"],
                        "query": query["query"],
                        "instruction": query["instruction"],
                        "positive": text[positive],
                        "negative": text[negative],
                    }
                    lines.write(json.dumps(row, ensure_ascii=False) + "\n")
    return [path]
