"""The machinery every stage shares: turn inputs into outcomes, write them, count them.

A stage starts by forgetting what it wrote before for this run, then processes every input again; the LLM
cache makes that free for inputs already answered, which is what makes a killed run resumable.

There are two shapes of stage, and both keep their decisions pure, as distilabel's tasks separate formatting
the input from parsing the output:
- an ``LLMStage`` turns one input into asks (``build``) and the replies into an ``Outcome`` or further asks
  (``handle``, called again with every reply so far: a level written, checked, written again);
- a ``RuleStage`` turns a page of inputs into outcomes (``decide``).
Both halves read the run through an ``Env`` (its id, settings and templates: no warehouse, no network), so each
is unit-tested with plain values. Reading inputs is the stage's ``inputs``; writing is the runner's alone, here,
through a ``StageWriter`` no stage sees. A recipe is an ordered list of stages; a stage's ordinal is its place.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar, cast

from ifsynth.flows.llm import loop
from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.requests import A, Ask, Reply, Unanswered
from ifsynth.flows.run.blame import blame
from ifsynth.flows.run.context import RunContext
from ifsynth.prompts.registry import Prompts, Rendered
from ifsynth.schemas.config import RecipeParams, Role
from ifsynth.schemas.records import Decision, ItemRecord, ItemStatus, Judge, Payload, StageCounts, VerdictRecord
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
    rejects: list[str] = field(default_factory=list)  # other items it takes down (a sibling that cannot stand alone)

    def overruled(self, accepted: bool) -> Outcome:
        """This outcome as a person decided it, the rest kept. The stage's count was for its own decision, so it
        is set again: a reject passes nothing on and drops what the stage made; an accept passes the input on as
        one output, as a judge's pass does (of what it rejected, a stage made nothing more), so a stage's inputs
        still add up to its funnel's columns."""
        decision: Decision = "pass" if accepted else "reject"
        return replace(self, decision=decision, items=self.items if accepted else [], n_out=int(accepted))


@dataclass(frozen=True)
class FollowUp:
    """More asks an input needs before ``handle`` can decide it (a check of what was just written)."""

    asks: list[Ask]


@dataclass(frozen=True)
class Env:
    """What a stage's pure halves read about their run: its id, recipe, settings and templates.

    It holds no warehouse and no connection, so ``build``, ``handle`` and ``decide`` are plain functions of
    their inputs; it also makes the records they return, stamped with the run and the stage."""

    run_id: str
    recipe: str
    stage: str
    params: RecipeParams
    prompts: Prompts = field(default_factory=Prompts)

    def template(self, name: str) -> str:
        """A template's full name: the recipe's own, ``<recipe>/<name>``."""
        return f"{self.recipe}/{name}"

    def render(self, template: str, **variables: Any) -> Rendered:
        return self.prompts.render(self.template(template), **variables)

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
        rule: str = "",
    ) -> VerdictRecord:
        """``rule``: what was checked, without the measured ``score`` or the ``threshold`` (reasons group by it;
        none: by the reason's text)."""
        return VerdictRecord(
            run_id=self.run_id,
            item_id=item_id,
            stage=self.stage,
            judge=judge,
            decision=decision,
            score=score,
            threshold=threshold,
            reason=reason,
            call_key=call_key,
            rule=rule,
        )

    def child(
        self,
        parent: ItemRecord,
        kind: str,
        payload: Mapping[str, Any] | Payload,
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
            run_id=self.run_id,
            item_id=item_id(id_as or kind, list(parent_ids), *id_parts),
            stage=self.stage,
            kind=kind,
            group_id=parent.group_id,
            parent_ids=parent_ids,
            payload=payload.model_dump(mode="json") if isinstance(payload, Payload) else dict(payload),
            status=status,
            call_keys=tuple(reply.keys) if reply is not None else tuple(call_keys),
            ord=parent.ord if ord is None else ord,
        )

    def failed(self, input_id: str, reply: Reply) -> Outcome:
        """The outcome of an input whose call did not give a usable answer, with the reason on record. An answer
        cut at its budget rejects the input (the model wrote more than the run allows), as a judge would."""
        decision: Decision = "reject" if reply.cut else "parse_error" if reply.status == "parse_error" else "failed"
        rule = "the answer fits max_tokens" if reply.cut else ""
        reason = reply.error or ""
        verdict = self.verdict(input_id, decision, judge="llm", reason=reason, call_key=reply.keys[-1], rule=rule)
        return Outcome(decision, verdicts=[verdict])


