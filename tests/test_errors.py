"""The drawing in ``schemas/errors.py``'s docstring is the error tree: every class, its parent and its mixin."""

from __future__ import annotations

import inspect
import re

from ifsynth.schemas import errors
from ifsynth.schemas.errors import StageFailed, TerminalError, TransientError

LINE = re.compile(r"^    (?P<indent>(?:[│ ]   |[├└]── )*)(?P<name>[A-Z]\w+)(?:\s+\[(?P<kind>transient|terminal)\])?")
MIXINS = {"transient": TransientError, "terminal": TerminalError}


def drawn() -> dict[str, tuple[str | None, str | None]]:
    """Each class the docstring draws: its parent in the drawing and its ``[kind]`` mark."""
    tree: dict[str, tuple[str | None, str | None]] = {}
    path: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        match = LINE.match(line)
        if match is None:
            continue
        depth = len(match["indent"]) // 4
        path[depth:] = [match["name"]]
        tree[match["name"]] = (path[depth - 1] if depth else None, match["kind"])
    return tree


def test_the_docstring_draws_every_exception_class_under_its_parent_with_its_mixin() -> None:
    classes = {
        name: cls
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == errors.__name__
    }
    tree = drawn()
    assert set(classes) <= set(tree), f"not drawn: {set(classes) - set(tree)}"
    assert set(tree) - set(classes) <= {"KeyboardInterrupt"}, "drawn but gone"
    for name, cls in classes.items():
        parent, kind = tree[name]
        base = cls.__bases__[0]
        assert parent == (None if base is Exception else base.__name__), name
        marks = {k for k, mixin in MIXINS.items() if issubclass(cls, mixin) and cls is not mixin}
        assert marks == ({kind} if kind else set()), name


def test_a_stage_failure_is_one_line_naming_stage_run_item_and_error() -> None:
    failure = StageFailed("judge", "r1", "item9", ValueError("no score\nin it"))
    assert str(failure).startswith("stage `judge` of run `r1` failed on item `item9`: ValueError: no score in it")
    assert "\n" not in str(failure) and isinstance(failure, TerminalError)
    assert "on item" not in str(StageFailed("select", "r1", None, ValueError("x")))
