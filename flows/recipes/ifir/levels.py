"""Instruction levels, bottom-up: level 1 is the subset's generic ask (no LLM, as in the paper); level n+1 is
written from level n, keeping all its conditions and adding the subset's next kind of detail.

Each written level is checked at once by a judge (does it keep every condition of the level below, does it add
one?) because the level above is written from it. A level that fails is written once more, told why; the
second failure is final. Every attempt is a ``level`` item with its check's verdict, so ``audit --stage
level2`` shows what was passed over and why. A query whose level fails keeps the levels below it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ifsynth.flows.llm import loop
from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, Stage, StageWriter, run_gateway
from ifsynth.schemas.answers import LevelCheck, LevelInstruction
from ifsynth.schemas.ifir import SCHEMES
from ifsynth.schemas.records import ItemRecord, StageCounts, VerdictRecord

ATTEMPTS = 2  # a failing level is written once more, then rejected

# one attempt: the written level's reply and, when it parsed, its check's reply
Attempt = tuple[Reply, Reply | None]


def write_level1(ctx: RunContext, order: int, *, stage: str, source: str) -> StageCounts:
    """Level 1 of every selected query: its subset's generic ask."""
    queries = [item for page in ctx.warehouse.items(ctx.run_id, source) for item in page if item.kind == "query"]
    writer = StageWriter(ctx, stage, order, total=len(queries))
    for query in queries:
        instruction = SCHEMES[query.payload["subset"]].level1
        level = writer.child(query, "level", {**query.payload, "level": 1, "instruction": instruction}, 1)
        writer.add(None, Outcome("pass", items=[level]))
        ctx.progress.advance(stage)
    return writer.close()


def passed(attempt: Attempt) -> bool:
    check = attempt[1]
    return check is not None and check.status == "ok" and _fits(check.value)  # type: ignore[arg-type]


def _fits(check: LevelCheck) -> bool:
    return check.keeps_all and check.adds


