"""The machinery every stage shares: turn inputs into outcomes, write them, count them.

A stage starts by forgetting what it wrote before for this run, then processes every input again; the LLM
cache makes that free for inputs already answered, which is what makes a killed run resumable.

A stage is an object: ``Stage.run`` does its work; an ``LLMStage`` splits that work into ``build`` (one input
-> the asks it needs) and ``handle`` (the replies -> an ``Outcome``), each testable without Prefect or the
network, as distilabel's tasks separate formatting the input from parsing the output. A recipe is an ordered
list of stages; a stage's ordinal is its place in that list.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Self, TypeVar

from ifsynth.flows.llm import loop
from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.blame import blame
from ifsynth.flows.run.context import RunContext
from ifsynth.schemas.answers import Answer
from ifsynth.schemas.config import Role
from ifsynth.schemas.records import Decision, ItemRecord, ItemStatus, Judge, StageCounts, VerdictRecord
from ifsynth.warehouse.keys import item_id

T = TypeVar("T")

_STATUS: dict[Decision, ItemStatus] = {"reject": "rejected", "parse_error": "parse_error", "failed": "failed"}


@dataclass
class Outcome:
    """What became of one input: its decision, the items it produced and the verdicts about it."""

    decision: Decision | Literal["set_aside"]
    items: list[ItemRecord] = field(default_factory=list)
    verdicts: list[VerdictRecord] = field(default_factory=list)
    n_out: int | None = None


class StageWriter:
    """Writes a stage's outcomes and keeps the funnel's books: every input is counted exactly once."""

    def __init__(self, ctx: RunContext, stage: str, order: int, total: int) -> None:
        self.ctx, self.stage, self.order = ctx, stage, order
        self.counts: dict[str, int] = defaultdict(int)
        self._status: dict[ItemStatus, list[str]] = defaultdict(list)
        ctx.warehouse.clear_stage(ctx.run_id, stage)
        ctx.progress.start(stage, total)

    def verdict(
        self,
        item_id: str,
        decision: Decision,
        *,
        judge: Judge,
        reason: str,
        score: float | None = None,
        threshold: float | None = None,
        call_key: str | None = None,
    ) -> VerdictRecord:
        return VerdictRecord(
            run_id=self.ctx.run_id,
            item_id=item_id,
            stage=self.stage,
            judge=judge,
            decision=decision,
            score=score,
            threshold=threshold,
            reason=reason,
            call_key=call_key,
        )

    def child(
        self,
        parent: ItemRecord,
        kind: str,
        payload: Mapping[str, Any],
        *id_parts: object,
        reply: Reply | None = None,
        call_keys: Sequence[str] = (),
        ord: int | None = None,
        parents: Sequence[ItemRecord] = (),
        status: ItemStatus = "ok",
        id_as: str | None = None,
    ) -> ItemRecord:
        """An item this stage made from ``parent`` (and any further ``parents``): same group, lineage on
        record, its id derived from its kind (or ``id_as``), lineage and ``id_parts``, the calls behind it
        from ``reply`` (or ``call_keys``)."""
        parent_ids = (parent.item_id, *(other.item_id for other in parents))
        return ItemRecord(
            run_id=self.ctx.run_id,
            item_id=item_id(id_as or kind, list(parent_ids), *id_parts),
            stage=self.stage,
            kind=kind,
            group_id=parent.group_id,
            parent_ids=parent_ids,
            payload=dict(payload),
            status=status,
            call_keys=tuple(reply.keys) if reply is not None else tuple(call_keys),
            ord=parent.ord if ord is None else ord,
        )

    def add(self, input_id: str | None, outcome: Outcome) -> None:
        """Record one input's outcome; a judged input that did not pass takes the matching status.

        Where a person decided this input at this stage, their decision is the one that counts, in this one
        place for every stage: an accept lets a rejected input go on (as far as later stages have answers for
        it), a reject removes a passed one and what it made. The stage's own verdicts stay on record."""
        if self.order == 1 and self.ctx.config.shard is not None:
            outcome = self._in_shard(outcome)
        human = self.ctx.humans.get((input_id or "", self.stage))
        if human is not None and outcome.decision in ("pass", "reject") and human != outcome.decision:
            self.ctx.overruled.add((input_id or "", self.stage))
            outcome = Outcome(human, [] if human == "reject" else outcome.items, outcome.verdicts)  # type: ignore[arg-type]
        self.counts["n_in"] += 1
        self.counts["n_out"] += outcome.n_out if outcome.n_out is not None else len(outcome.items)
        if outcome.decision == "set_aside":
            self.counts["set_aside"] += 1
        elif outcome.decision != "pass":
            self.counts[outcome.decision if outcome.decision != "reject" else "rejected"] += 1
            if input_id is not None:
                self._status[_STATUS[outcome.decision]].append(input_id)
        self.ctx.warehouse.add_items(outcome.items)
        self.ctx.warehouse.add_verdicts(outcome.verdicts)

    def _in_shard(self, outcome: Outcome) -> Outcome:
        """In a shard's run, the first stage (one seed per input) passes on, and counts, only the seeds of its
        shard; another shard's seed is set aside with nothing written: that shard answers for it."""
        shard = self.ctx.config.shard
        assert shard is not None
        if all(shard.holds(item.group_id) for item in outcome.items):
            return outcome
        return Outcome("set_aside")

    def failed(self, input_id: str, reply: Reply) -> Outcome:
        """The outcome of an input whose call did not give a usable answer, with the reason on record."""
        decision: Decision = "parse_error" if reply.status == "parse_error" else "failed"
        verdict = self.verdict(input_id, decision, judge="llm", reason=reply.error or "", call_key=reply.keys[-1])
        return Outcome(decision, verdicts=[verdict])

    def mark(self, item_ids: Sequence[str], status: ItemStatus) -> None:
        self._status[status].extend(item_ids)

    def close(self, *, cached: int = 0, sent: int = 0) -> StageCounts:
        for status, ids in self._status.items():
            self.ctx.warehouse.set_status(self.ctx.run_id, ids, status)
        counts = StageCounts(stage=self.stage, cached=cached, sent=sent, **self.counts)
        self.ctx.warehouse.record_stage(self.ctx.run_id, self.order, counts)
        self.ctx.progress.finish(self.stage, counts)
        return counts


