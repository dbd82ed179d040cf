"""Seed records: what a seed source yields, before any LLM has touched it."""

from __future__ import annotations

import math
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field


class SeedPassage(BaseModel):
    """A passage; inside a ``SeedPair``, also its judged grade for that pair's query (TREC grades 0-2)."""

    model_config = ConfigDict(frozen=True)

    doc_id: str
    title: str = ""
    text: str
    grade: int = 1


class SeedQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    query_id: str
    text: str
    # what a TREC topic carries besides its query text; empty where a collection has none
    title: str = ""
    description: str = ""
    narrative: str = ""
    # what a source carries beyond these, for a recipe that needs it (SciFact's stance labels, per passage id)
    metadata: dict[str, Any] = {}


class SeedPair(BaseModel):
    """One query with every passage judged relevant to it (InstructIR keeps only single-positive pairs) and
    those judged non-relevant (FollowIR spot-checks its altered narratives on them)."""

    model_config = ConfigDict(frozen=True)

    query: SeedQuery
    positives: tuple[SeedPassage, ...] = Field(min_length=1)
    negatives: tuple[SeedPassage, ...] = ()


def id_fault(raw: object, what: str) -> str | None:
    """Why ``raw`` cannot be the ``_id`` of a query or passage (``what``), or None: ids become TSV and TREC
    fields, so none is empty or holds whitespace. Seed sources and imported releases keep this one rule."""
    if raw is None or (isinstance(raw, str) and not raw):
        return f"the {what} has no _id"
    text = str(raw)
    if any(c.isspace() for c in text):
        shown = text.encode("unicode_escape").decode("ascii")  # a tab or a newline shown, the line kept one
        return f"_id `{shown}` holds whitespace (ids become TSV and TREC fields)"
    return None


class NotText(ValueError):
    """A line of a text file that is not UTF-8, said without the file: each reader names it its own way."""

    def __init__(self, number: int) -> None:
        super().__init__(f"line {number} is not UTF-8 text; save the file as UTF-8")


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """A seed or release file's lines, numbered from 1, a Windows line end read as a plain one; a line that is
    not UTF-8 raises ``NotText`` when it is reached, so what comes before it is read."""
    return ((number, line) for number, _, line in placed_lines(path))


def placed_lines(path: Path) -> Iterator[tuple[int, int, str]]:
    """``text_lines``, each with the byte offset its line starts at: a reader can hold where a line is rather
    than what it says, and seek to it when it is wanted."""
    with path.open("rb") as lines:
        start = 0
        for number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8").replace("\r\n", "\n")
            except UnicodeDecodeError:
                raise NotText(number) from None
            yield number, start, line
            start += len(raw)


class Judgement(NamedTuple):
    """One qrels line: a passage judged for a query, with its TREC grade (> 0 relevant)."""

    query_id: str
    doc_id: str
    grade: int


class QrelsFault(ValueError):
    """Why a qrels line is no judgement, said without the file and line: each reader names them its own way."""


def qrels_header(line: str) -> bool:
    """Whether a qrels file's first line is its header (BEIR's `query-id corpus-id score`, InstructIR's
    `qid pid score`): three columns, the third no number, so no judgement is taken for one."""
    fields = line.rstrip("\r\n").split("\t")
    return len(fields) >= 3 and not _is_number(fields[2])


def judgement(line: str, queries: Container[str] | None = None, docs: Container[str] | None = None) -> Judgement | None:
    """A qrels line's judgement (none for a blank line), held to the one rule seed folders and imported releases
    keep: query-id, corpus-id and a finite score, the query one of ``queries`` and the passage one of ``docs``
    (None: not checked), or a ``QrelsFault``. A fractional positive score stays relevant (0.5 is grade 1)."""
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) < 3:
        if line.strip():
            raise QrelsFault("needs query-id, corpus-id, score")
        return None
    query_id, doc_id, score = fields[:3]
    try:
        value = float(score)
    except ValueError:
        raise QrelsFault("has a non-numeric score") from None
    if not math.isfinite(value):
        raise QrelsFault(f"has the score `{score}`; a grade is a finite number")
    if queries is not None and query_id not in queries:
        raise QrelsFault(f"names query `{query_id}`, which the queries do not hold")
    if docs is not None and doc_id not in docs:
        raise QrelsFault(f"names passage `{doc_id}`, which the corpus does not hold")
    return Judgement(query_id, doc_id, math.ceil(value) if value > 0 else int(value))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
