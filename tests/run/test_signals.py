"""The stop signals' handling in one process: outside an event loop a signal raises Interrupted; inside one it
cancels the loop, which then raises Interrupted; a block, and so a run, that a signal stopped ends Interrupted
whatever error the stop came out as, unless a budget stopped it; a worker thread, where no handler can be
installed, runs unguarded."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.llm import loop
from ifsynth.flows.run import runner, signals
from ifsynth.flows.run.signals import stoppable
from ifsynth.schemas.errors import BudgetExhausted, Interrupted, WarehouseError
from tests.fake_openai import FakeOpenAI
from tests.helpers import config


@pytest.fixture(autouse=True)
def forgotten() -> Iterator[None]:
    """The signals these tests send are forgotten after them: a later test of this process reads no stop."""
    yield
    signals._received.clear()


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


def test_a_block_a_signal_stopped_ends_interrupted_whatever_error_the_stop_came_out_as() -> None:
    """What a run on shards and a flow run get from the block itself, as the runner's run does (below)."""
    with pytest.raises(Interrupted) as raised, stoppable():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0.1)  # let the handler run
        except Interrupted:  # as a library may turn the interrupt into an error of its own
            raise WarehouseError("the write was cut short") from None
    assert raised.value.exit_code == 130 and isinstance(raised.value.__cause__, WarehouseError)

    with pytest.raises(BudgetExhausted), stoppable():  # a budget's stop stays what it is
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.1)
        except Interrupted:
            raise BudgetExhausted("--max-calls 10 reached") from None


def test_an_error_without_a_signal_stays_what_it_is() -> None:
    with pytest.raises(WarehouseError), stoppable():
        raise WarehouseError("the disk is full")


@pytest.mark.usefixtures("prefect")
def test_a_run_stopped_by_a_signal_ends_interrupted_whatever_error_the_stop_came_out_as(
    fake: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def requests() -> None:
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:  # as a library may turn its cancelled call into an error of its own
            raise WarehouseError("the write was cut short") from None

    def drive(*_: Any) -> Any:
        return loop.run(requests())

    monkeypatch.setattr(runner, "_drive", drive)
    with pytest.raises(Interrupted) as raised:
        runner.execute(config(fake), tmp_path / "w.duckdb")
    assert raised.value.exit_code == 143

    async def cancelled() -> None:
        raise asyncio.CancelledError

    try:
        loop.run(cancelled())
    except Interrupted:  # a KeyboardInterrupt: pytest.raises would let it end the session
        pytest.fail("a later loop's own cancellation was read as that stop again")
    except asyncio.CancelledError:
        pass
    else:
        pytest.fail("the cancellation was lost")


def test_a_worker_thread_runs_unguarded() -> None:
    entered: list[bool] = []

    def work() -> None:
        with stoppable():
            entered.append(True)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert entered == [True]
