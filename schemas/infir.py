"""The InF-IR tuple as released: its seven text fields, and which of them each retrieval mode pairs.

Generation (assemble), export and import all read the tuple through these two names, so the layout is
stated once."""

from __future__ import annotations

from ifsynth.schemas.payloads import InstructedPassage, RewriteItem
from ifsynth.schemas.records import Payload

FIELDS: tuple[str, ...] = (
    "query_positive",
    "instruction_positive",
    "document_positive",
    "query_negative",
    "instruction_negative",
    "hard_negative_document_1",
    "hard_negative_document_2",
)

# mode -> (query field, instruction field, the passage relevant in that mode)
MODES: dict[str, tuple[str, str, str]] = {
    "positive": ("query_positive", "instruction_positive", "document_positive"),
    "negative_instruction": ("query_positive", "instruction_negative", "hard_negative_document_1"),
    "negative_query": ("query_negative", "instruction_positive", "hard_negative_document_2"),
}


class PositiveItem(InstructedPassage):
    """I+ with its seed's Q+ and P+; the code flavour's I+ names its programming language."""

    language: str | None = None


class PoisonedItem(PositiveItem):
    """I- or Q- (``role`` says which; ``query`` and ``instruction`` are the pair it stands for) and the
    positive it was poisoned from."""

    role: str
    query_positive: str
    instruction_positive: str
    instruction_item: str


class NegativeItem(PoisonedItem, RewriteItem):
    """P1- or P2-: the passage written from P+ (``original_passage``) for its poisoned instruction or query."""


class TupleTexts(Payload):
    """A tuple as its judge reads it: its seven texts (``FIELDS``) and its P+'s seed id."""

    doc_id: str
    query_positive: str
    instruction_positive: str
    document_positive: str
    query_negative: str
    instruction_negative: str
    hard_negative_document_1: str
    hard_negative_document_2: str

    def text(self, name: str) -> str:
        """One of the seven texts by its field name (``MODES`` and the judge's judgments name them)."""
        if name not in FIELDS:
            raise KeyError(name)
        return str(getattr(self, name))


class TupleItem(TupleTexts):
    """A tuple as released: also its seed query's id, the items each text came from, and the language a code
    flavour's I+ names."""

    query_id: str
    title: str = ""
    items: dict[str, str]
    language: str | None = None
