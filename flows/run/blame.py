"""A stage's own code failing on an item is a bug: it reaches the user as ``StageFailed``, naming the stage, the
run and the item, instead of a bare ``KeyError``.

ifsynth's own errors already say what to do and pass through unchanged, as do a Ctrl-C and a cancellation
(``BaseException``, not ``Exception``): a stop is not a bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ifsynth.schemas.errors import IfsynthError, StageFailed


@contextmanager
def blame(stage: str, run_id: str, item_id: str | None = None) -> Iterator[None]:
    """Run a stage's own code for one item (or, without ``item_id``, for the whole stage)."""
    try:
        yield
    except IfsynthError:
        raise
    except Exception as exc:
        raise StageFailed(stage, run_id, item_id, exc) from exc