class StageWriter:
    """Writes a stage's outcomes and keeps the funnel's books: every input is counted exactly once.

    Only the runner below makes one: it clears what the stage wrote before, so no stage half may."""

    def __init__(self, ctx: RunContext, stage: str, order: int, total: int) -> None:
        self.ctx, self.stage, self.order = ctx, stage, order
        self.counts: dict[str, int] = defaultdict(int)
        self._status: dict[ItemStatus, list[str]] = defaultdict(list)
        ctx.warehouse.clear_stage(ctx.run_id, self.stage)
        ctx.progress.start(self.stage, total)

    def add(self, input_id: str | None, outcome: Outcome) -> Outcome:
        """Record one input's outcome; a judged input that did not pass takes the matching status. Returns the
        outcome that counts.

        Where a person decided this input at this stage, their decision is the one that counts, in this one
        place for every stage: an accept lets a rejected input go on (as far as later stages have answers for
        it), a reject removes a passed one and what it made. The stage's own verdicts stay on record."""
        if self.order == 1 and self.ctx.config.shard is not None:
            outcome = self._in_shard(outcome)
        human = self.ctx.humans.get((input_id or "", self.stage))
        if human in ("pass", "reject") and outcome.decision in ("pass", "reject") and human != outcome.decision:
            self.ctx.overruled.add((input_id or "", self.stage))
            outcome = outcome.overruled(human == "pass")
        self.counts["n_in"] += 1
        self.counts["n_out"] += outcome.n_out if outcome.n_out is not None else len(outcome.items)
        if outcome.decision == "set_aside":
            self.counts["set_aside"] += 1
        elif outcome.decision != "pass":
            self.counts[outcome.decision if outcome.decision != "reject" else "rejected"] += 1
            if input_id is not None:
                self._status[_STATUS[outcome.decision]].append(input_id)
        self._status["rejected"].extend(outcome.rejects)
        self.ctx.warehouse.add_items(outcome.items)
        self.ctx.warehouse.add_verdicts(outcome.verdicts)
        return outcome

    def _in_shard(self, outcome: Outcome) -> Outcome:
        """In a shard's run, the first stage (one seed per input) passes on, and counts, only the seeds of its
        shard; another shard's seed is set aside with nothing written: that shard answers for it."""
        shard = self.ctx.config.shard
        assert shard is not None
        if all(shard.holds(item.group_id) for item in outcome.items):
            return outcome
        return Outcome("set_aside")

    def close(self, *, cached: int = 0, sent: int = 0) -> StageCounts:
        for status, ids in self._status.items():
            self.ctx.warehouse.set_status(self.ctx.run_id, ids, status)
        counts = StageCounts(stage=self.stage, cached=cached, sent=sent, **self.counts)
        self.ctx.warehouse.record_stage(self.ctx.run_id, self.order, counts)
        self.ctx.progress.finish(self.stage, counts)
        return counts


def stage_env(ctx: RunContext, stage: str) -> Env:
    """The ``Env`` of one stage of this run."""
    return Env(ctx.run_id, ctx.recipe, stage, ctx.params, ctx.prompts)


class Stage(ABC):
    """One step of a recipe, run once per run (again when a run is continued).

    ``templates`` names the templates it renders, so the run's fingerprint, its pre-run check and the prompt
    tests derive from the stages; ``reads`` is the model of the items it reads (the fields it relies on; none
    for a stage that reads the seed source). A stage that needs every seed's items at once (a release's noise
    and distractors, a retrieval panel over all documents) is ``whole``: a shard's run stops before the first
    such stage, which runs after the merge."""

    name: str
    whole: bool = False
    reads: ClassVar[type[Payload] | None] = None

    @property
    def templates(self) -> tuple[str, ...]:
        return ()

    @abstractmethod
    def run(self, ctx: RunContext, order: int) -> StageCounts:
        """Process every input, write the outcomes, return the stage's counts."""


Decided = tuple[str | None, Outcome]  # an input's id (None: nothing to mark) and its outcome
Pending = tuple[Any, list[Ask], list[Reply]]  # an input, the asks it waits on, and its replies so far
Record = Callable[[Any, Outcome], None]  # takes an input's outcome once ``handle`` has decided it


def status_of(decision: Decision | Literal["set_aside"]) -> ItemStatus | None:
    """The status an input takes for a decision (none: it stays as it is)."""
    return _STATUS.get(decision) if decision != "set_aside" else None


