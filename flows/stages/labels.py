"""Relevance labels from an LLM judge, as a TREC assessor gives them: a document against a query and an
instruction (a narrative, an instruction level), yes or no, with the reason.

A document longer than one window is judged window by window (FollowIR: 400 words, 200 apart, as it cut its
documents) and is relevant when its best window is (MaxP); without windows (IFIR, whose judge code grades a
passage whole) it is judged whole. The uses differ in their inputs, their template and
what a label decides:

- FollowIR's ``rejudge`` and IFIR's ``recheck``: each instruction against each originally relevant (or
  spot-checked) document; the label becomes a ``label`` item, its verdict passes when the document is still
  relevant.
- FollowIR's ``judge_documents`` (training set): each synthetic document against its own narrative; it stays
  only when the judged label equals the one it was written for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.evaluation.windows import windows
from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.schemas.answers import RelevanceLabel
from ifsynth.schemas.config import Role
from ifsynth.schemas.payloads import DocumentItem, InstructedItem, PassageItem, WrittenDocument
from ifsynth.schemas.records import ItemRecord, ItemStatus, Payload

# (what the document is judged against: an ``InstructedItem``; the document: a ``PassageItem``, a ``DocumentItem``
# where it gets a label item, a ``WrittenDocument`` where its label must be the one it was written for)
Judged = tuple[ItemRecord, ItemRecord]


@dataclass(frozen=True, kw_only=True)
class LabelDocuments(LLMStage[Judged]):
    reads: ClassVar[type[Payload]] = PassageItem  # with what each is judged against, an ``InstructedItem``
    streams: ClassVar[bool] = False  # its pairs are read by ``pairs``, from more than the source's groups
    role: Role = "judge"
    pairs: Callable[[RunContext, str], list[list[Judged]]]
    window_words: int | None  # none: the document whole
    window_stride: int
    rubric: str = "judge"  # the template: one rubric for all of a recipe's labels
    describe: Callable[[ItemRecord, ItemRecord], dict[str, Any]] | None = None  # what a label item records
    intended: bool = False  # judge_documents: a label must equal the document's ``label``

    @property
    def templates(self) -> tuple[str, ...]:
        return (self.rubric,)

    def inputs(self, ctx: RunContext) -> list[list[Judged]]:
        return self.pairs(ctx, self.source)

    def input_id(self, entry: Judged) -> str:
        return entry[1].item_id if self.intended else entry[0].item_id

    def build(self, env: Env, entry: Judged) -> list[Ask]:
        about, document = entry[0].read(InstructedItem), entry[1].read(PassageItem)
        return [
            self.ask(
                env, RelevanceLabel, self.rubric, query=about.query, instruction=about.instruction, document=window
            )
            for window in (
                windows(document.passage, self.window_words, self.window_stride)
                if self.window_words is not None
                else [document.passage]
            )
        ]

    def handle(self, env: Env, entry: Judged, replies: list[Reply]) -> Outcome:
        about, document = entry
        keys = [key for reply in replies for key in reply.keys]
        failed = next((r for r in replies if r.status != "ok" or not isinstance(r.value, RelevanceLabel)), None)
        if failed is not None and self.intended:
            return env.failed(document.item_id, failed)
        if failed is not None:
            # the label this document lacks, with the verdict that says why: one per (instruction, document), so
            # two failed documents of one instruction do not share a verdict; the instruction is marked by its input
            label = self.label(env, about, document, {"relevant": None}, keys, "parse_error")
            outcome = env.failed(label.item_id, failed)
            return Outcome(outcome.decision, items=[label], verdicts=outcome.verdicts, n_out=0)
        labels = [reply.value for reply in replies if isinstance(reply.value, RelevanceLabel)]  # every one, none failed
        best = next((n for n, label in enumerate(labels) if label.relevant), 0)
        relevant = labels[best].relevant
        where = f" (window {best + 1} of {len(labels)})" if len(labels) > 1 else ""
        reason = f"{'relevant' if relevant else 'not relevant'}{where}: {labels[best].explanation}"
        if self.intended:
            written = bool(document.read(WrittenDocument).label)
            agrees = relevant == written
            verdict = env.verdict(
                document.item_id,
                "pass" if agrees else "reject",
                judge="llm",
                reason=f"written {'relevant' if written else 'non-relevant'}, judged {reason}",
                score=float(relevant),
                call_key=replies[best].keys[-1],
                rule="judged as written",
            )
            return Outcome("pass" if agrees else "reject", verdicts=[verdict], n_out=int(agrees))
        label = self.label(
            env, about, document, {"relevant": relevant, "window": best + 1, "windows": len(labels)}, keys
        )
        verdict = env.verdict(
            label.item_id,
            "pass" if relevant else "reject",
            judge="llm",
            reason=reason,
            score=float(relevant),
            call_key=replies[best].keys[-1],
            rule="relevant under the instruction",
        )
        return Outcome("pass", items=[label], verdicts=[verdict])

    def label(
        self,
        env: Env,
        about: ItemRecord,
        document: ItemRecord,
        found: dict[str, Any],
        keys: list[str],
        status: ItemStatus = "ok",
    ) -> ItemRecord:
        """The ``label`` item of a document under an instruction: what ``describe`` records, and what was found."""
        doc_id = document.read(DocumentItem).doc_id
        payload = {"doc_id": doc_id, **(self.describe(about, document) if self.describe else {})}
        return env.child(
            about,
            "label",
            payload | found,
            doc_id,
            parents=[document],
            call_keys=keys,
            status=status,
        )


def instructions_with_documents(
    ctx: RunContext, source: str, *, kind: str, documents: str = "select", instructions: Sequence[str] = ()
) -> list[list[Judged]]:
    """Every ``ok`` item of ``instructions`` (default: ``source``) with each ``kind`` item of ``documents`` in its
    group: FollowIR's candidate alterations with their topic's judged documents, IFIR's levels with their query's
    relevant passages."""
    by_group: dict[str, list[ItemRecord]] = {}
    for page in ctx.warehouse.items(ctx.run_id, documents):
        for item in page:
            if item.kind == kind:
                by_group.setdefault(item.group_id, []).append(item)
    pages = []
    for stage in instructions or (source,):
        for page in ctx.warehouse.items(ctx.run_id, stage):
            entries = [(about, doc) for about in page for doc in by_group.get(about.group_id, [])]
            if entries:
                pages.append(entries)
    return pages
