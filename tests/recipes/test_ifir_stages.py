"""IFIR's own stages, called directly: the levels written and checked, selection, nesting and the release rows."""

from __future__ import annotations

import json
from typing import Any

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.recipes.ifir.assemble import corpus_rows, release_rows
from ifsynth.flows.recipes.ifir.levels import WriteLevel, WriteLevel1
from ifsynth.flows.recipes.ifir.nest import Checked, nest
from ifsynth.flows.recipes.ifir.select import Candidate, SelectQueries
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.stage import FollowUp, Outcome
from ifsynth.flows.stages.labels import LabelDocuments
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.answers import LevelCheck, LevelInstruction
from ifsynth.schemas.ifir import SCHEMES
from ifsynth.schemas.records import ItemRecord, ItemStatus
from ifsynth.schemas.seeds import SeedPair, SeedPassage, SeedQuery
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item, ok, unusable

QUERY: dict[str, Any] = {
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
    assert not STAGE.marks_input, "the level below keeps its status"


def test_a_check_without_an_answer_fails_the_attempt_and_says_so() -> None:
    again = prompt(handle(ok(LEVEL), unusable("cut off")))
    assert "Why: the check of it gave no answer" in again
    outcome = handle(ok(LEVEL), unusable("cut off", key="c1"), ok(AGAIN), ok(GOOD))
    assert isinstance(outcome, Outcome) and outcome.decision == "pass"
    first = outcome.verdicts[0]
    assert (first.decision, first.reason, first.call_key) == ("parse_error", "cut off", "c1")


def test_the_stage_names_both_its_templates() -> None:
    assert STAGE.templates == ("level", "judge_level")


def pair(query_id: str, *docs: str, labels: dict[str, str] | None = None) -> SeedPair:
    query = SeedQuery(query_id=query_id, text=f"claim {query_id}", metadata={"labels": labels} if labels else {})
    return SeedPair(query=query, positives=tuple(SeedPassage(doc_id=d, title=f"T{d}", text=f"text {d}") for d in docs))


def test_selection_rejects_a_query_short_of_relevant_passages_and_sets_aside_the_undrawn() -> None:
    labels = {"40": "support", "41": "contradict", "42": "contradict"}
    page = [
        Candidate("scifact_open", pair("5", "40", "41", "42", labels=labels), drawn=True),
        Candidate("scifact_open", pair("6", "43"), drawn=True),
        Candidate("scifact_open", pair("7", "44", "45"), drawn=False),
    ]
    (_, kept), (_, short), (_, undrawn) = SelectQueries().decide(at(env("ifir", min_relevant=2), "select"), page)
    query, *passages = kept.items
    assert kept.decision == "pass" and kept.n_out == 1 and query.group_id == "scifact_open-5"
    assert query.payload["relevant"] == ["scifact_open-40", "scifact_open-41", "scifact_open-42"]
    assert query.payload["stance"] == "CONTRADICT", "the stance most of its passages hold"
    assert [(p.payload["doc_id"], p.payload["label"], p.ord) for p in passages] == [
        ("scifact_open-40", "SUPPORT", 1), ("scifact_open-41", "CONTRADICT", 2), ("scifact_open-42", "CONTRADICT", 3),
    ]  # fmt: skip
    (rejected,) = short.items
    assert short.decision == "reject" and rejected.status == "rejected" and short.n_out == 0
    assert short.verdicts[0].reason == "1 relevant passages; at least 2 needed"
    assert undrawn.decision == "set_aside" and not undrawn.items
    # the paper sets no minimum (AILA averages 2.01 relevant passages): by default one relevant passage will do
    ((_, one),) = SelectQueries().decide(at(env("ifir"), "select"), [page[1]])
    assert one.decision == "pass"


def level(number: int, status: ItemStatus = "ok", **fields: object) -> ItemRecord:
    made = item(f"level{number}", "level", "scifact_open-5", **{**QUERY, "level": number, "instruction": f"L{number}"})
    return made.model_copy(
        update={"item_id": f"level-{number}", "status": status, "payload": {**made.payload, **fields}}
    )


def labels(of: ItemRecord, *relevant: str, irrelevant: tuple[str, ...] = ()) -> list[ItemRecord]:
    judged = [(doc, True) for doc in relevant] + [(doc, False) for doc in irrelevant]
    return [
        item("recheck", "label", "scifact_open-5", doc_id=f"scifact_open-{d}", relevant=r).model_copy(
            update={"item_id": f"label-{of.item_id}-{d}", "parent_ids": (of.item_id, f"passage-{d}")}
        )
        for d, r in judged
    ]


def checked(levels: list[ItemRecord], judged: dict[str, list[ItemRecord]]) -> Checked:
    query = item("select", "query", "scifact_open-5", **QUERY)
    seed: dict[str, str | None] = {"scifact_open-40": "SUPPORT", "scifact_open-41": "CONTRADICT"}
    return Checked(query, {lv.payload["level"]: lv for lv in levels}, seed, judged)


def test_nesting_keeps_each_levels_passages_within_the_level_below_and_the_asked_stance() -> None:
    one, two, three = level(1), level(2), level(3)
    judged = {
        "level-1": labels(one, "40"),
        "level-2": labels(two, "40", "41"),
        "level-3": labels(three, "40", "41"),
    }
    outcome = nest(at(env("ifir"), "nest"), checked([one, two, three], judged))
    (group,) = outcome.items
    assert outcome.decision == "pass" and group.kind == "group"
    kept = [(lv["level"], lv["relevant"], lv["item"]) for lv in group.payload["levels"]]
    assert kept == [(1, ["scifact_open-40"], "level-1"), (2, ["scifact_open-40"], "level-2"),
                    (3, ["scifact_open-40"], "level-3")]  # fmt: skip
    reasons = {v.item_id: (v.judge, v.reason) for v in outcome.verdicts}
    assert reasons["label-level-2-41"][0] == "rule:nesting", "relevant at 2, not at 1"
    assert reasons["label-level-3-41"][0] == "rule:nesting"
    assert outcome.rejects == list(reasons)


def test_a_level_left_without_a_passage_is_dropped_with_those_above_it() -> None:
    one, two, three = level(1), level(2, stance="SUPPORT"), level(3)
    judged = {"level-1": labels(one, "40", "41"), "level-2": labels(two, "41", irrelevant=("40",))}
    outcome = nest(at(env("ifir"), "nest"), checked([one, two, three], judged))
    reasons = {v.item_id: (v.judge, v.reason) for v in outcome.verdicts}
    assert reasons["label-level-2-41"] == (
        "rule:stance",
        "the seed labels it CONTRADICT; level 2 asks for SUPPORT evidence",
    )
    assert reasons["level-2"] == ("rule", "no passage is relevant at level 2")
    assert reasons["level-3"] == ("rule", "the level below was dropped")
    assert [lv["level"] for lv in outcome.items[0].payload["levels"]] == [1]


def test_a_query_whose_first_level_is_unchecked_keeps_nothing_and_that_level_its_status() -> None:
    one = level(1, status="parse_error")
    outcome = nest(at(env("ifir"), "nest"), checked([one], {}))
    assert outcome.decision == "reject" and not outcome.items and outcome.n_out == 0
    assert outcome.verdicts[0].reason == "its re-check is incomplete: a judgment failed or did not parse"
    assert outcome.rejects == [], "a level the re-check left unfinished keeps its status"


def test_a_group_becomes_one_release_query_per_kept_level_with_its_qrels() -> None:
    levels = [
        {"level": 1, "instruction": "L1", "relevant": ["scifact_open-40", "scifact_open-41"], "item": "level-1"},
        {"level": 2, "instruction": "L2", "relevant": ["scifact_open-40"], "item": "level-2"},
    ]
    rows, per_level = release_rows([item("nest", "group", "scifact_open-5", **QUERY, levels=levels)])
    assert per_level == {"level1": 1, "level2": 1}
    assert [(q["mode"], q["query_id"], q["instruction"]) for q in rows.queries] == [
        ("level1", "scifact_open-5", "L1"), ("level2", "scifact_open-5", "L2"),
    ]  # fmt: skip
    assert json.loads(rows.queries[1]["meta"]) == {
        "domain": "science", "subset": "scifact_open", "level": 2, "seed_query_id": "5",
        "relevant": ["scifact_open-40", "scifact_open-41"], "item": "level-2",
    }  # fmt: skip
    assert [(q["mode"], q["doc_id"]) for q in rows.qrels] == [
        ("level1", "scifact_open-40"), ("level1", "scifact_open-41"), ("level2", "scifact_open-40"),
    ]  # fmt: skip
    (doc,) = corpus_rows("scifact_open", SCHEMES["scifact_open"], [SeedPassage(doc_id="9", text="noise")])
    assert doc["doc_id"] == "scifact_open-9" and json.loads(doc["meta"])["seed_doc_id"] == "9"


def test_a_level_takes_its_specifics_from_the_query_not_from_invention() -> None:
    """IFIR's level 3 on AILA adds details of the case, which the query (the case) holds: the prompt sends the
    model there first and lets it choose specifics only where the query has none."""
    texts = {"domain": "law", "seed_kind": "a case", "query": "q", "level": 3, "below": "b", "detail": "d",
             "stance": None, "previous": None, "problem": None}  # fmt: skip
    user = " ".join(Prompts().render("ifir/level", **texts).messages[-1]["content"].split())
    assert "Take the specifics from the query where it states them" in user
    assert "invent" not in user.lower()


def test_the_recheck_reads_a_passage_whole_unless_windows_are_asked_for() -> None:
    """IFIR's judge code grades a passage whole; its 512-token windows were its embedders'. A long AILA case is one
    ask by default, and windows are one setting away."""
    level = item("level2", "instruction", "aila-1", query="a tenant was evicted", instruction="I am the tenant.")
    passage = item("select", "passage", "aila-1", passage=" ".join(["word"] * 1000))

    def asks(**params: Any) -> list[Ask]:
        ctx = env("ifir", "recheck", **params)
        (recheck,) = [s for s in recipe("ifir").stage_list(ctx.params) if s.name == "recheck"]
        assert isinstance(recheck, LabelDocuments)
        return recheck.build(ctx, (level, passage))

    (whole,) = asks()
    assert " ".join(["word"] * 1000) in whole.prompt.messages[-1]["content"]
    assert len(asks(window_words=512)) == 3  # words 1-512, 385-896, 769-1000
