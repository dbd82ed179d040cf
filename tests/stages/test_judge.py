"""The judges: a rubric score against thresholds, and a pick among sibling candidates."""

from __future__ import annotations

from typing import Literal

from ifsynth.flows.run.stage import Outcome
from ifsynth.flows.stages.judge import JudgePick, JudgeRelevance, labels
from ifsynth.schemas.answers import RelevanceJudgement, candidate_pick
from tests.helpers import at, env, item, ok, unusable

REWRITE = item("rewrite", "rewrite", query="what is a tide", passage="At dawn the tide rises.", instruction="I sail.")


def judged(score: Literal[1, 2, 3, 4, 5], min_score: int, max_score: int = 5) -> tuple[str, float | None, float | None]:
    ctx = env()
    stage = JudgeRelevance(
        name="judge_relevance", source="rewrite", max_tokens=64, min_score=min_score, max_score=max_score
    )
    outcome = stage.handle(at(ctx, stage.name), REWRITE, [ok(RelevanceJudgement(explanation="why", score=score))])
    (verdict,) = outcome.verdicts
    assert verdict.reason == "why" and verdict.call_key == "key-1" and outcome.n_out == int(outcome.decision == "pass")
    return outcome.decision, verdict.score, verdict.threshold


def test_relevance_keeps_scores_from_the_minimum() -> None:
    assert judged(4, min_score=4) == ("pass", 4, 4)
    assert judged(3, min_score=4) == ("reject", 3, 4)


def test_an_upper_bound_keeps_what_must_not_answer() -> None:
    assert judged(2, min_score=1, max_score=2) == ("pass", 2, 2)
    assert judged(3, min_score=1, max_score=2) == ("reject", 3, 2)


def test_relevance_asks_the_judge_at_the_judge_temperature() -> None:
    ctx = env("instructir", judge_temperature=0.3)
    (ask,) = JudgeRelevance(name="judge_relevance", source="rewrite", min_score=4, max_tokens=64).build(ctx, REWRITE)
    assert ask.role == "judge" and ask.temperature == 0.3 and ask.schema is RelevanceJudgement
    assert "At dawn the tide rises." in ask.prompt.messages[-1]["content"]


def test_a_pick_passes_only_when_the_judge_names_the_items_own_passage() -> None:
    ctx = env()
    siblings = [
        item("rewrite", "rewrite", ord=n, passage=f"passage {n}", query="q", instruction=f"I am {n}.")
        for n in (1, 2, 3)
    ]
    stage = JudgePick(name="judge_specificity", source="rewrite", max_tokens=64)
    entry = (siblings[1], siblings)
    (ask,) = stage.build(ctx, entry)
    assert ask.schema is candidate_pick(labels(3)) and ask.role == "judge"
    listed = JudgePick.candidates(entry, ctx.params.seed)
    gold = str(listed.index(siblings[1]) + 1)
    other = next(label for label in labels(3) if label != gold)
    answer = candidate_pick(labels(3))
    kept = stage.handle(at(ctx, stage.name), entry, [ok(answer(explanation="fits", best=gold))])
    assert kept.decision == "pass" and f"(gold [{gold}])" in kept.verdicts[0].reason
    missed = stage.handle(at(ctx, stage.name), entry, [ok(answer(explanation="no", best=other))])
    assert missed.decision == "reject" and f"picked [{other}]" in missed.verdicts[0].reason
    unanswered = stage.settle(at(ctx, stage.name), entry, [unusable()])
    assert isinstance(unanswered, Outcome) and unanswered.decision == "parse_error"


def test_the_candidate_order_is_fixed_by_seed_and_item() -> None:
    siblings = [item("rewrite", "rewrite", ord=n, passage=f"p{n}") for n in range(1, 8)]
    first = JudgePick.candidates((siblings[0], siblings), seed=0)
    assert first == JudgePick.candidates((siblings[0], list(reversed(siblings))), seed=0), "not the file order"
    assert first != JudgePick.candidates((siblings[0], siblings), seed=1)
