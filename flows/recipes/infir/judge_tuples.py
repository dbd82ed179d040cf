"""Validation (InF-IR): three judgments per tuple. For (I+, Q+), (I-, Q+) and (I+, Q-) the judge sees the
instruction and query with P+, P1-, P2- and random seed passages as distractors, shuffled, and names the
single most relevant passage. A tuple is kept only if all three name the intended one.

Each judgment is a verdict on the tuple, told apart by its judge (`llm:positive`, `llm:negative_instruction`,
`llm:negative_query`), with the judge's answer and the intended label in its reason."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.recipes.infir.poison import NEGATIVE_INSTRUCTION, NEGATIVE_QUERY
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.flows.stages.judge import labels, pick_reason, shuffled
from ifsynth.schemas.answers import CandidatePick, candidate_pick
from ifsynth.schemas.config import Role
from ifsynth.schemas.infir import TupleTexts
from ifsynth.schemas.records import Decision, ItemRecord, Payload, VerdictRecord
from ifsynth.warehouse.keys import hash_sample, sha256

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


Passage = tuple[str, str]  # (seed doc id, text)


@dataclass(frozen=True, kw_only=True)
class JudgeTuples(LLMStage[ItemRecord]):
    """Three judgments per tuple, each over P+, P1-, P2- and ``distractors`` seed passages, shuffled."""

    reads: ClassVar[type[Payload]] = TupleTexts
    name: str = "validate"
    source: str = "tuples"
    distractors: int
    role: Role = "judge"
    variables: Mapping[str, Any] = field(default_factory=dict)
    pool: tuple[Passage, ...] = ()  # drawn once per run from the seed corpus (``prepared``)

    def prepared(self, ctx: RunContext) -> JudgeTuples:
        if not self.distractors:
            return self
        passages = ((p.doc_id, p.text) for p in ctx.source.passages())
        pool = hash_sample(passages, POOL, key=lambda passage: f"{ctx.params.seed}:distractor:{passage[0]}")
        return replace(self, pool=tuple(pool))

    def drawn(self, tuple_: ItemRecord, seed: int) -> list[Passage]:
        """``distractors`` pool passages other than P+ (by id or text) and the tuple's negatives."""
        texts = tuple_.read(TupleTexts)
        own = {texts.text(name) for name in TUPLE_PASSAGES}
        rng = random.Random(sha256(f"{seed}:{tuple_.item_id}"))
        # a few spare draws cover the excluded ones (P+ and texts equal to the tuple's passages)
        draws = rng.sample(range(len(self.pool)), min(len(self.pool), self.distractors + len(own) + 1))
        picked = [self.pool[i] for i in draws if self.pool[i][0] != texts.doc_id and self.pool[i][1] not in own]
        return picked[: self.distractors]

    def candidates(self, tuple_: ItemRecord, judgment: str, seed: int) -> list[Passage]:
        """(name, text) pairs: the tuple's three passages by field name, distractors by seed doc id."""
        texts = tuple_.read(TupleTexts)
        listed = [(name, texts.text(name)) for name in TUPLE_PASSAGES] + self.drawn(tuple_, seed)
        return shuffled(listed, f"{seed}:{tuple_.item_id}:{judgment}")

    def build(self, env: Env, tuple_: ItemRecord) -> list[Ask]:
        texts, asks = tuple_.read(TupleTexts), []
        for judgment, (instruction, query, _) in JUDGMENTS.items():
            listed = self.candidates(tuple_, judgment, env.params.seed)
            names = labels(len(listed))
            candidates = [{"label": label, "text": text} for label, (_, text) in zip(names, listed, strict=True)]
            asks.append(
                self.ask(
                    env,
                    candidate_pick(names),
                    query=texts.text(query),
                    instruction=texts.text(instruction),
                    candidates=candidates,
                    **self.variables,
                )
            )
        return asks

    def handle(self, env: Env, tuple_: ItemRecord, replies: list[Reply]) -> Outcome:
        verdicts = [
            self.judged(env, tuple_, judgment, intended, reply)
            for (judgment, (_, _, intended)), reply in zip(JUDGMENTS.items(), replies, strict=True)
        ]
        decisions = [verdict.decision for verdict in verdicts]
        worst: tuple[Decision, ...] = ("failed", "parse_error", "reject")
        overall: Decision = next((d for d in worst if d in decisions), "pass")
        return Outcome(overall, verdicts=verdicts, n_out=int(overall == "pass"))

    def judged(self, env: Env, tuple_: ItemRecord, judgment: str, intended: str, reply: Reply) -> VerdictRecord:
        """One judgment's verdict on the tuple: did the judge name the intended passage?"""
        judge = f"llm:{judgment}"
        if reply.status != "ok" or not isinstance(reply.value, CandidatePick):
            decision: Decision = "parse_error" if reply.status == "parse_error" else "failed"
            return env.verdict(tuple_.item_id, decision, judge=judge, reason=reply.error or "", call_key=reply.keys[-1])
        listed = [name for name, _ in self.candidates(tuple_, judgment, env.params.seed)]
        gold = str(listed.index(intended) + 1)
        picked = listed[int(reply.value.best) - 1]
        decision = "pass" if reply.value.best == gold else "reject"
        name = SHORT.get(picked, f"distractor {picked}")
        reason = pick_reason(reply.value.best, name, gold, reply.value.explanation, gold_id=SHORT[intended])
        rule = "names the intended passage"
        return env.verdict(tuple_.item_id, decision, judge=judge, reason=reason, call_key=reply.keys[-1], rule=rule)
