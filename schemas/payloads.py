"""The item kinds several recipes share, typed: each model names the fields its readers rely on.

Items carry their parents' fields on (a rewrite keeps its instruction's query and its seed's ids), so a kind's
model extends the one of the kind it was made from, and the rest passes through (``Payload``'s
``extra="allow"``). The small models (a query, a passage, a document) are what a shared stage reads of any
recipe's items; the others are the kinds InstructIR and InF-IR write."""

from __future__ import annotations

from ifsynth.schemas.records import Payload


class QueryItem(Payload):
    """An item asked about a query: what instructions are written for."""

    query: str


class PassageItem(Payload):
    """An item holding a passage: what a rewrite revises and a judge reads."""

    passage: str


class JudgedItem(QueryItem, PassageItem):
    """A passage with the query it is judged against."""


class InstructedItem(QueryItem):
    """A query with an instruction (a narrative, a level): what a relevance label judges a document against."""

    instruction: str


class InstructedPassage(InstructedItem, PassageItem):
    """A passage with the query and the instruction it answers: what a pick among siblings shows."""


class DocumentItem(PassageItem):
    """A document of the seed collection or one written for it, by its id."""

    doc_id: str


class WrittenDocument(PassageItem):
    """A document written to be relevant (1) or not (0) to its narrative."""

    label: int


class SeedItem(JudgedItem):
    """A selected seed: one query and its one judged positive passage."""

    query_id: str
    doc_id: str
    title: str = ""
    positives: tuple[str, ...] = ()


class InstructionItem(SeedItem):
    """An instruction written for a seed's query; ``k`` is its number among the seed's instructions."""

    instruction: str
    k: int = 1


class RewriteItem(InstructionItem):
    """A passage revised for an instruction: ``passage`` is the revision, ``original_passage`` what it revised."""

    original_passage: str
    plan: str = ""
