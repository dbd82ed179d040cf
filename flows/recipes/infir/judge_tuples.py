"""Validation (InF-IR): three judgments per tuple. For (I+, Q+), (I-, Q+) and (I+, Q-) the judge sees the
instruction and query with P+, P1-, P2- and random seed passages as distractors, shuffled, and names the
single most relevant passage. A tuple is kept only if all three name the intended one.

Each judgment is a verdict on the tuple, told apart by its judge (`llm:positive`, `llm:negative_instruction`,
`llm:negative_query`), with the judge's answer and the intended label in its reason."""

from __future__ import annotations

import heapq
import random
from collections.abc import Mapping
from typing import Any

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.recipes.infir.poison import NEGATIVE_INSTRUCTION, NEGATIVE_QUERY
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage
from ifsynth.flows.stages.judge import labels, pick_reason, shuffled
from ifsynth.schemas.answers import CandidatePick, candidate_pick
from ifsynth.schemas.records import Decision, ItemRecord, StageCounts, VerdictRecord
from ifsynth.warehouse.keys import sha256

STAGE = "validate"
POSITIVE = "positive"
# judgment -> (instruction field, query field, the passage it must name)
JUDGMENTS = {
    POSITIVE: ("instruction_positive", "query_positive", "document_positive"),
    NEGATIVE_INSTRUCTION: ("instruction_negative", "query_positive", "hard_negative_document_1"),
    NEGATIVE_QUERY: ("instruction_positive", "query_negative", "hard_negative_document_2"),
}
TUPLE_PASSAGES = ("document_positive", "hard_negative_document_1", "hard_negative_document_2")
SHORT = {"document_positive": "P+", "hard_negative_document_1": "P1-", "hard_negative_document_2": "P2-"}
POOL = 10_000  # distractors come from a fixed hash sample of the seed corpus this large, drawn once per stage


def validate_tuples(
    ctx: RunContext,
    order: int,
    *,
    distractors: int,
    max_tokens: int,
    source: str = "tuples",
    variables: Mapping[str, Any] | None = None,
) -> StageCounts:
    seed, extra = ctx.params.seed, dict(variables or {})
    pool = (
        heapq.nsmallest(
            POOL,
            ((p.doc_id, p.text) for p in ctx.source.passages()),
            key=lambda passage: sha256(f"{seed}:distractor:{passage[0]}"),
        )
        if distractors
        else []
    )

    def drawn(tuple_: ItemRecord) -> list[tuple[str, str]]:
        """``distractors`` pool passages other than P+ (by id or text) and the tuple's negatives."""
        payload = tuple_.payload
        own = {payload[name] for name in TUPLE_PASSAGES}
        rng = random.Random(sha256(f"{seed}:{tuple_.item_id}"))
        # a few spare draws cover the excluded ones (P+ and texts equal to the tuple's passages)
        draws = rng.sample(range(len(pool)), min(len(pool), distractors + len(own) + 1))
        picked = [pool[i] for i in draws if pool[i][0] != payload["doc_id"] and pool[i][1] not in own]
        return picked[:distractors]

    def candidates(tuple_: ItemRecord, judgment: str) -> list[tuple[str, str]]:
        """(name, text) pairs: the tuple's three passages by field name, distractors by seed doc id."""
        payload = tuple_.payload
        listed = [(name, payload[name]) for name in TUPLE_PASSAGES] + drawn(tuple_)
        return shuffled(listed, f"{seed}:{tuple_.item_id}:{judgment}")

    def build(tuple_: ItemRecord) -> list[Ask]:
        payload = tuple_.payload
        asks = []
        for judgment, (instruction, query, _) in JUDGMENTS.items():
            listed = candidates(tuple_, judgment)
            names = labels(len(listed))
            prompt = ctx.prompts.render(
                ctx.template(STAGE),
                query=payload[query],
                instruction=payload[instruction],
                candidates=[{"label": label, "text": text} for label, (_, text) in zip(names, listed, strict=True)],
                **extra,
            )
            asks.append(Ask(prompt, candidate_pick(names), "judge", ctx.params.judge_temperature, max_tokens))
        return asks

    def handle(writer: StageWriter, tuple_: ItemRecord, replies: list[Reply]) -> Outcome:
        verdicts: list[VerdictRecord] = []
        decisions: list[Decision] = []
        for (judgment, (_, _, intended)), reply in zip(JUDGMENTS.items(), replies, strict=True):
            judge = f"llm:{judgment}"
            if reply.status != "ok" or not isinstance(reply.value, CandidatePick):
                decision: Decision = "parse_error" if reply.status == "parse_error" else "failed"
                verdicts.append(
                    writer.verdict(
                        tuple_.item_id, decision, judge=judge, reason=reply.error or "", call_key=reply.keys[-1]
                    )
                )
                decisions.append(decision)
                continue
            listed = [name for name, _ in candidates(tuple_, judgment)]
            gold = str(listed.index(intended) + 1)
            picked = listed[int(reply.value.best) - 1]
            decision = "pass" if reply.value.best == gold else "reject"
            name = SHORT.get(picked, f"distractor {picked}")
            reason = pick_reason(reply.value.best, name, gold, reply.value.explanation, gold_id=SHORT[intended])
            verdicts.append(
                writer.verdict(tuple_.item_id, decision, judge=judge, reason=reason, call_key=reply.keys[-1])
            )
            decisions.append(decision)
        overall = next((d for d in ("failed", "parse_error", "reject") if d in decisions), "pass")
        return Outcome(overall, verdicts=verdicts, n_out=int(overall == "pass"))

    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle)
