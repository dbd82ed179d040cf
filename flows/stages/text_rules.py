"""Rule checks on generated text. Each decision is a verdict of kind ``rule`` with the rule's name."""

from __future__ import annotations

import json

from ifsynth.flows.run.stage import Env
from ifsynth.schemas.records import VerdictRecord

NEWLINE = "rule:newline"
LANGUAGE = "rule:language"
UNCHANGED = "rule:unchanged"


def first_line(text: str) -> str:
    """InF-IR's rule: a generated instruction or query ends at its first newline."""
    return text.strip().split("\n", 1)[0].strip()


def newline_verdicts(env: Env, item_id: str, field: str, before: str, after: str) -> list[VerdictRecord]:
    """The newline rule's verdict when it changed a text, with the text before and after."""
    if before == after:
        return []
    quoted = [json.dumps(text, ensure_ascii=False) for text in (before, after)]
    reason = f"{field} cut at its first newline: {quoted[0]} -> {quoted[1]}"
    return [env.verdict(item_id, "pass", judge=NEWLINE, reason=reason)]


def same_language(named: str, expected: str) -> bool:
    """Whether two answers name the same programming language (case and spacing aside)."""
    return " ".join(named.lower().split()) == " ".join(expected.lower().split())


def unchanged(poisoned: str, original: str) -> bool:
    """Whether poisoning left a text as it was (case and spacing aside): such a negative equals its positive."""
    return " ".join(poisoned.casefold().split()) == " ".join(original.casefold().split())
