"""The event loop a stage's requests run on.

uvloop where it is installed: it spends less CPU per request than asyncio's own loop. While the loop runs,
the cyclic garbage collector leaves alone what existed before (``gc.freeze``: the imported libraries, the
stage's inputs) and runs young collections every 10,000 allocations instead of 700: each pause holds the
answers of every request in flight. Measured with ``bench.gateway`` at L = 0.2 s, C = 128 (the SDK path):
0.89 efficiency with the collector's defaults, 0.93 with these settings (``--gc-default`` reproduces the
first). Both are undone when the loop ends, except in a process whose objects were frozen before it (a run
the warm process forked): there what the loop froze stays frozen too, until the run's process ends.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ifsynth.schemas.errors import Interrupted

_new_loop: Callable[[], asyncio.AbstractEventLoop] | None
try:
    import uvloop

    _new_loop = uvloop.new_event_loop
except ImportError:  # not on Windows
    _new_loop = None

T = TypeVar("T")
YOUNG_THRESHOLD = 10_000


_running: list[asyncio.Task[Any]] = []  # the main task of the loop that runs now, if one does
_stopped_by: list[int] = []


def stop(signum: int) -> bool:
    """Called from a stop signal's handler: cancel the running loop's main task, so that the loop ends, its
    requests in flight dropped, and ``run`` raises ``Interrupted``. False when no loop runs. Raising from the
    handler instead would not work while a loop runs: it would surface in a loop callback and be logged."""
    if not _running:
        return False
    _stopped_by.append(signum)
    _running[-1].cancel()
    return True


async def _stoppable(main: Coroutine[Any, Any, T]) -> T:
    task = asyncio.current_task()
    assert task is not None
    _running.append(task)
    try:
        return await main
    finally:
        _running.remove(task)


def run(main: Coroutine[Any, Any, T], *, tune_gc: bool = True) -> T:
    thresholds = gc.get_threshold()
    # a run the warm process forked finds its parent's objects frozen (flows/cli/warm.py): thawed, they would be
    # walked by the next full collection, and every page they are on copied
    inherited = gc.get_freeze_count() > 0
    if tune_gc:
        gc.freeze()
        gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD), *thresholds[1:])
    try:
        with asyncio.Runner(loop_factory=_new_loop) as runner:
            return runner.run(_stoppable(main))
    except asyncio.CancelledError:
        if _stopped_by:
            raise Interrupted(_stopped_by.pop()) from None
        raise
    finally:
        _stopped_by.clear()  # a stop that came out as another error is the caller's (signals.stop_signal)
        if tune_gc:
            gc.set_threshold(*thresholds)
            if not inherited:
                gc.unfreeze()
