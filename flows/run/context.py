"""What every stage of a run needs, found by run id, and how a process that did not start the run gets it.

Prefect records flow and task parameters, so flows take only the run id and the warehouse's location (never a
connection or a key) and tasks only the run id. The CLI's runner builds the context and makes it active before
it calls the flow; any other process (a Prefect worker, a served flow, a plain ``python -c``) rebuilds it with
``attach`` from what the warehouse recorded when the run started, its keys from its own environment.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ifsynth.flows.llm.limits import Budget
from ifsynth.flows.llm.secrets import scrubbed
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.signals import stopping
from ifsynth.flows.seeds import SeedSource
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.config import RecipeParams, RunConfig
from ifsynth.schemas.errors import BudgetExhausted, RunFailed, WarehouseError
from ifsynth.schemas.records import StageCounts
from ifsynth.warehouse import review
from ifsynth.warehouse.live import LiveServer
from ifsynth.warehouse.store import Warehouse


class Progress(Protocol):
    def note(self, message: str) -> None: ...

    def start(self, stage: str, total: int) -> None: ...

    def more(self, stage: str, n: int) -> None:
        """``n`` more inputs for a running stage: one fed by the stage before it as that one goes."""

    def advance(self, stage: str, n: int = 1) -> None: ...

    def finish(self, stage: str, counts: StageCounts) -> None: ...


class NoProgress:
    def note(self, message: str) -> None:
        pass

    def start(self, stage: str, total: int) -> None:
        pass

    def more(self, stage: str, n: int) -> None:
        pass

    def advance(self, stage: str, n: int = 1) -> None:
        pass

    def finish(self, stage: str, counts: StageCounts) -> None:
        pass


class Lines:
    """Progress as lines, for a log (a file, a scheduler's output, Prefect's flow-run log): a stage's start,
    a line every ``every`` seconds while it runs, and its end; stages that run together each have theirs."""

    def __init__(self, say: Callable[[str], None], every: float = 30.0) -> None:
        self.say, self.every = say, every
        self._stages: dict[str, _Tally] = {}

    def note(self, message: str) -> None:
        self.say(message)

    def start(self, stage: str, total: int) -> None:
        self._stages[stage] = _Tally(total)
        self.say(f"{stage}: {total} inputs" if total else f"{stage}: started, its inputs counted as they come")

    def more(self, stage: str, n: int) -> None:
        self._stages[stage].total += n

    def advance(self, stage: str, n: int = 1) -> None:
        tally = self._stages[stage]
        tally.done += n
        now = time.monotonic()
        if now - tally.said >= self.every:
            tally.said = now
            rate = tally.done / max(now - tally.began, 1e-6)
            left = f", about {(tally.total - tally.done) / rate:.0f} s left" if rate > 0 else ""
            self.say(f"{stage}: {tally.done}/{tally.total}, {rate:.1f}/s{left}")

    def finish(self, stage: str, counts: StageCounts) -> None:
        took = time.monotonic() - self._stages.pop(stage).began
        self.say(
            f"{stage}: done in {took:.0f} s: {counts.n_out} out, {counts.rejected} rejected, "
            f"{counts.parse_error + counts.failed} unanswered, {counts.cached} from cache, {counts.sent} sent"
        )


@dataclass
class _Tally:
    total: int
    done: int = 0
    began: float = field(default_factory=time.monotonic)
    said: float = field(default_factory=time.monotonic)


class Tracker:
    """A Progress that remembers the stages in progress, for readers of a live run, and passes everything on
    to its listeners (the command's display; Prefect's log of the flow run)."""

    def __init__(self, inner: Progress) -> None:
        self.listeners: list[Progress] = [inner]
        self.running: dict[str, list[int]] = {}  # stage -> [done, total], in the order they started

    @contextmanager
    def listening(self, listener: Progress) -> Iterator[None]:
        self.listeners.append(listener)
        try:
            yield
        finally:
            self.listeners.remove(listener)

    def note(self, message: str) -> None:
        for listener in self.listeners:
            listener.note(message)

    def start(self, stage: str, total: int) -> None:
        self.running[stage] = [0, total]
        for listener in self.listeners:
            listener.start(stage, total)

    def more(self, stage: str, n: int) -> None:
        self.running[stage][1] += n
        for listener in self.listeners:
            listener.more(stage, n)

    def advance(self, stage: str, n: int = 1) -> None:
        self.running[stage][0] += n
        for listener in self.listeners:
            listener.advance(stage, n)

    def finish(self, stage: str, counts: StageCounts) -> None:
        self.running.pop(stage, None)
        for listener in self.listeners:
            listener.finish(stage, counts)

    def snapshot(self) -> dict[str, Any] | None:
        """The first stage in progress (``stage``, ``done``, ``total``) and, under ``stages``, every one."""
        running = list(self.running.items())  # one step under the GIL: the live server's thread reads it
        stages = [{"stage": stage, "done": done, "total": total} for stage, (done, total) in running]
        return {**stages[0], "stages": stages} if stages else None


def in_progress(now: dict[str, Any]) -> str:
    """A live run's stages in progress, as a line: ``rewrite 300/800, judge_relevance 120/290`` (a stage that
    runs with those before it, not fed yet, is left out)."""
    stages = now.get("stages", [now])
    return ", ".join(f"{s['stage']} {s['done']}/{s['total']}" for s in [s for s in stages if s["total"]] or stages[:1])


@dataclass
class RunContext:
    run_id: str
    config: RunConfig
    params: RecipeParams
    warehouse: Warehouse
    prompts: Prompts
    source: SeedSource
    progress: Tracker = field(default_factory=lambda: Tracker(NoProgress()))
    budget: Budget = field(default_factory=Budget)
    # (item, stage) -> people's decision, which overrides the stage's own (flows/run/stage.py)
    humans: dict[tuple[str, str], str] = field(default_factory=dict)
    overruled: set[tuple[str, str]] = field(default_factory=set)
    # stage ordinal -> its counts, for the stages the flow runs together (flows/run/pipeline.py)
    together: dict[int, Future[StageCounts]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        run_id: str,
        config: RunConfig,
        warehouse: Warehouse,
        progress: Tracker | None = None,
        budget: Budget | None = None,
        prompts: Prompts | None = None,
    ) -> RunContext:
        """The context of a run with this config: its parameters, templates and seeds. ``prompts``: the ones the
        run's fingerprint was computed from, so that it renders the texts it was fingerprinted with."""
        chosen = recipe(config.recipe)
        params = chosen.settings.model_validate(config.params)
        prompts = prompts or Prompts(config.prompts_dir, chosen.prompts)
        source = chosen.source(config.seeds, params)
        humans = review.decisions(warehouse, config.humans_from or run_id)
        return cls(
            run_id,
            config,
            params,
            warehouse,
            prompts,
            source,
            progress or Tracker(NoProgress()),
            budget or Budget(),
            humans,
        )

    @property
    def recipe(self) -> str:
        return self.config.recipe

    def template(self, stage: str) -> str:
        return f"{self.recipe}/{stage}"


