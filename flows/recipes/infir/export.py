"""InF-IR releases to files: the seven-field tuples InF-IR released, triplets for sentence-transformers (one
row per anchor, both negatives), and a Hugging Face datasets folder holding both. Everything is rebuilt from
the agreed release rows: three queries per tuple (modes positive, negative_instruction, negative_query) and its
three passages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, get_args

import pyarrow as pa
import pyarrow.parquet as pq

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.infir import FIELDS, MODES
from ifsynth.warehouse.cards import CardFacts
from ifsynth.warehouse.export import Release, Written, write_jsonl

# release role of a passage -> the field it fills
DOC_FIELDS = {mode: passage for mode, (_, _, passage) in MODES.items()}
ITEM_COLUMNS = (
    "instruction_positive",
    "instruction_negative",
    "query_negative",
    "hard_negative_document_1",
    "hard_negative_document_2",
)
HF_CONFIGS: list[dict[str, Any]] = [
    {"config_name": "infir", "data_files": [{"split": "train", "path": "infir/train-*.parquet"}], "default": True},
    {"config_name": "triplets", "data_files": [{"split": "train", "path": "triplets/train-*.parquet"}]},
]
# InF-Embed's loader reads P+ as `document_positive` on one branch and `document` on its default (MS MARCO) one
TUPLE_COLUMNS = ("id", *FIELDS, "document")
AnchorOrder = Literal["query-instruction", "instruction-query"]
ANCHOR_ORDERS: tuple[AnchorOrder, ...] = get_args(AnchorOrder)


def notes(order: AnchorOrder) -> list[str]:
    """What a trainer must know about the triplets: how the anchor reads and why no anchor repeats."""
    first, second = order.split("-")
    return [
        "Each tuple: (I+, Q+, P+) with P1- written for (I-, Q+) and P2- written for (I+, Q-).",
        "",
        f"A triplet's anchor is the {first} then the {second}, joined by a space (`--anchor`; InF-Embed trains on "
        "`query instruction`). Each tuple is one row, `anchor, positive, negative_1, negative_2`: "
        "sentence-transformers' MultipleNegativesRankingLoss takes both negative columns, and with no anchor in "
        "two rows no batch holds a copy of a row's own anchor as a false in-batch negative. If you split the "
        "rows one negative each, train with `batch_sampler=BatchSamplers.NO_DUPLICATES`.",
    ]


def card(_: dict[str, Any]) -> CardFacts:
    return CardFacts(license_name="ms-marco", license_link="https://microsoft.github.io/msmarco/")


def anchor(instruction: str, query: str, order: AnchorOrder) -> str:
    return f"{query} {instruction}" if order == "query-instruction" else f"{instruction} {query}"


def tuples(docs: list[dict[str, Any]], queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per tuple: an id, the seven fields, and where each text came from (item ids for `show`)."""
    passages: dict[str, dict[str, str]] = {}
    for doc in docs:
        meta = json.loads(doc["meta"])
        if "tuple" in meta and meta.get("role") in DOC_FIELDS:
            passages.setdefault(meta["tuple"], {})[DOC_FIELDS[meta["role"]]] = doc["text"]
    modes: dict[str, dict[str, dict[str, Any]]] = {}
    for query in queries:
        modes.setdefault(query["query_id"], {})[query["mode"]] = query
    rows = []
    for tuple_id, by_mode in modes.items():
        if set(by_mode) != set(DOC_FIELDS) or len(passages.get(tuple_id, {})) != len(DOC_FIELDS):
            raise WarehouseError(f"release tuple {tuple_id} is incomplete; rerun the run to rebuild its release")
        positive, meta = by_mode["positive"], json.loads(by_mode["positive"]["meta"])
        row = {
            "id": tuple_id,
            "query_positive": positive["query"],
            "instruction_positive": positive["instruction"],
            "document_positive": passages[tuple_id]["document_positive"],
            "document": passages[tuple_id]["document_positive"],
            "query_negative": by_mode["negative_query"]["query"],
            "instruction_negative": by_mode["negative_instruction"]["instruction"],
            "hard_negative_document_1": passages[tuple_id]["hard_negative_document_1"],
            "hard_negative_document_2": passages[tuple_id]["hard_negative_document_2"],
            "origin_query_id": meta["origin_query_id"],
            "origin_doc_id": meta["origin_doc_id"],
            "tuple_item": meta["tuple_item"],
            **{f"{name}_item": meta["items"][name] for name in ITEM_COLUMNS},
        }
        if "language" in meta:
            row["language"] = meta["language"]
        rows.append(row)
    return rows


def triplets(rows: list[dict[str, Any]], order: AnchorOrder) -> list[dict[str, str]]:
    """(anchor, positive, negative_1, negative_2), one row per tuple: the columns sentence-transformers takes."""
    return [
        {
            "anchor": anchor(row["instruction_positive"], row["query_positive"], order),
            "positive": row["document_positive"],
            "negative_1": row["hard_negative_document_1"],
            "negative_2": row["hard_negative_document_2"],
        }
        for row in rows
    ]


def _table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pa.Table:
    names = list(columns) + [name for name in (rows[0] if rows else {}) if name not in columns]
    return pa.table({name: pa.array([row.get(name) for row in rows], pa.string()) for name in names})


def _order(release: Release) -> AnchorOrder:
    order = release.options.get("anchor", ANCHOR_ORDERS[0])
    if order not in ANCHOR_ORDERS:
        raise WarehouseError(f"--anchor must be one of {', '.join(ANCHOR_ORDERS)}, not {order}")
    return ANCHOR_ORDERS[ANCHOR_ORDERS.index(order)]


def write_hf(release: Release, out: Path) -> Written:
    """The Hub's layout: the tuples and the triplets as two Parquet configs."""
    rows = tuples(release.docs, release.queries)
    order = _order(release)
    written = []
    for name, table in (
        ("infir", _table(rows, TUPLE_COLUMNS)),
        ("triplets", _table(triplets(rows, order), ("anchor",))),
    ):
        path = out / name / "train-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        written.append(path)
    return Written(written, configs=HF_CONFIGS, training=True, notes=notes(order))


def write_tuples(release: Release, out: Path) -> Written:
    """The seven-field tuples InF-IR released, in JSONL and Parquet."""
    rows = tuples(release.docs, release.queries)
    return _both(out, "infir", rows, TUPLE_COLUMNS, notes(_order(release)))


def write_triplets(release: Release, out: Path) -> Written:
    """sentence-transformers triplets, in JSONL and Parquet."""
    order = _order(release)
    return _both(out, "triplets", triplets(tuples(release.docs, release.queries), order), ("anchor",), notes(order))


def _both(out: Path, name: str, data: list[dict[str, Any]], columns: tuple[str, ...], told: list[str]) -> Written:
    path = out / f"{name}.parquet"
    written = [write_jsonl(out / f"{name}.jsonl", data)]
    pq.write_table(_table(data, columns), path)
    return Written([*written, path], training=True, notes=told)
