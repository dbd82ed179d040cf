"""Cache keys and item ids: the same content gives the same address; anything that changes the answer
changes the key, and nothing else does."""

from __future__ import annotations

import pytest

from ifsynth.warehouse.keys import cache_key, canonical, canonical_request, item_id

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


UNUSUAL = 'héllo \u2028 "q" \x01'


def test_keys_are_stable_across_versions() -> None:
    """A changed derivation would orphan every cached answer in every user's warehouse."""
    assert cache_key("http://x/v1", BODY) == "8c642ee1b9ff05b78363d2ae8e4bd79eabdb5f26d47338e23c6e6009af2620e2"
    body = {**BODY, "logprobs": True, "top_logprobs": 5, "messages": [{"role": "user", "content": UNUSUAL}]}
    assert cache_key("http://x/v1", body, 2) == "293471dc210559dd9f314e0787aef44351c6ca2fe11dc0e6b57e1d76453b6f26"


@pytest.mark.parametrize(
    "value",
    [
        0.0, -0.0, 1.0, 0.7, 1e-4, 0.00012, 6.37e-5, 1e-7, -2.5e-12, 123456.789, 1e15, 1e16, 1.5e22, 2**53 + 0.5,
    ],
)  # fmt: skip
def test_fast_request_serialization_writes_what_json_writes(value: float) -> None:
    """The gateway serializes requests with orjson; a text differing from json's would change keys."""
    body = {
        **BODY,
        "temperature": value,
        "messages": [{"role": "user", "content": UNUSUAL + "".join(map(chr, range(1, 200)))}],
    }
    assert canonical_request(body) == canonical(body)
    assert canonical_request({**body, "seed": 2**70}) == canonical({**body, "seed": 2**70})  # beyond orjson's ints