@dataclass(frozen=True, kw_only=True)
class RuleStage(Stage, Generic[T]):
    """A stage that asks no LLM: selection, rules, grouping, assembly.

    ``inputs`` reads pages of inputs (by default the ``ok`` items of ``source``); ``decide`` turns one page into
    each input's outcome, purely; ``finish`` is where a stage that makes more than items and verdicts (a
    release) writes it, once the outcomes are written and counted."""

    name: str
    source: str = ""
    whole: bool = False

    def inputs(self, ctx: RunContext) -> Iterable[list[T]]:
        # the default for stages whose inputs are their source's items; any other shape overrides inputs
        return cast("Iterable[list[T]]", ctx.warehouse.items(ctx.run_id, self.source))

    def total(self, ctx: RunContext) -> int:
        """How many inputs the progress bar expects, where ``inputs`` are not a list (its entries, counted)."""
        return ctx.warehouse.count_items(ctx.run_id, self.source)

    @abstractmethod
    def decide(self, env: Env, page: list[T]) -> Iterable[Decided]:
        """Each input's outcome."""

    def finish(self, ctx: RunContext, env: Env, counts: StageCounts) -> None:
        """Write what the stage makes besides its outcomes, once they are counted (a release's card states
        them); nothing by default."""

    def prepared(self, ctx: RunContext) -> Self:
        """This stage with what it computes once per run before its total and first page (length bands)."""
        return self

    def run(self, ctx: RunContext, order: int) -> StageCounts:
        stage = self.prepared(ctx)
        env = stage_env(ctx, stage.name)
        pages = stage.inputs(ctx)
        total = sum(map(len, pages)) if isinstance(pages, list) else stage.total(ctx)  # a list: read once, counted
        writer = StageWriter(ctx, stage.name, order, total)
        for page in pages:
            with blame(stage.name, ctx.run_id):  # a page's inputs are decided together: the stage is named
                decided = list(stage.decide(env, page))
            for input_id, outcome in decided:
                writer.add(input_id, outcome)
                ctx.progress.advance(stage.name)
        counts = writer.close()
        stage.finish(ctx, env, counts)
        return counts


