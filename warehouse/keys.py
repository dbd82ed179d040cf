"""Content addresses: the cache key of an LLM request and the id of an item.

Both are pure functions of content, so two runs of the same config and seeds agree on every key and id.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import orjson

T = TypeVar("T")

# Request fields that decide the answer. Anything else (timeouts, concurrency, the key) stays out.
KEYED_FIELDS = ("model", "messages", "response_format", "temperature", "top_p", "max_tokens", "seed")
# Keyed only when a request sets them, so the keys of requests without them stay as they were.
OPTIONAL_KEYED_FIELDS = ("logprobs", "top_logprobs")


_encode = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode
# Where orjson's text can differ from json's for a request: floats below 1e-4 in magnitude (orjson writes
# 1e-5 as 0.00001 or 1e-5, json as 1e-05). Matching inside strings too only costs the slower path.
_SMALL_FLOAT = re.compile(r"\d[eE]-|0\.0000")


def canonical(value: Any) -> str:
    return _encode(value)  # one encoder for every call: json.dumps with options builds one each time


def canonical_request(body: dict[str, Any]) -> str:
    """``canonical`` of a chat request, several times faster: orjson writes the same text as json for
    everything a request holds (strings, integers, booleans, null, and floats such as sampling parameters),
    and anything it might write differently goes through json, so cache keys never change. (Not for
    arbitrary values: orjson writes NaN as null, and a request cannot hold NaN.)"""
    try:
        text = orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONEncodeError, TypeError):  # an integer beyond 64 bits, a key that is not a string
        return _encode(body)
    suspect = ("e-" in text or "E-" in text or "0.0000" in text) and _SMALL_FLOAT.search(text)
    return _encode(body) if suspect else text


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_key(base_url: str, body: dict[str, Any], sample_index: int = 0) -> str:
    """SHA-256 of the canonical request: endpoint, model, messages, schema, sampling, sample index."""
    keyed = {name: body.get(name) for name in KEYED_FIELDS}
    keyed.update({name: body[name] for name in OPTIONAL_KEYED_FIELDS if body.get(name) is not None})
    return sha256(canonical_request({"base_url": base_url.rstrip("/"), "sample_index": sample_index, **keyed}))


def item_id(kind: str, parents: Iterable[str], *content: Any) -> str:
    """``<kind>-<16 hex>`` over the kind, the parents and what makes this item itself."""
    digest = sha256(canonical([kind, sorted(parents), list(content)]))
    return f"{kind}-{digest[:16]}"


def hash_sample(items: Iterable[T], n: int, *, key: Callable[[T], str]) -> list[T]:
    """The ``n`` items with the smallest SHA-256 of ``key(item)``: a sample fixed by content and seed, the same
    under any file order, drawn in one pass with memory for ``n`` items."""
    return heapq.nsmallest(n, items, key=lambda item: sha256(key(item)))
