"""IFIR's own stages, called directly: the levels written and checked, selection, nesting and the release rows."""

from __future__ import annotations

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.recipes.ifir.levels import WriteLevel, WriteLevel1
from ifsynth.flows.run.stage import FollowUp, Outcome
from ifsynth.schemas.answers import LevelCheck, LevelInstruction
from ifsynth.schemas.ifir import SCHEMES
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item, ok, unusable

QUERY = {
    "subset": "scifact_open", "domain": "science", "query_id": "scifact_open-5", "seed_query_id": "5",
    "query": "Aspirin prevents strokes.", "relevant": ["scifact_open-40", "scifact_open-41"], "stance": "SUPPORT",
}  # fmt: skip
BELOW = item("level1", "level", "scifact_open-5", **QUERY, level=1, instruction=SCHEMES["scifact_open"].level1)
STAGE = WriteLevel(name="level2", source="level1", level=2, max_tokens=128, max_tokens_check=32)
LEVEL = LevelInstruction(added=["support"], instruction="Find evidence that supports it.")
AGAIN = LevelInstruction(added=["support"], instruction="Find evidence that supports the claim, as before.")
GOOD = LevelCheck(explanation="kept and narrowed", keeps_all=True, adds=True)
BAD = LevelCheck(explanation="the claim is gone", keeps_all=False, adds=True)


def handle(*replies: Reply) -> Outcome | FollowUp:
    return STAGE.handle(at(env("ifir"), "level2"), BELOW, list(replies))


def text(ask: Ask) -> str:
    return ask.prompt.messages[-1]["content"]


def prompt(result: Outcome | FollowUp) -> str:
    """The prompt of the one ask ``handle`` needs next."""
    assert isinstance(result, FollowUp)
    (ask,) = result.asks
    return text(ask)


def test_level1_is_the_subsets_generic_ask_for_each_query() -> None:
    ((input_id, outcome),) = WriteLevel1().decide(at(env("ifir"), "level1"), [item("select", "query", **QUERY)])
    (level,) = outcome.items
    assert input_id is None and outcome.decision == "pass"
    assert level.kind == "level" and level.payload["level"] == 1 and level.payload["stance"] == "SUPPORT"
    assert level.payload["instruction"] == "Find scientific evidence about this claim."


def test_a_level_is_written_then_checked_by_the_judge() -> None:
    (write,) = STAGE.build(at(env("ifir"), "level2"), BELOW)
    assert (write.schema, write.role, write.max_tokens) == (LevelInstruction, "generator", 128)
    assert write.prompt.template == "ifir/level" and "the evidence must support the claim" in text(write)
    follow = handle(ok(LEVEL, key="w1"))
    assert isinstance(follow, FollowUp)
    (check,) = follow.asks
    assert (check.schema, check.role, check.max_tokens, check.prompt.template) == (
        LevelCheck, "judge", 32, "ifir/judge_level",
    )  # fmt: skip
    assert "Find evidence that supports it." in text(check)


def test_a_level_that_passes_its_check_is_kept() -> None:
    outcome = handle(ok(LEVEL, key="w1"), ok(GOOD, key="c1"))
    assert isinstance(outcome, Outcome) and outcome.decision == "pass" and outcome.n_out == 1
    (level,) = outcome.items
    assert level.item_id == item_id("level", [BELOW.item_id], 2, 1) and level.call_keys == ("w1", "c1")
    assert level.payload["instruction"] == LEVEL.instruction and level.payload["attempt"] == 1
    assert [(v.decision, v.reason, v.call_key) for v in outcome.verdicts] == [("pass", "kept and narrowed", "c1")]


def test_a_failing_level_is_written_again_told_why_and_kept_when_it_then_passes() -> None:
    again = prompt(handle(ok(LEVEL, key="w1"), ok(BAD, key="c1")))
    assert "An earlier attempt was rejected:\nFind evidence that supports it.\nWhy: the claim is gone" in again
    assert isinstance(handle(ok(LEVEL), ok(BAD), ok(AGAIN)), FollowUp), "the second attempt is checked too"
    outcome = handle(ok(LEVEL, key="w1"), ok(BAD, key="c1"), ok(AGAIN, key="w2"), ok(GOOD, key="c2"))
    assert isinstance(outcome, Outcome) and outcome.decision == "pass" and outcome.n_out == 1
    assert [(i.status, i.payload["attempt"]) for i in outcome.items] == [("rejected", 1), ("ok", 2)]
    assert outcome.verdicts[0].reason == "drops a condition of the level below: the claim is gone"


def test_a_level_failing_twice_is_rejected_with_both_attempts_on_record() -> None:
    outcome = handle(ok(LEVEL), ok(BAD), ok(AGAIN), ok(BAD))
    assert isinstance(outcome, Outcome) and outcome.decision == "reject" and outcome.n_out == 0
    assert [i.status for i in outcome.items] == ["rejected", "rejected"]
    assert [v.decision for v in outcome.verdicts] == ["reject", "reject"]


def test_an_unparsable_level_is_written_again_and_fails_when_no_attempt_parses() -> None:
    again = prompt(handle(unusable("no JSON")))
    assert "(no usable answer)" in again and "not the JSON asked for (no JSON)" in again
    outcome = handle(unusable("no JSON", key="w1"), unusable("still none", key="w2"))
    assert isinstance(outcome, Outcome) and outcome.decision == "parse_error" and not outcome.items
    assert [(v.item_id, v.reason, v.call_key) for v in outcome.verdicts] == [(BELOW.item_id, "still none", "w2")]
    assert STAGE.input_id(BELOW) is None, "the level below keeps its status"


def test_a_check_without_an_answer_fails_the_attempt_and_says_so() -> None:
    again = prompt(handle(ok(LEVEL), unusable("cut off")))
    assert "Why: the check of it gave no answer" in again
    outcome = handle(ok(LEVEL), unusable("cut off", key="c1"), ok(AGAIN), ok(GOOD))
    assert isinstance(outcome, Outcome) and outcome.decision == "pass"
    first = outcome.verdicts[0]
    assert (first.decision, first.reason, first.call_key) == ("parse_error", "cut off", "c1")


def test_the_stage_names_both_its_templates() -> None:
    assert STAGE.templates == ("level", "judge_level")
