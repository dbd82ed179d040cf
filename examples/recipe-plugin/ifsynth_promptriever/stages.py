"""The recipe's stages in run order: ifsynth's seed selection and instruction stage (with this recipe's
template), then its own two, then ifsynth's assembly.

- ``instructions``: for a query and its positive, one instruction the positive satisfies.
- ``negatives``: passages that answer the query but fail that instruction.
- ``judge``: each negative read twice, for the query alone and under the instruction; it is kept when it is
  relevant to the query and not relevant under the instruction, which is what makes it an instruction negative
  and not merely an off-topic passage.
- ``assemble``: the query under its instruction, its positive (relevant) and its kept negatives (judged not
  relevant), as a release whose qrels carry both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome, Stage
from ifsynth.flows.stages.assemble import AssembleRelease, Rows
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.flows.stages.select import SelectSeeds
from ifsynth.schemas.answers import QueryNegatives, RelevanceLabel, query_negatives
from ifsynth.schemas.config import RecipeParams, Role
from ifsynth.schemas.modes import INSTRUCTED
from ifsynth.schemas.records import Decision, ItemRecord, Payload
from ifsynth_promptriever import PromptrieverSettings


class Instructed(Payload):
    """A seed with the instruction written for it."""

    query_id: str
    doc_id: str
    query: str
    passage: str
    instruction: str
    title: str = ""


class Negative(Instructed):
    """An instruction negative of that seed."""

    negative: str


def instruction_variables(seed: ItemRecord) -> dict[str, Any]:
    """The instruction template reads the positive: the instruction must be one it satisfies."""
    return {"query": seed.payload["query"], "passage": seed.payload["passage"], "k": 1}


@dataclass(frozen=True, kw_only=True)
class WriteNegatives(LLMStage[ItemRecord]):
    """One call per instruction for ``per_instruction`` passages; each becomes a ``negative`` item."""

    name: str = "negatives"
    source: str = "instructions"
    per_instruction: int
    reads: ClassVar[type[Payload]] = Instructed

    def build(self, env: Env, item: ItemRecord) -> list[Ask]:
        seed = item.read(Instructed)
        schema = query_negatives(self.per_instruction)
        variables = {"query": seed.query, "instruction": seed.instruction, "passage": seed.passage}
        return [self.ask(env, schema, n=self.per_instruction, **variables)]

    def handle(self, env: Env, item: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        answer = reply.answer(QueryNegatives)
        made = [
            env.child(item, "negative", {**item.payload, "negative": text}, number, text, reply=reply, ord=number)
            for number, text in enumerate(answer.passages, 1)
        ]
        return Outcome("pass", items=made)


@dataclass(frozen=True, kw_only=True)
class JudgeNegatives(LLMStage[ItemRecord]):
    """Two labels per negative, for the query alone and under the instruction, from one template."""

    name: str = "judge"
    source: str = "negatives"
    role: Role = "judge"
    reads: ClassVar[type[Payload]] = Negative

    def build(self, env: Env, item: ItemRecord) -> list[Ask]:
        negative = item.read(Negative)
        return [
            self.ask(env, RelevanceLabel, query=negative.query, instruction=instruction, passage=negative.negative)
            for instruction in (None, negative.instruction)
        ]

    def handle(self, env: Env, item: ItemRecord, replies: list[Reply]) -> Outcome:
        alone, instructed = (reply.answer(RelevanceLabel) for reply in replies)
        keep = alone.relevant and not instructed.relevant
        reason = (
            f"query alone: {'relevant' if alone.relevant else 'not relevant'} ({alone.explanation}); "
            f"under the instruction: {'relevant' if instructed.relevant else 'not relevant'} ({instructed.explanation})"
        )
        decision: Decision = "pass" if keep else "reject"
        verdict = env.verdict(
            item.item_id, decision, judge="llm", reason=reason, score=float(keep), call_key=replies[-1].keys[-1]
        )
        return Outcome(decision, verdicts=[verdict], n_out=int(keep))


@dataclass(frozen=True, kw_only=True)
class AssembleTriplets(AssembleRelease):
    """ifsynth's assembly over the kept negatives, with this recipe's rows and no noise passages."""

    reads: ClassVar[type[Payload]] = Negative
    source: str = "negatives"
    max_noise: int | None = 0

    def add(self, rows: Rows, item: ItemRecord, number: int) -> None:
        triplet_rows(rows, item, number)


def triplet_rows(rows: Rows, item: ItemRecord, number: int) -> None:
    """A kept negative as release rows: with the first of a query's negatives, the query under its instruction
    and its positive (relevant); then the negative itself, judged not relevant (score 0)."""
    negative = item.read(Negative)
    query_id = negative.query_id
    if number == 1:
        rows.queries.append(
            {
                "mode": INSTRUCTED,
                "query_id": query_id,
                "group_id": query_id,
                "query": negative.query,
                "instruction": negative.instruction,
                "meta": "{}",
            }
        )
        if negative.doc_id not in rows.used:  # a positive of two queries is one document
            rows.docs.append(
                {"doc_id": negative.doc_id, "title": negative.title, "text": negative.passage, "meta": "{}"}
            )
        rows.qrels.append({"mode": INSTRUCTED, "query_id": query_id, "doc_id": negative.doc_id, "score": 1})
        rows.used.add(negative.doc_id)
    doc_id = f"{query_id}-negative-{number}"
    rows.docs.append(
        {"doc_id": doc_id, "title": "", "text": negative.negative, "meta": json.dumps({"item": item.item_id})}
    )
    rows.qrels.append({"mode": INSTRUCTED, "query_id": query_id, "doc_id": doc_id, "score": 0})


def stages(settings: RecipeParams) -> list[Stage]:
    assert isinstance(settings, PromptrieverSettings)
    return [
        SelectSeeds(),
        GenerateInstructions(
            max_tokens=settings.max_tokens_instructions, variables=instruction_variables, cut_at_newline=True
        ),
        WriteNegatives(per_instruction=settings.negatives, max_tokens=settings.max_tokens_negatives),
        JudgeNegatives(max_tokens=settings.max_tokens_judge),
        AssembleTriplets(),
    ]
