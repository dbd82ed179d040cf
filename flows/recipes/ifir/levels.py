"""Instruction levels, bottom-up: level 1 is the subset's generic ask (no LLM, as in the paper); level n+1 is
written from level n, keeping all its conditions and adding the subset's next kind of detail.

Each written level is checked at once by a judge (does it keep every condition of the level below, does it add
one?) because the level above is written from it. A level that fails is written once more, told why; the
second failure is final. Every attempt is a ``level`` item with its check's verdict, so ``audit --stage
level2`` shows what was passed over and why. A query whose level fails keeps the levels below it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, FollowUp, LLMStage, Outcome, RuleStage
from ifsynth.schemas.answers import LevelCheck, LevelInstruction
from ifsynth.schemas.ifir import SCHEMES, IFIRQuery, Level
from ifsynth.schemas.records import Decision, ItemRecord, Payload, VerdictRecord

ATTEMPTS = 2  # a failing level is written once more, then rejected

# one attempt: the written level's reply and, when it parsed, its check's reply
Attempt = tuple[Reply, Reply | None]


@dataclass(frozen=True, kw_only=True)
class WriteLevel1(RuleStage[ItemRecord]):
    """Level 1 of every selected query: its subset's generic ask."""

    name: str = "level1"
    source: str = "select"
    reads: ClassVar[type[Payload]] = IFIRQuery

    def inputs(self, ctx: RunContext) -> Iterator[list[ItemRecord]]:
        for page in ctx.warehouse.items(ctx.run_id, self.source):
            yield [item for item in page if item.kind == "query"]  # not their passages

    def total(self, ctx: RunContext) -> int:
        return sum(map(len, self.inputs(ctx)))

    def decide(self, env: Env, page: list[ItemRecord]) -> Iterable[Decided]:
        for query in page:
            instruction = SCHEMES[query.read(IFIRQuery).subset].level1
            level = env.child(query, "level", {**query.payload, "level": 1, "instruction": instruction}, 1)
            yield None, Outcome("pass", items=[level])


def written(reply: Reply) -> LevelInstruction | None:
    """The level a write reply holds, if it parsed."""
    return reply.value if reply.status == "ok" and isinstance(reply.value, LevelInstruction) else None


def verdict_of(check: Reply | None) -> LevelCheck | None:
    """The check's answer, if it gave one."""
    return check.value if check is not None and check.status == "ok" and isinstance(check.value, LevelCheck) else None


def passed(attempt: Attempt) -> bool:
    value = verdict_of(attempt[1])
    return value is not None and _fits(value)


def _fits(check: LevelCheck) -> bool:
    return check.keeps_all and check.adds


def attempts_of(replies: list[Reply]) -> tuple[list[Attempt], LevelInstruction | None]:
    """The attempts the replies so far make (each a write, then its check when the write parsed), and a parsed
    level still waiting for its check."""
    attempts: list[Attempt] = []
    rest = iter(replies)
    for write in rest:
        level = written(write)
        if level is None:
            attempts.append((write, None))
            continue
        check = next(rest, None)
        if check is None:
            return attempts, level
        attempts.append((write, check))
    return attempts, None


@dataclass(frozen=True, kw_only=True)
class WriteLevel(LLMStage[ItemRecord]):
    """Level ``level`` from the ``ok`` levels of ``source`` (the stage of the level below): written, checked,
    written again told why when the check fails, checked again."""

    level: int
    max_tokens_check: int
    reads: ClassVar[type[Payload]] = Level

    @property
    def templates(self) -> tuple[str, ...]:
        return ("level", "judge_level")

    marks_input = False  # the level below stays as it is: what failed here is on this level's attempts

    def build(self, env: Env, below: ItemRecord) -> list[Ask]:
        return [self.write(env, below, [])]

    def handle(self, env: Env, below: ItemRecord, replies: list[Reply]) -> Outcome | FollowUp:
        attempts, unchecked = attempts_of(replies)
        if unchecked is not None:
            return FollowUp([self.check(env, below, unchecked)])
        if not passed(attempts[-1]) and len(attempts) < ATTEMPTS:
            return FollowUp([self.write(env, below, attempts)])
        return self.outcome(env, below, attempts)

    def write(self, env: Env, below: ItemRecord, attempts: list[Attempt]) -> Ask:
        """The ask for the next level; a second attempt is told what was wrong with the first."""
        p = below.read(Level)
        scheme = SCHEMES[p.subset]
        feedback = _feedback(attempts[-1]) if attempts else None
        variables: dict[str, Any] = {
            "domain": scheme.domain,
            "seed_kind": scheme.seed_kind,
            "query": p.query,
            "below": p.instruction,
            "level": self.level,
            "detail": scheme.details[self.level - 2],
            "stance": p.stance if self.level == 2 else None,
            "previous": feedback[0] if feedback else None,
            "problem": feedback[1] if feedback else None,
        }
        return self.ask(env, LevelInstruction, "level", **variables)

    def check(self, env: Env, below: ItemRecord, level: LevelInstruction) -> Ask:
        p = below.read(Level)
        prompt = env.render(
            "judge_level", query=p.query, below=p.instruction, above=level.instruction, added=level.added
        )
        return Ask(prompt, LevelCheck, "judge", env.params.judge_temperature, self.max_tokens_check)

    def outcome(self, env: Env, below: ItemRecord, attempts: list[Attempt]) -> Outcome:
        """The attempts' level items (the passing one ``ok``, the others ``rejected``) with their verdicts."""
        items: list[ItemRecord] = []
        verdicts: list[VerdictRecord] = []
        for number, (write, check) in enumerate(attempts, 1):
            level = written(write)
            if level is None:
                continue  # no level item: the input's own verdict below says why, if no attempt parsed
            payload = {**below.payload, "level": self.level, "instruction": level.instruction, "added": level.added}
            payload["attempt"] = number
            ok = passed((write, check))
            item = env.child(
                below,
                "level",
                payload,
                self.level,
                number,
                call_keys=[*write.keys, *(check.keys if check else [])],
                status="ok" if ok else "rejected",
            )
            items.append(item)
            verdicts.append(_verdict(env, item.item_id, check))
        if not items:
            return env.failed(below.item_id, attempts[-1][0])
        ok = items[-1].status == "ok"
        return Outcome("pass" if ok else "reject", items=items, verdicts=verdicts, n_out=int(ok))


def _feedback(attempt: Attempt) -> tuple[str, str]:
    """(the failed level, what was wrong with it), for a second attempt that must differ from the first."""
    write, check = attempt
    level = written(write)
    if level is None:
        return "(no usable answer)", f"the answer was not the JSON asked for ({write.error or write.status})"
    value = verdict_of(check)
    if value is None:
        return level.instruction, "the check of it gave no answer"
    return level.instruction, value.explanation


def _verdict(env: Env, item_id: str, check: Reply | None) -> VerdictRecord:
    value = verdict_of(check)
    if check is None or value is None:
        decision: Decision = "parse_error" if check is not None and check.status == "parse_error" else "failed"
        reason = check.error if check is not None and check.error else "the check gave no answer"
        return env.verdict(item_id, decision, judge="llm", reason=reason, call_key=check.keys[-1] if check else None)
    ok = _fits(value)
    missing = [] if value.keeps_all else ["drops a condition of the level below"]
    missing += [] if value.adds else ["adds no condition"]
    reason = value.explanation if ok else f"{'; '.join(missing)}: {value.explanation}"
    return env.verdict(
        item_id, "pass" if ok else "reject", judge="llm", reason=reason, score=float(ok), call_key=check.keys[-1]
    )
