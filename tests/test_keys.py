"""Cache keys and item ids: the same content gives the same address; anything that changes the answer
changes the key, and nothing else does."""

from __future__ import annotations

import pytest

from ifsynth.warehouse.keys import cache_key, item_id

BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "response_format": {"type": "json_schema", "json_schema": {"name": "A", "schema": {"type": "object"}}},
    "temperature": 1.0,
    "top_p": 0.9,
    "max_tokens": 100,
    "seed": 0,
}


def test_same_request_same_key() -> None:
    reordered = dict(reversed(list(BODY.items())))
    assert cache_key("http://x/v1", BODY) == cache_key("http://x/v1/", reordered)


@pytest.mark.parametrize(
    "field, value",
    [
        ("model", "other"),
        ("messages", [{"role": "user", "content": "hi!"}]),
        ("response_format", {"type": "json_object"}),
        ("temperature", 0.0),
        ("top_p", 1.0),
        ("max_tokens", 101),
        ("seed", 1),
    ],
)
def test_every_answer_deciding_field_changes_the_key(field: str, value: object) -> None:
    assert cache_key("http://x/v1", BODY) != cache_key("http://x/v1", {**BODY, field: value})


def test_endpoint_and_sample_index_change_the_key() -> None:
    base = cache_key("http://x/v1", BODY)
    assert base != cache_key("http://y/v1", BODY)
    assert base != cache_key("http://x/v1", BODY, sample_index=1)


def test_fields_that_do_not_change_the_answer_stay_out() -> None:
    assert cache_key("http://x/v1", BODY) == cache_key("http://x/v1", {**BODY, "timeout": 5, "user": "me"})


def test_item_ids_are_content_addresses() -> None:
    one = item_id("rewrite", ["a", "b"], 1, "text")
    assert one == item_id("rewrite", ["b", "a"], 1, "text")
    assert one.startswith("rewrite-") and len(one) == len("rewrite-") + 16
    assert one != item_id("rewrite", ["a", "b"], 1, "other text")
    assert one != item_id("rewrite", ["a", "c"], 1, "text")
    assert one != item_id("instruction", ["a", "b"], 1, "text")


def test_logprobs_are_keyed_only_when_asked() -> None:
    key = cache_key("http://x/v1", BODY)
    # a request that never asked keeps the key it had before log-probabilities were keyable
    assert key == cache_key("http://x/v1", {**BODY, "logprobs": None, "top_logprobs": None})
    asked = cache_key("http://x/v1", {**BODY, "logprobs": True, "top_logprobs": 5})
    assert asked != key != cache_key("http://x/v1", {**BODY, "logprobs": True, "top_logprobs": 3}) != asked
