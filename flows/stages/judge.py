"""LLM judges: a rubric score against the query, and a pick among sibling candidates.

Both write one verdict per input with the judge's explanation as the reason; an input that does not pass
takes the status ``rejected`` and leaves the pipeline.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.schemas.answers import CandidatePick, RelevanceJudgement, candidate_pick
from ifsynth.schemas.config import Role
from ifsynth.schemas.payloads import InstructedPassage, JudgedItem, PassageItem
from ifsynth.schemas.records import Decision, ItemRecord, Payload
from ifsynth.warehouse.keys import sha256

T = TypeVar("T")


def query_and_passage(item: ItemRecord) -> dict[str, Any]:
    judged = item.read(JudgedItem)
    return {"query": judged.query, "passage": judged.passage}


def fields(*names: str) -> Callable[[ItemRecord], dict[str, Any]]:
    """Template variables read from an item's payload."""
    return lambda item: {name: item.payload[name] for name in names}


@dataclass(frozen=True, kw_only=True)
class JudgeRelevance(LLMStage[ItemRecord]):
    """Score each item on a 1-5 rubric (by default: its passage against the original query); keep it when
    ``min_score <= score <= max_score`` (an upper bound keeps what must *not* answer, e.g. hard negatives).
    Other rubrics differ by template, variables and schema name."""

    reads: ClassVar[type[Payload]] = JudgedItem  # by default; ``variables`` reads what its recipe's kind holds
    min_score: int
    max_score: int = 5
    role: Role = "judge"
    schema: type[RelevanceJudgement] = RelevanceJudgement
    variables: Callable[[ItemRecord], dict[str, Any]] = query_and_passage

    def build(self, env: Env, item: ItemRecord) -> list[Ask]:
        return [self.ask(env, self.schema, **self.variables(item))]

    def handle(self, env: Env, item: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        answer = reply.answer(self.schema)
        decision: Decision = "pass" if self.min_score <= answer.score <= self.max_score else "reject"
        verdict = env.verdict(
            item.item_id,
            decision,
            judge="llm",
            reason=answer.explanation,
            score=answer.score,
            threshold=self.min_score if self.max_score == 5 else self.max_score,
            call_key=reply.keys[-1],
            rule=f"score in [{self.min_score:g}, {self.max_score:g}]",
        )
        return Outcome(decision, verdicts=[verdict], n_out=int(decision == "pass"))


def shuffled(candidates: Sequence[T], seed: str) -> list[T]:
    """A candidate list in an order fixed by ``seed``: the same for every rerun, unrelated to the gold's place."""
    listed = list(candidates)
    random.Random(sha256(seed)).shuffle(listed)
    return listed


def labels(n: int) -> tuple[str, ...]:
    return tuple(str(number) for number in range(1, n + 1))


def pick_reason(picked: str, picked_id: str, gold: str, explanation: str, gold_id: str | None = None) -> str:
    """The judge's answer and the intended label, as a verdict's reason."""
    return f"picked [{picked}] {picked_id} (gold [{gold}]{f' {gold_id}' if gold_id else ''}): {explanation}"


Siblings = tuple[ItemRecord, list[ItemRecord]]


@dataclass(frozen=True, kw_only=True)
class JudgePick(LLMStage[Siblings]):
    """Show the instruction with every sibling passage of its group; keep it when the judge names its own."""

    reads: ClassVar[type[Payload]] = InstructedPassage
    role: Role = "judge"

    def inputs(self, ctx: RunContext) -> Iterator[list[Siblings]]:
        for page in ctx.warehouse.items(ctx.run_id, self.source, status=None):
            yield self.entries(page)

    def entries(self, items: list[ItemRecord]) -> list[Siblings]:
        groups: dict[str, list[ItemRecord]] = {}
        for item in items:
            if item.status in ("ok", "rejected"):  # a sibling rejected earlier still serves as a distractor
                groups.setdefault(item.group_id, []).append(item)
        return [(item, siblings) for siblings in groups.values() for item in siblings if item.status == "ok"]

    def input_id(self, entry: Siblings) -> str:
        return entry[0].item_id

    @staticmethod
    def candidates(entry: Siblings, seed: int) -> list[ItemRecord]:
        item, siblings = entry
        return shuffled(sorted(siblings, key=lambda sibling: sibling.item_id), f"{seed}:{item.item_id}")

    def build(self, env: Env, entry: Siblings) -> list[Ask]:
        item, _ = entry
        listed = self.candidates(entry, env.params.seed)
        names = labels(len(listed))
        texts = [c.read(PassageItem).passage for c in listed]
        candidates = [{"label": label, "text": text} for label, text in zip(names, texts, strict=True)]
        read = item.read(InstructedPassage)
        return [
            self.ask(env, candidate_pick(names), query=read.query, instruction=read.instruction, candidates=candidates)
        ]

    def handle(self, env: Env, entry: Siblings, replies: list[Reply]) -> Outcome:
        item, _ = entry
        (reply,) = replies
        answer = reply.answer(CandidatePick)
        listed = self.candidates(entry, env.params.seed)
        gold = str(listed.index(item) + 1)
        picked = listed[int(answer.best) - 1]
        decision: Decision = "pass" if answer.best == gold else "reject"
        reason = pick_reason(answer.best, picked.item_id, gold, answer.explanation)
        rule = "picks its own passage among its siblings"
        verdict = env.verdict(item.item_id, decision, judge="llm", reason=reason, call_key=reply.keys[-1], rule=rule)
        return Outcome(decision, verdicts=[verdict], n_out=int(decision == "pass"))
