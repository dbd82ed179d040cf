"""Seed records: what a seed source yields, before any LLM has touched it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SeedPassage(BaseModel):
    model_config = ConfigDict(frozen=True)

    doc_id: str
    title: str = ""
    text: str


class SeedQuery(BaseModel):
    model_config = ConfigDict(frozen=True)

    query_id: str
    text: str


class SeedPair(BaseModel):
    """One query with every passage judged relevant to it (InstructIR keeps only single-positive pairs)."""

    model_config = ConfigDict(frozen=True)

    query: SeedQuery
    positives: tuple[SeedPassage, ...] = Field(min_length=1)
