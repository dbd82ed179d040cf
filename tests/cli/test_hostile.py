"""Runs against a hostile endpoint whose every answer is unusable: none may end "completed" with exit 0 (an
empty release that looks like a success); each stops in one line and is recorded failed. The runs are the
test's own process's (tests/cli/test_failures.py runs a failing one in a process of its own)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import invoke
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.usefixtures("prefect")  # runs flows: on the session's Prefect server

DEEP = 20_000  # levels of nesting, past any JSON parser's recursion limit


def constant(text: str) -> dict[str, Any]:
    """The fake answering every request with ``text``."""
    return {"mode": "responder", "responder": lambda body: text}


@pytest.mark.parametrize("settings", [
    constant('{"unrelated": "fields"}'),  # JSON that fits no schema
    constant("I would rather not answer in JSON."),  # prose
    constant('{"explanation": 5, "score": "high", "instructions": 7, "keep": "maybe"}'),  # wrong types
    constant('{"score": ' + "[" * DEEP + "]" * DEEP + "}"),  # nested too deep to read
    {"hostile": "null_content"},
    {"hostile": "empty_content"},
    {"hostile": "no_choices"},
    {"hostile": "empty_choices"},
    {"hostile": "wrong_types"},
    {"hostile": "bad_utf8"},
    {"hostile": "lone_surrogate"},
], ids=["schema-invalid", "prose", "wrong-types", "deep", "null", "empty", "no-choices", "empty-choices",
        "envelope-types", "bad-utf8", "lone-surrogate"])  # fmt: skip
def test_a_run_whose_every_answer_is_unusable_does_not_complete(tmp_path: Path, settings: dict[str, Any]) -> None:
    warehouse = str(tmp_path / "w.duckdb")
    with FakeOpenAI(**settings) as fake:
        proc = invoke("--warehouse", warehouse, "run", "instructir", "--seeds", "demo", "--base-url", fake.base_url,
                   "--model", "m")  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    said = ("cannot be used", "no usable answer", "not a chat completion")
    assert len(errors) == 1 and any(why in errors[0] for why in said), errors
    runs = json.loads(invoke("--warehouse", warehouse, "runs", "--json").stdout)
    assert runs[-1]["status"] == "failed"