_ACTIVE: dict[str, RunContext] = {}


def activate(context: RunContext) -> None:
    _ACTIVE[context.run_id] = context


def deactivate(run_id: str) -> None:
    _ACTIVE.pop(run_id, None)


def context(run_id: str) -> RunContext:
    return _ACTIVE[run_id]


@contextmanager
def recorded(warehouse: Warehouse, run_id: str) -> Iterator[None]:
    """The run's status when the block ends: completed, or stopped (budget), interrupted or failed."""
    try:
        yield
    except BudgetExhausted as exc:
        warehouse.finish_run(run_id, "stopped", str(exc))
        raise
    except KeyboardInterrupt:
        warehouse.finish_run(run_id, "interrupted", "interrupted by the user")
        raise
    except BaseException as exc:
        if stopping():
            warehouse.finish_run(run_id, "interrupted", "interrupted by the user")
        else:
            warehouse.finish_run(run_id, "failed", scrubbed(f"{type(exc).__name__}: {exc}")[:500])
        raise
    try:
        warehouse.finish_run(run_id, "completed")
    except WarehouseError as exc:  # its last rows could not be written (a full disk, the memory limit)
        warehouse.finish_run(run_id, "failed", str(exc)[:500])
        raise


def labels(config: RunConfig) -> list[str]:
    """The tags of a run's flow run in Prefect: its recipe, its seeds and its models (never a key: none is a
    setting)."""
    models = sorted({config.model_for("generator"), config.model_for("judge")})
    return [config.recipe, f"seeds:{config.seeds}", *(f"model:{m}" for m in models)]


def check_failures(warehouse: Warehouse, run_id: str, stages: list[StageCounts], allowed: float) -> None:
    """A run whose asks failed (after every retry, or with no usable answer after every re-ask) beyond
    ``allowed`` is not complete, whatever it kept; nor is one whose every ask failed, whatever it allowed (a
    release from an empty cache)."""
    asked = sum(c.n_in for c in stages if c.sent or c.cached or c.failed)
    unusable = sum(c.parse_error for c in stages)
    failed = sum(c.failed for c in stages) + unusable
    if asked and (failed / asked > allowed or failed == asked):
        common = warehouse.common_call_error(run_id)
        share = "all of them" if failed == asked else f"{failed / asked:.0%}, more than max_failure_share {allowed:.0%}"
        share += f"; {unusable} with no usable answer" if unusable else ""
        often = f"; most often: {common}" if common else ""
        raise RunFailed(f"{failed} of {asked} asks failed ({share}){often}; rerun to retry them")


@contextmanager
def attach(run_id: str, warehouse: str | Path) -> Iterator[RunContext]:
    """The run's context in this process: the one the runner made active, or one rebuilt from the warehouse
    (then this block owns the run: it marks it running, and records how it ended)."""
    if run_id in _ACTIVE:
        yield _ACTIVE[run_id]
        return
    with Warehouse(warehouse, memory_limit=os.environ.get("IFSYNTH_MEMORY_LIMIT")) as store:
        run = store.run(run_id)
        store.start_run(run.model_copy(update={"status": "running", "ended_at": None, "error": None}))
        # --max-calls and --max-cost bound one invocation of `ifsynth run`, not the run: none applies here
        tracker = Tracker(NoProgress())
        ctx = RunContext.build(run_id, RunConfig.model_validate(run.config), store, tracker)
        activate(ctx)
        try:
            # `ifsynth funnel` from another shell answers, with the stage in progress (the coordinator of a
            # sharded run reads it so)
            with LiveServer(store, tracker.snapshot), recorded(store, run_id):
                yield ctx
        finally:
            deactivate(run_id)
