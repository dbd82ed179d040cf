"""InfoSearch's item kinds, typed: a core query, its documents (seed, keyword or rewrite), its query
negatives, and the instructions and reversals written for its documents.

Each later kind carries its parent's fields on, so each model names only what InfoSearch's stages read."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ifsynth.schemas.records import Payload


class SeedText(BaseModel):
    """One seed passage a core query keeps (its siblings' texts are what a keyword must not occur in)."""

    model_config = ConfigDict(frozen=True)

    doc_id: str
    title: str
    text: str


class CoreQuery(Payload):
    """A core query (kind ``query``): one condition slot per document it ends with; the keyword dimension's
    slots are ``None`` until its keywords are extracted."""

    dimension: str
    query_id: str
    query: str
    conditions: list[str | None]
    passages: list[SeedText]


class CoreText(Payload):
    """What every text written for a core query holds: the query it is for, and the text itself."""

    dimension: str
    query_id: str
    query: str
    passage: str


class QueryNegative(CoreText):
    """A query negative (kind ``negative``): shares the core query's words, cannot answer it."""

    number: int


class Document(CoreText):
    """A positive of a core query (kind ``document``): a seed passage, or one rewritten for its condition;
    ``condition`` is ``None`` for a keyword dimension's seed until its keyword is named."""

    position: int
    condition: str | None
    origin: Literal["seed", "rewrite"]
    doc_id: str
    title: str = ""


class ConditionedDocument(Document):
    """A positive whose condition is named: every one from the rules stage on."""

    condition: str


class Instruction(Payload):
    """A positive's instruction (kind ``instruction``): the core query restated plus a restriction only its
    own condition meets; the reversal negates the restriction."""

    dimension: str
    query: str
    instruction: str
    restriction: str


class ReversedInstruction(ConditionedDocument):
    """A positive with its instruction and the instruction's reversal (kind ``reversal``): what a release
    reads of a finished positive."""

    instruction: str
    reversed_instruction: str