class Stage(ABC):
    """One step of a recipe, run once per run (again when a run is continued).

    A stage that needs every seed's items at once (a release's noise and distractors, a retrieval panel over
    all documents) is ``whole``: a shard's run stops before the first such stage, which runs after the merge."""

    name: str
    whole: bool = False

    @abstractmethod
    def run(self, ctx: RunContext, order: int) -> StageCounts:
        """Process every input, write the outcomes, return the stage's counts."""


@dataclass(frozen=True)
class Call(Stage):
    """A stage whose work is one plain function, ``function(ctx, order, stage=name, **options)``: selection,
    rules, grouping and assembly, which ask no LLM."""

    name: str
    function: Callable[..., StageCounts]
    options: Mapping[str, Any] = field(default_factory=dict)
    whole: bool = False

    def run(self, ctx: RunContext, order: int) -> StageCounts:
        with blame(self.name, ctx.run_id):
            return self.function(ctx, order, stage=self.name, **self.options)


@dataclass(frozen=True, kw_only=True)
class LLMStage(Stage, Generic[T]):
    """A stage that asks the LLM: ``build`` turns an input into asks, ``handle`` turns their replies into an
    outcome. Inputs are the ``ok`` items of ``source`` unless ``inputs`` brings them in another shape."""

    name: str
    source: str
    max_tokens: int
    role: Role = "generator"  # a judge samples at the run's judge temperature
    keep: Callable[[ItemRecord], bool] | None = None  # serve only the source items it accepts

    @abstractmethod
    def build(self, ctx: RunContext, entry: T) -> list[Ask]:
        """The asks one input needs, rendered now: a template error stops the stage before any call."""

    @abstractmethod
    def handle(self, writer: StageWriter, entry: T, replies: list[Reply]) -> Outcome:
        """What the replies to one input's asks (in the order asked) make of it."""

    def inputs(self, ctx: RunContext) -> Iterable[list[T]] | None:
        """Pages of inputs; ``None`` means every ``ok`` item of ``source``."""
        if self.keep is None:
            return None
        return pages_where(ctx, self.source, self.keep)  # type: ignore[return-value]

    def input_id(self, entry: T) -> str | None:
        return entry.item_id  # type: ignore[attr-defined]

    def template(self, ctx: RunContext) -> str:
        return ctx.template(self.name)

    def ask(self, ctx: RunContext, schema: type[Answer], /, template: str | None = None, **variables: Any) -> Ask:
        """This stage's template (or the recipe's ``template``, for a stage that asks two things) rendered with
        ``variables``, asked of its role at that role's temperature."""
        temperature = ctx.params.judge_temperature if self.role == "judge" else ctx.params.temperature
        name = ctx.template(template) if template else self.template(ctx)
        return Ask(ctx.prompts.render(name, **variables), schema, self.role, temperature, self.max_tokens)

    def prepared(self, ctx: RunContext) -> Self:
        """This stage with what it computes once per run before its first input (a sample of the seeds)."""
        return self

    def run(self, ctx: RunContext, order: int) -> StageCounts:
        """Ask the gateway for every input, page by page, and write what ``handle`` makes of the replies."""
        stage = self.prepared(ctx)
        pages = stage.inputs(ctx)
        total = sum(map(len, pages)) if isinstance(pages, list) else ctx.warehouse.count_items(ctx.run_id, stage.source)
        writer = StageWriter(ctx, stage.name, order, total)
        if pages is None:
            pages = ctx.warehouse.items(ctx.run_id, stage.source)  # type: ignore[assignment]
        tally = {"cached": 0, "sent": 0}

        async def answer_all() -> None:
            async with run_gateway(ctx) as gw:
                for page in pages:  # type: ignore[union-attr]
                    asks = []  # all rendered first: template errors stop here
                    for entry in page:
                        with blame(stage.name, ctx.run_id, stage.input_id(entry)):
                            asks.append(stage.build(ctx, entry))
                    flat = [ask for entry_asks in asks for ask in entry_asks]
                    replies = await gw.ask_many(stage.name, flat, on_done=lambda: ctx.progress.advance(stage.name))
                    start = 0
                    for entry, entry_asks in zip(page, asks, strict=True):
                        mine = replies[start : start + len(entry_asks)]
                        start += len(entry_asks)
                        tally["cached"] += sum(reply.cached for reply in mine)
                        tally["sent"] += sum(reply.sent for reply in mine)
                        with blame(stage.name, ctx.run_id, stage.input_id(entry)):
                            outcome = stage.handle(writer, entry, mine)
                        writer.add(stage.input_id(entry), outcome)

        loop.run(answer_all())
        return writer.close(**tally)


def run_gateway(ctx: RunContext) -> Gateway:
    """The gateway a stage of this run asks through: the run's endpoints, seed, budget and progress notes."""
    return Gateway(
        ctx.config, ctx.warehouse, ctx.run_id, seed=ctx.params.seed, budget=ctx.budget, notify=ctx.progress.note
    )


def pages_where(
    ctx: RunContext, source: str, keep: Callable[[ItemRecord], bool], *, status: ItemStatus | None = "ok"
) -> list[list[ItemRecord]]:
    """The pages of ``source`` with only the items ``keep`` accepts, for a stage that serves some of them.

    Held as a list, so the stage knows its total up front; such stages serve hundreds of items, not millions.
    """
    pages = ([item for item in page if keep(item)] for page in ctx.warehouse.items(ctx.run_id, source, status=status))
    return [page for page in pages if page]
