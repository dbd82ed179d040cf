"""The InF-IR tuple as released: its seven text fields, and which of them each retrieval mode pairs.

Generation (assemble), export and import all read the tuple through these two names, so the layout is
stated once."""

from __future__ import annotations

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
