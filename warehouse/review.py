"""What people review and what they decided: machine verdicts to look at, human verdicts written beside them,
and the pairs that measure how far the judges agree with people.

A human verdict is a row of ``verdicts`` like any other, at the stage of the verdict it answers, with the
judge ``human:<reviewer>``: one per reviewer, item and stage, so a second look replaces the first and two
reviewers keep theirs. Clearing a stage for a rerun keeps them (``store.py``)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.records import VerdictRecord
from ifsynth.warehouse.store import Warehouse

Status = Literal["rejected", "ok", "all"]
HUMAN = "human"
_NAME = re.compile(r"[^a-z0-9_]+")


def human_judge(reviewer: str) -> str:
    """The judge name of a reviewer's verdicts: ``human:<name>``, the name cut to what a judge name holds."""
    name = _NAME.sub("_", reviewer.strip().lower()).strip("_")
    if not name:
        raise WarehouseError(f"reviewer `{reviewer}` has no letter or digit to name the verdicts by")
    return f"{HUMAN}:{name}"


def machine_verdicts(
    warehouse: Warehouse, run_id: str, *, stage: str | None = None, status: Status = "rejected"
) -> list[dict[str, Any]]:
    """The LLM verdicts of a run that a person may review, with the item they decided and its parents' payloads
    (the query and instruction a passage was written for). ``rejected``: what a judge removed; ``ok``: what it
    let through; ``all``: both. Parse errors and failed calls are no judgment to agree with."""
    decisions = {"rejected": ("reject",), "ok": ("pass",), "all": ("pass", "reject")}[status]
    return warehouse.reviewable_verdicts(run_id, decisions, stage)


def stratified(rows: Sequence[dict[str, Any]], n: int | None, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` rows spread evenly over (stage, decision), so a review of 100 says something about every judge;
    a stratum with fewer rows than its share gives the rest to the others. The same seed, the same sample."""
    if n is None or n >= len(rows):
        return list(rows)
    strata: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        strata.setdefault((row["stage"], row["decision"]), []).append(row)
    rng = random.Random(seed)
    for members in strata.values():
        rng.shuffle(members)
    chosen: list[dict[str, Any]] = []
    pools = sorted(strata.items())
    while len(chosen) < n:
        for _, members in pools:
            if members and len(chosen) < n:
                chosen.append(members.pop())
    return sorted(chosen, key=lambda r: (r["stage"], r["item_id"], r["judge"]))


def record(warehouse: Warehouse, verdicts: Sequence[VerdictRecord]) -> None:
    """Write human verdicts at once: a review closed mid-way keeps every decision already made."""
    if any(not v.judge.startswith(f"{HUMAN}:") for v in verdicts):
        raise WarehouseError("only human verdicts are written by a review")
    if not verdicts:
        return
    # only the verdicts decided here: the page records one decision per key press
    known = warehouse.machine_judged(verdicts[0].run_id, {v.item_id for v in verdicts})
    for v in verdicts:
        if (v.item_id, v.stage) not in known:
            raise WarehouseError(f"run {v.run_id} has no verdict on item {v.item_id} at stage {v.stage} to review")
    warehouse.add_verdicts(verdicts)
    warehouse.flush()


def decisions(warehouse: Warehouse, run_id: str) -> dict[tuple[str, str], str]:
    """(item, stage) -> what people decided there, the newest human verdict counting."""
    return {(r["item_id"], r["stage"]): r["decision"] for r in warehouse.human_decisions(run_id)}


def pairs(warehouse: Warehouse, run_id: str) -> list[dict[str, Any]]:
    """Every (stage, LLM judge, item) that a person decided too: the LLM's decision and the newest human one."""
    return warehouse.judged_by_both(run_id)


def forget(warehouse: Warehouse, run_id: str, item_id: str, stage: str, judge: str) -> None:
    """Take back one person's verdict (a review's undo)."""
    if not judge.startswith(f"{HUMAN}:"):
        raise WarehouseError("a review takes back only human verdicts")
    warehouse.delete_verdict(run_id, item_id, stage, judge)


def siblings(warehouse: Warehouse, run_id: str, item_id: str) -> list[dict[str, Any]]:
    """The items made from the same parent by the same stage (InstructIR's other rewrites of a passage, the
    passages of an InF-IR tuple), with their status: what a judge chose among, or compared against."""
    return warehouse.siblings(run_id, item_id)
