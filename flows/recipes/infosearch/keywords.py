"""Keyword condition extraction: the LLM names one keyword central to a document that narrows its query.

The rules stage then rejects stop words, generic words, keywords absent from the document and keywords
its sibling documents share (document_rules.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.schemas.answers import KeywordCondition
from ifsynth.schemas.infosearch import Document
from ifsynth.schemas.records import ItemRecord, Payload


def unconditioned_document(item: ItemRecord) -> bool:
    """A collected document of the keyword dimension, whose condition is still to be named."""
    return item.kind == "document" and item.read(Document).condition is None


@dataclass(frozen=True, kw_only=True)
class ExtractKeywords(LLMStage[ItemRecord]):
    """One call per document without a condition; the answer's keyword becomes the document's condition."""

    reads: ClassVar[type[Payload]] = Document
    name: str = "keywords"
    source: str = "collect"
    keep: Callable[[ItemRecord], bool] | None = unconditioned_document

    def build(self, env: Env, document: ItemRecord) -> list[Ask]:
        read = document.read(Document)
        return [self.ask(env, KeywordCondition, query=read.query, passage=read.passage)]

    def handle(self, env: Env, document: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        answer = reply.answer(KeywordCondition)
        keyword = answer.keyword
        payload = {**document.payload, "condition": keyword, "keyword_reason": answer.explanation}
        return Outcome("pass", items=[env.child(document, "document", payload, keyword, reply=reply, id_as="keyword")])
