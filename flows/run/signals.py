"""How a run stops on SIGINT (a terminal's Ctrl-C) and SIGTERM (``kill``, ``timeout``, a scheduler).

The first signal stops the run: a stage's event loop, if one runs, is cancelled (``flows.llm.loop.stop``),
so the requests in flight are dropped and no new one is sent; outside a loop the handler raises
``Interrupted`` at once. Answers already received stay in the warehouse and the run is recorded
``interrupted``. A second signal exits at once, for a user who will not wait.

Whatever error a stopped block then ends with (a library may wrap the cancellation or the interrupt in an error
of its own) leaves it as ``Interrupted``, the error as its cause, so every way of running a recipe (one
process, shards, a flow run) says and records a stop as a stop. A budget's stop is its own: it stays
``BudgetExhausted``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from ifsynth.flows.llm import loop
from ifsynth.schemas.errors import BudgetExhausted, Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


_received: list[int] = []  # shared by nested blocks: the second signal exits whichever handler gets it


def _handle(signum: int, _: FrameType | None) -> None:
    if _received:
        os._exit(128 + signum)
    _received.append(signum)
    if not loop.stop(signum):
        raise Interrupted(signum)


def stopping() -> bool:
    """Whether a stop signal has come: whatever a run then ends with (a cancelled request, a library's own
    wrapping of the interrupt) comes from the stop."""
    return stop_signal() is not None


def stop_signal() -> int | None:
    """The stop signal that came since the outermost ``stoppable`` block was last entered, if one did."""
    return _received[0] if _received else None


@contextmanager
def stoppable() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM stop the run as described above, and an error after a stop leaves
    it as ``Interrupted``; the handlers are restored after.

    The runner opens one block around the whole run (or around a sharded run's shards), and the flow opens
    another inside Prefect's flow engine, which installs its own SIGTERM handler (raising
    ``TerminationSignal``, which a stage's event loop would log and ignore)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals; a flow run in a worker thread is stopped by its host
        return
    outermost = not any(signal.getsignal(s) is _handle for s in SIGNALS)
    if outermost:
        _received.clear()
    previous = {signum: signal.signal(signum, _handle) for signum in SIGNALS}
    try:
        yield
    except (Interrupted, BudgetExhausted):
        raise
    except BaseException as exc:
        stopped_by = stop_signal()
        if stopped_by is not None:  # the stop, come out as another error
            raise Interrupted(stopped_by) from exc
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
