"""Nesting the levels' relevant passages: rel(L3) ⊆ rel(L2) ⊆ rel(L1) ⊆ the seed's relevant passages.

From the re-check's labels, per query and level, bottom-up: a passage judged relevant at a level but not at
the level below is dropped there (a ``rule:nesting`` verdict), as is, at level 2 and above, a passage whose seed
stance label is not the one the query's level 2 asks for (``rule:stance``). A level whose re-check is
incomplete (a judgment failed or did not parse), or left with no relevant passage, is dropped with the levels
above it. A query keeps its levels up to the first dropped one, as a ``group`` item. What is dropped here is
marked rejected, so ``audit --stage nest`` lists it with its reason."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.ifir import LEVELS, IFIRPassage, IFIRQuery, KeptLevel, Level, QueryLevels, Rechecked
from ifsynth.schemas.records import ItemRecord, ItemStatus, Payload, VerdictRecord

UNCHECKED: tuple[ItemStatus, ...] = ("parse_error", "failed")  # a level the re-check could not finish


@dataclass(frozen=True)
class Checked:
    """A selected query with what nesting reads of it: its levels by number (``ok`` or left unchecked by the
    re-check), its passages' seed labels by release id and the re-check's labels of each level."""

    query: ItemRecord
    levels: dict[int, ItemRecord]
    seed_labels: dict[str, str | None]
    labels: dict[str, list[ItemRecord]]  # level item id -> its ``ok`` labels


@dataclass(frozen=True, kw_only=True)
class NestLevels(RuleStage[Checked]):
    """Per selected query of ``source``, its levels of ``levels`` nested by the labels of ``labels``."""

    name: str = "nest"
    source: str = "select"
    levels: tuple[str, ...]
    labels: str
    reads: ClassVar[type[Payload]] = Level

    def inputs(self, ctx: RunContext) -> list[list[Checked]]:
        found = {q.group_id: q for q in _all(ctx, self.source, None) if q.kind == "query" and q.status == "ok"}
        by_level: dict[str, dict[int, ItemRecord]] = {}
        for source in self.levels:
            for item in _all(ctx, source, None):
                if item.kind == "level" and item.status in ("ok", *UNCHECKED):
                    by_level.setdefault(item.group_id, {})[item.read(Level).level] = item
        seed_labels: dict[str, dict[str, str | None]] = {}
        for p in _all(ctx, self.source, "ok"):
            if p.kind == "passage":
                passage = p.read(IFIRPassage)
                seed_labels.setdefault(p.group_id, {})[passage.doc_id] = passage.label
        judged: dict[str, list[ItemRecord]] = {}
        for label in _all(ctx, self.labels, "ok"):
            judged.setdefault(label.parent_ids[0], []).append(label)
        checked = []
        for group, query in sorted(found.items()):
            levels = by_level.get(group, {})
            labels = {item.item_id: judged.get(item.item_id, []) for item in levels.values()}
            checked.append(Checked(query, levels, seed_labels.get(group, {}), labels))
        return [checked]

    def decide(self, env: Env, page: list[Checked]) -> Iterable[Decided]:
        return [(None, nest(env, checked)) for checked in page]


def nest(env: Env, checked: Checked) -> Outcome:
    """A query's levels up to the first dropped one, as a ``group`` item; what was dropped, rejected and why."""
    query = checked.query
    verdicts: list[VerdictRecord] = []
    kept: list[KeptLevel] = []
    relevant, dropped = list(query.read(IFIRQuery).relevant), False
    for number in LEVELS:
        item = checked.levels.get(number)
        if item is None:
            break
        if dropped:
            verdicts.append(env.verdict(item.item_id, "reject", judge="rule", reason="the level below was dropped"))
            continue
        nested, why = _nested(env, item, checked, relevant, verdicts)
        if nested is None:
            verdicts.append(env.verdict(item.item_id, "reject", judge="rule", reason=why))
            dropped = True
            continue
        relevant = nested
        kept.append(
            KeptLevel(level=number, instruction=item.read(Level).instruction, relevant=nested, item=item.item_id)
        )
    # what this stage dropped shows as rejected in audit (a level the re-check left unfinished keeps its status)
    unfinished = {item.item_id for item in checked.levels.values() if item.status in UNCHECKED}
    rejects = [v.item_id for v in verdicts if v.item_id not in unfinished]
    if not kept:
        return Outcome("reject", verdicts=verdicts, n_out=0, rejects=rejects)
    payload = QueryLevels.model_validate({**query.payload, "levels": kept})
    return Outcome("pass", items=[env.child(query, "group", payload)], verdicts=verdicts, rejects=rejects)


def _nested(
    env: Env, level: ItemRecord, checked: Checked, below: list[str], verdicts: list[VerdictRecord]
) -> tuple[list[str] | None, str]:
    """The level's relevant passages (in seed order) within those of the level below, or None and why not."""
    p = level.read(Level)
    n = p.level
    if level.status in UNCHECKED:
        return None, "its re-check is incomplete: a judgment failed or did not parse"
    stance = p.stance if n >= 2 else None
    relevant = set()
    for label in checked.labels.get(level.item_id, []):
        judged = label.read(Rechecked)
        doc = judged.doc_id
        if not judged.relevant:
            continue
        seed_label = checked.seed_labels[doc]
        if doc not in below:
            reason = f"judged relevant at level {n} but not at level {n - 1}"
            verdicts.append(env.verdict(label.item_id, "reject", judge="rule:nesting", reason=reason))
        elif stance and seed_label and seed_label != stance:
            reason = f"the seed labels it {seed_label}; level {n} asks for {stance} evidence"
            verdicts.append(env.verdict(label.item_id, "reject", judge="rule:stance", reason=reason))
        else:
            relevant.add(doc)
    if not relevant:
        return None, f"no passage is relevant at level {n}"
    return [doc for doc in below if doc in relevant], ""


def _all(ctx: RunContext, stage: str, status: ItemStatus | None) -> list[ItemRecord]:
    return [item for page in ctx.warehouse.items(ctx.run_id, stage, status=status) for item in page]
