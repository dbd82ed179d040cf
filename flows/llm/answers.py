"""Reading what an endpoint answered: the completion's text, finish reason, usage and token log-probabilities,
the answer validated against its pydantic model, and what the call cost at the configured prices."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeVar

from pydantic import ValidationError

from ifsynth.schemas.answers import Answer
from ifsynth.schemas.config import Price

A = TypeVar("A", bound=Answer)
_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


class Completion(NamedTuple):
    text: str | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    logprobs: list[dict[str, Any]] | None
    is_completion: bool = True  # False: the body was not a chat completion, kept as text


def parse_answer(text: str | None, schema: type[A]) -> A:
    """Validate an answer; tolerate prose or code fences around the JSON object (style ``none``)."""
    if not text or not text.strip():
        raise ValueError("empty answer")
    text = text.strip()
    candidates = [text]
    candidates += [match.group(1) for match in _FENCE.finditer(text)]
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{") : text.rindex("}") + 1])
    errors: list[ValidationError] = []
    for candidate in candidates:
        try:
            return schema.model_validate_json(candidate)
        except ValidationError as exc:
            errors.append(exc)
    # Report the most telling failure: a schema mismatch beats "invalid JSON" from a prose candidate.
    details = min((exc.errors()[0] for exc in errors), key=lambda e: e["type"] == "json_invalid")
    where = ".".join(str(part) for part in details.get("loc", ()))
    raise ValueError(f"{details['msg']}{f' at `{where}`' if where else ''}")


def token_logprobs(choice: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The answer's tokens with their log-probabilities and alternatives, when the endpoint returned them."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return [
        {
            "token": t.get("token"),
            "logprob": t.get("logprob"),
            "top_logprobs": [
                {"token": a.get("token"), "logprob": a.get("logprob")} for a in t.get("top_logprobs") or []
            ],
        }
        for t in content
    ]


def completion_of(data: Mapping[str, Any]) -> Completion:
    """The parts of a chat completion object the gateway keeps."""
    choice = (data.get("choices") or [{}])[0]
    message, usage = choice.get("message") or {}, data.get("usage") or {}
    return Completion(
        message.get("content"),
        choice.get("finish_reason"),
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        token_logprobs(choice),
    )


def decode_completion(content: bytes) -> Completion:
    """A 2xx body as a completion. A body that is not one is kept as the text, so it fails parsing on the
    record (and is re-asked) instead of crashing the run; so is one whose strings are not Unicode text (a lone
    surrogate escaped in the JSON), which nothing could store."""
    try:
        data = json.loads(content)
        json.dumps(data, ensure_ascii=False).encode()  # UnicodeEncodeError, a ValueError, on a lone surrogate
        return completion_of(data)
    except (ValueError, AttributeError, TypeError, IndexError):
        return Completion(content.decode("utf-8", "replace"), None, None, None, None, is_completion=False)


def call_cost(
    prices: Mapping[str, Price], model: str, prompt_tokens: int | None, completion_tokens: int | None
) -> float | None:
    """USD at the configured list price per million tokens; unknown without a price or usage."""
    price = prices.get(model)
    if price is None or prompt_tokens is None or completion_tokens is None:
        return None
    return (prompt_tokens * price.input + completion_tokens * price.output) / 1e6
