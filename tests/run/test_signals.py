"""The stop signals' handling in one process: outside an event loop a signal raises Interrupted; inside one it
cancels the loop, which then raises Interrupted; a worker thread, where no handler can be installed, runs
unguarded."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from ifsynth.flows.llm import loop
from ifsynth.flows.run.signals import stoppable
from ifsynth.schemas.errors import Interrupted


def test_a_signal_outside_a_loop_raises_interrupted_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as raised, stoppable():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0.1)  # let the handler run
    assert raised.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_inside_a_loop_cancels_it_and_the_loop_raises_interrupted() -> None:
    finished: list[int] = []

    async def requests() -> None:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGINT)
        await asyncio.sleep(5)
        finished.append(1)

    with pytest.raises(Interrupted) as raised, stoppable():
        loop.run(requests())
    assert raised.value.exit_code == 130 and finished == []


def test_a_worker_thread_runs_unguarded() -> None:
    entered: list[bool] = []

    def work() -> None:
        with stoppable():
            entered.append(True)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert entered == [True]
