"""Keyword condition extraction: the LLM names one keyword central to a document that narrows its query.

The rules stage then rejects stop words, generic words, keywords absent from the document and keywords
its sibling documents share (document_rules.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.schemas.answers import KeywordCondition
from ifsynth.schemas.records import ItemRecord


def unconditioned_document(item: ItemRecord) -> bool:
    """A collected document of the keyword dimension, whose condition is still to be named."""
    return item.kind == "document" and item.payload.get("condition") is None


@dataclass(frozen=True, kw_only=True)
class ExtractKeywords(LLMStage[ItemRecord]):
    """One call per document without a condition; the answer's keyword becomes the document's condition."""

    name: str = "keywords"
    source: str = "collect"
    keep: Callable[[ItemRecord], bool] | None = unconditioned_document

    def build(self, env: Env, document: ItemRecord) -> list[Ask]:
        return [self.ask(env, KeywordCondition, query=document.payload["query"], passage=document.payload["passage"])]

    def handle(self, env: Env, document: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, KeywordCondition):
            return env.failed(document.item_id, reply)
        keyword = reply.value.keyword
        payload = {**document.payload, "condition": keyword, "keyword_reason": reply.value.explanation}
        return Outcome("pass", items=[env.child(document, "document", payload, keyword, reply=reply, id_as="keyword")])