@dataclass(frozen=True, kw_only=True)
class LLMStage(Stage, Generic[T]):
    """A stage that asks the LLM: ``build`` turns an input into asks, ``handle`` turns their replies into an
    outcome, or into more asks it needs first. Inputs are the ``ok`` items of ``source`` unless ``inputs``
    brings them in another shape."""

    name: str
    source: str
    max_tokens: int
    role: Role = "generator"  # a judge samples at the run's judge temperature
    keep: Callable[[ItemRecord], bool] | None = None  # serve only the source items it accepts
    # a failed or rejected input takes that status and leaves the pipeline; a stage beside the main line (a
    # shorter form of a narrative) or one whose outcome is on items of its own (IFIR's level attempts) leaves
    # its input as it is, its verdicts still on record
    marks_input: ClassVar[bool] = True
    # its inputs from a group are ``entries`` of that group's source items alone, so it can take each group
    # as the stage before it finishes it (flows/run/pipeline.py); a stage that reads otherwise says False
    streams: ClassVar[bool] = True

    @property
    def templates(self) -> tuple[str, ...]:
        return (self.name,)

    @abstractmethod
    def build(self, env: Env, entry: T) -> list[Ask]:
        """The asks one input needs, rendered now: a template error stops the stage before any call."""

    @abstractmethod
    def handle(self, env: Env, entry: T, replies: list[Reply]) -> Outcome | FollowUp:
        """What the replies to one input's asks so far (in the order asked) make of it, or the asks it needs
        next; called again with every reply so far once those are answered."""

    def settle(self, env: Env, entry: T, replies: list[Reply]) -> Outcome | FollowUp:
        """``handle``'s decision, where an answer it needed and did not get (``Reply.answer``) fails the input
        with the reply's reason: what the runner records, and what a test of a failed ask checks."""
        try:
            return self.handle(env, entry, replies)
        except Unanswered as missing:
            return env.failed(self.input_id(entry), missing.reply)

    def inputs(self, ctx: RunContext) -> Iterable[list[T]] | None:
        """Pages of inputs; ``None`` means every ``ok`` item of ``source``."""
        if self.keep is None:
            return None
        pages = (self.entries(page) for page in ctx.warehouse.items(ctx.run_id, self.source))
        return [page for page in pages if page]  # held, so the total is known: such stages serve hundreds

    def entries(self, items: list[ItemRecord]) -> list[T]:
        """The inputs among some whole groups' items of ``source``, whatever their status: the ``ok`` ones
        ``keep`` accepts."""
        keep = self.keep
        return [i for i in items if i.status == "ok" and (keep is None or keep(i))]  # type: ignore[misc]

    def input_id(self, entry: T) -> str:
        return entry.item_id  # type: ignore[attr-defined]

    def ask(self, env: Env, schema: type[A], /, template: str | None = None, **variables: Any) -> Ask[A]:
        """This stage's template (or another of the recipe's, for a stage that asks two things) rendered with
        ``variables``, asked of its role at that role's temperature."""
        temperature = env.params.judge_temperature if self.role == "judge" else env.params.temperature
        return Ask(env.render(template or self.name, **variables), schema, self.role, temperature, self.max_tokens)

    def prepared(self, ctx: RunContext) -> Self:
        """This stage with what it computes once per run before its first input (a sample of the seeds)."""
        return self

    def run(self, ctx: RunContext, order: int) -> StageCounts:
        """Ask the gateway for every input, page by page, and write what ``handle`` makes of the replies."""
        stage = self.prepared(ctx)
        env = stage_env(ctx, stage.name)
        pages = stage.inputs(ctx)
        total = sum(map(len, pages)) if isinstance(pages, list) else ctx.warehouse.count_items(ctx.run_id, stage.source)
        writer = StageWriter(ctx, stage.name, order, total)
        tally = {"cached": 0, "sent": 0}

        def record(entry: Any, outcome: Outcome) -> None:
            writer.add(stage.input_id(entry) if stage.marks_input else None, outcome)

        async def answer_all() -> None:
            async with run_gateway(ctx) as gw:
                for page in pages if pages is not None else ctx.warehouse.items(ctx.run_id, stage.source):
                    await stage.answer_page(env, gw, page, record, tally, lambda: ctx.progress.advance(stage.name))

        loop.run(answer_all())
        return writer.close(**tally)

    async def answer_page(
        self,
        env: Env,
        gw: Gateway,
        page: Sequence[Any],
        record: Record,
        tally: dict[str, int],
        advance: Callable[[], None],
        started: asyncio.Event | None = None,
    ) -> None:
        """One page, in rounds: every input's pending asks go out together; each input is decided (and what
        ``handle`` makes of it recorded) as soon as its last answer of the round arrives, while the others
        are still in flight, and what it asks next goes out in the next round. ``started`` is set once the
        first round's asks are all looked up in the cache and started."""
        asks = []
        for entry in page:  # all rendered first: template errors stop here
            with blame(self.name, env.run_id, self.input_id(entry)):
                asks.append(self.build(env, entry))
        pending: list[Pending] = [(e, a, []) for e, a in zip(page, asks, strict=True)]
        first = True
        while pending:
            pending = await self._round(env, gw, pending, record, tally, advance if first else None, started)
            first, started = False, None

    async def _round(
        self,
        env: Env,
        gw: Gateway,
        pending: list[Pending],
        record: Record,
        tally: dict[str, int],
        advance: Callable[[], None] | None,
        started: asyncio.Event | None,
    ) -> list[Pending]:
        """Ask every pending input's asks; decide each input once its last answer is in. Returns the inputs
        that ask more, in page order."""
        owner = [at for at, (_, asks, _) in enumerate(pending) for _ in asks]
        place = [n for _, asks, _ in pending for n in range(len(asks))]
        got: list[list[Reply | None]] = [[None] * len(asks) for _, asks, _ in pending]
        left = [len(asks) for _, asks, _ in pending]
        later: dict[int, Pending] = {}

        def decide(at: int) -> None:
            entry, _, before = pending[at]
            mine = [reply for reply in got[at] if reply is not None]  # all of them, once it is decided
            tally["cached"] += sum(reply.cached for reply in mine)
            tally["sent"] += sum(reply.sent for reply in mine)
            with blame(self.name, env.run_id, self.input_id(entry)):
                result = self.settle(env, entry, [*before, *mine])
            if isinstance(result, FollowUp):
                later[at] = (entry, result.asks, [*before, *mine])
            else:
                record(entry, result)

        def answered(index: int, reply: Reply) -> None:
            at = owner[index]
            got[at][place[index]] = reply
            left[at] -= 1
            if advance is not None:
                advance()
            if left[at] == 0:
                decide(at)

        for at in [at for at, count in enumerate(left) if count == 0]:  # nothing to ask: decided at once
            decide(at)
        asks = [ask for _, asks, _ in pending for ask in asks]
        await gw.ask_many(self.name, asks, on_reply=answered, started=started)
        return [later[at] for at in sorted(later)]


def run_gateway(ctx: RunContext) -> Gateway:
    """The gateway a stage of this run asks through: the run's endpoints, seed, budget and progress notes."""
    return Gateway(
        ctx.config, ctx.warehouse, ctx.run_id, seed=ctx.params.seed, budget=ctx.budget, notify=ctx.progress.note
    )
