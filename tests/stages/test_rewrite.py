"""RewritePassages: one ask per target, one rewrite item per usable answer, failures on record."""

from __future__ import annotations

from typing import Any

from ifsynth.flows.stages.rewrite import RewritePassages
from ifsynth.schemas.answers import Rewrite
from ifsynth.schemas.records import ItemRecord
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item, ok, unusable

INSTRUCTION = item(
    "instructions", "instruction", query="what is a tide", instruction="I sail at dawn.", passage="Tides rise.", ord=1
)


def two_targets(document: ItemRecord) -> list[dict[str, Any]]:
    shared = {"query": "q", "passage": "p", "dimension": "format", "seed_kind": "article", "origin": "rewrite"}
    return [
        {**shared, "condition": "blog", "target": "a blog post", "position": 2},
        {**shared, "condition": "tweet", "target": "a tweet", "position": 3},
    ]


def test_build_renders_the_instructir_target_for_the_generator() -> None:
    ctx = env("instructir", temperature=0.9)
    (ask,) = RewritePassages(max_tokens=512).build(ctx, INSTRUCTION)
    assert ask.schema is Rewrite and ask.role == "generator" and (ask.temperature, ask.max_tokens) == (0.9, 512)
    assert "I sail at dawn." in ask.prompt.messages[-1]["content"]


def test_handle_keeps_the_original_passage_and_the_plan() -> None:
    ctx = env()
    answer = Rewrite(plan="mention the dawn tide", revised_passage="At dawn the tide rises.")
    (made,) = RewritePassages(max_tokens=512).handle(at(ctx, "rewrite"), INSTRUCTION, [ok(answer)]).items
    assert made.item_id == item_id("rewrite", [INSTRUCTION.item_id], "At dawn the tide rises.")
    assert made.payload["passage"] == "At dawn the tide rises." and made.payload["original_passage"] == "Tides rise."
    assert made.payload["plan"] == "mention the dawn tide" and made.ord == INSTRUCTION.ord


def test_with_several_targets_a_failed_one_is_recorded_and_the_others_kept() -> None:
    ctx = env("infosearch")
    stage = RewritePassages(source="collect", max_tokens=512, targets=two_targets)
    assert len(stage.build(ctx, INSTRUCTION)) == 2
    replies = [ok(Rewrite(plan="short", revised_passage="A blog post.")), unusable("empty answer")]
    outcome = stage.handle(at(ctx, "rewrite"), INSTRUCTION, replies)
    assert outcome.decision == "pass"
    (made,) = outcome.items
    assert made.item_id == item_id("rewrite", [INSTRUCTION.item_id], 0, "A blog post.")
    assert made.payload["target"] == "a blog post"
    (verdict,) = outcome.verdicts
    assert verdict.decision == "parse_error" and verdict.reason == "empty answer"


def test_when_every_target_fails_the_input_fails() -> None:
    ctx = env("infosearch")
    stage = RewritePassages(source="collect", max_tokens=512, targets=two_targets)
    outcome = stage.handle(at(ctx, "rewrite"), INSTRUCTION, [unusable(), unusable()])
    assert outcome.decision == "parse_error" and outcome.items == []
