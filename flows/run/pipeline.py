"""LLM stages that run together: each group of seeds goes on to the next stage as soon as the stage before
has finished it, and all of them ask through one gateway, under one concurrency bound.

Run one after the other, each stage's last requests leave the bound half empty while they finish (a tail of
up to one latency per round of the stage), and nothing is asked between two stages. Run together, the bound
stays full until the last groups' last stage.

What a stage decides does not change: a group (the items of one seed's query) reaches stage k only once
every stage before k in the set has decided all of it, so stage k sees the group exactly as it would have
read it from the warehouse after those stages, and each stage takes from its group with its own ``entries``.
The statuses the earlier stages give their inputs are applied here, in memory, as they are decided (in the
warehouse they are applied when each stage closes, as before). Requests of a later stage take a free place
before those of an earlier one, so groups finish about in the order they began, and at most twice the
concurrency in groups are between the first stage and the last: memory is bounded however many seeds the
run has.

Which stages run together (``together``): consecutive LLM stages that take their groups this way (``streams``),
each reading the source of the first or the items of a stage before it in the same run; a rule stage, or a
stage that reads otherwise, runs on its own, after the ones before it have all finished. Batch mode runs every
stage on its own (a batch is a stage's uncached requests at once).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ifsynth.flows.llm import loop
from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.limits import PRIORITY
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Env, LLMStage, Outcome, Stage, StageWriter, run_gateway, stage_env, status_of
from ifsynth.schemas.errors import BudgetExhausted
from ifsynth.schemas.records import ItemRecord, ItemStatus, StageCounts

IN_FLIGHT_PER_PLACE = 2  # groups between the first stage and the last, per place under the concurrency bound
LOT_WAIT = 0.25  # seconds a stage gathers inputs into a lot at most, while the endpoints are busy


def together(stages: Sequence[Stage], *, batch: bool = False) -> list[list[int]]:
    """The run's stages (ordinals from 1) in the sets that run together, in run order."""
    plan: list[list[int]] = []
    readable: set[str] = set()  # what the current set's next stage may read
    for order, stage in enumerate(stages, 1):
        source = stage.source if isinstance(stage, LLMStage) and stage.streams and not batch else None
        if plan and source is not None and source in readable:
            plan[-1].append(order)
        else:
            plan.append([order])
            readable = {source} if source is not None else set()
        if source is not None:
            readable.add(stage.name)
    return plan


@dataclass
class _Group:
    """What a group under way holds: its items by the stage that made them (or read them from the warehouse,
    for the first stage), and the statuses the set's stages gave them; all of it let go when the group leaves."""

    items: dict[str, list[ItemRecord]]
    status: dict[str, ItemStatus] = field(default_factory=dict)


@dataclass
class _Feed:
    """A stage's side of the run: the groups handed to it and not yet asked, and how many of each group's
    inputs it has still to decide."""

    stage: LLMStage[Any]
    order: int
    env: Env
    writer: StageWriter
    tally: dict[str, int] = field(default_factory=lambda: {"cached": 0, "sent": 0})
    waiting: list[tuple[str, Any]] = field(default_factory=list)  # (group, input), not yet asked
    left: dict[str, int] = field(default_factory=dict)  # group -> inputs not yet decided
    closed: bool = False  # no group will come any more
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    done: bool = False


