"""LLM judges: a rubric score against the query, and a pick among sibling candidates.

Both write one verdict per input with the judge's explanation as the reason; an input that does not pass
takes the status ``rejected`` and leaves the pipeline.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ifsynth.flows.llm.gateway import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage
from ifsynth.schemas.answers import CandidatePick, RelevanceJudgement, candidate_pick
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import sha256


def _query_and_passage(item: ItemRecord) -> dict[str, Any]:
    payload = item.payload or {}
    return {"query": payload["query"], "passage": payload["passage"]}


def judge_relevance(
    ctx: RunContext,
    order: int,
    *,
    stage: str,
    source: str,
    min_score: int,
    max_tokens: int,
    max_score: int = 5,
    schema: type[RelevanceJudgement] = RelevanceJudgement,
    variables: Callable[[ItemRecord], dict[str, Any]] = _query_and_passage,
    pages: Iterable[list[ItemRecord]] | None = None,
) -> StageCounts:
    """Score each item on a 1-5 rubric (by default: its passage against the original query); keep it when
    ``min_score <= score <= max_score`` (an upper bound keeps what must *not* answer, e.g. hard negatives).
    Other rubrics differ by template, variables and schema name."""

    def build(item: ItemRecord) -> list[Ask]:
        prompt = ctx.prompts.render(ctx.template(stage), **variables(item))
        return [Ask(prompt, schema, "judge", ctx.params.judge_temperature, max_tokens)]

    def handle(writer: StageWriter, item: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, schema):
            return writer.failed(item.item_id, reply)
        decision = "pass" if min_score <= reply.value.score <= max_score else "reject"
        verdict = writer.verdict(
            item.item_id,
            decision,
            judge="llm",
            reason=reply.value.explanation,
            score=reply.value.score,
            threshold=min_score if max_score == 5 else max_score,
            call_key=reply.keys[-1],
        )
        return Outcome(decision, verdicts=[verdict], n_out=int(decision == "pass"))

    return llm_stage(ctx, stage, order, source=source, build=build, handle=handle, pages=pages)


Entry = tuple[ItemRecord, list[ItemRecord]]
T = TypeVar("T")


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


def judge_pick(ctx: RunContext, order: int, *, stage: str, source: str, max_tokens: int) -> StageCounts:
    """Show the instruction with every sibling passage of its group; keep it when the judge names its own."""

    def pages() -> Iterator[list[Entry]]:
        for page in ctx.warehouse.items(ctx.run_id, source, status=None):
            groups: dict[str, list[ItemRecord]] = {}
            for item in page:
                if item.status in ("ok", "rejected"):  # a sibling rejected earlier still serves as a distractor
                    groups.setdefault(item.group_id, []).append(item)
            yield [(item, siblings) for siblings in groups.values() for item in siblings if item.status == "ok"]

    def candidates(entry: Entry) -> list[ItemRecord]:
        item, siblings = entry
        return shuffled(sorted(siblings, key=lambda sibling: sibling.item_id), f"{ctx.params.seed}:{item.item_id}")

    def build(entry: Entry) -> list[Ask]:
        item, _ = entry
        listed = candidates(entry)
        names = labels(len(listed))
        payload = item.payload or {}
        prompt = ctx.prompts.render(
            ctx.template(stage),
            query=payload["query"],
            instruction=payload["instruction"],
            candidates=[{"label": label, "text": c.payload["passage"]} for label, c in zip(names, listed, strict=True)],
        )
        return [Ask(prompt, candidate_pick(names), "judge", ctx.params.judge_temperature, max_tokens)]

    def handle(writer: StageWriter, entry: Entry, replies: list[Reply]) -> Outcome:
        item, _ = entry
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, CandidatePick):
            return writer.failed(item.item_id, reply)
        listed = candidates(entry)
        gold = str(listed.index(item) + 1)
        picked = listed[int(reply.value.best) - 1]
        decision = "pass" if reply.value.best == gold else "reject"
        reason = pick_reason(reply.value.best, picked.item_id, gold, reply.value.explanation)
        verdict = writer.verdict(item.item_id, decision, judge="llm", reason=reason, call_key=reply.keys[-1])
        return Outcome(decision, verdicts=[verdict], n_out=int(decision == "pass"))

    return llm_stage(
        ctx, stage, order, source=source, build=build, handle=handle, pages=pages(), input_id=lambda e: e[0].item_id
    )
