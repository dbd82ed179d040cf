"""Content addresses: the cache key of an LLM request and the id of an item.

Both are pure functions of content, so two runs of the same config and seeds agree on every key and id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

# Request fields that decide the answer. Anything else (timeouts, concurrency, the key) stays out.
KEYED_FIELDS = ("model", "messages", "response_format", "temperature", "top_p", "max_tokens", "seed")
# Keyed only when a request sets them, so the keys of requests without them stay as they were.
OPTIONAL_KEYED_FIELDS = ("logprobs", "top_logprobs")


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_key(base_url: str, body: dict[str, Any], sample_index: int = 0) -> str:
    """SHA-256 of the canonical request: endpoint, model, messages, schema, sampling, sample index."""
    keyed = {name: body.get(name) for name in KEYED_FIELDS}
    keyed.update({name: body[name] for name in OPTIONAL_KEYED_FIELDS if body.get(name) is not None})
    return sha256(canonical({"base_url": base_url.rstrip("/"), "sample_index": sample_index, **keyed}))


def item_id(kind: str, parents: Iterable[str], *content: Any) -> str:
    """``<kind>-<16 hex>`` over the kind, the parents and what makes this item itself."""
    digest = sha256(canonical([kind, sorted(parents), list(content)]))
    return f"{kind}-{digest[:16]}"