class Pipeline:
    """Runs a set of LLM stages together (``run``); ``results`` holds each stage's counts as it closes, for the
    Prefect task that stands for it."""

    def __init__(self, ctx: RunContext, stages: Sequence[tuple[int, LLMStage[Any]]]) -> None:
        self.ctx = ctx
        self.stages = [(order, stage.prepared(ctx)) for order, stage in stages]
        self.results: dict[int, Future[StageCounts]] = {order: Future() for order, _ in stages}

    def run(self) -> list[StageCounts]:
        """Every stage's counts, in run order; a stage's failure stops them all and is raised."""
        try:
            return loop.run(self._run())
        except BaseException as exc:
            self.abandon(exc)
            raise

    def abandon(self, exc: BaseException) -> None:
        """Fail every result not set yet with ``exc`` (the run stopped), so whoever waits on one is released."""
        for result in self.results.values():
            if not result.done():
                result.set_exception(exc)

    async def _run(self) -> list[StageCounts]:
        ctx = self.ctx
        self._feeds = [
            _Feed(stage, order, stage_env(ctx, stage.name), StageWriter(ctx, stage.name, order, 0))
            for order, stage in self.stages
        ]
        self._held: dict[str, _Group] = {}  # the groups under way
        self._finished = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._asking = 0  # lots of asks under way
        self._stopping: BudgetExhausted | None = None
        self._closing = False  # a stage's close is under way
        async with run_gateway(ctx) as gw:
            self._slots = asyncio.Semaphore(IN_FLIGHT_PER_PLACE * gw.capacity)
            for at in range(len(self._feeds)):
                self._spawn(self._consume(at, gw), at)
            self._spawn(self._read(), 0)
            try:
                await self._finished
            finally:
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
        return [self.results[order].result() for order, _ in self.stages]

    def _spawn(self, work: Coroutine[Any, Any, None], at: int) -> None:
        """Run ``work`` as a task whose requests have stage ``at``'s priority; a failure stops the run."""
        token = PRIORITY.set(at)  # a task copies the context it is created in
        task = asyncio.ensure_future(self._guarded(work))
        PRIORITY.reset(token)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except BudgetExhausted as exc:
            # as when a stage runs alone, what is in flight finishes (its answers, paid for, reach the cache)
            # and nothing more is asked; the run stops with the budget's error once the last lot is done
            self._stopping = self._stopping or exc
            for feed in self._feeds:
                feed.wake.set()
            if not self._asking:
                self._fail(exc)
        except BaseException as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if not self._finished.done():
            self._finished.set_exception(exc)

    async def _read(self) -> None:
        """The first stage's source, a page at a time in a worker thread, handed on a group at a time while
        fewer than ``in_flight`` groups are under way."""
        first = self._feeds[0]
        pages: Iterator[list[ItemRecord]] = self.ctx.warehouse.items(self.ctx.run_id, first.stage.source, status=None)
        while (page := await asyncio.to_thread(next, pages, None)) is not None:
            groups: dict[str, list[ItemRecord]] = defaultdict(list)
            for item in page:
                groups[item.group_id].append(item)
            for group, items in groups.items():
                await self._slots.acquire()
                if self._stopping is not None:
                    return
                self._held[group] = _Group({first.stage.source: items})
                self._enter(0, group)
        first.closed = True
        first.wake.set()
        self._check()

    def _enter(self, at: int, group: str) -> None:
        """Hand ``group`` to stage ``at``, or past it when it holds none of the stage's inputs."""
        feed = self._feeds[at]
        held = self._held[group]
        status = held.status
        source = held.items.get(feed.stage.source, [])
        items = [i if i.item_id not in status else i.model_copy(update={"status": status[i.item_id]}) for i in source]
        entries = feed.stage.entries(items)
        if not entries:
            self._passed(at, group)
            return
        feed.left[group] = len(entries)
        feed.waiting += [(group, entry) for entry in entries]
        self.ctx.progress.more(feed.stage.name, len(entries))
        feed.wake.set()

    def _passed(self, at: int, group: str) -> None:
        """Stage ``at`` has decided all of ``group``: on to the next stage, or out of the run."""
        if at + 1 < len(self._feeds):
            self._enter(at + 1, group)
        else:
            del self._held[group]
            self._slots.release()
        self._check()

    async def _consume(self, at: int, gw: Gateway) -> None:
        """Ask for what is waiting, all of it at once, the next lot once this one is looked up in the cache
        and under way. While the endpoints have as many asks as they take, a lot gathers as many inputs as they
        take at once, for at most ``LOT_WAIT`` seconds: each lot is one cache lookup, and asking sooner would only
        queue."""
        feed = self._feeds[at]
        clock = asyncio.get_running_loop().time
        while True:
            while not feed.waiting and not feed.closed:
                feed.wake.clear()
                await feed.wake.wait()
            deadline = clock() + LOT_WAIT
            while not feed.closed and len(feed.waiting) < gw.capacity and gw.crowded() and clock() < deadline:
                feed.wake.clear()
                # not asyncio.wait_for: on Python 3.11 it can swallow the run's cancellation when the event is
                # set at the same moment, and this loop would then wait for ever
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(deadline - clock()):
                        await feed.wake.wait()
            if not feed.waiting or self._stopping is not None:
                return
            lot, feed.waiting = feed.waiting, []
            started = asyncio.Event()
            self._asking += 1
            self._spawn(self._ask(at, gw, lot, started), at)
            await started.wait()

    async def _ask(self, at: int, gw: Gateway, lot: list[tuple[str, Any]], started: asyncio.Event) -> None:
        try:
            await self._answer(at, gw, lot, started)
        finally:
            self._asking -= 1
            if self._stopping is not None and not self._asking:
                self._fail(self._stopping)

    async def _answer(self, at: int, gw: Gateway, lot: list[tuple[str, Any]], started: asyncio.Event) -> None:
        feed = self._feeds[at]
        owner = {id(entry): group for group, entry in lot}

        def record(entry: Any, outcome: Outcome) -> None:
            stage = feed.stage
            input_id = stage.input_id(entry)
            counted = feed.writer.add(input_id if stage.marks_input else None, outcome)
            group = owner[id(entry)]
            held = self._held[group]
            status = status_of(counted.decision) if stage.marks_input else None
            if status is not None:
                held.status[input_id] = status
            for rejected in counted.rejects:  # a sibling: of the same group
                held.status[rejected] = "rejected"
            held.items.setdefault(stage.name, []).extend(counted.items)
            feed.left[group] -= 1
            if not feed.left[group]:
                del feed.left[group]
                self._passed(at, group)

        def advance() -> None:
            self.ctx.progress.advance(feed.stage.name)

        entries = [entry for _, entry in lot]
        await feed.stage.answer_page(feed.env, gw, entries, record, feed.tally, advance, started)

    def _check(self) -> None:
        """Close the first stage not closed yet once it has all its groups and has decided them; the stages
        close one at a time, in order, and the run ends when the last one has closed."""
        if self._closing:
            return  # the close under way checks again when it ends
        for at, feed in enumerate(self._feeds):
            if feed.done:
                continue
            if feed.closed and not feed.waiting and not feed.left:
                self._closing = True
                self._spawn(self._close(at), at)
            return
        if not self._finished.done():
            self._finished.set_result(None)

    async def _close(self, at: int) -> None:
        """Close stage ``at``. Its rows are written first in a worker thread (``Warehouse.drain``): written
        here, they would hold the event loop, and with it every request of the stages still running, for as
        long as the write takes (a tenth of a second and more). A run that stops meanwhile still records the
        stage, which has decided all it had, as it did when the close took no turn of the loop."""
        try:
            await asyncio.to_thread(self.ctx.warehouse.drain)
        except asyncio.CancelledError:
            self._record(at)
            raise
        self._record(at)
        self._check()

    def _record(self, at: int) -> None:
        """Stage ``at``'s counts and its inputs' statuses, written; the next stage may then close."""
        feed = self._feeds[at]
        counts = feed.writer.close(**feed.tally)
        feed.done, self._closing = True, False
        self.results[feed.order].set_result(counts)
        if at + 1 < len(self._feeds):
            self._feeds[at + 1].closed = True
            self._feeds[at + 1].wake.set()
