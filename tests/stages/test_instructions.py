"""GenerateInstructions: the asks it renders, the instruction items and verdicts it makes of the answers."""

from __future__ import annotations

from ifsynth.flows.run.stage import Outcome
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.schemas.answers import TwoSentenceInstruction, instruction_list
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item, ok, unusable

SEED = item("select", "seed", query="what is a tide", passage="Tides are the rise and fall of the sea.", ord=0)


def test_build_asks_the_generator_for_k_instructions_from_the_query_and_passage() -> None:
    ctx = env("instructir", temperature=0.7)
    stage = GenerateInstructions(k=3, max_tokens=300)
    (ask,) = stage.build(ctx, SEED)
    assert ask.schema is instruction_list(3) and ask.role == "generator"
    assert (ask.temperature, ask.max_tokens) == (0.7, 300)
    text = ask.prompt.messages[-1]["content"]
    assert "what is a tide" in text and ask.prompt.template == "instructir/instructions"


def test_handle_makes_one_item_per_instruction_with_lineage_and_calls() -> None:
    ctx = env()
    stage = GenerateInstructions(k=2, max_tokens=300)
    answer = instruction_list(2)(instructions=["I am a sailor.", "I am a student."])
    outcome = stage.handle(at(ctx, "instructions"), SEED, [ok(answer)])
    assert outcome.decision == "pass" and outcome.verdicts == []
    first, second = outcome.items
    assert first.item_id == item_id("instruction", [SEED.item_id], 1, "I am a sailor.")
    assert (first.kind, first.group_id, first.parent_ids, first.call_keys) == (
        "instruction",
        "q1",
        (SEED.item_id,),
        ("key-1",),
    )
    assert first.payload == {**SEED.payload, "instruction": "I am a sailor.", "k": 1}
    assert (second.payload["k"], second.ord) == (2, 2)


def test_an_unusable_answer_is_the_inputs_outcome_with_its_reason() -> None:
    ctx = env()
    outcome = GenerateInstructions(k=2, max_tokens=300).settle(at(ctx, "instructions"), SEED, [unusable()])
    assert isinstance(outcome, Outcome) and outcome.decision == "parse_error" and outcome.items == []
    (verdict,) = outcome.verdicts
    assert (verdict.item_id, verdict.reason, verdict.call_key) == (SEED.item_id, "invalid JSON at `score`", "key-bad")


def test_an_answer_cut_at_its_budget_rejects_the_input_for_its_length() -> None:
    ctx = env()
    cut = unusable("EOF while parsing a string (the answer was cut off at max_tokens=300)")
    cut.cut = True
    outcome = GenerateInstructions(k=2, max_tokens=300).settle(at(ctx, "instructions"), SEED, [cut])
    assert isinstance(outcome, Outcome) and outcome.decision == "reject" and outcome.items == []
    (verdict,) = outcome.verdicts
    assert verdict.rule == "the answer fits max_tokens" and "max_tokens=300" in verdict.reason


def test_cut_at_newline_keeps_the_first_line_and_records_the_cut() -> None:
    ctx = env("infir")
    stage = GenerateInstructions(k=1, max_tokens=300, cut_at_newline=True)
    answer = instruction_list(1)(instructions=["Find me the paper.\nAlso explain it."])
    outcome = stage.handle(at(ctx, "instructions"), SEED, [ok(answer)])
    (made,) = outcome.items
    assert made.payload["instruction"] == "Find me the paper."
    (verdict,) = outcome.verdicts
    assert verdict.judge == "rule:newline" and "Also explain it." in verdict.reason


def test_other_recipes_differ_in_variables_and_schema_only() -> None:
    ctx = env("infosearch")
    document = item("rules", "document", query="tides", condition="layman", dimension="audience")
    stage = GenerateInstructions(
        source="rules", max_tokens=200, schema=TwoSentenceInstruction,
        variables=lambda d: {"query": d.payload["query"], "dimension": "audience", "condition": "layman",
                             "siblings": ["expert"]},
    )  # fmt: skip
    (ask,) = stage.build(ctx, document)
    assert ask.schema is TwoSentenceInstruction and ask.prompt.template == "infosearch/instructions"
    answer = TwoSentenceInstruction(restated_query="I want to know about tides.", restriction="Plain words only.")
    (made,) = stage.handle(at(ctx, "instructions"), document, [ok(answer)]).items
    assert made.payload["instruction"] == "I want to know about tides. Plain words only."
    assert made.payload["restriction"] == "Plain words only." and made.payload["condition"] == "layman"
