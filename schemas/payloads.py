"""The item kinds several recipes share, typed: each model names the fields its readers rely on.

A kind's items carry their parents' fields on (a rewrite keeps its instruction's query and its seed's ids), so
each model extends the one it was made from and lets the rest pass through (``Payload``'s ``extra="allow"``)."""

from __future__ import annotations

from ifsynth.schemas.records import Payload


class SeedItem(Payload):
    """A selected seed: one query and its one judged positive passage."""

    query_id: str
    query: str
    doc_id: str
    title: str = ""
    passage: str
    positives: tuple[str, ...] = ()


class InstructionItem(SeedItem):
    """An instruction written for a seed's query; ``k`` is its number among the seed's instructions."""

    instruction: str
    k: int = 1


class RewriteItem(InstructionItem):
    """A passage revised for an instruction; ``passage`` is the revision, ``original_passage`` what it revised."""

    original_passage: str