@dataclass(frozen=True, kw_only=True)
class WriteLevel(Stage):
    """Level ``level`` from the ``ok`` levels of ``source`` (the stage of the level below)."""

    name: str
    source: str
    level: int
    max_tokens: int
    max_tokens_check: int

    @property
    def templates(self) -> tuple[str, ...]:
        return ("level", "judge_level")

    def write(self, ctx: RunContext, below: ItemRecord, attempts: list[Attempt]) -> Ask:
        """The ask for the next level; a second attempt is told what was wrong with the first."""
        p = below.payload
        scheme = SCHEMES[p["subset"]]
        feedback = _feedback(attempts[-1]) if attempts else None
        variables: dict[str, Any] = {
            "domain": scheme.domain,
            "seed_kind": scheme.seed_kind,
            "query": p["query"],
            "below": p["instruction"],
            "level": self.level,
            "detail": scheme.details[self.level - 2],
            "stance": p["stance"] if self.level == 2 else None,
            "previous": feedback[0] if feedback else None,
            "problem": feedback[1] if feedback else None,
        }
        return Ask(
            ctx.prompts.render(ctx.template("level"), **variables),
            LevelInstruction,
            "generator",
            ctx.params.temperature,
            self.max_tokens,
        )

    def check(self, ctx: RunContext, below: ItemRecord, written: LevelInstruction) -> Ask:
        prompt = ctx.prompts.render(
            ctx.template("judge_level"),
            query=below.payload["query"],
            below=below.payload["instruction"],
            above=written.instruction,
            added=written.added,
        )
        return Ask(prompt, LevelCheck, "judge", ctx.params.judge_temperature, self.max_tokens_check)

    def handle(self, writer: StageWriter, below: ItemRecord, attempts: list[Attempt]) -> Outcome:
        """The attempts' level items (the passing one ``ok``, the others ``rejected``) with their verdicts."""
        items: list[ItemRecord] = []
        verdicts: list[VerdictRecord] = []
        for number, (written, check) in enumerate(attempts, 1):
            if written.status != "ok" or written.value is None:
                continue  # no level item: the input's own verdict below says why, if no attempt parsed
            value: LevelInstruction = written.value  # type: ignore[assignment]
            payload = {**below.payload, "level": self.level, "instruction": value.instruction, "added": value.added}
            payload["attempt"] = number
            ok = passed((written, check))
            item = writer.child(
                below,
                "level",
                payload,
                self.level,
                number,
                call_keys=[*written.keys, *(check.keys if check else [])],
                status="ok" if ok else "rejected",
            )
            items.append(item)
            verdicts.append(_verdict(writer, item.item_id, check))
        if not items:
            return writer.env.failed(below.item_id, attempts[-1][0])
        ok = items[-1].status == "ok"
        return Outcome("pass" if ok else "reject", items=items, verdicts=verdicts, n_out=int(ok))

    def run(self, ctx: RunContext, order: int) -> StageCounts:
        below = [item for page in ctx.warehouse.items(ctx.run_id, self.source) for item in page if item.kind == "level"]
        writer = StageWriter(ctx, self.name, order, total=len(below))
        attempts: dict[str, list[Attempt]] = {item.item_id: [] for item in below}
        replies: list[Reply] = []

        async def write_all() -> None:
            async with run_gateway(ctx) as gw:
                pending = below
                for attempt in range(ATTEMPTS):
                    asks = [self.write(ctx, b, attempts[b.item_id]) for b in pending]
                    done = (lambda: ctx.progress.advance(self.name)) if attempt == 0 else None
                    written = await gw.ask_many(self.name, asks, on_done=done)
                    parsed = [(b, w) for b, w in zip(pending, written, strict=True) if w.status == "ok" and w.value]
                    checks = await gw.ask_many(self.name, [self.check(ctx, b, w.value) for b, w in parsed])  # type: ignore[arg-type]
                    checked = {b.item_id: c for (b, _), c in zip(parsed, checks, strict=True)}
                    for b, w in zip(pending, written, strict=True):
                        attempts[b.item_id].append((w, checked.get(b.item_id)))
                    replies.extend([*written, *checks])
                    pending = [b for b in pending if not passed(attempts[b.item_id][-1])]

        loop.run(write_all())
        for item in below:
            writer.add(None, self.handle(writer, item, attempts[item.item_id]))
        return writer.close(cached=sum(r.cached for r in replies), sent=sum(r.sent for r in replies))


def _feedback(attempt: Attempt) -> tuple[str, str]:
    """(the failed level, what was wrong with it), for a second attempt that must differ from the first."""
    written, check = attempt
    if written.status != "ok" or written.value is None:
        return "(no usable answer)", f"the answer was not the JSON asked for ({written.error or written.status})"
    text = written.value.instruction  # type: ignore[attr-defined]
    if check is None or check.status != "ok" or check.value is None:
        return text, "the check of it gave no answer"
    value: LevelCheck = check.value  # type: ignore[assignment]
    return text, value.explanation


def _verdict(writer: StageWriter, item_id: str, check: Reply | None) -> VerdictRecord:
    if check is None or check.status != "ok" or check.value is None:
        decision = "parse_error" if check is not None and check.status == "parse_error" else "failed"
        reason = check.error if check is not None and check.error else "the check gave no answer"
        return writer.verdict(item_id, decision, judge="llm", reason=reason, call_key=check.keys[-1] if check else None)
    value: LevelCheck = check.value  # type: ignore[assignment]
    ok = _fits(value)
    missing = [] if value.keeps_all else ["drops a condition of the level below"]
    missing += [] if value.adds else ["adds no condition"]
    reason = value.explanation if ok else f"{'; '.join(missing)}: {value.explanation}"
    return writer.verdict(
        item_id, "pass" if ok else "reject", judge="llm", reason=reason, score=float(ok), call_key=check.keys[-1]
    )
