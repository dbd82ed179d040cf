"""Seed records: what a seed source yields, before any LLM has touched it."""

from __future__ import annotations

from typing import Any

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
