"""Answer parsing: JSON as sent by a schema-honouring endpoint, or wrapped in prose by one that is not."""

from __future__ import annotations

import json

import pytest

from ifsynth.flows.llm.answers import parse_answer
from ifsynth.schemas.answers import (
    CHARS_PER_TOKEN,
    RelevanceJudgement,
    Rewrite,
    candidate_pick,
    fit_strings,
    instruction_list,
    strict_schema,
)


def test_plain_json() -> None:
    answer = parse_answer('{"explanation": "fits", "score": 5}', RelevanceJudgement)
    assert answer == RelevanceJudgement(explanation="fits", score=5)


def test_json_in_prose_and_fences() -> None:
    text = 'Sure, here it is:\n```json\n{"explanation": "ok", "score": 2}\n```\nAnything else?'
    assert parse_answer(text, RelevanceJudgement).score == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty answer"),
        ('{"explanation": "x", "score": 9}', "score"),
        ('{"explanation": "x", "score": 4', "JSON"),
        ('{"explanation": "x"}', "score"),
        ('{"explanation": "x", "score": 4, "extra": 1}', "extra"),
    ],
)
def test_bad_answers_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_answer(text, RelevanceJudgement)


def test_instruction_count_is_part_of_the_schema() -> None:
    three = instruction_list(3)
    assert strict_schema(three)["properties"]["instructions"]["minItems"] == 3
    assert len(parse_answer('{"instructions": ["a", "b", "c"]}', three).instructions) == 3
    with pytest.raises(ValueError):
        parse_answer('{"instructions": ["a", "b"]}', three)
    with pytest.raises(ValueError):
        parse_answer('{"instructions": ["a", " ", "c"]}', three)


def test_pick_must_name_a_listed_candidate() -> None:
    pick = candidate_pick(("1", "2", "3"))
    assert strict_schema(pick)["properties"]["best"]["enum"] == ["1", "2", "3"]
    assert parse_answer('{"explanation": "e", "best": "2"}', pick).best == "2"
    with pytest.raises(ValueError):
        parse_answer('{"explanation": "e", "best": "4"}', pick)


def test_strict_schema_closes_every_object() -> None:
    schema = strict_schema(RelevanceJudgement)
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"explanation", "score"}


def test_string_lengths_can_be_left_out_for_strict_subset_endpoints() -> None:
    three = instruction_list(3)
    assert strict_schema(three)["properties"]["instructions"]["items"]["minLength"] == 1
    portable = strict_schema(three, string_lengths=False)
    assert "minLength" not in json.dumps(portable) and portable["properties"]["instructions"]["minItems"] == 3


def test_fitted_strings_share_the_budget_and_leave_bounded_fields_alone() -> None:
    three = strict_schema(instruction_list(3))
    fitted = fit_strings(three, 200)
    each = fitted["properties"]["instructions"]["items"]["maxLength"]
    assert 3 * each <= 200 * CHARS_PER_TOKEN and each > 100, "three instructions share what the keys leave"
    assert "maxLength" not in three["properties"]["instructions"]["items"], "the cached schema stays as it was"
    rewrite = fit_strings(strict_schema(Rewrite), 200)["properties"]
    assert rewrite["plan"]["maxLength"] == rewrite["revised_passage"]["maxLength"] > each
    judged = fit_strings(strict_schema(RelevanceJudgement), 10)["properties"]
    assert judged["explanation"]["maxLength"] == 1 and "maxLength" not in judged["score"], "never below minLength"
